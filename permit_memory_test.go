package fleetlimit_test

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// maxBytesPerPermit bounds the Redis memory one held permit costs: a
// sorted-set member (its 36-byte id) and its score (the expiry).
const maxBytesPerPermit = 256

// TestPermitMemory: on the real redis-server, a key's memory grows by at
// most maxBytesPerPermit for each permit it holds, and releasing them all
// leaves no key behind. The figures docs/choosing.md and docs/guarantees.md
// quote are this measurement's, within permitMemoryTolerance.
func TestPermitMemory(t *testing.T) {
	c := redistest.Real(t)
	s := algorithm.Concurrency(1000, time.Hour)
	l, err := fleetlimit.New(s, stores.Redis(t, c), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10*time.Second))
	require.NoError(t, err)
	key := store.RedisKey(l.KeyPrefix(), "u", s.Script().Tag)
	var permits []fleetlimit.Permit
	usage := map[int]int64{}
	for _, n := range []int{1, 128, 129, 1000} {
		for len(permits) < n {
			p, res, err := l.Acquire(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			permits = append(permits, p)
		}
		b, err := c.MemoryUsage(bg, key, 0).Result() // SAMPLES 0: every member, not an estimate from 5
		require.NoError(t, err)
		usage[n] = b
	}
	// Beyond 128 members Redis keeps a skiplist: the per-permit cost there.
	per := float64(usage[1000]-usage[129]) / float64(1000-129)
	t.Logf("MEMORY USAGE: 1 permit %d B, 128 %d B, 129 %d B, 1000 %d B; %.0f B per permit beyond 128, %.0f B per permit within 128",
		usage[1], usage[128], usage[129], usage[1000], per, float64(usage[128]-usage[1])/127)
	checkPermitMemoryQuotes(t, usage, per, float64(usage[128]-usage[1])/127)
	require.Less(t, per, float64(maxBytesPerPermit))
	require.Less(t, float64(usage[1000])/1000, float64(maxBytesPerPermit))
	for _, p := range permits {
		require.NoError(t, p.Release(bg))
	}
	n, err := c.Exists(bg, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no key is left once every permit is released")
}

// permitMemoryTolerance is how far a quoted permit memory figure may be
// from the measurement (MEMORY USAGE SAMPLES 0): past 128 members a sorted
// set is a skiplist, whose nodes' levels are random (runs of 2026-12-01:
// 133,712 to 134,928 B for 1,000 permits).
const permitMemoryTolerance = 0.02

// checkPermitMemoryQuotes checks the permit memory figures the docs quote
// against the measured usage (by permits held) and per-permit costs.
func checkPermitMemoryQuotes(t *testing.T, usage map[int]int64, beyond, within float64) {
	t.Helper()
	quotes := []struct {
		doc, re string
		want    []float64
	}{
		{"docs/choosing.md", `about (\d+) B each while a key holds at most 128 and (\d+) B each\s+beyond`, []float64{within, beyond}},
		{"docs/choosing.md", `: (\d+) B for 1\s+permit, ([\d,]+) B for 128, ([\d,]+) B for\s+1,000\.`, []float64{float64(usage[1]), float64(usage[128]), float64(usage[1000])}},
		{"docs/guarantees.md", `measured (\d+) B each within 128 permits, (\d+) B beyond`, []float64{within, beyond}},
	}
	for _, q := range quotes {
		m := regexp.MustCompile(q.re).FindAllStringSubmatch(readDoc(t, q.doc), -1)
		if len(m) != 1 {
			t.Errorf("%s: %d matches of %q, want 1", q.doc, len(m), q.re)
			continue
		}
		for i, w := range q.want {
			got, err := strconv.ParseFloat(strings.ReplaceAll(m[0][i+1], ",", ""), 64)
			if err != nil || math.Abs(got-w) > permitMemoryTolerance*w {
				t.Errorf("%s quotes %s B where the measurement is %.0f B (tolerance %.0f%%)", q.doc, m[0][i+1], w, 100*permitMemoryTolerance)
			}
		}
	}
}
