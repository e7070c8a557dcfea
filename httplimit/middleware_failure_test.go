package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// slowClient makes the go-redis client itself willing to wait a minute, so
// that only the limiter's 50ms timeout can bound a decision.
func slowClient(o *redis.Options) {
	o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.MaxRetries = time.Minute, time.Minute, time.Minute, -1
	o.ContextTimeoutEnabled = true
}

// failureRig is a limited server over a real redis-server that a test can
// kill, hang and restart, with the breaker on a fake clock, a count of the
// calls that reach the store and a record of what the observer was told.
type failureRig struct {
	st    *spy.Store
	clk   *fakeclock.Clock
	rec   *spy.Observer
	l     *fleetlimit.Limiter
	limit int64
}

const rigThreshold = 3

func newFailureRig(t *testing.T, st store.Store, policy fleetlimit.FailurePolicy, timeout time.Duration) (*failureRig, func() response) {
	rig := &failureRig{st: &spy.Store{Store: st}, clk: fakeclock.New(proptest.Epoch), rec: &spy.Observer{}, limit: 100}
	b, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{MinFailures: rigThreshold, MinOutage: -1, ProbeTimeout: timeout, Clock: rig.clk.Now})
	require.NoError(t, err)
	rig.l, err = fleetlimit.New(algorithm.TokenBucket(rig.limit, time.Minute, rig.limit), rig.st,
		fleetlimit.WithName("api"), fleetlimit.WithFailurePolicy(policy), fleetlimit.WithTimeout(timeout),
		fleetlimit.WithBreaker(b), fleetlimit.WithObserver(rig.rec), fleetlimit.WithKeyPrefix(redistest.Prefix()))
	require.NoError(t, err)
	srv := serve(t, httplimit.Middleware(rig.l, httplimit.KeyByHeader("X-User"))(okHandler))
	return rig, func() response { return get(t, srv, "X-User", "alice") }
}

// requireHealthy checks a response and event of a decision the store made.
func (rig *failureRig) requireHealthy(t *testing.T, resp response, msg string) {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.status, msg)
	require.NotEmpty(t, resp.header.Get("X-RateLimit-Remaining"), "%s: the store decided: remaining is known", msg)
	require.NotEmpty(t, resp.header.Get("RateLimit"), msg)
	ev := rig.rec.Take()
	require.Len(t, ev, 1, msg)
	require.False(t, ev[0].Degraded(), "%s: %v", msg, ev[0].Err)
	require.Equal(t, fleetlimit.DecidedByStore, ev[0].DecidedBy, msg)
}

// requireDegraded checks a response and event of a decision the store did
// not make: the policy's answer, with only the headers known without the
// store, and the observer told why.
func (rig *failureRig) requireDegraded(t *testing.T, resp response, policy fleetlimit.FailurePolicy, circuitOpen bool, msg string) fleetlimit.Event {
	t.Helper()
	if policy == fleetlimit.FailOpen {
		require.Equal(t, http.StatusOK, resp.status, "%s: fail-open admits", msg)
		require.Empty(t, resp.header.Get("Retry-After"), msg)
	} else {
		require.Equal(t, http.StatusServiceUnavailable, resp.status, "%s: fail-closed answers 503, not 429", msg)
		require.Equal(t, "1", resp.header.Get("Retry-After"), msg)
		require.Equal(t, "rate limiter unavailable: retry in 1 second\n", resp.body, msg)
	}
	require.Equal(t, "100", resp.header.Get("X-RateLimit-Limit"), msg)
	require.Equal(t, `"api";q=100;w=60`, resp.header.Get("RateLimit-Policy"), msg)
	for _, h := range []string{"X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit"} {
		require.Empty(t, resp.header.Values(h), "%s: %s is omitted, not guessed", msg, h)
	}
	ev := rig.rec.Take()
	require.Len(t, ev, 1, msg)
	e := ev[0]
	require.True(t, e.Degraded(), msg)
	require.ErrorIs(t, e.Err, fleetlimit.ErrStoreUnavailable, msg)
	require.Equal(t, circuitOpen, e.CircuitOpen, msg)
	require.Equal(t, circuitOpen, errors.Is(e.Err, fleetlimit.ErrCircuitOpen), msg)
	require.Equal(t, policy, e.Policy, msg)
	require.Equal(t, fleetlimit.DecidedByPolicy, e.DecidedBy, msg)
	require.Equal(t, policy == fleetlimit.FailOpen, e.Allowed, msg)
	require.Equal(t, "api", e.Name)
	require.Equal(t, "token_bucket", e.Algorithm)
	return e
}

// Redis stopped, then restarted: the first failures each end by the
// limiter's timeout (the client would wait a minute) and are reported as
// store failures; then the breaker
// opens and the store is no longer called, even once Redis is back, until
// the cool-down ends; the probe that finds Redis back closes the breaker and
// responses carry the real quota again.
func TestMiddlewareRedisStoppedAndRestarted(t *testing.T) {
	for _, policy := range []fleetlimit.FailurePolicy{fleetlimit.FailOpen, fleetlimit.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			s := redistest.StartServer(t)
			// 250ms: room for the probe to dial the restarted server and reload
			// the script on a loaded machine; failures still end at it.
			rig, hit := newFailureRig(t, stores.Redis(t, s.Client(slowClient)), policy, 250*time.Millisecond)
			rig.requireHealthy(t, hit(), "healthy")

			s.Kill()
			for i := range rigThreshold {
				calls := rig.st.Calls.Load()
				rig.requireDegraded(t, hit(), policy, false, fmt.Sprintf("Redis stopped, failure %d", i+1))
				require.Equal(t, calls+1, rig.st.Calls.Load(), "the store was tried")
			}
			require.Equal(t, fleetlimit.BreakerOpen, rig.l.Breaker().State())
			calls := rig.st.Calls.Load()
			for range 5 {
				rig.requireDegraded(t, hit(), policy, true, "breaker open")
			}
			require.Equal(t, calls, rig.st.Calls.Load(), "an open breaker does not call the store")

			s.Start()
			rig.requireDegraded(t, hit(), policy, true, "Redis is back but the cool-down is not over")
			require.Equal(t, calls, rig.st.Calls.Load())

			rig.clk.Advance(fleetlimit.DefaultBreakerConfig().CoolDown)
			rig.requireHealthy(t, hit(), "the probe finds Redis back")
			require.Equal(t, fleetlimit.BreakerClosed, rig.l.Breaker().State())
			require.Equal(t, calls+1, rig.st.Calls.Load())
			resp := hit()
			rig.requireHealthy(t, resp, "closed again")
			require.Equal(t, "98", resp.header.Get("X-RateLimit-Remaining"), "the restarted Redis lost its data: two requests since")
		})
	}
}

// Redis hung (a listener that accepts and never answers) against a client
// that would wait a minute: every decision still ends at the limiter's 50ms
// timeout, with context.DeadlineExceeded, until the breaker opens and
// decisions stop waiting at all.
func TestMiddlewareRedisHung(t *testing.T) {
	for _, policy := range []fleetlimit.FailurePolicy{fleetlimit.FailOpen, fleetlimit.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			o := &redis.Options{Addr: redistest.HungAddr(t)}
			slowClient(o)
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			rig, hit := newFailureRig(t, stores.Redis(t, c), policy, 50*time.Millisecond)
			for i := range rigThreshold {
				e := rig.requireDegraded(t, hit(), policy, false, fmt.Sprintf("hung, call %d", i+1))
				require.ErrorIs(t, e.Err, context.DeadlineExceeded, "the limiter's timeout ended the wait")
			}
			calls := rig.st.Calls.Load()
			for range 5 {
				e := rig.requireDegraded(t, hit(), policy, true, "breaker open")
				require.NotErrorIs(t, e.Err, context.DeadlineExceeded, "no wait at all")
			}
			require.Equal(t, calls, rig.st.Calls.Load())

			// A direct caller sees the same.
			_, err := rig.l.Allow(bg, "bob")
			require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen)
			rig.rec.Take()
			rig.clk.Advance(fleetlimit.DefaultBreakerConfig().CoolDown)
			_, err = rig.l.Allow(bg, "bob")
			require.ErrorIs(t, err, context.DeadlineExceeded, "the probe waits one timeout on the still-hung Redis")
			require.Equal(t, fleetlimit.BreakerOpen, rig.l.Breaker().State(), "and reopens the breaker")
		})
	}
}
