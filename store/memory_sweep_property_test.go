package store_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// TestMemorySweepNeverForgetsEarly is the sweeper's safety property: no
// sequence of caller times makes the store forget a key before its state is
// full again. Put as something a test can see: a store that sweeps decides
// every request exactly as a store that never drops anything, given the same
// times — each request's time, or the store's clock when it passes none,
// raised to the sweep horizon (store.Memory.Sweep: the earlier of the store's
// clock and the latest time passed, never moving back). A key dropped while
// some later time could still see it non-full would show up as a decision
// that differs.
//
// Each seed drives a random run: keys under two prefixes and every
// registered algorithm; caller times that step back and forth around a
// caller clock, with readings a century ahead, a year behind, or none (the
// store's clock); a store clock that runs with the callers', behind them or
// ahead of them, and is sometimes set back; sweeps at random moments. The loop is deterministic: a
// failure names its seed and the last steps, and fails the same way again.
func TestMemorySweepNeverForgetsEarly(t *testing.T) {
	const seeds, steps = 100, 300
	dropped := 0
	for seed := range uint64(seeds) {
		dropped += sweepRun(t, seed, steps)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d runs of %d steps; %d keys dropped in all by sweeps", seeds, steps, dropped)
	require.Positive(t, dropped, "the sweeps must actually drop keys, or the property is vacuous")
}

// sweepRun runs one seeded timeline and returns how many keys the sweeping
// store held fewer than the reference at the end.
func sweepRun(t *testing.T, seed uint64, steps int) int {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second}
	w := windows[rng.IntN(len(windows))]
	var strats []algorithm.Strategy
	for _, e := range algorithm.Registry() {
		strats = append(strats, e.New(int64(rng.IntN(4))+1, w))
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	prefixes := []string{"p:", "q:"}

	wus := int64(w / time.Microsecond)
	callers := storetest.T0.UnixMicro() // the honest callers' clock, µs
	// The store's clock: with the callers', an hour behind or an hour ahead.
	storeClock := fakeclock.New(time.UnixMicro(callers + []int64{0, -3600e6, 3600e6}[rng.IntN(3)]))
	sweeping := store.NewMemory(store.WithMemoryClock(storeClock.Now), store.WithSweepInterval(24*time.Hour))
	defer sweeping.Close()
	reference := store.NewMemory(store.WithSweepInterval(24 * time.Hour)) // never swept
	defer reference.Close()

	// The model of the horizon (store.Memory.Sweep's doc).
	horizon, latest, callerTime := int64(-1<<63), int64(-1<<63), false
	var log []string
	for i := range steps {
		switch r := rng.IntN(100); {
		case r < 70: // a decision
			s := strats[rng.IntN(len(strats))]
			req := store.Request{Strategy: s, Prefix: prefixes[rng.IntN(2)], Key: keys[rng.IntN(len(keys))], N: int64(rng.IntN(int(s.Limit())+1)) + 1}
			var at int64 // µs
			own := true  // the request carries its time
			switch k := rng.IntN(100); {
			case k < 3:
				at = callers + int64(100*365*24*time.Hour/time.Microsecond) // a century ahead
			case k < 6:
				at = callers - int64(365*24*time.Hour/time.Microsecond) // a year behind
			case k < 16:
				at = storeClock.Now().UnixMicro() // the store's clock, passed or not
				own = rng.IntN(2) == 0
			default:
				at = callers + rng.Int64N(2*wus+1) - wus // skew of up to a window
			}
			if own {
				req.Now = time.UnixMicro(at)
				callerTime = true
			}
			eff := max(at, horizon)
			latest = max(latest, eff)
			got, err := sweeping.Decide(ctx, req)
			require.NoError(t, err)
			req.Now = time.UnixMicro(eff)
			want, err := reference.Decide(ctx, req)
			require.NoError(t, err)
			log = append(log, fmt.Sprintf("%s %s%s n=%d at %+dµs (judged at %+dµs): %+v", s.Name(), req.Prefix, req.Key, req.N, at-storetest.T0.UnixMicro(), eff-storetest.T0.UnixMicro(), got))
			if got != want {
				t.Fatalf("seed %d, step %d: the sweeping store decided\n  %+v\nwhere one that keeps every key decides\n  %+v\nlast steps:\n  %s",
					seed, i, got, want, tail(log, 12))
			}
		case r < 90: // time passes, for the callers and the store
			d := rng.Int64N(2*wus + 1)
			callers += d
			switch rng.IntN(8) {
			case 0: // the store's clock on its own
				storeClock.Advance(time.Duration(rng.Int64N(4*wus+1)) * time.Microsecond)
			case 1: // a store clock set back (WithMemoryClock may do that)
				storeClock.Advance(-time.Duration(rng.Int64N(4*wus+1)) * time.Microsecond)
			default:
				storeClock.Advance(time.Duration(d) * time.Microsecond)
			}
		default:
			sweeping.Sweep()
			h := storeClock.Now().UnixMicro()
			if callerTime {
				h = min(h, latest)
			}
			horizon = max(horizon, h)
			log = append(log, fmt.Sprintf("sweep: horizon %+dµs, %d keys held (reference %d)", horizon-storetest.T0.UnixMicro(), sweeping.Len(), reference.Len()))
		}
	}
	return reference.Len() - sweeping.Len()
}

func tail(log []string, n int) string {
	if len(log) > n {
		log = log[len(log)-n:]
	}
	var s string
	for i, l := range log {
		if i > 0 {
			s += "\n  "
		}
		s += l
	}
	return s
}
