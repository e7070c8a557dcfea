package fleetlimit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/cpubench"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// BenchmarkOverhead puts Limiter.Allow beside the store's Decide alone,
// with the request the Limiter builds, for each built-in strategy that
// never denies here, over benchKeys keys: "allow" minus "decide" is what
// the Limiter itself costs a decision when leases, the denial cache,
// tiers, the penalty box, the observer and shadow mode are off (the
// default breaker is on, as it is by default). The memory pairs show it
// in process; the redis pairs, on the real redis-server, show it beside a
// round trip. Run with -cpu 1,2 to see the memory store scale with cores.
//
// bench/instructions.sh counts the instructions of the memory pairs'
// loop bodies by their closures' names (BenchmarkOverhead.func2.1.1.1 and
// func2.2.1.1): keep decide, then allow, as pair's first two closures.
//
// Every call is checked to be admitted, and the memory store to hold one
// state per key: the load was spread as intended.
func BenchmarkOverhead(b *testing.B) {
	strategies := []algorithm.Strategy{
		algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000),
		algorithm.FixedWindow(1_000_000_000_000, time.Hour),
		algorithm.SlidingWindowCounter(1_000_000_000_000, time.Hour),
	}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%05d", i)
	}
	// most is the most calls one goroutine made in any run of a pair: the
	// keys it walked, which the memory store must then hold.
	var mu sync.Mutex
	most := 0
	walked := func(i int) {
		mu.Lock()
		most = max(most, i)
		mu.Unlock()
	}
	pair := func(b *testing.B, st store.Store, s algorithm.Strategy) {
		most = 0
		l, err := fleetlimit.New(s, st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("decide", func(b *testing.B) {
			b.ReportAllocs()
			cpubench.Report(b, func() {
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						req := store.Request{Strategy: s, Prefix: l.KeyPrefix(), Key: keys[i%benchKeys], N: 1, Timeout: 10 * time.Second}
						if d, err := st.Decide(bg, req); err != nil || !d.Allowed {
							b.Fatalf("call %d: %+v, %v", i, d, err)
						}
						i++
					}
					walked(i)
				})
			})
		})
		b.Run("allow", func(b *testing.B) {
			b.ReportAllocs()
			cpubench.Report(b, func() {
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if res, err := l.Allow(bg, keys[i%benchKeys]); err != nil || !res.Allowed {
							b.Fatalf("call %d: %+v, %v", i, res, err)
						}
						i++
					}
					walked(i)
				})
			})
		})
	}
	for _, s := range strategies {
		b.Run("memory/"+s.Name(), func(b *testing.B) {
			mem := stores.Memory(b)
			pair(b, mem, s)
			if mem.Len() != min(most, benchKeys) {
				b.Fatalf("memory holds %d keys, want %d: the load was not spread", mem.Len(), min(most, benchKeys))
			}
		})
	}
	for _, s := range strategies {
		b.Run("redis/"+s.Name(), func(b *testing.B) {
			pair(b, stores.Redis(b, redistest.Real(b)), s)
		})
	}
}
