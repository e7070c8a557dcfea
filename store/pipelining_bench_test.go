package store_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// BenchmarkPipelining compares, on the real redis-server, the ways one
// decision's script can share round trips with concurrent ones, at 1, 8 and
// 64 goroutines over 10,000 keys (a token bucket that never denies):
//
//   - store: store.Redis.Decide as shipped (its combiner, store/pipeline.go,
//     at DefaultMaxInFlight);
//   - nopipeline: store.Redis.Decide with pipelining off
//     (WithMaxInFlight(0)): one round trip per decision on pooled
//     connections;
//   - autopipeline: the same EVALSHA through go-redis's own AutoPipeliner
//     (v9.23, experimental), default options but MaxRetries -1: a retried
//     batch may run a script twice, which for a limiter charges twice.
//
// autopipeline sends the script with the arguments Decide would, and checks
// the reply's shape; it does no more than the store's own decoding, so it
// is, if anything, favoured. Compare ns/op and allocs/op side by side in
// one run (docs/performance.md quotes it).
func BenchmarkPipelining(b *testing.B) {
	c := redistest.Real(b)
	s := algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000)
	ctx := context.Background()
	if err := c.ScriptLoad(ctx, s.Script().Source).Err(); err != nil {
		b.Fatal(err)
	}
	noRetry := redis.NewClient(&redis.Options{Addr: c.Options().Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer noRetry.Close()
	ap, err := noRetry.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	defer ap.Close()
	shipped := stores.Redis(b, c)
	solo := stores.Redis(b, c, store.WithMaxInFlight(0))
	for _, g := range []int{1, 8, 64} {
		b.Run("store/g="+strconv.Itoa(g), func(b *testing.B) { benchDecide(b, shipped, s, g) })
		b.Run("nopipeline/g="+strconv.Itoa(g), func(b *testing.B) { benchDecide(b, solo, s, g) })
		b.Run("autopipeline/g="+strconv.Itoa(g), func(b *testing.B) {
			prefix := redistest.Prefix()
			static := s.ScriptArgs()
			parallel(b, g, func(i int) error {
				key := store.RedisKey(prefix, benchKeys[i%len(benchKeys)], s.Script().Tag)
				args := append([]any{"", int64(1)}, static...)
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				reply, err := ap.EvalSha(cctx, s.Script().SHA1, []string{key}, args...).Result()
				if err != nil {
					return err
				}
				if r, ok := reply.([]any); !ok || len(r) != 4 {
					b.Fatalf("reply %v", reply)
				}
				return nil
			})
		})
	}
}

func benchDecide(b *testing.B, r *store.Redis, s algorithm.Strategy, g int) {
	prefix := redistest.Prefix()
	parallel(b, g, func(i int) error {
		req := store.Request{Strategy: s, Prefix: prefix, Key: benchKeys[i%len(benchKeys)], N: 1, Timeout: time.Second}
		d, err := r.Decide(context.Background(), req)
		if err == nil && !d.Allowed {
			b.Fatalf("denied: %+v", d)
		}
		return err
	})
}

// parallel runs f b.N times over g goroutines, each call with its own index.
func parallel(b *testing.B, g int, f func(i int) error) {
	b.ReportAllocs()
	var next atomic.Int64
	b.ResetTimer()
	done := make(chan error, g)
	for range g {
		go func() {
			for {
				i := int(next.Add(1))
				if i > b.N {
					done <- nil
					return
				}
				if err := f(i); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	for range g {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaxInFlight is store.Redis.Decide on the real redis-server over
// 10,000 keys (a fixed window that never denies) at 1 to 64 goroutines,
// with pipelining off (inflight=0) and at several WithMaxInFlight settings,
// the shipped DefaultMaxInFlight among them: the measurement behind its
// value (docs/performance.md quotes it). Compare the cells of one
// goroutine count side by side, over several invocations.
func BenchmarkMaxInFlight(b *testing.B) {
	c := redistest.Real(b)
	s := algorithm.FixedWindow(1_000_000_000, time.Hour)
	for _, g := range []int{1, 2, 4, 8, 16, 32, 64} {
		for _, n := range []int{0, 4, 8, 16} {
			r := stores.Redis(b, c, store.WithMaxInFlight(n))
			b.Run("g="+strconv.Itoa(g)+"/inflight="+strconv.Itoa(n), func(b *testing.B) { benchDecide(b, r, s, g) })
		}
	}
}
