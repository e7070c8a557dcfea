package fleetlimit_test

// Fuzz targets for everything that takes outside input: keys and costs
// (AllowN), strategy parameters (configuration) and the key prefix option.
// The Redis key built from a user's key is fuzzed in package store
// (FuzzRedisKey). `go test` runs their seed corpus; docs/guarantees.md says
// how to fuzz them for longer.

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// fuzzNow is the fixed clock of the fuzz targets.
func fuzzNow() time.Time { return epoch2026.Add(30 * time.Second) }

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
		lr, err := fleetlimit.New(s, stores.Redis(t, client), fleetlimit.WithClock(fuzzNow), fleetlimit.WithTimeout(propTimeout))
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

// FuzzStrategyConfig: strategy constructors with any parameters. Neither
// construction nor Validate panics; an invalid strategy's error wraps
// algorithm.ErrInvalidStrategy and New refuses it with ErrInvalidConfig; a
// valid one decides without error, its Go rule and Lua script (miniredis)
// agree, and every Result keeps the contract (resultInvariants).
func FuzzStrategyConfig(f *testing.F) {
	for _, seed := range []struct {
		kind    uint8
		a, b, d int64
	}{
		{0, 5, 0, int64(time.Minute)}, {1, 5, 0, int64(time.Minute)}, {2, 3, 5, int64(time.Minute)},
		{0, 0, 0, int64(time.Minute)}, {1, -1, 0, int64(time.Second)}, {2, 1, 1, 0},
		{0, 1, 0, int64(time.Millisecond) - 1}, {0, 1, 0, int64(time.Millisecond) + 1},
		{2, 7, algorithm.MaxInt, int64(time.Hour)}, {2, algorithm.MaxInt, 1, int64(time.Millisecond)},
		{2, 1, 1 << 20, int64(algorithm.MaxWindow)}, {1, algorithm.MaxInt, 0, int64(algorithm.MaxWindow)},
		{0, algorithm.MaxInt + 1, 0, int64(time.Minute)}, {2, 1_000_000_007, 999_983, 999_999_000},
		{3, 10, 0, int64(time.Minute)}, {4, 10, 0, int64(time.Minute)}, {5, 10, 0, int64(time.Minute)},
		{0, math.MaxInt64, 0, math.MaxInt64}, {2, math.MinInt64, math.MinInt64, math.MinInt64},
	} {
		f.Add(seed.kind, seed.a, seed.b, seed.d)
	}
	reg := algorithm.Registry()
	_, client := redistest.Mini(f)
	rs := stores.Redis(f, client)
	f.Fuzz(func(t *testing.T, kind uint8, a, b, d int64) {
		var s algorithm.Strategy
		switch k := int(kind) % (3 + len(reg)); k {
		case 0:
			s = algorithm.SlidingWindowLog(a, time.Duration(d))
		case 1:
			s = algorithm.FixedWindow(a, time.Duration(d))
		case 2:
			s = algorithm.TokenBucket(a, time.Duration(d), b)
		default:
			s = reg[k-3].New(a, time.Duration(d))
		}
		mem := store.NewMemory()
		defer mem.Close()
		err := s.Validate()
		_, errNew := fleetlimit.New(s, mem, fleetlimit.WithClock(fuzzNow))
		if err != nil {
			if !errors.Is(err, algorithm.ErrInvalidStrategy) {
				t.Fatalf("%s: Validate error %v does not wrap ErrInvalidStrategy", s.Name(), err)
			}
			if !errors.Is(errNew, fleetlimit.ErrInvalidConfig) || !errors.Is(errNew, algorithm.ErrInvalidStrategy) {
				t.Fatalf("%s: New accepted an invalid strategy or said %v", s.Name(), errNew)
			}
			return
		}
		if errNew != nil {
			t.Fatalf("%s: valid strategy refused by New: %v", s.Name(), errNew)
		}
		clock := &fakeclock.Clock{}
		lr, err := fleetlimit.New(s, rs, fleetlimit.WithClock(clock.Now), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(propTimeout))
		if err != nil {
			t.Fatal(err)
		}
		lm, err := fleetlimit.New(s, mem, fleetlimit.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		// Small costs only, or above the limit: a sliding log writes one
		// Redis member per admitted unit. Times stop at fleetlimit.MaxTime()
		// (a token bucket may take centuries to fill).
		limit, w := s.Limit(), s.Window()
		later := func(d time.Duration) time.Time {
			if t := fuzzNow().Add(d); t.Before(fleetlimit.MaxTime()) {
				return t
			}
			return fleetlimit.MaxTime()
		}
		probes := []propEvent{
			{At: fuzzNow(), N: 1},
			{At: fuzzNow(), N: min(limit, 3)},
			{At: later(w / 2), N: 1},
			{At: later(w), N: 2},
		}
		if limit < algorithm.MaxInt {
			probes = append(probes, propEvent{At: later(w), N: limit + 1})
		}
		for i, p := range probes {
			clock.Set(p.At)
			rm, err := lm.AllowN(context.Background(), "k", p.N)
			if err != nil {
				t.Fatalf("%s: probe %d (n=%d): Go rule: %v", s.Name(), i, p.N, err)
			}
			rr, err := lr.AllowN(context.Background(), "k", p.N)
			if err != nil {
				t.Fatalf("%s: probe %d (n=%d): Lua script: %v", s.Name(), i, p.N, err)
			}
			if rm != rr {
				t.Fatalf("%s (limit %d, window %v): probe %d (n=%d at +%v): Go rule %+v, Lua script %+v", s.Name(), limit, w, i, p.N, p.At.Sub(fuzzNow()), rm, rr)
			}
			if msg := resultInvariants(s, p, rm); msg != "" {
				t.Fatalf("%s (limit %d, window %v): probe %d (n=%d): %s: %+v", s.Name(), limit, w, i, p.N, msg, rm)
			}
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
		lim, err := fleetlimit.New(s, stores.Redis(t, client), fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithClock(fuzzNow), fleetlimit.WithTimeout(propTimeout))
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
