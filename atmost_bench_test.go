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

// BenchmarkAllowAtMost is one partial grant of up to 10 through the
// Limiter, over benchKeys keys, beside BenchmarkAllowN's one decision (same
// token bucket, which never runs short): what the atmost mode costs against
// a plain decision. Every call must be granted all 10.
func BenchmarkAllowAtMost(b *testing.B) {
	run := func(b *testing.B, st store.Store) {
		l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000), st,
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
			g, res, err := l.AllowAtMost(bg, keys[i%benchKeys], 10)
			if err != nil || g != 10 || !res.Allowed {
				b.Fatalf("call %d: granted %d, %+v, %v", i, g, res, err)
			}
			i++
		}
	}
	b.Run("memory", func(b *testing.B) {
		mem := store.NewMemory()
		defer mem.Close()
		run(b, mem)
		if mem.Len() != min(b.N, benchKeys) {
			b.Fatalf("memory holds %d keys, want %d: the load was not spread", mem.Len(), min(b.N, benchKeys))
		}
	})
	b.Run("miniredis", func(b *testing.B) {
		_, c := redistest.Mini(b)
		run(b, stores.Redis(b, c))
	})
	b.Run("redis", func(b *testing.B) { run(b, stores.Redis(b, redistest.Real(b))) })
}
