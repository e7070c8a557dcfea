package faults_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// capMemory sets maxmemory to what c's server uses now plus headroom (which
// may be negative).
func capMemory(t *testing.T, c *redis.Client, headroom int64) {
	t.Helper()
	used, err := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64)
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(bg, "maxmemory", strconv.FormatInt(used+headroom, 10)).Err())
}

var junk = strings.Repeat("j", 8<<10)

// With maxmemory and noeviction, a full Redis refuses writes with OOM. The
// token bucket and the fixed window then decide by the policy, with an error
// wrapping ErrStoreUnavailable that says OOM. The sliding log keeps deciding,
// exactly: its script prunes expired members (a write that Redis allows
// when out of memory) before it adds, and Redis lets a script that has
// written finish its writes, so its keys grow past maxmemory
// (docs/reliability.md). Lifting the cap restores every decision.
func TestMaxmemoryNoEviction(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	admin := srv.Client()
	for i := range 32 {
		require.NoError(t, admin.Set(bg, fmt.Sprint("junk:", i), junk, 0).Err())
	}
	capMemory(t, admin, -128<<10) // the data alone is over the cap
	err := admin.Set(bg, "one-more", "x", 0).Err()
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "OOM"), "%v", err)

	st := redisStore(t, srv.Client())
	for _, e := range algorithm.Registry() {
		for _, policy := range policies {
			l := newLimiter(t, e.New(5, time.Minute), st, fleetlimit.WithFailurePolicy(policy))
			msg := e.Name + " " + policy.String()
			if e.Name == "sliding_window_log" {
				require.Equal(t, 5, count(t, l, "u", 6), "%s: prunes first, so Redis lets it write", msg)
				continue
			}
			o := call(l, bg, "u")
			requireDegraded(t, o, l, healthyTimeout, msg)
			require.Contains(t, o.err.Error(), "OOM", msg)
		}
	}
	require.NoError(t, admin.ConfigSet(bg, "maxmemory", "0").Err())
	for _, e := range algorithm.Registry() {
		require.Equal(t, 5, count(t, newLimiter(t, e.New(5, time.Minute), st), "u", 6), "%s: room again", e.Name)
	}
}

// With an evicting maxmemory policy, Redis may drop a limiter's key to make
// room, and the key starts afresh: the over-admission is at most one limit
// per evicted key, and none for a key that survived. 50 exhausted keys per
// algorithm (limit 5), then junk until eviction has taken some of them,
// then each key is probed with limit+1 requests. Under volatile-ttl only
// keys with a TTL (every limiter key has one) are candidates.
func TestMaxmemoryEviction(t *testing.T) {
	const limit, keysPer = 5, 50
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.StartServer(t, "--maxmemory-policy", policy)
			admin := srv.Client()
			st := redisStore(t, srv.Client())
			type limited struct {
				l        *fleetlimit.Limiter
				user     string
				redisKey string
			}
			var all []limited
			var redisKeys []string
			for _, e := range algorithm.Registry() {
				p := redistest.Prefix()
				s := e.New(limit, time.Hour)
				l := newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)))
				for i := range keysPer {
					user := fmt.Sprint("user", i)
					require.Equal(t, limit, count(t, l, user, limit+1), "%s %s", e.Name, user)
					k := store.RedisKey(p, user, s.Script().Tag)
					all = append(all, limited{l, user, k})
					redisKeys = append(redisKeys, k)
				}
			}

			capMemory(t, admin, 256<<10)
			for i := 0; i < 4000; i++ {
				err := admin.Set(bg, fmt.Sprint("junk:", i), junk, 0).Err()
				if err != nil {
					require.True(t, strings.HasPrefix(err.Error(), "OOM"), "%v", err)
					break // volatile-ttl with nothing volatile left
				}
				if i%20 == 0 && admin.Exists(bg, redisKeys...).Val() <= int64(len(redisKeys)-keysPer/2) {
					break
				}
			}
			require.NoError(t, admin.ConfigSet(bg, "maxmemory", "0").Err()) // no more eviction while probing

			evicted, extra := 0, 0
			for _, k := range all {
				survived := admin.Exists(bg, k.redisKey).Val() == 1
				n := count(t, k.l, k.user, limit+1)
				if survived {
					require.Zero(t, n, "%s %s survived: still exhausted", k.l.Name(), k.user)
				} else {
					evicted++
					require.Equal(t, limit, n, "%s %s was evicted: it starts afresh, one limit", k.l.Name(), k.user)
				}
				extra += n
			}
			require.GreaterOrEqual(t, evicted, keysPer/2, "eviction reached the limiter's keys")
			require.Equal(t, limit*evicted, extra, "over-admission is one limit per evicted key")
			t.Logf("%s: %d of %d limiter keys evicted, %d extra admissions", policy, evicted, len(all), extra)
		})
	}
}
