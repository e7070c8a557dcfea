package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Zipf traffic: 10,000 users, user i (from 0) drawn with probability
// proportional to 1/(i+1)^zipfS, so that a few users are hot and most are
// cold, as on a real API.
const (
	zipfS     = 1.1
	zipfDraws = 1 << 17 // the length of the walk: every goroutine cycles through it
)

// zipfOrder returns the walk over keys of the Zipf scenarios: zipfDraws keys
// drawn from a Zipf distribution over keys with a fixed seed, so that every
// contender and every run walks the same sequence (each goroutine from its
// own offset, as loadFor does over a key set).
func zipfOrder(keys []string) []string {
	out := make([]string, zipfDraws)
	for i, k := range zipfIndexes(len(keys)) {
		out[i] = keys[k]
	}
	return out
}

// zipfIndexes returns the drawn user indexes, the same on every call.
func zipfIndexes(users int) []int {
	z := rand.NewZipf(rand.New(rand.NewPCG(14, 2026)), zipfS, 1, uint64(users-1))
	idx := make([]int, zipfDraws)
	for i := range idx {
		idx[i] = int(z.Uint64())
	}
	return idx
}

// zipfShares describes the walk: what share of its decisions go to the
// hottest user, to the ten hottest, and how many users it visits at all.
func zipfShares(users int) string {
	count := make([]int, users)
	for _, i := range zipfIndexes(users) {
		count[i]++
	}
	visited := 0
	for _, c := range count {
		if c > 0 {
			visited++
		}
	}
	sorted := slices.Clone(count)
	slices.SortFunc(sorted, func(a, b int) int { return b - a })
	top10 := 0
	for _, c := range sorted[:min(10, len(sorted))] {
		top10 += c
	}
	return fmt.Sprintf("the hottest user gets %.1f%% of the decisions, the ten hottest %.1f%%, and %d of the %d users are visited in each pass of %d decisions",
		100*float64(sorted[0])/zipfDraws, 100*float64(top10)/zipfDraws, visited, users, zipfDraws)
}
