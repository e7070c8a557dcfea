package store_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/cpubench"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// benchKeys are 10,000 user keys, built once so that key building is not
// measured by the store benchmarks.
var benchKeys = func() []string {
	k := make([]string, 10000)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(100000+i)
	}
	return k
}()

func benchStrategies() []algorithm.Strategy {
	// Limits high enough that nothing is denied.
	return []algorithm.Strategy{
		algorithm.SlidingWindowLog(100, time.Minute),
		algorithm.TokenBucket(1_000_000, time.Second, 1_000_000),
		algorithm.FixedWindow(1_000_000_000, time.Minute),
	}
}

// BenchmarkMemoryDecide is one decision on the in-process store over 10,000
// keys; run with -cpu 1,2 to see it scale with cores.
func BenchmarkMemoryDecide(b *testing.B) {
	for _, s := range benchStrategies() {
		b.Run(s.Name(), func(b *testing.B) {
			m := store.NewMemory()
			defer m.Close()
			now := time.Now()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					// Advance time so the sliding log evicts as it adds.
					req := store.Request{Strategy: s, Prefix: "rl:", Key: benchKeys[i%len(benchKeys)], N: 1, Now: now.Add(time.Duration(i) * time.Millisecond)}
					if _, err := m.Decide(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkRedisDecide is one decision on the real redis-server (server
// TIME), over 10,000 keys, at 32 goroutines per -cpu, with pipelining off
// (inflight=0) and on; run with -cpu to vary concurrency.
func BenchmarkRedisDecide(b *testing.B) {
	c := redistest.Real(b)
	for _, s := range benchStrategies() {
		for _, inflight := range []int{0, 1, 2, 4, 8} {
			b.Run(s.Name()+"/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
				benchRedis(b, stores.Redis(b, c, store.WithMaxInFlight(inflight)), s)
			})
		}
	}
}

func benchRedis(b *testing.B, r *store.Redis, s algorithm.Strategy) {
	prefix := redistest.Prefix()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := store.Request{Strategy: s, Prefix: prefix, Key: benchKeys[i%len(benchKeys)], N: 1, Timeout: time.Second}
			if _, err := r.Decide(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRedisDecideSerial is one goroutine's latency per decision on the
// real redis-server: compare it with BenchmarkRedisIncr in the same run.
func BenchmarkRedisDecideSerial(b *testing.B) {
	c := redistest.Real(b)
	for _, s := range benchStrategies() {
		b.Run(s.Name(), func(b *testing.B) {
			r := stores.Redis(b, c)
			prefix := redistest.Prefix()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				req := store.Request{Strategy: s, Prefix: prefix, Key: benchKeys[i%len(benchKeys)], N: 1, Timeout: time.Second}
				if _, err := r.Decide(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRedisIncr is the floor: a plain INCR through the same client.
func BenchmarkRedisIncr(b *testing.B) {
	c := redistest.Real(b)
	prefix := redistest.Prefix()
	b.Run("serial", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Incr(context.Background(), prefix+benchKeys[i%len(benchKeys)]).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if err := c.Incr(context.Background(), prefix+benchKeys[i%len(benchKeys)]).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkMemoryDecideClock is one decision on the in-process store at
// its own clock (no Request.Now), as a Limiter without WithClock asks for
// it, for each strategy of BenchmarkOverhead (limits that never deny), over
// the 10,000 keys, every one of them held before timing, each goroutine
// walking them from its own offset (as fleetbench's in-process cells do);
// run with -cpu 1,2 to see it scale with cores. cpu-ns/op is the process's
// CPU time per decision, which other processes taking the cores do not
// inflate.
func BenchmarkMemoryDecideClock(b *testing.B) {
	for _, s := range []algorithm.Strategy{
		algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000),
		algorithm.FixedWindow(1_000_000_000_000, time.Hour),
		algorithm.SlidingWindowCounter(1_000_000_000_000, time.Hour),
	} {
		b.Run(s.Name(), func(b *testing.B) {
			m := store.NewMemory()
			defer m.Close()
			ctx := context.Background()
			for _, k := range benchKeys {
				if d, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "rl:", Key: k, N: 1}); err != nil || !d.Allowed {
					b.Fatalf("%s: %+v, %v", k, d, err)
				}
			}
			var goroutines atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			cpubench.Report(b, func() {
				b.RunParallel(func(pb *testing.PB) {
					var d algorithm.Decision
					i := int(goroutines.Add(1)-1) * len(benchKeys) / runtime.GOMAXPROCS(0)
					for pb.Next() {
						i++
						req := store.Request{Strategy: s, Prefix: "rl:", Key: benchKeys[i%len(benchKeys)], N: 1}
						if err := m.DecideTo(ctx, &req, &d); err != nil || !d.Allowed {
							b.Fatalf("call %d: %+v, %v", i, d, err)
						}
					}
				})
			})
		})
	}
}
