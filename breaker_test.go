package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// slowMachine is the timeout of tests whose healthy store must answer: far
// above a round trip, so that a loaded CI machine cannot fail them; tests of
// timeouts set their own.
const slowMachine = 5 * time.Second

func newBreaker(t *testing.T, cfg fleetlimit.BreakerConfig) *fleetlimit.Breaker {
	t.Helper()
	b, err := fleetlimit.NewBreaker(cfg)
	require.NoError(t, err)
	return b
}

func TestNewBreakerRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]fleetlimit.BreakerConfig{
		"negative threshold":     {Threshold: -1},
		"negative cool-down":     {CoolDown: -time.Second},
		"max below the cooldown": {CoolDown: time.Second, MaxCoolDown: time.Millisecond},
		"jitter 1":               {Jitter: 1},
		"negative jitter":        {Jitter: -0.1},
	} {
		b, err := fleetlimit.NewBreaker(cfg)
		require.Nil(t, b, name)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, name)
	}
	mem := store.NewMemory()
	defer mem.Close()
	_, err := fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithBreaker(nil))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	_, err = fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithObserver(nil))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)

	l, err := fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem)
	require.NoError(t, err)
	require.NotNil(t, l.Breaker(), "every limiter has a breaker by default")
	l, err = fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithoutBreaker())
	require.NoError(t, err)
	require.Nil(t, l.Breaker())
}

// The breaker's whole cycle against a Redis that answers LOADING (as while
// it reads its dataset after a restart): it opens after Threshold failures,
// keeps the store uncalled while open, probes once per cool-down, doubles the
// cool-down up to the cap on each failed probe, and closes — resetting the
// cool-down — once Redis answers again.
func TestBreakerCycle(t *testing.T) {
	mr, c := redistest.Mini(t)
	st := &spy.Store{Store: stores.Redis(t, c)}
	clk := fakeclock.New(proptest.Epoch)
	b := newBreaker(t, fleetlimit.BreakerConfig{Threshold: 3, CoolDown: 100 * time.Millisecond, MaxCoolDown: 400 * time.Millisecond, Clock: clk.Now})
	rec := &spy.Observer{}
	l, err := fleetlimit.New(algorithm.SlidingWindowLog(1000, time.Minute), st,
		fleetlimit.WithBreaker(b), fleetlimit.WithObserver(rec), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed),
		fleetlimit.WithTimeout(slowMachine))
	require.NoError(t, err)

	// allow makes one decision and says whether the store was called and
	// whether it answered.
	allow := func(step string) (called bool, err error) {
		t.Helper()
		before := st.Calls.Load()
		_, err = l.Allow(bg, "u")
		return st.Calls.Load() > before, err
	}
	requireStoreOK := func(step string) {
		t.Helper()
		called, err := allow(step)
		require.True(t, called, step)
		require.NoError(t, err, step)
		require.Equal(t, fleetlimit.BreakerClosed, b.State(), step)
	}
	requireStoreFails := func(step string) {
		t.Helper()
		called, err := allow(step)
		require.True(t, called, "%s: the store is called", step)
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, step)
		require.NotErrorIs(t, err, fleetlimit.ErrCircuitOpen, step)
	}
	requireOpen := func(step string) {
		t.Helper()
		for range 5 {
			called, err := allow(step)
			require.False(t, called, "%s: an open breaker does not call the store", step)
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, step)
			require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen, step)
		}
		require.Equal(t, fleetlimit.BreakerOpen, b.State(), step)
	}

	requireStoreOK("healthy")
	mr.SetError("LOADING Redis is loading the dataset in memory")
	requireStoreFails("failure 1")
	requireStoreFails("failure 2")
	require.Equal(t, fleetlimit.BreakerClosed, b.State(), "2 failures are below the threshold of 3")
	requireStoreFails("failure 3 opens the breaker")
	requireOpen("open for the first cool-down")

	// The observer saw 3 store failures then 5 short-circuited decisions,
	// all decided by the policy (fail-closed: denied).
	ev := rec.Take()
	require.Len(t, ev, 9)
	for i, e := range ev[1:] {
		require.True(t, e.Degraded(), "event %d", i)
		require.False(t, e.Allowed)
		require.Equal(t, fleetlimit.DecidedByPolicy, e.DecidedBy)
		require.Equal(t, fleetlimit.FailClosed, e.Policy)
		require.Equal(t, i >= 3, e.CircuitOpen, "event %d", i)
	}

	clk.Advance(100 * time.Millisecond)
	require.Equal(t, fleetlimit.BreakerHalfOpen, b.State(), "the cool-down is over")
	requireStoreFails("probe 1 fails")
	requireOpen("the failed probe reopens it, now for 200ms")
	clk.Advance(100 * time.Millisecond)
	requireOpen("100ms into a 200ms cool-down")
	clk.Advance(100 * time.Millisecond)
	requireStoreFails("probe 2 fails")
	clk.Advance(200 * time.Millisecond)
	requireOpen("200ms into a 400ms cool-down")
	clk.Advance(200 * time.Millisecond)
	requireStoreFails("probe 3 fails")
	clk.Advance(300 * time.Millisecond)
	requireOpen("the cool-down stays at the 400ms cap (jitter shortens it by at most 20%)")
	clk.Advance(100 * time.Millisecond)
	requireStoreFails("probe 4 fails")

	mr.SetError("")
	clk.Advance(400 * time.Millisecond)
	requireStoreOK("probe 5 succeeds and closes the breaker")
	requireStoreOK("closed")

	// Closing reset the cool-down: the next outage opens it for 100ms again.
	mr.SetError("OOM command not allowed when used memory > 'maxmemory'")
	for i := range 3 {
		requireStoreFails(fmt.Sprintf("second outage, failure %d", i+1))
	}
	requireOpen("second outage")
	clk.Advance(100 * time.Millisecond)
	mr.SetError("")
	requireStoreOK("a probe after the first 100ms cool-down closes it")
}

// Only availability failures count: errors of one key, and the caller's own
// cancelled context, leave the breaker closed however many there are.
func TestBreakerIgnoresPerKeyErrors(t *testing.T) {
	mr, c := redistest.Mini(t)
	st := &spy.Store{Store: stores.Redis(t, c)}
	l, err := fleetlimit.New(algorithm.SlidingWindowLog(10, time.Minute), st, fleetlimit.WithTimeout(slowMachine),
		fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{Threshold: 2})))
	require.NoError(t, err)
	mr.HSet(store.RedisKey(l.KeyPrefix(), "bad", "sl"), "f", "v")
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	for i := range 5 {
		_, err := l.Allow(bg, "bad")
		require.ErrorIs(t, err, store.ErrWrongType, "call %d", i)
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "call %d", i)
		_, err = l.Allow(cancelled, "u")
		require.ErrorIs(t, err, context.Canceled)
	}
	require.Equal(t, fleetlimit.BreakerClosed, l.Breaker().State())
	require.EqualValues(t, 5, st.Calls.Load(), "every per-key error reached the store (cancelled calls never do)")
	_, err = l.Allow(bg, "good")
	require.NoError(t, err)

	// Redis errors that are not about availability do not count either;
	// those that are do.
	for _, reply := range []struct {
		msg   string
		opens bool
	}{
		{"ERR user_script:1: Script attempted to access nonexistent global variable", false},
		{"NOSCRIPT No matching script", false},
		{"LOADING Redis is loading the dataset in memory", true},
		{"READONLY You can't write against a read only replica.", true},
		{"MASTERDOWN Link with MASTER is down", true},
		{"OOM command not allowed", true},
		{"BUSY Redis is busy running a script", true},
		{"ERR max number of clients reached", true},
	} {
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(10, time.Minute), st, fleetlimit.WithTimeout(slowMachine),
			fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{Threshold: 2})))
		require.NoError(t, err)
		mr.SetError(reply.msg)
		for range 2 {
			_, err = l.Allow(bg, "u")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, reply.msg)
		}
		require.Equal(t, reply.opens, l.Breaker().State() == fleetlimit.BreakerOpen, reply.msg)
	}
}

// Half-open lets one probe through at a time: while a probe waits on a hung
// Redis, every other decision returns at once without calling the store.
func TestBreakerOneProbeAtATime(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: redistest.HungAddr(t), ReadTimeout: time.Minute, WriteTimeout: time.Minute, DialTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cl.Close() })
	st := &spy.Store{Store: stores.Redis(t, cl)}
	clk := fakeclock.New(proptest.Epoch)
	b := newBreaker(t, fleetlimit.BreakerConfig{Threshold: 1, Clock: clk.Now})
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st,
		fleetlimit.WithBreaker(b), fleetlimit.WithTimeout(300*time.Millisecond))
	require.NoError(t, err)

	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the hung Redis costs one timeout")
	require.Equal(t, fleetlimit.BreakerOpen, b.State())
	clk.Advance(fleetlimit.DefaultCoolDown)

	probeDone := make(chan error, 1)
	go func() {
		_, err := l.Allow(bg, "u")
		probeDone <- err
	}()
	for st.Calls.Load() < 2 {
		select {
		case err := <-probeDone:
			t.Fatalf("the probe ended before reaching the store: %v", err)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	// The probe is in flight.
	for range 20 {
		_, err := l.Allow(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen)
	}
	require.EqualValues(t, 2, st.Calls.Load(), "only the probe reached the store")
	err = <-probeDone
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, fleetlimit.ErrCircuitOpen)
	require.Equal(t, fleetlimit.BreakerOpen, b.State(), "the failed probe reopened the breaker")
}

// One Breaker shared by the limiters of one store opens for all of them: the
// login limiter's failures spare the API limiter its timeouts.
func TestBreakerShared(t *testing.T) {
	mr, c := redistest.Mini(t)
	st := &spy.Store{Store: stores.Redis(t, c)}
	b := newBreaker(t, fleetlimit.BreakerConfig{Threshold: 3})
	login, err := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Minute), st, fleetlimit.WithBreaker(b), fleetlimit.WithName("login"))
	require.NoError(t, err)
	api, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 200), st, fleetlimit.WithBreaker(b), fleetlimit.WithName("api"))
	require.NoError(t, err)
	mr.Close()
	for range 3 {
		_, err := login.Allow(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	}
	calls := st.Calls.Load()
	res, err := api.Allow(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen, "the API limiter never called the dead store")
	require.True(t, res.Allowed, "fail-open")
	require.Equal(t, calls, st.Calls.Load())
	require.Same(t, api.Breaker(), login.Breaker())
}

// A decision cut short by the breaker allocates nothing (the happy path's
// allocations are measured by BenchmarkAllowN).
func TestCircuitOpenDoesNotAllocate(t *testing.T) {
	mem := store.NewMemory()
	require.NoError(t, mem.Close())
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), mem,
		fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{Threshold: 1, Clock: fixedClock(proptest.Epoch)})))
	require.NoError(t, err)
	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, store.ErrClosed, "a closed store is an availability failure")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := l.Allow(bg, "u"); !errors.Is(err, fleetlimit.ErrCircuitOpen) {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
