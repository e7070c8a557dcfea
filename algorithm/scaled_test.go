package algorithm_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Every built-in strategy scales: limit / divisor (at least 1) over the same
// window, and divisor <= 1 changes nothing.
func TestScaled(t *testing.T) {
	for _, e := range algorithm.Registry()[:3] {
		s := e.New(100, time.Minute)
		sc, ok := s.(algorithm.Scaler)
		require.True(t, ok, "built-in %s implements Scaler", e.Name)
		for _, c := range []struct{ divisor, limit int64 }{
			{1, 100}, {0, 100}, {-3, 100}, {4, 25}, {3, 33}, {100, 1}, {1000, 1},
		} {
			got := sc.Scaled(c.divisor)
			require.NoError(t, got.Validate(), "%s / %d", e.Name, c.divisor)
			require.Equal(t, e.Name, got.Name())
			require.Equal(t, c.limit, got.Limit(), "%s / %d", e.Name, c.divisor)
			if c.divisor <= 1 {
				require.Same(t, s, got, "%s / %d is the strategy itself", e.Name, c.divisor)
			}
		}
	}
}

// A scaled token bucket refills at rate/divisor exactly: 10 per second over 4
// instances is one token every 400ms, not 2 per second.
func TestScaledTokenBucketRate(t *testing.T) {
	tb := algorithm.TokenBucket(10, time.Second, 20).(algorithm.Scaler).Scaled(4)
	run(t, tb, []step{
		{0, 5, ok(5, 0, 2*s), "the burst is 20/4 = 5; empty now, full after 5 tokens at 400ms each"},
		{0, 1, no(5, 0, 400*ms, 2*s), "the next token comes after 1s*4/10"},
		{400 * ms, 1, ok(5, 0, 2*s), "and then passes"},
	})
	// A period that cannot be multiplied within MaxWindow rounds the rate
	// down instead.
	long := algorithm.TokenBucket(10, algorithm.MaxWindow/2, 10).(algorithm.Scaler).Scaled(4)
	require.NoError(t, long.Validate())
	require.Equal(t, int64(2), long.Limit())
}
