package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// shardKeys are user keys with and without braces of their own.
func shardKeys() []string {
	keys := []string{"{a}", "}{", "{}", "a{b}c", "%7B", "{user:1}:x"}
	for i := range 40 {
		keys = append(keys, fmt.Sprint("user:", i))
	}
	return keys
}

// On the real Cluster, Shard names the master where a key's Redis keys
// really land (found by scanning every master), braces or not — once the
// store has made a decision: before, it does not know (and does no I/O to
// find out).
func TestRedisShardCluster(t *testing.T) {
	c := redistest.Cluster(t)
	s := stores.Redis(t, c)
	require.Empty(t, s.Shard("user:1"), "no decision yet: the slot map may not be loaded")
	p := redistest.Prefix()
	strat := algorithm.TokenBucket(10, time.Minute, 10)
	for _, k := range shardKeys() {
		_, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: k, N: 1, Now: storetest.T0})
		require.NoError(t, err, "%q", k)
	}
	node := map[string]string{} // Redis key -> the master holding it
	for addr, keys := range redistest.KeysByNode(t, c, p+"*") {
		for _, k := range keys {
			node[k] = addr
		}
	}
	shards := map[string]bool{}
	for _, k := range shardKeys() {
		want := node[key(p, strat, k)]
		require.NotEmpty(t, want, "%q was stored", k)
		require.Equal(t, want, s.Shard(k), "%q", k)
		shards[want] = true
	}
	require.Len(t, shards, 3, "keys on every master")
}

// A standalone client is one shard, its address; a Ring names the shard a
// key lands on.
func TestRedisShardStandaloneAndRing(t *testing.T) {
	mr, c := redistest.Mini(t)
	require.Equal(t, mr.Addr(), stores.Redis(t, c).Shard("user:1"))

	a, b := miniredis.RunT(t), miniredis.RunT(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	s := stores.Redis(t, ring)
	strat := algorithm.FixedWindow(10, time.Minute)
	seen := map[string]bool{}
	for _, k := range shardKeys() {
		_, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: "p:", Key: k, N: 1, Now: storetest.T0})
		require.NoError(t, err, "%q", k)
		want := a.Addr()
		if b.Exists(key("p:", strat, k)) {
			want = b.Addr()
		}
		require.Equal(t, want, s.Shard(k), "%q", k)
		seen[want] = true
	}
	require.Len(t, seen, 2, "keys on both shards")
}
