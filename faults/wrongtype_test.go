package faults_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// A key of another type (or a string in another format) at the limiter's
// name is a clear error on every Redis: store.ErrWrongType naming the key,
// inside ErrStoreUnavailable, the policy's Result, and the foreign value
// left as it was.
func TestWrongType(t *testing.T) {
	type kind struct {
		write func(c redis.UniversalClient, k string) error
		read  func(c redis.UniversalClient, k string) (any, error)
	}
	foreign := map[string]kind{
		"list": {
			func(c redis.UniversalClient, k string) error { return c.RPush(bg, k, "x").Err() },
			func(c redis.UniversalClient, k string) (any, error) { return c.LRange(bg, k, 0, -1).Result() },
		},
		"hash": {
			func(c redis.UniversalClient, k string) error { return c.HSet(bg, k, "f", "v").Err() },
			func(c redis.UniversalClient, k string) (any, error) { return c.HGetAll(bg, k).Result() },
		},
		"set": {
			func(c redis.UniversalClient, k string) error { return c.SAdd(bg, k, "x").Err() },
			func(c redis.UniversalClient, k string) (any, error) { return c.SMembers(bg, k).Result() },
		},
		"string": {
			func(c redis.UniversalClient, k string) error { return c.Set(bg, k, "not:a-state", 0).Err() },
			func(c redis.UniversalClient, k string) (any, error) { return c.Get(bg, k).Result() },
		},
		// A sorted set whose members are not the sliding log's, and strings
		// that Lua's tonumber alone would read as numbers ("inf" would make
		// a token bucket deny for ever, with no TTL).
		"zset": {
			func(c redis.UniversalClient, k string) error {
				return c.ZAdd(bg, k, redis.Z{Score: 1e18, Member: "x"}).Err()
			},
			func(c redis.UniversalClient, k string) (any, error) { return c.ZRangeWithScores(bg, k, 0, -1).Result() },
		},
	}
	for _, v := range []string{"inf", "nan", "0x1A", " 12 ", "12:", ":3", "1:2:3:4", "-5:1", "99999999999999999999999999999999999999999:1"} {
		foreign["string "+v] = kind{
			func(c redis.UniversalClient, k string) error { return c.Set(bg, k, v, 0).Err() },
			func(c redis.UniversalClient, k string) (any, error) { return c.Get(bg, k).Result() },
		}
	}
	for name, c := range backends(t) {
		st := redisStore(t, c)
		for _, e := range algorithm.Registry() {
			for kind, f := range foreign {
				for _, policy := range policies {
					p := redistest.Prefix()
					key := store.RedisKey(p, "u", e.New(1, time.Minute).Script().Tag)
					require.NoError(t, f.write(c, key))
					before, err := f.read(c, key)
					require.NoError(t, err)

					l := newLimiter(t, e.New(5, time.Minute), st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithFailurePolicy(policy))
					o := call(l, bg, "u")
					msg := name + " " + e.Name + " over a " + kind + ", " + policy.String()
					requireDegraded(t, o, l, healthyTimeout, msg)
					require.ErrorIs(t, o.err, store.ErrWrongType, msg)
					require.Contains(t, o.err.Error(), key, msg)

					after, err := f.read(c, key)
					require.NoError(t, err)
					require.Equal(t, before, after, "%s: the foreign value is untouched", msg)
				}
			}
		}
	}
}
