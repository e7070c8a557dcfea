package faults_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// Leases through an outage of a real redis-server (SIGKILL), under each
// policy: the instance spends the lease it holds, with no error, then the
// policy decides (its Result, an error wrapping ErrStoreUnavailable); Close
// cannot hand back and says so, within the timeout; once the server is
// back, the limiter takes new leases on its own.
func TestLeasesThroughAnOutage(t *testing.T) {
	for _, policy := range policies {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.StartServer(t)
			c := srv.Client()
			defer func() { _ = c.Close() }()
			var by []fleetlimit.Decider
			l := newLimiter(t, algorithm.FixedWindow(100, time.Hour), stores.Redis(t, c),
				fleetlimit.WithLeases(10, time.Hour), fleetlimit.WithFailurePolicy(policy),
				fleetlimit.WithTimeout(200*time.Millisecond), fleetlimit.WithoutBreaker(),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) { by = append(by, e.DecidedBy) })))
			for _, key := range []string{"spent", "held"} {
				for range 2 { // the key's first decision is exact, its second takes a lease
					res, err := l.Allow(bg, key)
					require.NoError(t, err)
					require.True(t, res.Allowed)
				}
			}
			srv.Kill()
			by = nil
			for i := range 9 {
				res, err := l.Allow(bg, "spent")
				require.NoError(t, err, "unit %d of the lease", i)
				require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 100, Remaining: int64(8 - i), ResetAfter: res.ResetAfter}, res)
			}
			res, err := l.Allow(bg, "spent")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
			require.Equal(t, degraded(policy, 100).Allowed, res.Allowed)
			require.Equal(t, append(slices.Repeat([]fleetlimit.Decider{fleetlimit.DecidedByLease}, 9), fleetlimit.DecidedByPolicy), by)
			err = l.Close()
			require.Error(t, err, "the held lease cannot be handed back")
			require.Contains(t, err.Error(), `hand back 9 units of "held"`)

			srv.Restart()
			require.Eventually(t, func() bool {
				res, err := l.Allow(bg, "again")
				return err == nil && res.Allowed
			}, 20*time.Second, 50*time.Millisecond)
			by = nil
			for range 2 { // a lease round trip if the first success was exact, then served
				res, err = l.Allow(bg, "again")
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			require.Equal(t, fleetlimit.DecidedByLease, by[len(by)-1], "a new lease")
			require.False(t, errors.Is(l.Close(), fleetlimit.ErrStoreUnavailable))
		})
	}
}

// A caller that gives up while its lease round trip is in flight (a slow
// link: 50 ms each way through a proxy to a real redis-server) is not
// admitted, and the lease the round trip took is kept rather than lost:
// the key's next requests spend it, and Close hands back what they did not,
// so the store ends short of exactly the units spent (the gone caller's
// included, as for any request the store admitted before its caller left).
func TestLeaseSurvivesItsCallerLeaving(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	st := stores.Redis(t, c)
	p := redistest.Prefix()
	var by []fleetlimit.Decider
	l := newLimiter(t, algorithm.FixedWindow(100, time.Hour), st, fleetlimit.WithKeyPrefix(p),
		fleetlimit.WithLeases(8, time.Hour), fleetlimit.WithTimeout(5*time.Second),
		fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) { by = append(by, e.DecidedBy) })))
	exact := newLimiter(t, algorithm.FixedWindow(100, time.Hour), st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithTimeout(5*time.Second))
	_, err := exact.Peek(bg, "u", 1) // dial before the link slows
	require.NoError(t, err)
	res, err := l.Allow(bg, "u") // the key's first decision is exact: its next takes a lease
	require.NoError(t, err)
	require.True(t, res.Allowed)

	proxy.SetLatency(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancel()
	res, err = l.Allow(ctx, "u")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, res.Allowed, "a caller gone is never admitted")
	proxy.SetLatency(0)

	by = nil
	res, err = l.Allow(bg, "u")
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, []fleetlimit.Decider{fleetlimit.DecidedByLease}, by, "the lease the gone caller's round trip took serves the next request")
	require.NoError(t, l.Close())
	res, err = exact.Peek(bg, "u", 1)
	require.NoError(t, err)
	require.Equal(t, int64(100-3-1), res.Remaining, "3 units spent (the first, exact; the gone caller's; the next), and none lost")
}

// A 3 s stall of a real redis-server (DEBUG SLEEP 3) under 64 workers
// offering ten times a 1,000/s token bucket on one key, with leases and
// WithTimeout(100ms): every decision takes at most the timeout plus a
// scheduling slack, however many callers of the key queue behind its lease
// round trips — each call has one deadline, set when it arrives, that
// bounds its waits and its own round trip. The slack stated: one more
// timeout (a worst decision under 2 × 100 ms), for 64 goroutines on a
// shared 2-core machine, -race included. The decisions the stall cut off
// are degraded as any timeout is (ErrStoreUnavailable, DeadlineExceeded).
func TestLeaseDecisionsKeepTheTimeoutThroughAStall(t *testing.T) {
	const (
		workers = 64
		rate    = 1000 // per second
		offered = 4 * rate
		timeout = 100 * time.Millisecond
	)
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	st := redisStore(t, srv.Client())
	l := newLimiter(t, algorithm.TokenBucket(rate, time.Second, 100), st,
		fleetlimit.WithLeases(10, time.Second), fleetlimit.WithTimeout(timeout))
	admin := srv.Client()
	defer func() { _ = admin.Close() }()

	stop := make(chan struct{})
	var outs []timed
	done, lagged := make(chan struct{}), make(chan time.Duration)
	go func() { outs = offer(l, []string{"k"}, workers, offered, stop); close(done) }()
	go func() { lagged <- schedulingLag(stop) }()
	time.Sleep(time.Second) // warm pools, a steady state
	stallAt := time.Now()
	require.NoError(t, admin.Do(bg, "DEBUG", "SLEEP", "3").Err())
	stallEnd := time.Now()
	time.Sleep(time.Second)
	close(stop)
	<-done
	lag := <-lagged
	slack := max(timeout, 2*lag)

	var worst time.Duration
	var inStall, timedOut int
	for _, o := range outs {
		worst = max(worst, o.took)
		if o.at.After(stallAt) && o.at.Before(stallEnd) {
			inStall++
		}
		if o.err != nil {
			require.ErrorIs(t, o.err, fleetlimit.ErrStoreUnavailable)
			if errors.Is(o.err, context.DeadlineExceeded) {
				timedOut++
			}
		}
	}
	t.Logf("%d decisions, %d during the %v stall, %d timed out; worst decision %v (bound %v, the scheduler's worst lag %v)",
		len(outs), inStall, stallEnd.Sub(stallAt).Round(time.Millisecond), timedOut, worst, timeout+slack, lag)
	require.Positive(t, inStall)
	require.Positive(t, timedOut, "the stall cut decisions off")
	require.Less(t, worst, timeout+slack, "a decision outlived the limiter's timeout")
}

// schedulingLag returns, once stop is closed, the longest that a 10 ms
// sleep overslept meanwhile: how late this process's goroutines can run on
// the machine as loaded, the part of a decision's latency no code of the
// limiter's can remove.
func schedulingLag(stop <-chan struct{}) time.Duration {
	var worst time.Duration
	for {
		select {
		case <-stop:
			return worst
		default:
		}
		start := time.Now()
		time.Sleep(10 * time.Millisecond)
		worst = max(worst, time.Since(start)-10*time.Millisecond)
	}
}

// A flood of one-shot keys with leases on a real redis-server: each key
// seen once costs one script call — its exact decision — and nothing to
// hand back at Close (a lease taken at the first request cost a take and a
// hand-back: two calls a key).
func TestLeaseOneShotKeysCostOneScriptCall(t *testing.T) {
	const keys = 2000
	srv := redistest.StartServer(t)
	st := redisStore(t, srv.Client())
	l := newLimiter(t, algorithm.TokenBucket(100, time.Second, 100), st, fleetlimit.WithLeases(16, time.Minute))
	admin := srv.Client()
	defer func() { _ = admin.Close() }()
	res, err := l.Allow(bg, "warm") // loads the script: later calls are plain EVALSHA
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.NoError(t, admin.ConfigResetStat(bg).Err())

	for i := range keys {
		res, err := l.Allow(bg, fmt.Sprintf("once-%d", i))
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	require.NoError(t, l.Close())
	calls := scriptCalls(t, admin)
	t.Logf("%d one-shot keys: %d script calls", keys, calls)
	require.Equal(t, int64(keys), calls, "one script call per key seen once")
}

// scriptCalls is how many EVAL and EVALSHA calls c's server ran since its
// statistics were last reset.
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(bg, "commandstats").Result()
	require.NoError(t, err)
	var total int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				field, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				n, err := strconv.ParseInt(field, 10, 64)
				require.NoError(t, err, line)
				total += n
			}
		}
	}
	return total
}
