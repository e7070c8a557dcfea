package fleetlimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// maxBytesPerPermit bounds the Redis memory one held permit costs: a
// sorted-set member (its 36-byte id) and its score (the expiry).
const maxBytesPerPermit = 256

// TestPermitMemory: on the real redis-server, a key's memory grows by at
// most maxBytesPerPermit for each permit it holds, and releasing them all
// leaves no key behind. The figures are logged (docs/choosing.md quotes a
// run).
func TestPermitMemory(t *testing.T) {
	c := redistest.Real(t)
	s := algorithm.Concurrency(1000, time.Hour)
	l, err := fleetlimit.New(s, stores.Redis(t, c), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10*time.Second))
	require.NoError(t, err)
	key := store.RedisKey(l.KeyPrefix(), "u", s.Script().Tag)
	var permits []fleetlimit.Permit
	usage := map[int]int64{}
	for _, n := range []int{1, 128, 129, 1000} {
		for len(permits) < n {
			p, res, err := l.Acquire(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			permits = append(permits, p)
		}
		b, err := c.MemoryUsage(bg, key).Result()
		require.NoError(t, err)
		usage[n] = b
	}
	// Beyond 128 members Redis keeps a skiplist: the per-permit cost there.
	per := float64(usage[1000]-usage[129]) / float64(1000-129)
	t.Logf("MEMORY USAGE: 1 permit %d B, 128 %d B, 129 %d B, 1000 %d B; %.0f B per permit beyond 128, %.0f B per permit within 128",
		usage[1], usage[128], usage[129], usage[1000], per, float64(usage[128]-usage[1])/127)
	require.Less(t, per, float64(maxBytesPerPermit))
	require.Less(t, float64(usage[1000])/1000, float64(maxBytesPerPermit))
	for _, p := range permits {
		require.NoError(t, p.Release(bg))
	}
	n, err := c.Exists(bg, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no key is left once every permit is released")
}
