package faults_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
)

// failoverNodeTimeout is the cluster-node-timeout of TestClusterFailoverFollowed:
// short, so that a dead master's replica takes over within a few seconds.
const failoverNodeTimeout = 1000 * time.Millisecond

// A master of a 3-master, 3-replica Cluster killed and not restarted, with
// go-redis's default options (it reloads its slot map by itself every 60s)
// and the limiter's (FailOpen, default timeout and breaker), while 8
// workers offer 400 decisions a second on 6 keys per master: the dead
// master's replica takes over after about two node timeouts, and the dead
// master's keys are decided by the store again within one probe interval
// (DefaultMaxCoolDown) and a reload of it, not a minute later.
//
// With cluster-require-full-coverage off, the keys of the other masters
// are the store's throughout. With Redis's default (on), the other masters
// refuse their own keys with CLUSTERDOWN from when they mark the dead one
// failed until its replica takes over: a refusal by the live servers
// themselves, which no client can route around; the count of those keys'
// degraded decisions is logged for docs/reliability.md.
func TestClusterFailoverFollowed(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("full coverage ", full), func(t *testing.T) { clusterFailover(t, full) })
	}
}

func clusterFailover(t *testing.T, fullCoverage bool) {
	masters, replicas := startCluster(t, 1, failoverNodeTimeout, fullCoverage)
	var addrs []string
	for _, n := range masters {
		addrs = append(addrs, n.Addr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l := newLimiter(t, algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), redisStore(t, c),
		fleetlimit.WithTimeout(fleetlimit.DefaultTimeout), fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))

	victim, heir := masters[0], replicas[0]
	keys, owner := keysPerMaster(t, masters[1].Client(), 6)
	victimKeys := map[string]bool{}
	for _, k := range keys {
		victimKeys[k] = owner[k] == victim.Addr
	}
	for _, k := range keys {
		_, err := l.Allow(bg, k)
		require.NoError(t, err, "warm-up %q", k)
	}

	stop := make(chan struct{})
	var outs []timed
	done := make(chan struct{})
	go func() { outs = offer(l, keys, 8, 400, stop); close(done) }()
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	victim.Kill()

	// Wait for the heir to take over.
	heirClient := heir.Client()
	var promoted time.Time
	for deadline := killed.Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		role, err := heirClient.Do(bg, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			promoted = time.Now()
			break
		}
	}
	require.False(t, promoted.IsZero(), "the replica never took over")
	// Then watch for the store to decide the dead master's keys again, for
	// up to window: long enough for the fix with plenty to spare on a
	// loaded machine, far short of go-redis's 60s reload.
	const window = 10 * time.Second
	var mu sync.Mutex
	var recovered time.Time
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for deadline := promoted.Add(window); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var k string
			for key, v := range victimKeys {
				if v {
					k = key
					break
				}
			}
			if _, err := l.Allow(bg, k); err == nil {
				mu.Lock()
				recovered = time.Now()
				mu.Unlock()
				return
			}
		}
	}()
	<-watch
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-done

	var dead, live tally
	var lastDegraded time.Time
	for _, o := range outs {
		n := &live
		if victimKeys[o.key] {
			n = &dead
			if o.err != nil && o.at.After(lastDegraded) {
				lastDegraded = o.at
			}
		}
		switch {
		case o.err == nil:
			n.store++
		case errors.Is(o.err, fleetlimit.ErrCircuitOpen):
			n.open++
		default:
			n.failed++
		}
	}
	t.Logf("killed; replica master after %v; dead master's keys decided by the store again %v after that "+
		"(last degraded offered decision at +%v); dead master's keys: %d by the store, %d failed calls, %d short-circuited; "+
		"live masters' keys: %d by the store, %d failed calls, %d short-circuited",
		promoted.Sub(killed).Round(time.Millisecond), recovered.Sub(promoted).Round(time.Millisecond),
		lastDegraded.Sub(promoted).Round(time.Millisecond),
		dead.store, dead.failed, dead.open, live.store, live.failed, live.open)
	require.False(t, recovered.IsZero(), "the dead master's keys were not decided by the store within %v of the promotion", window)
	// One probe interval, a reload and a probe's timeout, with a second to
	// spare for a loaded machine.
	require.Less(t, recovered.Sub(promoted), fleetlimit.DefaultBreakerConfig().MaxCoolDown+fleetlimit.DefaultTimeout+time.Second,
		"recovery after the promotion")
	if !fullCoverage {
		require.Zero(t, live.open, "decisions on live masters' keys short-circuited")
		// As in TestBreakerClusterMasterKilled: a live master may miss the
		// timeout now and then on a loaded machine.
		require.LessOrEqual(t, 50*live.failed, live.store+live.failed, "decisions on live masters' keys that the store did not make")
	}
}
