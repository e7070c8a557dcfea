package fleetlimit_test

// Fuzz targets for the Limiter's outside input: keys and costs (AllowN) and
// the key prefix option. The Redis key built from a user's key is fuzzed in
// package store (FuzzRedisKey), strategy parameters in package algorithm
// (FuzzStrategyConfig). `go test` runs their seed corpus; docs/guarantees.md
// says how to fuzz them for longer.

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// fuzzNow is the fixed clock of the fuzz targets, 30s into a minute.
func fuzzNow() time.Time { return proptest.Epoch.Add(30 * time.Second) }

// FuzzAllowN: any key bytes and any cost, through memory and miniredis. An
// empty or over-long key is ErrInvalidKey, a cost outside 1..2^53
// ErrInvalidCost; with an error the Result is the zero denial and nothing is
// recorded in either store. Otherwise both stores decide identically, and
// admit exactly when n fits the limit.
func FuzzAllowN(f *testing.F) {
	for _, seed := range []struct {
		key string
		n   int64
	}{
		{"alice", 1}, {"alice", 5}, {"alice", 6}, {"", 1}, {"k", 0}, {"k", -1},
		{"k", math.MinInt64}, {"k", math.MaxInt64}, {"k", algorithm.MaxInt}, {"k", algorithm.MaxInt + 1},
		{strings.Repeat("x", store.MaxKeyLen), 1}, {strings.Repeat("x", store.MaxKeyLen+1), 1},
		{"{", 1}, {"}{", 2}, {"%7B", 3}, {"\x00\xff\n", 1}, {"ключ", 4},
	} {
		f.Add(seed.key, seed.n)
	}
	m, client := redistest.Mini(f)
	s := algorithm.SlidingWindowLog(5, time.Minute)
	f.Fuzz(func(t *testing.T, key string, n int64) {
		m.FlushAll()
		mem := store.NewMemory()
		defer mem.Close()
		lm, err := fleetlimit.New(s, mem, fleetlimit.WithClock(fuzzNow))
		if err != nil {
			t.Fatal(err)
		}
		lr, err := fleetlimit.New(s, stores.Redis(t, client), fleetlimit.WithClock(fuzzNow), fleetlimit.WithTimeout(proptest.Timeout))
		if err != nil {
			t.Fatal(err)
		}
		rm, errm := lm.AllowN(context.Background(), key, n)
		rr, errr := lr.AllowN(context.Background(), key, n)

		var want error
		switch {
		case key == "" || len(key) > store.MaxKeyLen:
			want = fleetlimit.ErrInvalidKey
		case n < 1 || n > algorithm.MaxInt:
			want = fleetlimit.ErrInvalidCost
		}
		if want != nil {
			if !errors.Is(errm, want) || !errors.Is(errr, want) {
				t.Fatalf("key of %d bytes, n=%d: errors %v and %v, want %v", len(key), n, errm, errr, want)
			}
			zero := fleetlimit.Result{Limit: s.Limit()}
			if rm != zero || rr != zero {
				t.Fatalf("invalid request got %+v and %+v, want the zero denial %+v", rm, rr, zero)
			}
			if mem.Len() != 0 || len(m.Keys()) != 0 {
				t.Fatalf("invalid request recorded state: memory holds %d keys, redis %v", mem.Len(), m.Keys())
			}
			return
		}
		if errm != nil || errr != nil {
			t.Fatalf("valid key of %d bytes, n=%d: errors %v, %v", len(key), n, errm, errr)
		}
		if rm != rr {
			t.Fatalf("key %q n=%d: memory %+v, redis %+v", key, n, rm, rr)
		}
		if rm.Allowed != (n <= s.Limit()) {
			t.Fatalf("n=%d on a fresh key: %+v", n, rm)
		}
		recorded := 0
		if rm.Allowed {
			recorded = 1
		}
		if mem.Len() != recorded || len(m.Keys()) != recorded {
			t.Fatalf("Allowed %v: memory holds %d keys, redis %v", rm.Allowed, mem.Len(), m.Keys())
		}
	})
}

// FuzzKeyPrefix: WithKeyPrefix refuses (ErrInvalidConfig) exactly the
// prefixes with a brace or longer than store.MaxKeyLen; with any other, a
// decision lands on the Redis key store.RedisKey names.
func FuzzKeyPrefix(f *testing.F) {
	for _, p := range []string{"", "ratelimit:", "{", "a}b", "app:v2:", strings.Repeat("p", store.MaxKeyLen), strings.Repeat("p", store.MaxKeyLen+1), "\x00*?[", "%7B"} {
		f.Add(p)
	}
	m, client := redistest.Mini(f)
	s := algorithm.FixedWindow(3, time.Minute)
	f.Fuzz(func(t *testing.T, prefix string) {
		m.FlushAll()
		lim, err := fleetlimit.New(s, stores.Redis(t, client), fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithClock(fuzzNow), fleetlimit.WithTimeout(proptest.Timeout))
		bad := strings.ContainsAny(prefix, "{}") || len(prefix) > store.MaxKeyLen
		if bad {
			if !errors.Is(err, fleetlimit.ErrInvalidConfig) {
				t.Fatalf("prefix %q accepted (err %v)", prefix, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("prefix %q refused: %v", prefix, err)
		}
		res, err := lim.Allow(context.Background(), "user")
		if err != nil || !res.Allowed {
			t.Fatalf("prefix %q: %+v, %v", prefix, res, err)
		}
		want := store.RedisKey(prefix, "user", s.Script().Tag)
		if keys := m.Keys(); len(keys) != 1 || keys[0] != want {
			t.Fatalf("prefix %q: redis holds %q, want [%q]", prefix, keys, want)
		}
	})
}
