package redistest_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// The proxy forwards, delays, swallows, resets and moves connections, and
// counts them.
func TestProxy(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	require.NoError(t, a.Client().Set(ctx, "where", "a", 0).Err())
	require.NoError(t, b.Client().Set(ctx, "where", "b", 0).Err())
	p := redistest.NewProxy(t, a.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 100*time.Millisecond) }

	require.Equal(t, "a", c.Get(ctx, "where").Val(), "forwards")
	require.EqualValues(t, 1, p.Accepted())
	require.Equal(t, 1, p.Open())

	p.SetLatency(time.Second)
	cctx, cancel := short()
	err := c.Get(cctx, "where").Err()
	cancel()
	require.True(t, timedOut(err), "a reply a second late misses a 100ms deadline: %v", err)
	p.SetLatency(0)
	require.Equal(t, "a", c.Get(ctx, "where").Val(), "no latency: answers again")

	p.SetBlackHole(true)
	cctx, cancel = short()
	err = c.Get(cctx, "where").Err()
	cancel()
	require.True(t, timedOut(err), "a black hole never answers: %v", err)
	p.SetBlackHole(false)
	require.Equal(t, "a", c.Get(ctx, "where").Val(), "the hole closed: answers again")

	p.SetTarget(b.Addr)
	require.Equal(t, "a", c.Get(ctx, "where").Val(), "open connections stay on a")
	p.ResetAll()
	require.Equal(t, "b", c.Get(ctx, "where").Val(), "reset connections reconnect to b")
	require.LessOrEqual(t, p.PeakOpen(), 2)
	require.Greater(t, p.Accepted(), int64(2))

	p.Close()
	cctx, cancel = short()
	require.Error(t, c.Get(cctx, "where").Err(), "a closed proxy refuses")
	cancel()
	p.Close() // twice is fine
}

// timedOut reports a deadline missed: go-redis says so with the context's
// error or, when it does not retry, with the socket's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// Cluster and ValkeyCluster reach every master of the real clusters, and
// keys spread over them.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	for name, open := range map[string]struct {
		addrs  func(testing.TB) []string
		client func(testing.TB, ...func(*redis.ClusterOptions)) *redis.ClusterClient
	}{
		"redis":  {redistest.ClusterAddrs, redistest.Cluster},
		"valkey": {redistest.ValkeyClusterAddrs, redistest.ValkeyCluster},
	} {
		t.Run(name, func(t *testing.T) {
			require.GreaterOrEqual(t, len(open.addrs(t)), 3)
			c := open.client(t)
			p := redistest.Prefix()
			for i := range 64 {
				require.NoError(t, c.Set(ctx, p+string(rune('a'+i%26))+string(rune('a'+i/26)), "v", time.Minute).Err())
			}
			require.Len(t, redistest.KeysByNode(t, c, p+"*"), 3, "64 keys land on every one of 3 masters")
		})
	}
}
