package faults_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// The phases of a kill-and-restart run.
const (
	phaseUp int32 = iota
	phaseDown
	phaseRestarting
	phaseBack
)

// stamped is an outcome with the phases it started and ended in.
type stamped struct {
	outcome
	worker     int
	from, till int32
	policy     fleetlimit.FailurePolicy
}

// Redis killed (SIGKILL) while two instances with four workers each keep
// deciding, under both policies, then started again on the same port:
// while it is down every call is the policy's Result with an error wrapping
// ErrStoreUnavailable, within the timeout; once it is back every worker
// decides without error again on its own (same clients, no intervention);
// no call panics or hangs; and once the clients are closed no goroutine is
// left behind (goleak). On redis-server and on valkey-server.
func TestRedisKilledAndRestarted(t *testing.T) {
	eachServer(t, func(t *testing.T, bin string) {
		srv := redistest.StartServerOf(t, bin)
		ignore := goleak.IgnoreCurrent()
		runKillRestart(t, srv)
		srv.Kill() // its process-waiting goroutine belongs to the server
		verifyNoLeaks(t, ignore)
	})
}

// verifyNoLeaks fails the test if goroutines other than those ignored are
// still running after a grace period: a go-redis pool that failed to dial
// probes the server from a goroutine that sleeps a second between probes,
// and ends at the next one once its client is closed.
func verifyNoLeaks(t *testing.T, ignore goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for goleak.Find(ignore) != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	goleak.VerifyNone(t, ignore)
}

func runKillRestart(t *testing.T, srv *redistest.Server) {
	const timeout = 200 * time.Millisecond
	var limiters []*fleetlimit.Limiter
	p := redistest.Prefix()
	for range 2 { // two instances: a client and a store each
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		st := stores.Redis(t, c)
		defer func() { _ = st.Close(); _ = c.Close() }()
		for _, policy := range policies {
			limiters = append(limiters, newLimiter(t, algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), st,
				fleetlimit.WithKeyPrefix(p), fleetlimit.WithTimeout(timeout), fleetlimit.WithFailurePolicy(policy)))
		}
	}

	var phase atomic.Int32
	var mu sync.Mutex
	var outs []stamped
	streak := make([]int, 2*len(limiters)) // consecutive successes in phaseBack, per worker
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range streak {
		l := limiters[w%len(limiters)]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				from := phase.Load()
				o := call(l, bg, fmt.Sprint("user", w%3))
				till := phase.Load()
				mu.Lock()
				outs = append(outs, stamped{o, w, from, till, l.Policy()})
				if from == phaseBack && o.err == nil {
					streak[w]++
				} else {
					streak[w] = 0
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	// waitFor polls cond (under mu) until it holds, or fails after a guard.
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(6 * hangGuard)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited too long for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	countWhere := func(f func(stamped) bool) int {
		n := 0
		for _, o := range outs {
			if f(o) {
				n++
			}
		}
		return n
	}

	waitFor("decisions while up", func() bool {
		return countWhere(func(o stamped) bool { return o.err == nil }) >= 40
	})
	srv.Kill()
	phase.Store(phaseDown)
	waitFor("decisions while down", func() bool {
		return countWhere(func(o stamped) bool { return o.from == phaseDown && o.till == phaseDown }) >= 40
	})
	phase.Store(phaseRestarting)
	srv.Start()
	phase.Store(phaseBack)
	waitFor("every worker to recover", func() bool {
		for _, n := range streak {
			if n < 5 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	failures := 0
	for i, o := range outs {
		msg := fmt.Sprintf("call %d (worker %d, phases %d..%d, %s)", i, o.worker, o.from, o.till, o.policy)
		require.Less(t, o.took, timeout+hangGuard, "%s: hung past the timeout", msg)
		if o.err == nil {
			require.True(t, o.res.Allowed, "%s: a million per second is never exhausted", msg)
			require.False(t, o.from == phaseDown && o.till == phaseDown, "%s: decided while Redis was dead", msg)
			continue
		}
		failures++
		require.ErrorIs(t, o.err, fleetlimit.ErrStoreUnavailable, msg)
		require.False(t, errors.Is(o.err, store.ErrClosed), msg)
		require.Equal(t, degraded(o.policy, 1_000_000), o.res, "%s: the policy decides", msg)
	}
	require.GreaterOrEqual(t, failures, 40)
	t.Logf("%d calls, %d decided by the policy", len(outs), failures)
}
