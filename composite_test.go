package fleetlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// A composite through the Limiter on every store: each member's figures in
// Result.Limits, nothing charged on a denial, Reset clears every member,
// and a bad composite is refused by New.
func TestCompositeLimiter(t *testing.T) {
	for name, st := range stores.All(t) {
		l, err := fleetlimit.New(algorithm.All(
			algorithm.TokenBucket(2, time.Second, 2),
			algorithm.FixedWindow(3, time.Hour),
		), st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithClock(fixedClock(proptest.Epoch)))
		require.NoError(t, err, name)
		for i, want := range []struct {
			allowed   bool
			remaining int64
			limits    [2]int64 // each member's Remaining
		}{{true, 1, [2]int64{1, 2}}, {true, 0, [2]int64{0, 1}}, {false, 0, [2]int64{0, 1}}} {
			res, err := l.Allow(bg, "u")
			require.NoError(t, err, name)
			require.Equal(t, want.allowed, res.Allowed, "%s request %d", name, i)
			require.Equal(t, want.remaining, res.Remaining, "%s request %d", name, i)
			ls := res.Limits()
			require.Len(t, ls, 2, name)
			require.Equal(t, fleetlimit.LimitResult{Name: "token_bucket", Limit: 2, Window: time.Second,
				Remaining: want.limits[0], RetryAfter: ls[0].RetryAfter, ResetAfter: ls[0].ResetAfter}, ls[0], name)
			require.Equal(t, want.limits[1], ls[1].Remaining, "%s request %d: the denial charged the hour's window nothing", name, i)
			require.Equal(t, "fixed_window", ls[1].Name)
		}
		require.NoError(t, l.Reset(bg, "u"), name)
		res, err := l.Allow(bg, "u")
		require.NoError(t, err, name)
		require.Equal(t, []int64{1, 2}, []int64{res.Limits()[0].Remaining, res.Limits()[1].Remaining}, "%s: Reset cleared every member", name)
	}
	_, err := fleetlimit.New(algorithm.All(), store.NewMemory())
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	require.ErrorIs(t, err, algorithm.ErrInvalidStrategy)
}

// During an outage a composite's fallback applies every member at its
// share: 4 per hour AND 2 per second over 2 instances is 2 per hour AND 1
// per second here.
func TestCompositeFallback(t *testing.T) {
	mr, c := redistest.Mini(t)
	l, err := fleetlimit.New(algorithm.All(
		algorithm.TokenBucket(2, time.Second, 2),
		algorithm.FixedWindow(4, time.Hour),
	), stores.Redis(t, c), fleetlimit.WithFallback(stores.Memory(t), 2),
		fleetlimit.WithClock(fixedClock(proptest.Epoch)), fleetlimit.WithTimeout(time.Second))
	require.NoError(t, err)
	mr.Close()
	res, err := l.Allow(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	require.True(t, res.Allowed)
	require.Equal(t, []int64{1, 2}, []int64{res.Limits()[0].Limit, res.Limits()[1].Limit}, "each member scaled to its share")
	res, _ = l.Allow(bg, "u")
	require.False(t, res.Allowed, "the scaled bucket holds 1")
}

// The penalty box through the Limiter on every store: three denials within
// a minute ban the key for 5 minutes (RetryAfter the ban's remaining time);
// Reset lifts the ban; a tier (WithStrategyFor) gets the same penalty;
// invalid penalties are refused by New.
func TestPenaltyLimiter(t *testing.T) {
	for name, st := range stores.All(t) {
		now := proptest.Epoch
		tier := algorithm.Strategy(nil)
		l, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithClock(func() time.Time { return now }),
			fleetlimit.WithPenalty(3, time.Minute, 5*time.Minute, time.Hour),
			fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return tier, nil }))
		require.NoError(t, err, name)
		for i, wantRetry := range []time.Duration{0, 0, 60 * time.Second, 60 * time.Second, 5 * time.Minute} {
			res, err := l.Allow(bg, "u")
			require.NoError(t, err, name)
			require.Equal(t, wantRetry, res.RetryAfter, "%s request %d", name, i)
		}
		now = now.Add(2 * time.Minute) // a new window, but banned
		res, err := l.Allow(bg, "u")
		require.NoError(t, err, name)
		require.Equal(t, [3]any{false, int64(0), 3 * time.Minute}, [3]any{res.Allowed, res.Remaining, res.RetryAfter}, name)
		tier = algorithm.FixedWindow(100, time.Minute)
		res, err = l.Allow(bg, "u")
		require.NoError(t, err, name)
		require.False(t, res.Allowed, "%s: the ban holds whatever the key's tier", name)
		require.NoError(t, l.Reset(bg, "u"), name)
		res, err = l.Allow(bg, "u")
		require.NoError(t, err, name)
		require.True(t, res.Allowed, "%s: Reset lifts the ban", name)
	}
	_, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), store.NewMemory(), fleetlimit.WithPenalty(0, time.Minute, time.Minute, time.Hour))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
}
