package store_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// Sweep drops exactly the keys that are back at full capacity, on the time
// axis of the decisions (a virtual clock is never overtaken by real time).
// Shards are chosen by the user key, so "p:"+"u" and "q:"+"u" share a shard
// and its latest decision time.
func TestMemorySweepDropsOnlyFullKeys(t *testing.T) {
	m := store.NewMemory()
	defer m.Close()
	// Each is full again a minute (the fixed window: at the edge, 60s) after
	// a request.
	strats := []algorithm.Strategy{
		algorithm.SlidingWindowLog(3, time.Minute),
		algorithm.TokenBucket(1, time.Minute, 1),
		algorithm.FixedWindow(3, time.Minute),
	}
	at := func(prefix string, d time.Duration) {
		for _, strat := range strats {
			_, err := m.Decide(ctx, store.Request{Strategy: strat, Prefix: prefix, Key: "u", N: 1, Now: storetest.T0.Add(d)})
			require.NoError(t, err)
		}
	}
	at("p:", time.Second) // full again by 61s
	at("q:", 50*time.Second)
	m.Sweep()
	require.Equal(t, 6, m.Len(), "at 50s nothing is full yet")
	at("q:", 61*time.Second)
	m.Sweep()
	require.Equal(t, 3, m.Len(), "at 61s the p: keys are full and dropped; the q: keys were used at 50s and 61s")
	at("p:", 62*time.Second)
	require.Equal(t, 6, m.Len(), "a dropped key starts afresh")
}

// With caller-supplied time, every shard is swept up to the latest time any
// caller has passed, not only its own latest: with WithClock, keys in shards
// that saw no later decision must be dropped too.
func TestMemorySweepFollowsLatestCallerTime(t *testing.T) {
	m := store.NewMemory()
	defer m.Close()
	s := algorithm.TokenBucket(1, time.Second, 1)
	for i := range 1000 {
		_, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: strconv.Itoa(i), N: 1, Now: storetest.T0})
		require.NoError(t, err)
	}
	require.Equal(t, 1000, m.Len())
	_, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: "later", N: 1, Now: storetest.T0.Add(time.Minute)})
	require.NoError(t, err)
	m.Sweep()
	require.Equal(t, 1, m.Len(), "all 1000 were full a second after T0; only the key used at T0+1m remains")
}

// With the store's own clock, the background sweeper empties idle keys on
// its own, and Close stops it.
func TestMemorySweeperRunsAndStops(t *testing.T) {
	before := runtime.NumGoroutine()
	now := storetest.T0
	clock := make(chan time.Time, 1)
	clock <- now
	read := func() time.Time { t := <-clock; clock <- t; return t }
	m := store.NewMemory(store.WithMemoryClock(read), store.WithSweepInterval(5*time.Millisecond))
	for _, strat := range strategies() {
		_, err := m.Decide(ctx, store.Request{Strategy: strat, Prefix: "p:", Key: "u", N: 1})
		require.NoError(t, err)
	}
	require.Equal(t, 3, m.Len())
	<-clock
	clock <- now.Add(time.Hour)
	require.Eventually(t, func() bool { return m.Len() == 0 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, m.Close()) // waits for the sweeper to return
	// Not require.Eventually: it runs the condition on goroutines of its own.
	for i := 0; runtime.NumGoroutine() > before; i++ {
		require.Less(t, i, 1000, "goroutines: %d before NewMemory, %d after Close", before, runtime.NumGoroutine())
		time.Sleep(10 * time.Millisecond)
	}
}

// A request at a far-behind clock on the same key is judged without
// refilling (elapsed time is clamped at zero).
func TestMemoryTimeNeverRunsBackwardsForAKey(t *testing.T) {
	m := store.NewMemory()
	defer m.Close()
	strat := algorithm.TokenBucket(1, time.Minute, 1)
	d, err := m.Decide(ctx, store.Request{Strategy: strat, Prefix: "p:", Key: "u", N: 1, Now: storetest.T0.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = m.Decide(ctx, store.Request{Strategy: strat, Prefix: "p:", Key: "u", N: 1, Now: storetest.T0})
	require.NoError(t, err)
	require.False(t, d.Allowed, "a clock an hour behind sees an empty bucket, not a full one")
}

// scriptless is a strategy for in-process use only: no Lua twin.
type scriptless struct{ algorithm.Strategy }

func (scriptless) Script() *algorithm.Script { return nil }

// The memory store runs a strategy without a script (it must not read the
// script's tag); Redis refuses it with a clear error.
func TestStrategyWithoutScript(t *testing.T) {
	m := store.NewMemory()
	defer m.Close()
	s := scriptless{algorithm.FixedWindow(1, time.Minute)}
	d, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: "u", N: 1, Now: storetest.T0})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, c := redistest.Mini(t)
	_, err = stores.Redis(t, c).Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: "u", N: 1, Now: storetest.T0})
	require.ErrorIs(t, err, algorithm.ErrInvalidStrategy)
}

// century is how far ahead a broken clock reads in the tests below.
const century = 100 * 365 * 24 * time.Hour

// One caller's clock reading a century ahead (a glitch, or a clock far
// fast) must not count as time passing for every key: a 5/hour quota spent
// at T0 stays spent 2.5s later, after a sweep, for every algorithm. The
// store's clock and the callers' are one fake clock, as WithMemoryClock and
// fleetlimit.WithClock would share it.
func TestMemoryFarFutureReadingDropsNoOtherKey(t *testing.T) {
	for _, e := range algorithm.Registry() {
		clock := fakeclock.New(storetest.T0)
		m := store.NewMemory(store.WithMemoryClock(clock.Now), store.WithSweepInterval(time.Hour))
		s := e.New(5, time.Hour)
		decide := func(key string, at time.Time) algorithm.Decision {
			d, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: key, N: 1, Now: at})
			require.NoError(t, err)
			return d
		}
		for i := range 5 {
			require.True(t, decide("u", storetest.T0).Allowed, "%s: request %d", e.Name, i)
		}
		require.False(t, decide("u", storetest.T0).Allowed, "%s: the quota is spent", e.Name)
		require.True(t, decide("other", storetest.T0.Add(century)).Allowed, "%s: the broken clock's own key", e.Name)
		clock.Advance(2500 * time.Millisecond)
		m.Sweep()
		d := decide("u", clock.Now())
		require.False(t, d.Allowed, "%s: 2.5s after T0 the hourly quota must still be spent", e.Name)
		require.Zero(t, d.Remaining, e.Name)
		require.NoError(t, m.Close())
	}
}

// DecideTo is Decide: over two stores, the same calls (admissions, denials,
// keys fresh and held, the store's clock and the caller's) get the same
// decisions, and recorded state; on a closed store it is ErrClosed with a
// zero decision.
func TestMemoryDecideToIsDecide(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	byValue := store.NewMemory(store.WithMemoryClock(clock.Now))
	byPointer := store.NewMemory(store.WithMemoryClock(clock.Now))
	defer byValue.Close()
	for _, s := range []algorithm.Strategy{
		algorithm.TokenBucket(3, time.Second, 3),
		algorithm.FixedWindow(3, time.Second),
		algorithm.SlidingWindowCounter(3, time.Second),
		algorithm.SlidingWindowLog(3, time.Second),
	} {
		for i := range 12 {
			req := store.Request{Strategy: s, Prefix: "p:", Key: "k" + strconv.Itoa(i%2), N: int64(1 + i%3)}
			if i%4 == 3 {
				req.Now = clock.Now().Add(time.Duration(i) * time.Millisecond)
			}
			want, wantErr := byValue.Decide(context.Background(), req)
			var got algorithm.Decision
			err := byPointer.DecideTo(context.Background(), &req, &got)
			require.Equal(t, wantErr, err, "%s call %d", s.Name(), i)
			require.Equal(t, want, got, "%s call %d", s.Name(), i)
			clock.Advance(100 * time.Millisecond)
		}
	}
	require.Equal(t, byValue.Len(), byPointer.Len())
	require.NoError(t, byPointer.Close())
	got := algorithm.Decision{Allowed: true, Limit: 1}
	req := store.Request{Strategy: algorithm.FixedWindow(3, time.Second), Key: "k", N: 1}
	require.ErrorIs(t, byPointer.DecideTo(context.Background(), &req, &got), store.ErrClosed)
	require.Equal(t, algorithm.Decision{}, got)
}

// A closed Memory refuses every decision with ErrClosed, recording
// nothing: Decide, Peek and the operations of a rule interface (Refund,
// AtMost, Charge, Lease), which check it before the strategy.
func TestMemoryClosedRefusesEveryDecision(t *testing.T) {
	m := store.NewMemory()
	require.NoError(t, m.Close())
	ctx := t.Context()
	req := store.Request{Key: "k", N: 1, Strategy: algorithm.FixedWindow(10, time.Minute)}
	for name, op := range map[string]func() error{
		"Decide": func() error { _, err := m.Decide(ctx, req); return err },
		"Peek":   func() error { _, err := m.Peek(ctx, req); return err },
		"Refund": func() error { _, err := m.Refund(ctx, req); return err },
		"AtMost": func() error { _, err := m.AtMost(ctx, req); return err },
		"Charge": func() error { _, err := m.Charge(ctx, req, -1); return err },
		"Lease":  func() error { _, err := m.Lease(ctx, req, algorithm.LeaseTerms{Want: 4}); return err },
	} {
		require.ErrorIs(t, op(), store.ErrClosed, name)
	}
	require.Zero(t, m.Len())
}

// A memory store whose clock reads before the Unix epoch or after
// algorithm.MaxTimeMicros refuses the decision with ErrClockOutOfRange
// (a rejection) and keeps nothing; a time the request carries is not its
// clock's.
func TestMemoryClockOutOfRange(t *testing.T) {
	s := algorithm.TokenBucket(10, time.Second, 10)
	for name, at := range map[string]time.Time{
		"zero time":     {},
		"before 1970":   time.Unix(-1, 0),
		"after MaxTime": time.UnixMicro(algorithm.MaxTimeMicros + 1),
		"the year 9999": time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		m := store.NewMemory(store.WithMemoryClock(func() time.Time { return at }))
		d, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: "k", N: 1})
		require.ErrorIs(t, err, store.ErrClockOutOfRange, name)
		require.ErrorIs(t, err, store.ErrRejected, name)
		require.False(t, d.Allowed, name)
		require.Zero(t, m.Len(), "%s: nothing recorded", name)
		d, err = m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: "k", N: 1, Now: storetest.T0})
		require.NoError(t, err, name)
		require.True(t, d.Allowed, "%s: a fresh key at the request's own time starts full", name)
		_ = m.Close()
	}
	m := store.NewMemory(store.WithMemoryClock(func() time.Time { return time.UnixMicro(algorithm.MaxTimeMicros) }))
	defer m.Close()
	d, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: "p:", Key: "k", N: 1})
	require.NoError(t, err, "MaxTimeMicros itself is in range")
	require.True(t, d.Allowed)
}
