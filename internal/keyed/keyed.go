// Package keyed holds what the in-process caches (internal/lease,
// internal/denial) share: keys spread over locked shards by a seeded
// hash, and the clock that ages their entries as the store would.
package keyed

import (
	"hash/maphash"
	"time"
)

// MaxShards is the most shards a cache has: enough to keep goroutines on
// different keys off each other's locks on a few cores.
const MaxShards = 16

// Shards spreads keys over a fixed number of values of T (each usually a
// lock and a map) by a hash with a seed of its own. The zero value is not
// usable; build it with NewShards. Of is safe for concurrent use; what T
// guards is T's business.
type Shards[T any] struct {
	seed maphash.Seed
	all  []T
}

// NewShards returns n shards (1 to MaxShards; outside it, the nearest).
func NewShards[T any](n int) Shards[T] {
	n = min(max(n, 1), MaxShards)
	return Shards[T]{seed: maphash.MakeSeed(), all: make([]T, n)}
}

// Of returns key's shard.
func (s *Shards[T]) Of(key string) *T {
	if len(s.all) == 1 {
		return &s.all[0]
	}
	return &s.all[maphash.String(s.seed, key)%uint64(len(s.all))]
}

// Len is the number of shards.
func (s *Shards[T]) Len() int { return len(s.all) }

// Sum is the sum of f over every shard, visited in turn.
func (s *Shards[T]) Sum(f func(*T) int) int {
	n := 0
	for i := range s.all {
		n += f(&s.all[i])
	}
	return n
}

// Each calls f with every shard in turn.
func (s *Shards[T]) Each(f func(*T)) {
	for i := range s.all {
		f(&s.all[i])
	}
}

// Clock ages in-process entries as the store counts time. With Exact (the
// limiter reads a WithClock clock, which it also sends to the store) ages
// are in whole microseconds of that clock, as the store reads it, and are
// exact. Otherwise the store reads its own clock, which this process
// cannot: ages are measured on the monotonic clock from the moment the
// request was sent — at or before the store's — and rounded up to a
// whole microsecond, so an entry is never trusted longer than the store
// would trust it (but for the two clocks' rate difference).
type Clock struct{ Exact bool }

// Since is the age at now of an entry made at at; a zero now reads the
// monotonic clock (one reading, not time.Now's two).
func (c Clock) Since(at, now time.Time) time.Duration {
	if c.Exact {
		return time.Duration(now.UnixMicro()-at.UnixMicro()) * time.Microsecond
	}
	var d time.Duration
	if now.IsZero() {
		d = time.Since(at)
	} else {
		d = now.Sub(at)
	}
	if r := d % time.Microsecond; r > 0 {
		d += time.Microsecond - r
	}
	return d
}
