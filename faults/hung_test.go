package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// burst makes workers × calls concurrent calls of l on key and returns every
// outcome.
func burst(l *fleetlimit.Limiter, key string, workers, calls int) []outcome {
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				o := call(l, bg, key)
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return outs
}

// recovered waits (up to a hang guard) until l decides without error again,
// on its own.
func recovered(t *testing.T, l *fleetlimit.Limiter, key string) {
	t.Helper()
	deadline := time.Now().Add(3 * hangGuard)
	for {
		o := call(l, bg, key)
		if o.err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "no recovery: %v", o.err)
		time.Sleep(10 * time.Millisecond)
	}
}

// faultPool is the pool size of faultClient: small, so that its bound on
// connections is visible with 64 callers.
const faultPool = 8

// faultClient is a client through proxy p with a pool of faultPool.
func faultClient(t *testing.T, p *redistest.Proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, PoolSize: faultPool})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireBoundedConnections runs f while watching c's pool and proxy p, and
// asserts that the connections stayed bounded by the pool, not by the
// number of callers, and that no call dialled more than once.
//
// The pool's own count never passes its size. The proxy also sees sockets
// the client has closed and it has not yet noticed, so its peak is judged
// against 3x the pool (64 callers unbounded would reach 64).
func requireBoundedConnections(t *testing.T, c *redis.Client, p *redistest.Proxy, f func() []outcome) []outcome {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	var peakPool uint32
	go func() {
		defer close(done)
		for {
			peakPool = max(peakPool, c.PoolStats().TotalConns)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	accepted := p.Accepted()
	outs := f()
	close(stop)
	<-done
	accepted = p.Accepted() - accepted
	t.Logf("%d calls: %d connections accepted, pool peak %d, proxy peak %d open", len(outs), accepted, peakPool, p.PeakOpen())
	require.LessOrEqual(t, peakPool, uint32(faultPool), "the pool bounds connections")
	require.LessOrEqual(t, p.PeakOpen(), 3*faultPool, "open connections at the server side")
	require.LessOrEqual(t, accepted, int64(len(outs)), "at most one new connection per call: no retry storm")
	return outs
}

// A hung Redis (connections accepted, nothing ever answered) costs each
// decision at most the limiter's timeout: 64 concurrent callers all get the
// policy's Result and an error wrapping ErrStoreUnavailable — with
// context.DeadlineExceeded until the circuit breaker opens, ErrCircuitOpen
// after. The pool bounds open connections however many callers. While the
// breaker is open the store is not called at all: no call waits, no
// connection is made. When Redis answers again, the breaker's probe closes
// it and decisions recover on their own. The breaker's clock is fake, so
// that its runs and cool-down last as long as the test says: the callers
// come in waves, each one timeout later on that clock than the last.
func TestHungRedis(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := redistest.StartServer(t)
	p := redistest.NewProxy(t, srv.Addr)
	c := faultClient(t, p)
	st := redisStore(t, c)
	for _, policy := range policies {
		clock := fakeclock.New(proptest.Epoch)
		b, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{Clock: clock.Now})
		require.NoError(t, err)
		l := newLimiter(t, algorithm.TokenBucket(1000, time.Second, 1000), st, fleetlimit.WithTimeout(timeout),
			fleetlimit.WithFailurePolicy(policy), fleetlimit.WithBreaker(b))
		// Open a connection first, without the 100ms deadline: on a loaded
		// machine the dial through the proxy alone can take longer.
		require.NoError(t, c.Ping(bg).Err())
		require.NoError(t, call(l, bg, "u").err)

		p.SetBlackHole(true)
		outs := requireBoundedConnections(t, c, p, func() []outcome {
			// One wave's failures are one instant: the breaker opens in the
			// wave that makes them span the default MinOutage, and the next wave
			// finds it open.
			var outs []outcome
			for i := range int(fleetlimit.DefaultBreakerConfig().MinOutage/timeout) + 2 {
				if i > 0 && i <= int(fleetlimit.DefaultBreakerConfig().MinOutage/timeout) {
					clock.Advance(timeout)
				}
				outs = append(outs, burst(l, "u", 64, 1)...)
			}
			return outs
		})
		timedOut, open := 0, 0
		for i, o := range outs {
			msg := fmt.Sprintf("%s, call %d", policy, i)
			requireDegraded(t, o, l, timeout, msg)
			switch {
			case errors.Is(o.err, context.DeadlineExceeded):
				timedOut++
			case errors.Is(o.err, fleetlimit.ErrCircuitOpen):
				open++
			default:
				t.Fatalf("%s: want a deadline or circuit-open error, got %v", msg, o.err)
			}
		}
		t.Logf("%s: %d calls timed out, then the breaker answered %d", policy, timedOut, open)
		require.GreaterOrEqual(t, timedOut, fleetlimit.DefaultBreakerConfig().MinFailures, "%s: it takes failures over time to open", policy)
		require.Positive(t, open, "%s: the breaker opened", policy)
		require.Equal(t, fleetlimit.BreakerOpen, b.State(), policy)

		// Open: 256 more calls, none of which touches Redis.
		accepted := p.Accepted()
		for i, o := range burst(l, "u", 64, 4) {
			requireDegraded(t, o, l, timeout, fmt.Sprintf("%s, open, call %d", policy, i))
			require.ErrorIs(t, o.err, fleetlimit.ErrCircuitOpen, "%s, open, call %d", policy, i)
		}
		require.Equal(t, accepted, p.Accepted(), "%s: no connection is made while the breaker is open", policy)

		// Redis answers again; once the cool-down is over a probe closes it.
		p.SetBlackHole(false)
		clock.Advance(fleetlimit.DefaultBreakerConfig().MaxCoolDown)
		require.Equal(t, fleetlimit.BreakerHalfOpen, b.State(), policy)
		recovered(t, l, "u")
		require.Equal(t, fleetlimit.BreakerClosed, b.State(), policy)
	}
}
