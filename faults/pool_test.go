package faults_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// How many connections one process opens to Redis. go-redis v9.23 runs
// pipelines on a pool of their own (PipelinePoolSize, default
// redis.DefaultPipelinePoolSize = 10) beside the main pool (PoolSize), and
// the store pipelines decisions once store.DefaultMaxInFlight round trips
// are in flight. So 64 concurrent callers through PoolSize 4 open up to
// 4 + 10 connections; with PipelinePoolSize -1 pipelines share the main
// pool and PoolSize bounds them. Counted by the server itself
// (total_connections_received), on a server of the test's own.
func TestConnectionsPerProcess(t *testing.T) {
	const poolSize, callers, calls = 4, 64, 50
	srv := redistest.StartServer(t)
	admin := srv.Client()
	accepted := func() int {
		info, err := admin.Info(context.Background(), "stats").Result()
		require.NoError(t, err)
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
				n, err := strconv.Atoi(v)
				require.NoError(t, err)
				return n
			}
		}
		t.Fatal("no total_connections_received in INFO stats")
		return 0
	}
	for _, c := range []struct {
		pipelinePool, bound int
	}{
		{0, poolSize + redis.DefaultPipelinePoolSize},
		{-1, poolSize},
	} {
		before := accepted()
		client := srv.Client(func(o *redis.Options) { o.PoolSize, o.PipelinePoolSize = poolSize, c.pipelinePool })
		l := newLimiter(t, algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), redisStore(t, client))
		for _, o := range burst(l, "u", callers, calls) {
			require.NoError(t, o.err)
		}
		opened := accepted() - before
		t.Logf("PoolSize %d, PipelinePoolSize %d, %d callers: %d connections", poolSize, c.pipelinePool, callers, opened)
		require.LessOrEqual(t, opened, c.bound, "PipelinePoolSize %d", c.pipelinePool)
		if c.pipelinePool == 0 {
			// What docs/operations.md says: PoolSize alone is not the bound.
			require.Greater(t, opened, poolSize, "64 callers pipeline beyond the main pool")
		}
	}
}
