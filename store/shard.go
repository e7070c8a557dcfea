package store

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded is implemented by a store whose keys live on separate servers
// that fail separately, such as the masters of a Redis Cluster. It names the
// server of each key, so that a circuit breaker can keep one circuit per
// server (see fleetlimit.Breaker) and a dead server lifts no limit for the
// keys of the others.
type Sharded interface {
	// Shard names the server that decides key (a Request.Key) now — for
	// Redis, its address — or returns "" when it does not know. It is
	// called before every decision: it must be cheap, do no I/O, and be
	// safe for concurrent use.
	Shard(key string) string
}

// shards is what a Redis store keeps per shard of a Cluster or Ring client.
// Shards are added as they are seen and never removed: they are the
// client's servers, few and long-lived.
type shards struct {
	routed    atomic.Bool                          // a decision succeeded: see Redis.Shard
	reloaded  atomic.Int64                         // when followTopology last asked for a reload, Unix ns
	mu        sync.Mutex                           // serializes adding to combiners
	combiners atomic.Pointer[map[string]*combiner] // by shard; replaced, never changed
}

// Shard names the Redis server that decides key: for a Cluster client, the
// address of the master that serves key's slot in the client's slot map;
// for a Ring, the address of key's shard; for any other *redis.Client
// (standalone, or Sentinel-backed), its address; "" for other clients.
//
// A Cluster client loads its slot map with its first command, and
// MasterForKey would load it then and there, which is I/O: so until this
// store has seen a decision succeed, Shard returns "" for every key of a
// Cluster, and the keys of every master share one circuit until the cluster
// first answers.
func (r *Redis) Shard(key string) string {
	switch c := r.client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		if !r.shards.routed.Load() {
			return ""
		}
		// The hash tag has no braces: the client hashes all of it.
		node, err := c.MasterForKey(context.Background(), hashTag(key))
		if err != nil {
			return ""
		}
		return node.Options().Addr
	case *redis.Ring:
		node, err := c.GetShardClientForKey(hashTag(key))
		if err != nil {
			return ""
		}
		return node.Options().Addr
	}
	return ""
}

// hashTag is the hash tag of key's Redis keys (see RedisKey): key with its
// braces and '%' percent-encoded.
func hashTag(key string) string {
	if strings.ContainsAny(key, "{}%") {
		return braceEscaper.Replace(key)
	}
	return key
}

// reloadEvery is the least time between two slot-map reloads that a Redis
// store asks of its Cluster client (go-redis itself waits 200ms between two
// reloads, and reloads by itself only every ClusterStateReloadInterval,
// 60s by default, or when a server answers MOVED).
const reloadEvery = 200 * time.Millisecond

// followTopology asks a Cluster client to reload its slot map, at most once
// per reloadEvery, after a call failed as an outage does. A master that
// dies answers no MOVED, so without it the client would keep routing its
// slots to the dead address until its periodic reload, a minute after the
// replica took over; with it, the first failure after the promotion (for
// keys behind an open circuit, the next probe) brings the new master into
// the map, Shard names it, and its keys get a circuit of their own, closed.
// The reload is done by the client on a goroutine of its own: the caller
// does not wait for it. Other clients are left alone.
func (r *Redis) followTopology() {
	c, ok := r.client.(interface{ ReloadState(context.Context) })
	if !ok {
		return
	}
	now := time.Now().UnixNano()
	last := r.shards.reloaded.Load()
	if now-last < int64(reloadEvery) || !r.shards.reloaded.CompareAndSwap(last, now) {
		return
	}
	c.ReloadState(context.Background())
}

// noteRouted records that a decision succeeded: a Cluster client has its
// slot map. It writes only once, to keep the line shared.
func (r *Redis) noteRouted() {
	if !r.shards.routed.Load() {
		r.shards.routed.Store(true)
	}
}

// combinerFor returns the combiner that pipelines key's decisions: one per
// shard of a Cluster or Ring client, each with the store's maxInFlight, so
// that a dead or stalled master's round trips neither share a pipeline with
// the other masters' decisions (a pipeline ends when its slowest node
// answers) nor hold the slots they need. It requires r.combine != nil.
func (r *Redis) combinerFor(key string) *combiner {
	switch r.client.(type) {
	case *redis.ClusterClient, *redis.Ring:
	default:
		return r.combine
	}
	shard := r.Shard(key)
	if shard == "" {
		return r.combine
	}
	if m := r.shards.combiners.Load(); m != nil {
		if b := (*m)[shard]; b != nil {
			return b
		}
	}
	r.shards.mu.Lock()
	defer r.shards.mu.Unlock()
	m := map[string]*combiner{}
	if old := r.shards.combiners.Load(); old != nil {
		if b := (*old)[shard]; b != nil {
			return b
		}
		m = maps.Clone(*old)
	}
	b := &combiner{r: r, maxInFlight: r.combine.maxInFlight}
	m[shard] = b
	r.shards.combiners.Store(&m)
	return b
}
