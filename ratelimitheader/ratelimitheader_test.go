package ratelimitheader_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/ratelimitheader"
)

// TestCompositeRateLimitReset: a composite's RateLimit item names its
// tightest member and carries that member's own reset, not the whole
// composite's: a 10-per-second bucket beside a 2-day log says t=1 while
// the bucket is tightest, and the log's reset once the log is. Denials a
// retry can pass say the Retry-After; X-RateLimit-Reset stays the
// composite's (when the whole quota is back).
func TestCompositeRateLimitReset(t *testing.T) {
	clock := fakeclock.New(proptest.Epoch)
	l, err := fleetlimit.New(algorithm.All(
		algorithm.TokenBucket(10, time.Second, 10),
		algorithm.SlidingWindowLog(12, 48*time.Hour),
	), stores.Memory(t), fleetlimit.WithName("exports"), fleetlimit.WithClock(clock.Now))
	require.NoError(t, err)
	p := ratelimitheader.ForLimiter(l)
	ctx := context.Background()
	const day2 = 48 * 3600

	// 1 request: the bucket has 9 left of 10, the log 11 of 12. The bucket
	// is full again in 100ms (t=1); the log's unit comes back in 2 days.
	res, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	f := p.Fields(res, true)
	require.Equal(t, `"exports.token_bucket";r=9;t=1`, f.RateLimit)
	require.Equal(t, int64(day2), f.Reset, "X-RateLimit-Reset: the whole composite's")

	// 9 more: the bucket is spent (0 left), the log has 2 left.
	res, err = l.AllowN(ctx, "k", 9)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	f = p.Fields(res, true)
	require.Equal(t, `"exports.token_bucket";r=0;t=1`, f.RateLimit)

	// A denial that a retry can pass: t is the Retry-After.
	res, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.False(t, res.Allowed)
	f = p.Fields(res, true)
	require.Equal(t, int64(1), f.RetryAfter)
	require.Equal(t, `"exports.token_bucket";r=0;t=1`, f.RateLimit)

	// A second later the bucket is full and the log (2 left) is tightest:
	// its own reset, 2 days less that second.
	clock.Set(proptest.Epoch.Add(time.Second))
	res, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, res.Allowed)
	f = p.Fields(res, true)
	require.Equal(t, `"exports.sliding_window_log";r=1;t=172800`, f.RateLimit)

	// A cost above the bucket's burst can never pass: no Retry-After, and
	// t is the bucket's own reset (9 of 10 left: 100ms, t=1), not two days.
	res, err = l.AllowN(ctx, "k", 11)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	f = p.Fields(res, false)
	require.Zero(t, f.RetryAfter)
	require.Equal(t, `"exports.token_bucket";r=9;t=1`, f.RateLimit)
}
