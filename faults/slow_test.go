package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// A slow Redis: replies 50 ms late are within a 2 s timeout and decide
// exactly (10 of 32 admitted); replies 150 ms and 500 ms late miss a 100 ms
// timeout, and every call gets the policy's Result with
// context.DeadlineExceeded, connections bounded by the pool. (The breaker is
// off here, so that every call meets the slow Redis; TestHungRedis shows the
// breaker.) A call that times out may still have been recorded: Redis ran
// the script, only the reply was late. That can only under-admit later,
// never over-admit.
func TestSlowRedis(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := redistest.StartServer(t)
	p := redistest.NewProxy(t, srv.Addr)
	c := faultClient(t, p)
	st := redisStore(t, c)

	p.SetLatency(50 * time.Millisecond)
	l := newLimiter(t, algorithm.SlidingWindowLog(10, time.Hour), st, fleetlimit.WithTimeout(2*time.Second))
	admitted := 0
	for _, o := range burst(l, "u", faultPool, 4) {
		require.NoError(t, o.err)
		if o.res.Allowed {
			admitted++
		}
	}
	require.Equal(t, 10, admitted, "slow but within the timeout: exact")

	for _, latency := range []time.Duration{150 * time.Millisecond, 500 * time.Millisecond} {
		for _, policy := range policies {
			p.SetLatency(0)
			l := newLimiter(t, algorithm.SlidingWindowLog(1000, time.Hour), st, fleetlimit.WithTimeout(timeout), fleetlimit.WithFailurePolicy(policy), fleetlimit.WithoutBreaker())
			for _, o := range burst(l, "warm", faultPool, 1) { // fill the pool
				require.NoError(t, o.err)
			}
			p.SetLatency(latency)
			outs := requireBoundedConnections(t, c, p, func() []outcome { return burst(l, "u", 32, 2) })
			for i, o := range outs {
				msg := fmt.Sprintf("%v late, %s, call %d", latency, policy, i)
				requireDegraded(t, o, l, timeout, msg)
				require.ErrorIs(t, o.err, context.DeadlineExceeded, msg)
			}
			p.SetLatency(0)
			recovered(t, l, "probe")
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			recorded := 1000 - 1 - res.Remaining
			require.Positive(t, recorded, "%v %s: calls on warm connections reached Redis and were recorded", latency, policy)
			require.LessOrEqual(t, recorded, int64(len(outs)), "%v %s", latency, policy)
		}
	}
}
