package store_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

func TestSmokeTwins(t *testing.T) {
	_, mini := redistest.Mini(t)
	real := redistest.Real(t)
	for _, srv := range []struct {
		name string
		s    store.Store
	}{{"mini", store.NewRedis(mini)}, {"real", store.NewRedis(real)}} {
		for _, strat := range []algorithm.Strategy{
			algorithm.SlidingWindowLog(5, 10*time.Second),
			algorithm.TokenBucket(3, 10*time.Second, 5),
			algorithm.FixedWindow(5, 10*time.Second),
		} {
			rng := rand.New(rand.NewSource(1))
			mem := store.NewMemory()
			prefix := redistest.Prefix()
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := 0; i < 300; i++ {
				now = now.Add(time.Duration(rng.Intn(3_000_000)) * time.Microsecond)
				n := int64(rng.Intn(3) + 1)
				req := store.Request{Strategy: strat, Prefix: prefix, Key: "k", N: n, Now: now}
				a, err := mem.Decide(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := srv.s.Decide(context.Background(), req)
				if err != nil {
					t.Fatal(srv.name, strat.Name(), err)
				}
				if a != b {
					t.Fatalf("%s %s step %d n=%d: go %+v lua %+v", srv.name, strat.Name(), i, n, a, b)
				}
			}
		}
	}
}
