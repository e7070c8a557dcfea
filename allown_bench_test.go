package fleetlimit_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// benchKeys spreads a benchmark over this many keys, so that it measures the
// decision path rather than one key's lock.
const benchKeys = 1024

// benchmarkAllowN runs AllowN on a token bucket that never denies, over
// benchKeys keys, and checks that every call was admitted without error.
func benchmarkAllowN(b *testing.B, st store.Store, opts ...fleetlimit.Option) {
	b.Helper()
	// A generous timeout: on a loaded machine a 100ms deadline can fire, and
	// this measures decisions, not outages.
	opts = append([]fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10 * time.Second)}, opts...)
	l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000), st, opts...)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%05d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		res, err := l.Allow(bg, keys[i%benchKeys])
		if err != nil || !res.Allowed {
			b.Fatalf("call %d: %+v, %v", i, res, err)
		}
		i++
	}
}

// BenchmarkAllowN measures one decision through the Limiter: on the
// in-process store the Limiter's own overhead is visible; on miniredis and
// the real redis-server the round trip dominates.
//
// The memory variants isolate what the breaker and the observer add to the
// happy path: "memory-no-breaker" is the decision path as it was before
// either existed; "memory" has the default breaker; "memory-observer" adds a
// counting Observer.
func BenchmarkAllowN(b *testing.B) {
	memory := func(opts ...fleetlimit.Option) func(*testing.B) {
		return func(b *testing.B) {
			mem := store.NewMemory()
			defer mem.Close()
			benchmarkAllowN(b, mem, opts...)
			if mem.Len() != min(b.N, benchKeys) {
				b.Fatalf("memory holds %d keys, want %d: the load was not spread", mem.Len(), min(b.N, benchKeys))
			}
		}
	}
	b.Run("memory", memory())
	b.Run("memory-no-breaker", memory(fleetlimit.WithoutBreaker()))
	b.Run("memory-overrides", memory(fleetlimit.WithOverrides(0))) // on, with an empty table
	b.Run("memory-observer", func(b *testing.B) {
		observed := 0
		memory(fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
			if e.Allowed {
				observed++
			}
		})))(b)
		if observed != b.N {
			b.Fatalf("the observer saw %d decisions, want %d", observed, b.N)
		}
	})
	// A dead store behind an open breaker: what each request costs during an
	// outage once the breaker has opened (without it: a full timeout).
	b.Run("circuit-open", func(b *testing.B) {
		dead := stores.Down(b)
		br, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, Clock: func() time.Time { return proptest.Epoch }})
		if err != nil {
			b.Fatal(err)
		}
		// FailOpen: every short-circuited call is admitted, however many
		// (FailLocal's in-process limit would start denying after 100).
		l, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 100), dead, fleetlimit.WithBreaker(br),
			fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = l.Allow(bg, "u") // opens it
		b.ReportAllocs()
		for b.Loop() {
			if res, err := l.Allow(bg, "u"); !errors.Is(err, fleetlimit.ErrCircuitOpen) || !res.Allowed {
				b.Fatalf("%+v, %v", res, err)
			}
		}
	})
	b.Run("miniredis", func(b *testing.B) {
		_, c := redistest.Mini(b)
		benchmarkAllowN(b, stores.Redis(b, c))
	})
	b.Run("redis", func(b *testing.B) {
		benchmarkAllowN(b, stores.Redis(b, redistest.Real(b)))
	})
}
