// Package faults_test is fleetlimit's fault suite: real redis-server
// processes that the tests start, kill, restart, fill, flush, replicate and
// promote, and a TCP proxy (redistest.Proxy) that delays, black-holes and
// resets the connections between the limiter and Redis. Each test asserts
// what a caller sees: an error wrapping the right sentinel, a Result decided
// by the failure policy, a count of admissions, a TTL on every key, no
// goroutine left behind. docs/reliability.md lists every fault and the test
// that covers it.
//
// Durations are never asserted tightly (the tests share two cores with
// others): a call that takes longer than its timeout plus hangGuard is a
// hang, anything shorter is not judged.
package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

var bg = context.Background()

// t0 is a fixed instant in the middle of a minute and of an hour, so that a
// pinned clock is far from every window edge.
var t0 = proptest.Epoch.Add(30*time.Minute + 30*time.Second)

// hangGuard is how much longer than its timeout a call may take before the
// suite calls it hung. It is a guard, not a speed assertion.
const hangGuard = 5 * time.Second

func fixedClock(at time.Time) func() time.Time { return func() time.Time { return at } }

// healthyTimeout is the limiter timeout of tests that are not about
// timeouts: generous, so that a loaded machine never turns a slow answer
// into a policy decision that would spoil a count.
const healthyTimeout = 10 * time.Second

// newLimiter builds a limiter with a key prefix no other test uses and
// healthyTimeout, plus opts, which may override both.
func newLimiter(t testing.TB, s algorithm.Strategy, st store.Store, opts ...fleetlimit.Option) *fleetlimit.Limiter {
	t.Helper()
	defaults := []fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(healthyTimeout)}
	l, err := fleetlimit.New(s, st, append(defaults, opts...)...)
	require.NoError(t, err)
	return l
}

// redisStore is a Redis store over c, closed when the test ends.
func redisStore(t testing.TB, c redis.UniversalClient) *store.Redis {
	s := stores.Redis(t, c)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// backends returns a fresh client for each Redis the suite runs on:
// miniredis, the shared real redis-server and the real cluster, and the
// shared Valkey and Valkey Cluster when the environment names them.
func backends(t testing.TB) map[string]redis.UniversalClient {
	_, mini := redistest.Mini(t)
	all := map[string]redis.UniversalClient{
		"miniredis": mini,
		"redis":     redistest.Real(t),
		"cluster":   redistest.Cluster(t),
	}
	if redistest.HaveValkey(t) {
		all["valkey"] = redistest.Valkey(t)
		all["valkey-cluster"] = redistest.ValkeyCluster(t)
	}
	return all
}

// eachServer runs f as a subtest per server program (redistest.Binaries:
// redis-server, valkey-server), for the tests that start servers of their
// own.
func eachServer(t *testing.T, f func(t *testing.T, bin string)) {
	for _, bin := range redistest.Binaries {
		t.Run(bin, func(t *testing.T) { f(t, bin) })
	}
}

// allStores returns a fresh store for every backend, and store.Memory.
func allStores(t testing.TB) map[string]store.Store {
	all := map[string]store.Store{"memory": store.NewMemory()}
	t.Cleanup(func() { _ = all["memory"].Close() })
	for name, c := range backends(t) {
		all[name] = redisStore(t, c)
	}
	return all
}

// policies are both failure policies.
var policies = []fleetlimit.FailurePolicy{fleetlimit.FailOpen, fleetlimit.FailClosed}

// degraded is the Result the policy gives when the store cannot decide.
func degraded(p fleetlimit.FailurePolicy, limit int64) fleetlimit.Result {
	if p == fleetlimit.FailClosed {
		return fleetlimit.Result{Limit: limit, RetryAfter: fleetlimit.FailClosedRetryAfter, ResetAfter: fleetlimit.FailClosedRetryAfter}
	}
	return fleetlimit.Result{Allowed: true, Limit: limit}
}

// outcome is one timed call.
type outcome struct {
	res  fleetlimit.Result
	err  error
	took time.Duration
}

func call(l *fleetlimit.Limiter, ctx context.Context, key string) outcome {
	start := time.Now()
	res, err := l.Allow(ctx, key)
	return outcome{res, err, time.Since(start)}
}

// requireDegraded asserts that o is the policy's answer to a store that
// could not decide, given within the timeout (plus hangGuard).
func requireDegraded(t testing.TB, o outcome, l *fleetlimit.Limiter, timeout time.Duration, msg string) {
	t.Helper()
	require.ErrorIs(t, o.err, fleetlimit.ErrStoreUnavailable, msg)
	require.Equal(t, degraded(l.Policy(), l.Strategy().Limit()), o.res, "%s: %s decides", msg, l.Policy())
	require.Less(t, o.took, timeout+hangGuard, "%s: hung past the timeout", msg)
}

// count makes tries calls on key and returns how many were admitted,
// failing on any error.
func count(t testing.TB, l *fleetlimit.Limiter, key string, tries int) int {
	t.Helper()
	admitted := 0
	for range tries {
		res, err := l.Allow(bg, key)
		require.NoError(t, err)
		require.GreaterOrEqual(t, res.Remaining, int64(0))
		if res.Allowed {
			admitted++
		}
	}
	return admitted
}

// infoField returns one field of INFO section (e.g. "used_memory").
func infoField(t testing.TB, c *redis.Client, section, field string) string {
	t.Helper()
	info, err := c.Info(bg, section).Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return ""
}
