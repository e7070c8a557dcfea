package algorithm_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

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
		{6, 10, 0, int64(time.Minute)}, {6, algorithm.MaxInt, 0, int64(algorithm.MaxWindow)}, {6, 1, 0, int64(time.Millisecond)},
		{0, math.MaxInt64, 0, math.MaxInt64}, {2, math.MinInt64, math.MinInt64, math.MinInt64},
	} {
		f.Add(seed.kind, seed.a, seed.b, seed.d)
	}
	reg := algorithm.Registry()
	_, client := redistest.Mini(f)
	rs := stores.Redis(f, client)
	// fuzzNow is the target's fixed clock, 30s into a minute.
	fuzzNow := func() time.Time { return proptest.Epoch.Add(30 * time.Second) }
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
		lr, err := fleetlimit.New(s, rs, fleetlimit.WithClock(clock.Now), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout))
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
		probes := []proptest.Event{
			{At: fuzzNow(), N: 1},
			{At: fuzzNow(), N: min(limit, 3)},
			{At: later(w / 2), N: 1},
			{At: later(w), N: 2},
		}
		if limit < algorithm.MaxInt {
			probes = append(probes, proptest.Event{At: later(w), N: limit + 1})
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
