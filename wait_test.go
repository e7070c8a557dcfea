package fleetlimit_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
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

// TestWaitArrivalOrder: 64 goroutines Wait on one spent key of one
// Limiter, one after another, on a virtual clock, for every registered
// algorithm on every store. They are admitted in the order they arrived;
// at exactly the instants, and with exactly the store calls, of one caller
// that makes the same requests in turn and, when denied, retries exactly
// RetryAfter later — the best any schedule can do, at most two calls per
// admission; so the store sees O(admitted) calls, not one per waiter per
// retry. The sliding log and the fixed window admit exactly the limit in
// every window.
func TestWaitArrivalOrder(t *testing.T) {
	const waiters, limit, window = 64, 4, time.Minute
	backends := map[string]store.Store{"memory": stores.Memory(t)}
	_, mini := redistest.Mini(t)
	backends["miniredis"] = stores.Redis(t, mini)
	if redistest.HaveReal(t) {
		backends["redis"] = stores.Redis(t, redistest.Real(t))
	}
	for _, e := range proptest.RegistryEntries(t) {
		for name, st := range backends {
			t.Run(e.Name+"/"+name, func(t *testing.T) {
				strat := e.New(limit, window)
				start := proptest.EdgeAfter(proptest.Epoch, window)
				times, calls := serialSchedule(t, st, strat, start, waiters)

				clock := fakeclock.New(start)
				counted := &spy.Store{Store: st}
				var mu sync.Mutex
				var order []string
				var at []time.Time
				lim, err := fleetlimit.New(strat, counted,
					fleetlimit.WithClock(clock.Now), fleetlimit.WithKeyPrefix(redistest.Prefix()),
					fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed),
					fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(ev fleetlimit.Event) {
						if ev.Allowed && ev.Route != "" {
							mu.Lock()
							order, at = append(order, ev.Route), append(at, clock.Now())
							mu.Unlock()
						}
					})))
				require.NoError(t, err)
				wait := func(ctx context.Context, key string) (fleetlimit.Result, error) {
					return fleetlimit.WaitNSleeping(lim, clock.Sleep, ctx, key, 1)
				}
				res, err := lim.AllowN(bg, "k", limit) // spend the key
				require.NoError(t, err)
				require.True(t, res.Allowed)

				errs := make(chan error, waiters)
				for i := range waiters {
					go func() {
						ctx := fleetlimit.ContextWithRoute(bg, strconv.Itoa(i))
						res, err := wait(ctx, "k")
						if err == nil && !res.Allowed {
							err = fmt.Errorf("waiter %d returned %+v without an error", i, res)
						}
						errs <- err
					}()
					// The next arrives once this one is queued (and the
					// first has been denied and sleeps).
					eventually(t, func() bool {
						_, asleep := clock.NextWake()
						return fleetlimit.Waiting(lim, "k") == i+1 && asleep
					})
				}
				for {
					mu.Lock()
					done := len(order) == waiters
					mu.Unlock()
					if done {
						break
					}
					var next time.Time
					eventually(t, func() bool {
						mu.Lock()
						defer mu.Unlock()
						var asleep bool
						next, asleep = clock.NextWake()
						return asleep || len(order) == waiters
					})
					if !next.IsZero() {
						clock.Set(next)
					}
				}
				for range waiters {
					require.NoError(t, <-errs)
				}
				want := make([]string, waiters)
				for i := range want {
					want[i] = strconv.Itoa(i)
				}
				require.Equal(t, want, order, "admitted out of arrival order")
				require.Equal(t, times, at, "admitted at other instants than the best serial schedule")
				require.Equal(t, calls, counted.Calls.Load()-1, "store calls")
				require.LessOrEqual(t, calls, int64(2*waiters))
				require.Zero(t, fleetlimit.Waiting(lim, "k"))
				if e.Name == "sliding_window_log" || e.Name == "fixed_window" {
					per := make(map[int64]int)
					for _, a := range at {
						per[int64(a.Sub(start)/window)]++
					}
					per[0] += limit // the spending
					for w := range int64(len(per)) {
						require.Equal(t, limit, per[w], "admitted in window %d", w)
					}
				}
			})
		}
	}
}

// serialSchedule makes n requests of cost 1 in turn on a spent key, each
// retried exactly RetryAfter after a denial, on a virtual clock from start,
// and returns the instants of their admissions and the number of decisions
// made for them.
func serialSchedule(t *testing.T, st store.Store, strat algorithm.Strategy, start time.Time, n int) ([]time.Time, int64) {
	t.Helper()
	rig, err := proptest.NewRig(st, strat)
	require.NoError(t, err)
	res, err := rig.At(proptest.Event{At: start, Key: "k", N: strat.Limit()})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	var times []time.Time
	var calls int64
	now := start
	for range n {
		for {
			res, err := rig.At(proptest.Event{At: now, Key: "k", N: 1})
			require.NoError(t, err)
			calls++
			if res.Allowed {
				times = append(times, now)
				break
			}
			now = now.Add(res.RetryAfter)
		}
	}
	return times, calls
}

// eventually polls cond until it holds, failing t after a minute of real
// time: a hang, not a measurement.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// WaitN's early returns and its queue: a deadline before the waiter's
// RetryAfter, or before the sleeping head's retry, returns at once (ctx is
// not yet done when it does); n above the limit and bad input return at
// once; a waiter whose ctx is cancelled leaves the queue, and when it was
// the head the next one takes over.
func TestWaitReturns(t *testing.T) {
	clock := fakeclock.New(proptest.Epoch)
	lim, err := fleetlimit.New(algorithm.FixedWindow(1, time.Hour), stores.Memory(t),
		fleetlimit.WithClock(clock.Now), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	require.NoError(t, err)
	wait := func(ctx context.Context, key string) (fleetlimit.Result, error) {
		return fleetlimit.WaitNSleeping(lim, clock.Sleep, ctx, key, 1)
	}
	none := fleetlimit.Result{Limit: 1}

	res, err := wait(bg, "k")
	require.NoError(t, err)
	require.True(t, res.Allowed, "a key with room is admitted at once")

	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	res, err = wait(ctx, "k") // RetryAfter is an hour
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, ctx.Err(), "it waited for the deadline")
	require.Equal(t, none, res)

	_, err = fleetlimit.WaitNSleeping(lim, clock.Sleep, bg, "k", 2)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)
	_, err = wait(bg, "")
	require.ErrorIs(t, err, fleetlimit.ErrInvalidKey)
	require.Zero(t, fleetlimit.Waiting(lim, "k"))

	// A head that sleeps (in real time: its wake-up is an hour away), a
	// waiter behind it, and one whose deadline comes first.
	type outcome struct {
		res fleetlimit.Result
		err error
	}
	headCtx, cancelHead := context.WithCancel(bg)
	head, second := make(chan outcome, 1), make(chan outcome, 1)
	go func() { r, err := wait(headCtx, "k"); head <- outcome{r, err} }()
	eventually(t, func() bool { _, asleep := clock.NextWake(); return asleep })
	go func() { r, err := wait(bg, "k"); second <- outcome{r, err} }()
	eventually(t, func() bool { return fleetlimit.Waiting(lim, "k") == 2 })

	res, err = wait(ctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded, "joined behind a head that retries in an hour")
	require.NoError(t, ctx.Err())
	require.Equal(t, none, res)
	require.Equal(t, 2, fleetlimit.Waiting(lim, "k"))

	cancelHead()
	o := <-head
	require.ErrorIs(t, o.err, context.Canceled)
	require.Equal(t, none, o.res)
	// The second is the head now: it asks, is denied, and sleeps.
	eventually(t, func() bool { _, asleep := clock.NextWake(); return asleep && fleetlimit.Waiting(lim, "k") == 1 })
	next, _ := clock.NextWake()
	clock.Set(next)
	o = <-second
	require.NoError(t, o.err)
	require.True(t, o.res.Allowed)
	require.Zero(t, fleetlimit.Waiting(lim, "k"))
}

// TestWaitNAboveTheKeysTier: n above the key's own limit (its tier, from
// WithStrategyFor) can never pass, even when the limiter's own limit is
// larger: WaitN returns at once with ErrInvalidCost and a Result that has
// only the key's Limit set, whether ctx has a deadline or not, and without
// asking the store. n within the key's tier still waits and passes.
func TestWaitNAboveTheKeysTier(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  algorithm.Strategy
		free algorithm.Strategy
	}{
		{"fixed_window", algorithm.FixedWindow(100, time.Minute), algorithm.FixedWindow(10, time.Minute)},
		{"token_bucket", algorithm.TokenBucket(100, time.Minute, 100), algorithm.TokenBucket(10, time.Minute, 10)},
		{"composite", algorithm.All(algorithm.TokenBucket(100, time.Minute, 100), algorithm.FixedWindow(1000, time.Hour)),
			algorithm.All(algorithm.TokenBucket(10, time.Minute, 10), algorithm.FixedWindow(1000, time.Hour))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(proptest.Epoch)
			counted := &spy.Store{Store: stores.Memory(t)}
			lim, err := fleetlimit.New(tc.own, counted, fleetlimit.WithClock(clock.Now),
				fleetlimit.WithStrategyFor(func(_ context.Context, key string) (algorithm.Strategy, error) {
					if key == "free" {
						return tc.free, nil
					}
					return nil, nil
				}))
			require.NoError(t, err)
			// A sleep that never returns before ctx is done: a WaitN that
			// sleeps at all fails the test (the first, without a deadline,
			// would hang; the eventually below catches it).
			sleep := func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() }

			done := make(chan error, 1)
			var res fleetlimit.Result
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			go func() {
				var err error
				res, err = fleetlimit.WaitNSleeping(lim, sleep, ctx, "free", 50)
				done <- err
			}()
			var werr error
			eventually(t, func() bool {
				select {
				case werr = <-done:
					return true
				default:
					return false
				}
			})
			require.ErrorIs(t, werr, fleetlimit.ErrInvalidCost)
			require.Equal(t, fleetlimit.Result{Limit: 10}, res)
			require.Zero(t, counted.Calls.Load(), "asked the store for a cost that can never pass")

			dl, cancelDl := context.WithTimeout(bg, time.Hour)
			defer cancelDl()
			res, err = fleetlimit.WaitNSleeping(lim, sleep, dl, "free", 50)
			require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			require.NoError(t, dl.Err(), "it returned before its deadline")
			require.Equal(t, fleetlimit.Result{Limit: 10}, res)

			// Within the tier, and above the free tier on another key.
			res, err = fleetlimit.WaitNSleeping(lim, sleep, bg, "free", 10)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			res, err = fleetlimit.WaitNSleeping(lim, sleep, bg, "paid", 50)
			require.NoError(t, err)
			require.True(t, res.Allowed)
		})
	}
}

// TestWaitOrderWithOtherTraffic: the order claim holds with other traffic
// on the key. 8 goroutines Wait on one spent key of one Limiter while
// another Limiter on the same keys (another process of the fleet) takes a
// slot at every wake-up, racing the queue's head for it. The waiters are
// still admitted in the order they arrived, every one of them, and the two
// together never pass the limit in a window; only the round trips grow
// (a head that loses the race asks again).
func TestWaitOrderWithOtherTraffic(t *testing.T) {
	const waiters, limit, window = 8, 2, time.Minute
	st := stores.Memory(t)
	start := proptest.EdgeAfter(proptest.Epoch, window)
	clock := fakeclock.New(start)
	var mu sync.Mutex
	var order []string
	perWindow := map[int64]int{}
	record := fleetlimit.ObserverFunc(func(ev fleetlimit.Event) {
		if ev.Allowed {
			mu.Lock()
			if ev.Route != "" {
				order = append(order, ev.Route)
			}
			perWindow[int64(clock.Now().Sub(start)/window)]++
			mu.Unlock()
		}
	})
	newLimiter := func() *fleetlimit.Limiter {
		l, err := fleetlimit.New(algorithm.FixedWindow(limit, window), st, fleetlimit.WithClock(clock.Now),
			fleetlimit.WithFailurePolicy(fleetlimit.FailClosed), fleetlimit.WithObserver(record))
		require.NoError(t, err)
		return l
	}
	lim, other := newLimiter(), newLimiter()
	res, err := other.AllowN(bg, "k", limit) // spend the key
	require.NoError(t, err)
	require.True(t, res.Allowed)

	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			ctx := fleetlimit.ContextWithRoute(bg, strconv.Itoa(i))
			res, err := fleetlimit.WaitNSleeping(lim, clock.Sleep, ctx, "k", 1)
			if err == nil && !res.Allowed {
				err = fmt.Errorf("waiter %d returned %+v without an error", i, res)
			}
			errs <- err
		}()
		eventually(t, func() bool {
			_, asleep := clock.NextWake()
			return fleetlimit.Waiting(lim, "k") == i+1 && asleep
		})
	}
	stolen := 0
	for {
		mu.Lock()
		done := len(order) == waiters
		mu.Unlock()
		if done {
			break
		}
		var next time.Time
		eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			var asleep bool
			next, asleep = clock.NextWake()
			return asleep || len(order) == waiters
		})
		if next.IsZero() {
			continue
		}
		clock.Set(next)
		if res, err := other.Allow(bg, "k"); err == nil && res.Allowed { // races the head
			stolen++
		}
	}
	for range waiters {
		require.NoError(t, <-errs)
	}
	want := make([]string, waiters)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	require.Equal(t, want, order, "admitted out of arrival order")
	require.Positive(t, stolen, "the other traffic never took a slot")
	for w, n := range perWindow {
		require.LessOrEqual(t, n, limit, "window %d", w)
	}
	require.Zero(t, fleetlimit.Waiting(lim, "k"))
}

// A sliding log admits at most algorithm.MaxLogCost units in one request,
// even under a larger limit: WaitN for more returns at once with
// ErrInvalidCost and only Limit set, without asking the store or sleeping.
func TestWaitNAboveMaxLogCost(t *testing.T) {
	counted := &spy.Store{Store: stores.Memory(t)}
	lim, err := fleetlimit.New(algorithm.SlidingWindowLog(3*algorithm.MaxLogCost, time.Minute), counted)
	require.NoError(t, err)
	sleep := func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() }
	ctx, cancel := context.WithTimeout(bg, 10*time.Second) // before the window's retry
	defer cancel()
	res, err := fleetlimit.WaitNSleeping(lim, sleep, ctx, "k", algorithm.MaxLogCost+1)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)
	require.Equal(t, fleetlimit.Result{Limit: 3 * algorithm.MaxLogCost}, res)
	require.Zero(t, counted.Calls.Load(), "asked the store for a cost that can never pass")
	require.NoError(t, ctx.Err(), "it slept")
	res, err = fleetlimit.WaitNSleeping(lim, sleep, ctx, "k", algorithm.MaxLogCost)
	require.NoError(t, err)
	require.True(t, res.Allowed, "MaxLogCost itself passes")
}
