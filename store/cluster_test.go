package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// The conformance suite on a real 3-master Redis Cluster, through
// redis.NewClusterClient.
func TestRedisClusterConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return stores.Redis(t, redistest.Cluster(t)) })
}

// Keys with braces of their own never raise CROSSSLOT or land in a slot
// other than their hash tag's: every decision succeeds, each key is limited
// on its own, and Redis itself (CLUSTER KEYSLOT) hashes the full key exactly
// as the escaped user key. 60 plain keys spread over all three masters.
func TestRedisClusterBraceKeys(t *testing.T) {
	c := redistest.Cluster(t)
	s := stores.Redis(t, c)
	defer s.Close()
	p := redistest.Prefix()
	keys := []string{"{a}", "}{", "{}", "{", "}", "a{b}c", "{a}b", "}}{{", "%7B", "{user:1}:x"}
	for i := range 60 {
		keys = append(keys, fmt.Sprint("user:", i))
	}
	for _, strat := range strategies() { // limit 3
		for _, k := range keys {
			req := store.Request{Strategy: strat, Prefix: p, Key: k, N: 1, Now: storetest.T0}
			for i := range 4 {
				d, err := s.Decide(ctx, req)
				require.NoError(t, err, "%s %q", strat.Name(), k)
				require.Equal(t, i < 3, d.Allowed, "%s %q request %d", strat.Name(), k, i)
			}
			full := key(p, strat, k)
			tag := strings.TrimSuffix(strings.TrimPrefix(full, p+"{"), "}:"+strat.Script().Tag)
			require.Equal(t, c.ClusterKeySlot(ctx, tag).Val(), c.ClusterKeySlot(ctx, full).Val(), "%q: slot of its tag %q", k, tag)
			require.EqualValues(t, 1, c.Exists(ctx, full).Val(), "%q", k)
		}
	}
	require.Len(t, redistest.KeysByNode(t, c, p+"*"), 3, "keys on every master")
}

// A Cluster store asks its client to reload the slot map after a call that
// failed as an outage does (here: calls whose deadline has passed), at most
// once per 200ms however many fail, and never after a rejection of one
// request (a key holding a list). The reloads are counted through
// ClusterOptions.ClusterSlots, which go-redis calls for each one.
func TestRedisClusterReloadsOnOutage(t *testing.T) {
	admin := redis.NewClient(&redis.Options{Addr: redistest.ClusterAddrs(t)[0]})
	t.Cleanup(func() { _ = admin.Close() })
	var loads atomic.Int64
	c := redistest.Cluster(t, func(o *redis.ClusterOptions) {
		o.ClusterSlots = func(ctx context.Context) ([]redis.ClusterSlot, error) {
			loads.Add(1)
			return admin.ClusterSlots(ctx).Result()
		}
	})
	s := stores.Redis(t, c)
	p := redistest.Prefix()
	strat := algorithm.FixedWindow(10, time.Minute)
	_, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "ok", N: 1})
	require.NoError(t, err)
	require.NoError(t, c.RPush(ctx, key(p, strat, "list"), "x").Err())
	time.Sleep(300 * time.Millisecond) // past the start-up loads and their cool-down
	before := loads.Load()

	for range 50 {
		_, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "list", N: 1})
		require.ErrorIs(t, err, store.ErrWrongType)
	}
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, before, loads.Load(), "a rejection reloads nothing")

	start := time.Now()
	for range 200 {
		_, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "ok", N: 1, Timeout: time.Nanosecond})
		require.ErrorIs(t, err, store.ErrUnavailable)
	}
	elapsed := time.Since(start)
	require.Eventually(t, func() bool { return loads.Load() > before }, 5*time.Second, 10*time.Millisecond, "an outage reloads the slot map")
	time.Sleep(300 * time.Millisecond)
	got := loads.Load() - before
	// One per 200ms of failures, and one more that go-redis runs when asked
	// again during its own cool-down.
	require.LessOrEqual(t, got, 2*(int64(elapsed/(200*time.Millisecond))+1), "reloads for 200 failures over %v", elapsed)
	t.Logf("200 failures over %v: %d reloads", elapsed, got)
}
