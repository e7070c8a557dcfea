package fleetlimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// BenchmarkAcquireRelease is one Acquire and its Release (two round trips
// on Redis) over benchKeys keys, beside BenchmarkAllowN's one decision:
// what holding a slot costs against counting a request. Every acquire is
// admitted (a limit of 1,000 per key, each released at once).
func BenchmarkAcquireRelease(b *testing.B) {
	run := func(b *testing.B, st store.Store) {
		l, err := fleetlimit.New(algorithm.Concurrency(1000, time.Minute), st,
			fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]string, benchKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("user:%05d", i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p, res, err := l.Acquire(bg, keys[i%benchKeys])
			if err != nil || !res.Allowed {
				b.Fatalf("acquire %d: %+v, %v", i, res, err)
			}
			if err := p.Release(bg); err != nil {
				b.Fatalf("release %d: %v", i, err)
			}
			i++
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, stores.Memory(b)) })
	b.Run("redis", func(b *testing.B) { run(b, stores.Redis(b, redistest.Real(b))) })
}
