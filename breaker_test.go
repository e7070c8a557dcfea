package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
		"negative min failures":  {MinFailures: -1},
		"ratio above 1":          {FailureRatio: 1.5},
		"negative ratio":         {FailureRatio: -0.5},
		"negative forget-after":  {ForgetAfter: -time.Second},
		"negative probe timeout": {ProbeTimeout: -time.Second},
		"negative cool-down":     {CoolDown: -time.Second},
		"max below the cooldown": {CoolDown: time.Second, MaxCoolDown: time.Millisecond},
		"jitter 1":               {Jitter: 1},
		"negative jitter":        {Jitter: -0.1},
	} {
		b, err := fleetlimit.NewBreaker(cfg)
		require.Nil(t, b, name)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, name)
	}
	_, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{MinOutage: -1})
	require.NoError(t, err, "a negative MinOutage means none")
	mem := store.NewMemory()
	defer mem.Close()
	_, err = fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithBreaker(nil))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	_, err = fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithObserver(nil))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	_, err = fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithObserver(fleetlimit.ObserverFunc(nil)))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, "a nil ObserverFunc would panic at the first decision")

	l, err := fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem)
	require.NoError(t, err)
	require.NotNil(t, l.Breaker(), "every limiter has a breaker by default")
	l, err = fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithoutBreaker())
	require.NoError(t, err)
	require.Nil(t, l.Breaker())
}

// The breaker's whole cycle against a Redis that answers LOADING (as while
// it reads its dataset after a restart): it opens once MinFailures failures
// span MinOutage, keeps the store uncalled while open, probes once per
// cool-down, doubles the cool-down up to the cap on each failed probe, and
// closes — resetting the cool-down — once Redis answers again.
func TestBreakerCycle(t *testing.T) {
	mr, c := redistest.Mini(t)
	st := &spy.Store{Store: stores.Redis(t, c)}
	clk := fakeclock.New(proptest.Epoch)
	b := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 3, MinOutage: 100 * time.Millisecond, CoolDown: 100 * time.Millisecond, MaxCoolDown: 400 * time.Millisecond, Clock: clk.Now})
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
	requireStoreFails("failure 3")
	require.Equal(t, fleetlimit.BreakerClosed, b.State(), "3 failures at one instant: no time has passed")
	clk.Advance(50 * time.Millisecond)
	requireStoreFails("failure 4, 50ms into the run")
	clk.Advance(50 * time.Millisecond)
	requireStoreFails("failure 5 opens the breaker: 100ms since the first")
	requireOpen("open for the first cool-down")

	// The observer saw 3 store failures then 5 short-circuited decisions,
	// all decided by the policy (fail-closed: denied).
	ev := rec.Take()
	require.Len(t, ev, 11)
	for i, e := range ev[1:] {
		require.True(t, e.Degraded(), "event %d", i)
		require.False(t, e.Allowed)
		require.Equal(t, fleetlimit.DecidedByPolicy, e.DecidedBy)
		require.Equal(t, fleetlimit.FailClosed, e.Policy)
		require.Equal(t, i >= 5, e.CircuitOpen, "event %d", i)
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
		clk.Advance(50 * time.Millisecond)
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
		fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 2, MinOutage: -1})))
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
			fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 2, MinOutage: -1})))
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
// (The probe's timeout is the limiter's, so its caller waits for it.)
func TestBreakerOneProbeAtATime(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: redistest.HungAddr(t), ReadTimeout: time.Minute, WriteTimeout: time.Minute, DialTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cl.Close() })
	st := &spy.Store{Store: stores.Redis(t, cl)}
	clk := fakeclock.New(proptest.Epoch)
	b := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, ProbeTimeout: 300 * time.Millisecond, Clock: clk.Now})
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st,
		fleetlimit.WithBreaker(b), fleetlimit.WithTimeout(300*time.Millisecond))
	require.NoError(t, err)

	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the hung Redis costs one timeout")
	require.Equal(t, fleetlimit.BreakerOpen, b.State())
	clk.Advance(fleetlimit.DefaultBreakerConfig().CoolDown)

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
// login limiter's failures spare the API limiter its timeouts. (A store
// without shards: one circuit.)
func TestBreakerShared(t *testing.T) {
	mr, c := redistest.Mini(t)
	st := &spy.Store{Store: stores.Redis(t, c)}
	b := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 3, MinOutage: -1})
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
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), stores.Down(t),
		fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, Clock: fixedClock(proptest.Epoch)})))
	require.NoError(t, err)
	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "a refused connection is an availability failure")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := l.Allow(bg, "u"); !errors.Is(err, fleetlimit.ErrCircuitOpen) {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// faultyStore decides in memory, except that the keys of a failing shard
// (a key's shard is its first byte) fail with that shard's error, and that
// while it is held every decision waits for release (or until its context is
// done). It counts the decisions that reach it. shardedStore names its
// shards.
type faultyStore struct {
	*store.Memory
	calls atomic.Int64

	mu      sync.Mutex
	failing map[string]error
	held    chan struct{} // nil: not held; closed by release
}

func newFaultyStore(t *testing.T) *faultyStore {
	return &faultyStore{Memory: stores.Memory(t), failing: map[string]error{}}
}

// fail makes the keys of shard fail with err (nil: succeed again).
func (s *faultyStore) fail(shard string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[shard] = err
}

// hold makes decisions wait until release.
func (s *faultyStore) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = make(chan struct{})
}

func (s *faultyStore) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.held)
	s.held = nil
}

func (s *faultyStore) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	s.calls.Add(1)
	s.mu.Lock()
	err, held := s.failing[req.Key[:1]], s.held
	s.mu.Unlock()
	if held != nil {
		if req.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, req.Timeout)
			defer cancel()
		}
		select {
		case <-held:
		case <-ctx.Done():
			return algorithm.Decision{}, fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
		}
	}
	if err != nil {
		return algorithm.Decision{}, err
	}
	return s.Memory.Decide(ctx, req)
}

// shardedStore is a faultyStore that names its shards.
type shardedStore struct{ *faultyStore }

func (s shardedStore) Shard(key string) string { return key[:1] }

var _ store.Sharded = shardedStore{}

// errDown is an availability failure.
var errDown = fmt.Errorf("%w: connection refused", store.ErrUnavailable)

// A circuit opens on evidence over time, not on a crowd: step by step on a
// fixed clock, with the default rule (5 failures, at least half of the run's
// round trips, spanning 500ms; a run forgotten after 10s without a failure).
func TestBreakerOpensOnEvidenceOverTime(t *testing.T) {
	type step struct {
		advance        time.Duration // on the breaker's clock, before the step
		fails, answers int           // decisions that fail, then that succeed
		want           fleetlimit.BreakerState
		why            string
	}
	for name, steps := range map[string][]step{
		"a stall": {
			{0, 64, 0, fleetlimit.BreakerClosed, "64 callers waiting on one stall fail at one instant: a span of 0"},
			{50 * time.Millisecond, 64, 0, fleetlimit.BreakerClosed, "those who called during it fail 50ms later: far short of 500ms"},
			{10 * time.Millisecond, 0, 129, fleetlimit.BreakerClosed, "then the store answers: 128 failures to 129 answers end the run"},
			{500 * time.Millisecond, 4, 0, fleetlimit.BreakerClosed, "a new run, at one instant"},
			{500 * time.Millisecond, 1, 0, fleetlimit.BreakerOpen, "5 failures over 500ms, all of the round trips: an outage"},
		},
		"a dead store, one caller": {
			{0, 1, 0, fleetlimit.BreakerClosed, "one failure"},
			{100 * time.Millisecond, 1, 0, fleetlimit.BreakerClosed, "two"},
			{100 * time.Millisecond, 1, 0, fleetlimit.BreakerClosed, "three"},
			{100 * time.Millisecond, 1, 0, fleetlimit.BreakerClosed, "four"},
			{100 * time.Millisecond, 1, 0, fleetlimit.BreakerClosed, "five, spanning 400ms: too short"},
			{100 * time.Millisecond, 1, 0, fleetlimit.BreakerOpen, "six over 500ms"},
		},
		"a store answering most": {
			{0, 1, 2, fleetlimit.BreakerClosed, "1 failure in 3 round trips: below half, the run ends"},
			{100 * time.Millisecond, 1, 2, fleetlimit.BreakerClosed, "again"},
			{100 * time.Millisecond, 1, 2, fleetlimit.BreakerClosed, "again: no run lasts"},
			{100 * time.Millisecond, 1, 2, fleetlimit.BreakerClosed, "again"},
			{100 * time.Millisecond, 1, 2, fleetlimit.BreakerClosed, "again"},
			{100 * time.Millisecond, 1, 2, fleetlimit.BreakerClosed, "again"},
			{100 * time.Millisecond, 1, 2, fleetlimit.BreakerClosed, "again, 600ms on"},
		},
		"a store failing most": {
			{0, 2, 1, fleetlimit.BreakerClosed, "2 failures in 3 round trips"},
			{250 * time.Millisecond, 2, 1, fleetlimit.BreakerClosed, "4 in 6, over 250ms"},
			{250 * time.Millisecond, 1, 0, fleetlimit.BreakerOpen, "5 in 7 over 500ms: cut off"},
		},
		"failures far apart": {
			{0, 4, 0, fleetlimit.BreakerClosed, "four failures"},
			{10*time.Second + time.Millisecond, 1, 0, fleetlimit.BreakerClosed, "a fifth more than ForgetAfter later starts a new run"},
			{time.Second, 1, 0, fleetlimit.BreakerClosed, "two in the new run"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			st := newFaultyStore(t)
			clk := fakeclock.New(proptest.Epoch)
			b := newBreaker(t, fleetlimit.BreakerConfig{Clock: clk.Now, Logger: slog.New(slog.DiscardHandler)})
			l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), st, fleetlimit.WithBreaker(b))
			require.NoError(t, err)
			for i, s := range steps {
				clk.Advance(s.advance)
				st.fail("u", errDown)
				for range s.fails {
					_, err := l.Allow(bg, "u")
					require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "step %d: %s", i, s.why)
					require.NotErrorIs(t, err, fleetlimit.ErrCircuitOpen, "step %d: %s", i, s.why)
				}
				st.fail("u", nil)
				for range s.answers {
					_, err := l.Allow(bg, "u")
					require.NoError(t, err, "step %d: %s", i, s.why)
				}
				require.Equal(t, s.want, b.State(), "step %d: %s", i, s.why)
			}
		})
	}
}

// One circuit per shard: a failing shard's circuit opens and its keys skip
// the store, while keys of another shard keep being decided by the store;
// the shard's probe closes its circuit alone. State reports the most open.
func TestBreakerPerShard(t *testing.T) {
	st := shardedStore{newFaultyStore(t)}
	clk := fakeclock.New(proptest.Epoch)
	b := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 2, MinOutage: -1, Clock: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	l, err := fleetlimit.New(algorithm.FixedWindow(3, time.Hour), st, fleetlimit.WithBreaker(b), fleetlimit.WithClock(fixedClock(proptest.Epoch)))
	require.NoError(t, err)

	st.fail("a", errDown)
	for i := range 2 {
		_, err := l.Allow(bg, "a1")
		require.NotErrorIs(t, err, fleetlimit.ErrCircuitOpen, "failure %d of shard a", i+1)
	}
	require.Equal(t, fleetlimit.BreakerOpen, b.State(), "shard a's circuit is open")
	calls := st.calls.Load()
	_, err = l.Allow(bg, "a2")
	require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen, "another key of shard a")
	require.Equal(t, calls, st.calls.Load())
	for i := range 4 {
		res, err := l.Allow(bg, "b1")
		require.NoError(t, err, "shard b decides, call %d", i)
		require.Equal(t, i < 3, res.Allowed, "shard b keeps its limit of 3, call %d", i)
	}

	st.fail("a", nil)
	clk.Advance(fleetlimit.DefaultBreakerConfig().CoolDown)
	_, err = l.Allow(bg, "a1")
	require.NoError(t, err, "the probe of shard a")
	require.Equal(t, fleetlimit.BreakerClosed, b.State())
}

// A probe has the breaker's ProbeTimeout, not the limiter's: a store too
// slow for the limiter's 50ms timeout but alive (here held until the test
// lets it answer) answers the probe and closes the circuit, although the
// caller whose decision probed was answered by the policy at 50ms.
// Meanwhile other decisions skip the store.
func TestBreakerProbeOutlastsTheTimeout(t *testing.T) {
	st := newFaultyStore(t)
	clk := fakeclock.New(proptest.Epoch)
	b := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, Clock: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st,
		fleetlimit.WithBreaker(b), fleetlimit.WithTimeout(50*time.Millisecond), fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	require.NoError(t, err)
	st.hold()
	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, fleetlimit.BreakerOpen, b.State())

	clk.Advance(fleetlimit.DefaultBreakerConfig().CoolDown)
	start := time.Now()
	res, err := l.Allow(bg, "u")
	took := time.Since(start)
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "the probe's caller is not kept waiting")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, fleetlimit.ErrCircuitOpen, "it called the store")
	require.True(t, res.Allowed, "fail-open")
	require.Less(t, took, 50*time.Millisecond+hangGuard)
	clk.Advance(200 * time.Millisecond)
	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen, "one probe at a time, for as long as a probe may take")
	st.release()
	require.Eventually(t, func() bool { return b.State() == fleetlimit.BreakerClosed }, hangGuard, time.Millisecond,
		"the probe's answer closes the circuit")
	require.EqualValues(t, 2, st.calls.Load())
}

// hangGuard bounds how long a test waits for something that should happen
// at once; it is not a speed assertion.
const hangGuard = 5 * time.Second

// An outage is reported once when a circuit opens (Error, with the shard,
// the cause and the evidence) and once when it closes (Info, with the
// outage's length and the failed probes) — not once per failed probe.
func TestBreakerLogsEachChangeOnce(t *testing.T) {
	st := shardedStore{newFaultyStore(t)}
	clk := fakeclock.New(proptest.Epoch)
	log := &spy.Log{}
	b := newBreaker(t, fleetlimit.BreakerConfig{Clock: clk.Now, Logger: slog.New(log)})
	l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), st, fleetlimit.WithBreaker(b))
	require.NoError(t, err)

	st.fail("a", errDown)
	for i := range 5 {
		if i > 0 {
			clk.Advance(125 * time.Millisecond)
		}
		_, _ = l.Allow(bg, "a")
	}
	require.Equal(t, fleetlimit.BreakerOpen, b.State())
	opened := log.Take()
	require.Len(t, opened, 1)
	require.Equal(t, slog.LevelError, opened[0].Level)
	require.Contains(t, opened[0].Message, "circuit breaker opened")
	a := spy.Attrs(opened[0])
	require.Equal(t, "a", a["shard"].String())
	require.Equal(t, errDown.Error(), a["cause"].String())
	require.EqualValues(t, 5, a["failures"].Int64())
	require.Equal(t, 500*time.Millisecond, a["over"].Duration())

	for range 3 {
		clk.Advance(fleetlimit.DefaultBreakerConfig().MaxCoolDown)
		_, err := l.Allow(bg, "a")
		require.ErrorIs(t, err, errDown, "a failed probe")
	}
	require.Empty(t, log.Take(), "failed probes are not news")

	st.fail("a", nil)
	clk.Advance(fleetlimit.DefaultBreakerConfig().MaxCoolDown)
	_, err = l.Allow(bg, "a")
	require.NoError(t, err)
	closed := log.Take()
	require.Len(t, closed, 1)
	require.Equal(t, slog.LevelInfo, closed[0].Level)
	require.Contains(t, closed[0].Message, "circuit breaker closed")
	a = spy.Attrs(closed[0])
	require.Equal(t, 4*fleetlimit.DefaultBreakerConfig().MaxCoolDown, a["outage"].Duration(), "from opening to closing on the breaker's clock")
	require.EqualValues(t, 3, a["failed_probes"].Int64())
}
