package faults_test

import (
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// fastSync lets a primary serve a full sync at once rather than after the
// default 5s wait for more replicas.
var fastSync = []string{"--repl-diskless-sync-delay", "0"}

// replicate makes replica a replica of addr and waits until it is in sync.
func replicate(t *testing.T, replica *redis.Client, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.NoError(t, replica.Do(bg, "REPLICAOF", host, port).Err())
	deadline := time.Now().Add(3 * hangGuard)
	for infoField(t, replica, "replication", "master_link_status") != "up" ||
		infoField(t, replica, "replication", "master_sync_in_progress") != "0" {
		require.True(t, time.Now().Before(deadline), "the replica never synced")
		time.Sleep(20 * time.Millisecond)
	}
}

// inSync waits until replica has applied everything primary has written
// (their replication offsets agree).
func inSync(t *testing.T, primary, replica *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for infoField(t, primary, "replication", "master_repl_offset") != infoField(t, replica, "replication", "master_repl_offset") {
		require.True(t, time.Now().Before(deadline), "the replica never caught up")
		time.Sleep(10 * time.Millisecond)
	}
}

// promote crashes the primary, promotes the replica and moves the clients'
// address (the proxy) to it, as a failover behind a fixed address would.
func promote(t *testing.T, primary *redistest.Server, replica *redis.Client, replicaAddr string, p *redistest.Proxy) {
	t.Helper()
	primary.Kill()
	require.NoError(t, replica.Do(bg, "REPLICAOF", "NO", "ONE").Err())
	require.Equal(t, "master", infoField(t, replica, "replication", "role"))
	p.SetTarget(replicaAddr)
	p.ResetAll()
}

// A primary and a replica; decisions on every algorithm through a fixed
// address; every write acknowledged by the replica (WAIT); the primary
// crashes and the replica is promoted (REPLICAOF NO ONE) behind the same
// address. The replica never ran the scripts (Redis replicates their
// effects), so its script cache is empty: the store reloads them and
// callers see no error, no NOSCRIPT. The counts carry over exactly: each
// key admits the rest of its limit and no more.
func TestReplicaPromotion(t *testing.T) {
	primary, replica := redistest.StartServer(t, fastSync...), redistest.StartServer(t)
	rc := replica.Client()
	replicate(t, rc, primary.Addr)
	p := redistest.NewProxy(t, primary.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })

	const limit = 10
	var ls []*fleetlimit.Limiter
	st := redisStore(t, c)
	for _, e := range algorithm.Registry() {
		ls = append(ls, newLimiter(t, e.New(limit, time.Hour), st, fleetlimit.WithClock(fixedClock(t0))))
	}
	users := []string{"a", "b", "c", "d", "e"}
	for _, l := range ls {
		for _, u := range users {
			require.Equal(t, 6, count(t, l, u, 6), "%s %s", l.Name(), u)
		}
	}
	inSync(t, primary.Client(), rc)
	requireScriptsCached(t, rc, false, "a replica receives effects, not scripts")

	promote(t, primary, rc, replica.Addr, p)
	for _, l := range ls {
		for _, u := range users {
			require.Equal(t, limit-6, count(t, l, u, 6), "%s %s: the count carried over", l.Name(), u)
		}
	}
	requireScriptsCached(t, rc, true, "reloaded on the promoted replica")
}

// What asynchronous replication can lose: admissions the primary
// acknowledged but had not yet replicated when it crashed. The replication
// link goes through a proxy that the test black-holes; 3 admissions made
// after that are acknowledged to the caller, never reach the replica, and
// are lost at the promotion, so the key admits 3 more than its limit:
// the over-admission is exactly what was in flight.
func TestReplicaPromotionLosesUnreplicatedAdmissions(t *testing.T) {
	primary, replica := redistest.StartServer(t, fastSync...), redistest.StartServer(t)
	rc := replica.Client()
	link := redistest.NewProxy(t, primary.Addr)
	replicate(t, rc, link.Addr)
	p := redistest.NewProxy(t, primary.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	pc := primary.Client()

	const limit = 10
	s := algorithm.SlidingWindowLog(limit, time.Hour)
	prefix := redistest.Prefix()
	key := store.RedisKey(prefix, "u", s.Script().Tag)
	l := newLimiter(t, s, redisStore(t, c), fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithClock(fixedClock(t0)))
	require.Equal(t, 4, count(t, l, "u", 4))
	inSync(t, pc, rc)
	require.EqualValues(t, 4, rc.ZCard(bg, key).Val(), "4 replicated")

	link.SetBlackHole(true)
	require.Equal(t, 3, count(t, l, "u", 3), "acknowledged by the primary")
	time.Sleep(50 * time.Millisecond)
	require.EqualValues(t, 7, pc.ZCard(bg, key).Val())
	require.EqualValues(t, 4, rc.ZCard(bg, key).Val(), "the last 3 never reached the replica")

	promote(t, primary, rc, replica.Addr, p)
	after := count(t, l, "u", 20)
	require.Equal(t, limit-4, after, "the replica knew only 4 of 7 admissions")
	require.Equal(t, limit+3, 4+3+after, "over-admission = the 3 unreplicated admissions")
}
