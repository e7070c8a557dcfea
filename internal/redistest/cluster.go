package redistest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterAddrsEnv names the environment variable holding the real Redis
// Cluster's master addresses, comma-separated, as ./test.sh exports them.
const ClusterAddrsEnv = "FLEETLIMIT_REDIS_CLUSTER_ADDRS"

// ClusterAddrs returns the real cluster's master addresses, failing the test
// when the environment does not name them.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for a := range strings.SplitSeq(os.Getenv(ClusterAddrsEnv), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("%s is not set: run the tests with ./test.sh, which starts a throwaway 3-master Redis Cluster", ClusterAddrsEnv)
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
	o := &redis.ClusterOptions{Addrs: ClusterAddrs(t), ContextTimeoutEnabled: true}
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
		t.Fatalf("real redis cluster at %v: %v", o.Addrs, err)
	}
	return c
}
