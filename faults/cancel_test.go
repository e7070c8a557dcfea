package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// requireAllKeysExpire scans every key under prefix (on every master of a
// cluster) and asserts that each has a TTL: none is left to live forever.
// It returns how many keys it saw.
func requireAllKeysExpire(t *testing.T, c redis.UniversalClient, prefix string) int {
	t.Helper()
	n := 0
	for _, keys := range redistest.KeysByNode(t, c, prefix+"*") {
		for _, k := range keys {
			ttl, err := c.PTTL(bg, k).Result()
			require.NoError(t, err)
			require.Positive(t, ttl, "key %q", k)
			n++
		}
	}
	return n
}

// cancelAfter returns a context cancelled after d.
func cancelAfter(d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(bg)
	time.AfterFunc(d, cancel)
	return ctx
}

// A cancelled caller is never admitted, whatever the policy: the Result is
// denied and the error wraps context.Canceled (not a store outage).
// Cancelled before the call: nothing written. Cancelled while waiting for a
// connection (a pool of one, held by a slow call): the same. Cancelled while
// the reply is in flight: go-redis interrupts a socket read at a deadline,
// not at a cancellation, so the call ends at the limiter's timeout (reply
// 300ms late, timeout 100ms) — or, if the reply comes first (50ms late,
// timeout 1s), when it comes; Redis charged the request, the caller is
// denied all the same. Either way every key Redis wrote has a TTL.
func TestContextCancelled(t *testing.T) {
	srv := redistest.StartServer(t)
	p := redistest.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	st := redisStore(t, c)
	admin := srv.Client()
	requireCancelled := func(o outcome, msg string) {
		t.Helper()
		require.ErrorIs(t, o.err, context.Canceled, msg)
		require.False(t, errors.Is(o.err, fleetlimit.ErrStoreUnavailable), "%s: the caller gave up, the store is not blamed", msg)
		require.Equal(t, fleetlimit.Result{Limit: 5}, o.res, "%s: denied, whatever the policy", msg)
	}
	for _, e := range algorithm.Registry() {
		for _, policy := range policies {
			prefix := redistest.Prefix()
			l := func(timeout time.Duration) *fleetlimit.Limiter {
				return newLimiter(t, e.New(5, time.Minute), st, fleetlimit.WithKeyPrefix(prefix),
					fleetlimit.WithFailurePolicy(policy), fleetlimit.WithTimeout(timeout))
			}
			msg := e.Name + " " + policy.String()

			ctx, cancel := context.WithCancel(bg)
			cancel()
			requireCancelled(call(l(time.Second), ctx, "before"), msg+", before")
			// A connection ready and the script cached: EVALSHA goes out at once.
			require.NoError(t, call(l(time.Second), bg, "warm").err)

			p.SetLatency(150 * time.Millisecond)
			var wg sync.WaitGroup
			wg.Go(func() { _ = call(l(time.Second), bg, "holder") })
			// Let the holder take the only connection (on a loaded machine
			// its goroutine may start late).
			require.Eventually(t, func() bool { return c.PoolStats().IdleConns == 0 }, hangGuard, time.Millisecond)
			requireCancelled(call(l(time.Second), cancelAfter(20*time.Millisecond), "waiting"), msg+", waiting for a connection")
			wg.Wait()

			// A connection ready again (the holder's may not be, on a loaded
			// machine): the EVALSHA goes out at once, and it is its reply
			// that is in flight when the caller gives up.
			p.SetLatency(0)
			require.NoError(t, call(l(time.Second), bg, "warm").err)
			p.SetLatency(300 * time.Millisecond)
			requireCancelled(call(l(100*time.Millisecond), cancelAfter(20*time.Millisecond), "inflight"), msg+", reply in flight")

			p.SetLatency(0)
			require.NoError(t, call(l(time.Second), bg, "warm").err) // a connection ready again
			p.SetLatency(50 * time.Millisecond)
			o := call(l(time.Second), cancelAfter(10*time.Millisecond), "answered")
			p.SetLatency(0)
			requireCancelled(o, msg+", reply came before the timeout")

			require.Equal(t, 4, requireAllKeysExpire(t, admin, prefix), "%s: warm, holder, inflight, answered", msg)
		}
	}
}

// 16 workers cancel their calls at random moments (before, during, after
// the round trip) on 30 keys of every algorithm, on the real servers and
// clusters (Redis, and Valkey when named): every error is context.Canceled, and afterwards every key has a
// TTL.
func TestRandomCancellationLeavesNoImmortalKeys(t *testing.T) {
	servers := map[string]redis.UniversalClient{"redis": redistest.Real(t), "cluster": redistest.Cluster(t)}
	if redistest.HaveValkey(t) {
		servers["valkey"], servers["valkey-cluster"] = redistest.Valkey(t), redistest.ValkeyCluster(t)
	}
	for name, c := range servers {
		prefix := redistest.Prefix()
		st := redisStore(t, c)
		var ls []*fleetlimit.Limiter
		for _, e := range algorithm.Registry() {
			ls = append(ls, newLimiter(t, e.New(3, time.Minute), st, fleetlimit.WithKeyPrefix(prefix)))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16*60)
		for w := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for i := range 60 {
					ctx, cancel := context.WithCancel(bg)
					time.AfterFunc(time.Duration(r.IntN(400))*time.Microsecond, cancel)
					_, err := ls[i%len(ls)].Allow(ctx, fmt.Sprint("user", r.IntN(30)))
					cancel()
					if err != nil && !errors.Is(err, context.Canceled) {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, name)
		}
		n := requireAllKeysExpire(t, c, prefix)
		require.Positive(t, n, name)
		t.Logf("%s: %d keys, all with a TTL", name, n)
	}
}
