package faults_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// scripted returns one limiter per algorithm over c, sharing prefix p.
func scripted(t *testing.T, c redis.UniversalClient, p string, limit int64) []*fleetlimit.Limiter {
	st := redisStore(t, c)
	var ls []*fleetlimit.Limiter
	for _, e := range algorithm.Registry() {
		ls = append(ls, newLimiter(t, e.New(limit, time.Hour), st, fleetlimit.WithKeyPrefix(p)))
	}
	return ls
}

// requireScriptsCached asserts whether c's server holds every algorithm's
// script.
func requireScriptsCached(t *testing.T, c *redis.Client, want bool, msg string) {
	t.Helper()
	for _, e := range algorithm.Registry() {
		sha := e.New(1, time.Minute).Script().SHA1
		got, err := c.ScriptExists(bg, sha).Result()
		require.NoError(t, err)
		require.Equal(t, []bool{want}, got, "%s: %s", msg, e.Name)
	}
}

// SCRIPT FLUSH and FLUSHALL while 16 workers decide on every algorithm,
// and a restart with an empty script cache between decisions: callers see
// no error at all (EVALSHA's NOSCRIPT falls back to EVAL, which reloads the
// script). FLUSHALL erases state: a key flushed starts afresh (over-admission
// of at most one limit per flush, as with eviction). On redis-server and on
// valkey-server, whose NOSCRIPT reply has other words after the code
// ("NOSCRIPT No matching script." in 8.0): the fallback reads the code only.
func TestScriptCacheLoss(t *testing.T) {
	eachServer(t, testScriptCacheLoss)
}

func testScriptCacheLoss(t *testing.T, bin string) {
	srv := redistest.StartServerOf(t, bin)
	admin := srv.Client()
	c := srv.Client()
	const limit = 50
	ls := scripted(t, c, redistest.Prefix(), limit)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	calls := 0
	admitted := make([]int, len(ls))
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (w + i) % len(ls)
				res, err := ls[k].Allow(bg, "u")
				mu.Lock()
				calls++
				if err != nil {
					errs = append(errs, err)
				} else if res.Allowed {
					admitted[k]++
				}
				mu.Unlock()
			}
		})
	}
	const flushes, flushAlls = 20, 3
	for i := range flushes {
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, admin.ScriptFlush(bg).Err())
		if i%(flushes/flushAlls) == 0 && i/(flushes/flushAlls) < flushAlls {
			require.NoError(t, admin.FlushAll(bg).Err())
		}
	}
	time.Sleep(5 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.Empty(t, errs, "%d of %d calls failed across %d SCRIPT FLUSHes and %d FLUSHALLs", len(errs), calls, flushes, flushAlls)
	for k, n := range admitted {
		require.LessOrEqual(t, n, limit*(flushAlls+1), "%s: at most one limit per FLUSHALL", ls[k].Name())
	}
	t.Logf("%d calls, no errors", calls)

	// A restart: data and script cache gone; the same clients carry on.
	srv.Restart()
	requireScriptsCached(t, admin, false, "after a restart")
	for _, l := range ls {
		require.Equal(t, 3, count(t, l, "fresh", 3), l.Name())
	}
	requireScriptsCached(t, admin, true, "reloaded by EVAL")
}

// On the Redis and Valkey clusters, SCRIPT FLUSH on every master between decisions on keys
// spread over all of them: no caller sees an error.
func TestClusterScriptFlush(t *testing.T) {
	clusters := map[string]*redis.ClusterClient{"redis": redistest.Cluster(t)}
	if redistest.HaveValkey(t) {
		clusters["valkey"] = redistest.ValkeyCluster(t)
	}
	for name, c := range clusters {
		t.Run(name, func(t *testing.T) { testClusterScriptFlush(t, c) })
	}
}

func testClusterScriptFlush(t *testing.T, c *redis.ClusterClient) {
	p := redistest.Prefix()
	ls := scripted(t, c, p, 1)
	for round := range 3 {
		require.NoError(t, c.ForEachMaster(bg, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptFlush(ctx).Err()
		}))
		for _, l := range ls {
			for u := range 20 {
				key := fmt.Sprint("user", round, ":", u)
				require.Equal(t, 1, count(t, l, key, 2), "%s %s", l.Name(), key)
			}
		}
	}
}
