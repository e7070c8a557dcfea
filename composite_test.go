package fleetlimit_test

import (
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
		), st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithClock(fixedClock(proptest.Epoch)))
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
