package redistest

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterAddrsEnv names the environment variable holding the real Redis
// Cluster's master addresses, comma-separated, as ./test.sh exports them.
const ClusterAddrsEnv = "FLEETLIMIT_REDIS_CLUSTER_ADDRS"

// ValkeyClusterAddrsEnv names the environment variable holding the real
// Valkey Cluster's master addresses, as ClusterAddrsEnv does for Redis.
const ValkeyClusterAddrsEnv = "FLEETLIMIT_VALKEY_CLUSTER_ADDRS"

// ClusterAddrs returns the real Redis Cluster's master addresses; when the
// environment does not name them the test skips (fails under RequireEnv).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	return clusterAddrs(t, ClusterAddrsEnv, "Redis")
}

// ValkeyClusterAddrs returns the real Valkey Cluster's master addresses, as
// ClusterAddrs does for Redis.
func ValkeyClusterAddrs(t testing.TB) []string {
	t.Helper()
	return clusterAddrs(t, ValkeyClusterAddrsEnv, "Valkey")
}

func clusterAddrs(t testing.TB, env, server string) []string {
	t.Helper()
	var addrs []string
	for a := range strings.SplitSeq(os.Getenv(env), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		missing(t, "%s is not set: run ./test.sh, which starts a throwaway 3-master %s Cluster", env, server)
	}
	return addrs
}

// Cluster returns a new client for the real Redis Cluster (with
// ContextTimeoutEnabled), closed when the test ends. It fails the test if the
// cluster is not configured or some master does not answer. Each call makes a
// client with a pool of its own, so a test can stand up several "instances"
// of a service the way separate processes would. Tests share the cluster:
// give every key a Prefix of its own rather than flushing.
func Cluster(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	return cluster(t, ClusterAddrs(t), opts)
}

// ValkeyCluster returns a new client for the real Valkey Cluster, as Cluster
// does for Redis.
func ValkeyCluster(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	return cluster(t, ValkeyClusterAddrs(t), opts)
}

func cluster(t testing.TB, addrs []string, opts []func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
		return shard.Ping(ctx).Err()
	})
	if err != nil {
		t.Fatalf("real cluster at %v: %v", o.Addrs, err)
	}
	return c
}

// KeysByNode returns the keys matching pattern on each node that holds any,
// by node address: every master of a cluster client, or the one server of a
// plain client. It fails the test on an error or another client type.
func KeysByNode(t testing.TB, c redis.UniversalClient, pattern string) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	found := map[string][]string{}
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			found[node.Options().Addr] = append(found[node.Options().Addr], iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("redistest: cannot scan a %T", c)
	}
	if err != nil {
		t.Fatalf("redistest: scan %q: %v", pattern, err)
	}
	return found
}

// HaveCluster reports whether the environment names a real Redis Cluster
// (./test.sh starts one). Under RequireEnv a missing one fails the test.
func HaveCluster(t testing.TB) bool {
	t.Helper()
	if os.Getenv(ClusterAddrsEnv) != "" {
		return true
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s is not set although %s=1", ClusterAddrsEnv, RequireEnv)
	}
	return false
}
