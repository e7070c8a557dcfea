package fleetlimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// unscalable is a strategy that does not implement algorithm.Scaler.
type unscalable struct{ algorithm.Strategy }

func TestWithFallbackRejectsBadConfig(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	good := algorithm.SlidingWindowLog(10, time.Minute)
	for name, mk := range map[string]func() (*fleetlimit.Limiter, error){
		"nil store": func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, mem, fleetlimit.WithFallback(nil, 4)) },
		"typed nil store": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(good, mem, fleetlimit.WithFallback((*store.Memory)(nil), 4))
		},
		"0 instances": func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, mem, fleetlimit.WithFallback(mem, 0)) },
		"strategy without Scaled": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(unscalable{good}, mem, fleetlimit.WithFallback(mem, 4))
		},
		"fallback with FailOpen": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(good, mem, fleetlimit.WithFallback(mem, 4), fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
		},
		"fallback with FailClosed": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(good, mem, fleetlimit.WithFallback(mem, 4), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
		},
	} {
		l, err := mk()
		require.Nil(t, l, name)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, name)
	}
	_, err := fleetlimit.New(unscalable{good}, mem)
	require.NoError(t, err, "the default fallback, at the full limit, needs no Scaler")
}

// While Redis is down the fallback enforces limit/instances in process,
// first on failed calls and then with the breaker open; every such decision
// is degraded and says so. With no WithFallback at all (the default
// FailLocal), it enforces the full limit.
func TestFallbackBoundsAnOutage(t *testing.T) {
	for _, policy := range []fleetlimit.FailurePolicy{fleetlimit.FailLocal} {
		mr, c := redistest.Mini(t)
		fb := store.NewMemory()
		t.Cleanup(func() { _ = fb.Close() })
		rec := &spy.Observer{}
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(8, time.Minute), stores.Redis(t, c),
			fleetlimit.WithFallback(fb, 4), fleetlimit.WithObserver(rec),
			fleetlimit.WithClock(fixedClock(proptest.Epoch)), fleetlimit.WithTimeout(time.Second),
			fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, Clock: fixedClock(proptest.Epoch)})))
		require.NoError(t, err)
		res, err := l.Allow(bg, "u")
		require.NoError(t, err)
		require.Equal(t, int64(7), res.Remaining, "%v: Redis decides while it is up", policy)

		mr.Close()
		want := []fleetlimit.Result{
			{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute},
			{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Minute},
			{Allowed: false, Limit: 2, Remaining: 0, RetryAfter: time.Minute, ResetAfter: time.Minute},
			{Allowed: false, Limit: 2, Remaining: 0, RetryAfter: time.Minute, ResetAfter: time.Minute},
		}
		for i, w := range want {
			res, err := l.Allow(bg, "u")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "%v request %d", policy, i)
			require.Equal(t, i > 0, errors.Is(err, fleetlimit.ErrCircuitOpen), "%v request %d: the first failure opens the breaker", policy, i)
			require.Equal(t, w, res, "%v request %d: 8 per minute over 4 instances is 2 per instance", policy, i)
		}
		ev := rec.Take()[1:]
		require.Len(t, ev, 4)
		for i, e := range ev {
			require.Equal(t, fleetlimit.DecidedByFallback, e.DecidedBy, "%v event %d", policy, i)
			require.Equal(t, policy, e.Policy)
			require.True(t, e.Degraded())
			require.Equal(t, want[i].Allowed, e.Allowed)
			require.Equal(t, want[i].Remaining, e.Remaining)
			require.Equal(t, i > 0, e.CircuitOpen)
		}
	}
}

// By default an outage costs at most the limit per instance: the default
// FailLocal decides in process at the full limit. The clock is fixed far
// ahead of the wall clock: the default local store, which the whole
// process shares, judges a decision no earlier than the latest time it has
// swept to (at most the wall clock), so a clock behind it would see the
// window turn with the wall clock's minutes.
func TestDefaultPolicyBoundsAnOutage(t *testing.T) {
	ahead := time.Date(2100, 1, 1, 0, 0, 30, 0, time.UTC)
	for _, e := range algorithm.Registry() {
		mr, c := redistest.Mini(t)
		l, err := fleetlimit.New(e.New(5, time.Minute), stores.Redis(t, c), fleetlimit.WithKeyPrefix(redistest.Prefix()),
			fleetlimit.WithClock(fixedClock(ahead)), fleetlimit.WithTimeout(time.Second))
		require.NoError(t, err)
		mr.Close()
		admitted := 0
		for range 50 {
			res, err := l.Allow(bg, "u")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, e.Name)
			if res.Allowed {
				admitted++
			}
		}
		require.Equal(t, 5, admitted, "%s: 50 requests during an outage, the limit admitted", e.Name)
	}
}

// TestFallbackBoundAcrossTheOutage: K instances, each with a FailLocal
// fallback of its own at the full limit L, share one Redis, on a sliding
// log (exact: at most L in any window, per store). A window that lies
// inside the outage admits at most K·L, but one that spans the outage's
// start admits (K+1)·L — what Redis admitted before it went down, and each
// fallback, which starts empty, its L — and so does one that spans its end,
// where Redis, which never saw the fallbacks' admissions, admits its L
// beside theirs. (K+1)·L is the bound: Redis's admissions and each
// fallback's are each at most L in any window.
func TestFallbackBoundAcrossTheOutage(t *testing.T) {
	const K, L, window = 3, 4, time.Minute
	start := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC) // ahead of the wall clock, as above
	clock := fakeclock.New(start)
	mr, c := redistest.Mini(t)
	shared := stores.Redis(t, c)
	prefix := redistest.Prefix()
	var fleet []*fleetlimit.Limiter
	for range K {
		fb := store.NewMemory()
		t.Cleanup(func() { _ = fb.Close() })
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(L, window), shared, fleetlimit.WithKeyPrefix(prefix),
			fleetlimit.WithFallback(fb, 1), fleetlimit.WithoutBreaker(),
			fleetlimit.WithClock(clock.Now), fleetlimit.WithTimeout(time.Second))
		require.NoError(t, err)
		fleet = append(fleet, l)
	}
	var admitted []time.Time
	// offer sends each instance `each` requests and returns how many of
	// them were degraded (decided without Redis).
	offer := func(each int) (degraded int) {
		for range each {
			for _, l := range fleet {
				res, err := l.Allow(bg, "u")
				if err != nil {
					require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
					degraded++
				}
				if res.Allowed {
					admitted = append(admitted, clock.Now())
				}
			}
		}
		return degraded
	}
	in := func(from time.Time) int { // admissions in [from, from+window)
		n := 0
		for _, a := range admitted {
			if !a.Before(from) && a.Before(from.Add(window)) {
				n++
			}
		}
		return n
	}

	require.Zero(t, offer(2)) // Redis admits L of 2·K
	require.Len(t, admitted, L)

	outage := start.Add(window / 2)
	clock.Set(outage)
	mr.Close()
	require.Equal(t, 2*K, offer(2)) // each fallback admits its L... of 2
	clock.Set(outage.Add(time.Second))
	require.Equal(t, 3*K, offer(3)) // ...and L−2 of 3 more
	require.Equal(t, K*L, in(outage), "a window inside the outage: K·L")
	require.Equal(t, (K+1)*L, in(start), "a window spanning the outage's start: (K+1)·L, not K·L")

	end := start.Add(window + time.Second) // Redis's admissions have left its window
	clock.Set(end)
	require.NoError(t, mr.Restart())
	// The client may back off its dialling for a while after the refused
	// connections: wait until a decision on another key reaches the server
	// again, through the same store.
	probe, err := fleetlimit.New(algorithm.SlidingWindowLog(L, window), shared, fleetlimit.WithKeyPrefix(prefix),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed), fleetlimit.WithoutBreaker(),
		fleetlimit.WithClock(clock.Now), fleetlimit.WithTimeout(time.Second))
	require.NoError(t, err)
	eventually(t, func() bool { _, err := probe.Allow(bg, "probe"); return err == nil })
	require.Zero(t, offer(2), "Redis decides again")
	require.Equal(t, (K+1)*L, in(outage), "a window spanning the outage's end: (K+1)·L")
	for _, from := range []time.Time{start, outage, outage.Add(time.Second), end} {
		require.LessOrEqual(t, in(from), (K+1)*L)
	}
}
