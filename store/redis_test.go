package store_test

import (
	"context"
	"errors"
	"net"
	"strings"
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

var ctx = context.Background()

func strategies() []algorithm.Strategy {
	return []algorithm.Strategy{
		algorithm.SlidingWindowLog(3, time.Minute),
		algorithm.TokenBucket(3, time.Minute, 3),
		algorithm.FixedWindow(3, time.Minute),
	}
}

func key(prefix string, s algorithm.Strategy, k string) string {
	return store.RedisKey(prefix, k, s.Script().Tag)
}

// Every key gets a TTL equal to the time until it is full again (rounded up
// to a millisecond), and is gone once that passes: a quiet user leaves
// nothing behind. miniredis's clock only moves when told, so the virtual
// timeline and expiry agree exactly.
func TestRedisKeyExpiry(t *testing.T) {
	m, c := redistest.Mini(t)
	s := stores.Redis(t, c)
	for _, strat := range strategies() {
		p := redistest.Prefix()
		now := storetest.T0.Add(15 * time.Second)
		d, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "u", N: 1, Now: now})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		k := key(p, strat, "u")
		require.Equal(t, d.ResetAfter, m.TTL(k), strat.Name())
		m.FastForward(d.ResetAfter - time.Millisecond)
		require.True(t, m.Exists(k), "%s: still needed 1ms before it is full", strat.Name())
		m.FastForward(time.Millisecond)
		require.False(t, m.Exists(k), "%s: gone once full", strat.Name())
	}
}

// On the real server with its own clock (no Now), keys carry a TTL no longer
// than the window, and a denied request on a fresh key writes nothing.
func TestRedisRealTTL(t *testing.T) {
	c := redistest.Real(t)
	s := stores.Redis(t, c)
	for _, strat := range strategies() {
		p := redistest.Prefix()
		d, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "u", N: 1})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		ttl, err := c.PTTL(ctx, key(p, strat, "u")).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0), strat.Name())
		require.LessOrEqual(t, ttl, d.ResetAfter.Round(time.Millisecond)+time.Millisecond, strat.Name())

		d, err = s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "fresh", N: 4})
		require.NoError(t, err)
		require.False(t, d.Allowed)
		n, err := c.Exists(ctx, key(p, strat, "fresh")).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s: a denial records nothing", strat.Name())
	}
}

// The default clock is the Redis server's TIME: with no Now, decisions on
// one key still count against each other.
func TestRedisServerTime(t *testing.T) {
	_, mini := redistest.Mini(t)
	for name, c := range map[string]*redis.Client{"miniredis": mini, "real": redistest.Real(t)} {
		s := stores.Redis(t, c)
		for _, strat := range strategies() {
			p := redistest.Prefix()
			admitted := 0
			for range 5 {
				d, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "u", N: 1})
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			require.Equal(t, 3, admitted, "%s %s", name, strat.Name())
		}
	}
}

// SCRIPT FLUSH (as after a restart or failover) is invisible to callers:
// EVALSHA's NOSCRIPT falls back to EVAL, which reloads the script.
func TestRedisScriptFlush(t *testing.T) {
	_, mini := redistest.Mini(t)
	for name, c := range map[string]*redis.Client{"miniredis": mini, "real": redistest.Real(t)} {
		s := stores.Redis(t, c)
		for _, strat := range strategies() {
			p := redistest.Prefix()
			for i := range 4 {
				require.NoError(t, c.ScriptFlush(ctx).Err())
				d, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "u", N: 1, Now: storetest.T0})
				require.NoError(t, err, "%s %s", name, strat.Name())
				require.Equal(t, i < 3, d.Allowed, "%s %s request %d", name, strat.Name(), i)
			}
			exists, err := c.ScriptExists(ctx, strat.Script().SHA1).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true}, exists, "%s: EVAL cached the script again", name)
		}
	}
}

// A key of another type at the limiter's name is a clear error.
func TestRedisWrongType(t *testing.T) {
	_, mini := redistest.Mini(t)
	for name, c := range map[string]*redis.Client{"miniredis": mini, "real": redistest.Real(t)} {
		s := stores.Redis(t, c)
		for _, strat := range strategies() {
			p := redistest.Prefix()
			require.NoError(t, c.RPush(ctx, key(p, strat, "u"), "x").Err())
			_, err := s.Decide(ctx, store.Request{Strategy: strat, Prefix: p, Key: "u", N: 1, Now: storetest.T0})
			require.True(t, errors.Is(err, store.ErrWrongType), "%s %s: %v", name, strat.Name(), err)
			require.Contains(t, err.Error(), key(p, strat, "u"))
		}
	}
}

// hungListener accepts connections and never answers: a Redis that hangs.
func hungListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// wrapped is a user's own client type around *redis.Client: NewRedis
// judges it by the client it embeds.
type wrapped struct{ *redis.Client }

// opaque is a UniversalClient whose options NewRedis cannot see.
type opaque struct{ redis.UniversalClient }

// NewRedis refuses a nil client and a go-redis client that ignores context
// deadlines (it would hold callers for its socket timeouts), naming the
// option to set; it accepts every go-redis type built with the option, and
// client types it does not know.
func TestNewRedisRefusesClientsThatIgnoreDeadlines(t *testing.T) {
	var typedNil *redis.Client
	for name, c := range map[string]redis.UniversalClient{
		"nil":          nil,
		"typed nil":    typedNil,
		"client":       redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		"cluster":      redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		"ring":         redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
		"failover":     redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}),
		"universal":    redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}),
		"cluster, nil": (*redis.ClusterClient)(nil),
		"wrapped":      wrapped{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})},
	} {
		s, err := store.NewRedis(c)
		require.ErrorIs(t, err, store.ErrInvalidClient, name)
		require.Nil(t, s, name)
		if c != nil && c != redis.UniversalClient(typedNil) && name != "cluster, nil" {
			require.Contains(t, err.Error(), "ContextTimeoutEnabled", name)
			_ = c.Close()
		}
	}
	for name, c := range map[string]redis.UniversalClient{
		"client":       redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}),
		"cluster":      redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}),
		"ring":         redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true}),
		"wrapped":      wrapped{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})},
		"unknown type": opaque{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})},
	} {
		s, err := store.NewRedis(c)
		require.NoError(t, err, name)
		require.NotNil(t, s, name)
		_ = c.Close()
	}
}

// Request.Timeout bounds a decision whatever client the caller built: a
// client with ContextTimeoutEnabled whose own socket timeouts are a minute,
// and an unknown UniversalClient (called on a goroutine the deadline
// abandons) both end with the deadline.
func TestRedisTimeoutBoundsAnyClient(t *testing.T) {
	addr := hungListener(t)
	plain := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = plain.Close() })
	bounded := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = bounded.Close() })
	for name, c := range map[string]redis.UniversalClient{"deadlines enabled": bounded, "unknown type": opaque{plain}} {
		s := stores.Redis(t, c)
		_, err := s.Decide(ctx, store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: "p:", Key: "u", N: 1, Timeout: 50 * time.Millisecond})
		require.Error(t, err, name)
		require.True(t, errors.Is(err, context.DeadlineExceeded) || isTimeout(err), "%s: %v", name, err)
		require.NoError(t, s.Close())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Ping answers nil for a live server and cluster, and for an address that
// refuses connections an error that names the refusal, not only the
// deadline that go-redis's dial retries ran into; a decision on that address
// says that no connection is open.
func TestPingNamesTheCause(t *testing.T) {
	require.NoError(t, stores.Redis(t, redistest.Real(t)).Ping(ctx))
	require.NoError(t, stores.Redis(t, redistest.Cluster(t)).Ping(ctx))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	for name, c := range map[string]redis.UniversalClient{
		"client":  redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}),
		"cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}),
	} {
		t.Cleanup(func() { _ = c.Close() })
		s := stores.Redis(t, c)
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := s.Ping(pctx)
		cancel()
		require.ErrorIs(t, err, store.ErrUnavailable, name)
		require.ErrorContains(t, err, "connection refused", name)
		_, err = s.Decide(ctx, store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: "p:", Key: "u", N: 1, Timeout: 100 * time.Millisecond})
		require.ErrorIs(t, err, store.ErrUnavailable, name)
		if name == "client" {
			require.ErrorContains(t, err, "no connection to Redis is open", name)
		}
	}
}

// Close leaves the caller's client usable, and the store refuses decisions
// after it.
func TestRedisCloseLeavesCallersClient(t *testing.T) {
	c := redistest.Real(t)
	s := stores.Redis(t, c)
	_, err := s.Decide(ctx, store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: redistest.Prefix(), Key: "u", N: 1})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, c.Ping(ctx).Err())
	_, err = s.Decide(ctx, store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: redistest.Prefix(), Key: "u", N: 1})
	require.ErrorIs(t, err, store.ErrClosed)
}

// A go-redis client closed under an open store is the store's ErrClosed
// (a programming error the caller can tell from an outage), on a server,
// miniredis and a cluster, with pipelining and without; Reset too.
func TestRedisClosedClientIsErrClosed(t *testing.T) {
	_, mini := redistest.Mini(t)
	for name, c := range map[string]redis.UniversalClient{
		"miniredis": mini, "redis": redistest.Real(t), "cluster": redistest.Cluster(t),
	} {
		for _, inFlight := range []int{0, store.DefaultMaxInFlight} {
			s := stores.Redis(t, c, store.WithMaxInFlight(inFlight))
			req := store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: redistest.Prefix(), Key: "u", N: 1}
			_, err := s.Decide(ctx, req)
			require.NoError(t, err, name)
		}
		require.NoError(t, c.Close())
		for _, inFlight := range []int{0, store.DefaultMaxInFlight} {
			s := stores.Redis(t, c, store.WithMaxInFlight(inFlight))
			req := store.Request{Strategy: algorithm.FixedWindow(1, time.Minute), Prefix: redistest.Prefix(), Key: "u", N: 1, Timeout: time.Second}
			_, err := s.Decide(ctx, req)
			require.ErrorIs(t, err, store.ErrClosed, "%s, %d in flight", name, inFlight)
			require.ErrorIs(t, s.Reset(ctx, req), store.ErrClosed, "%s: Reset", name)
		}
	}
}

// RedisKey puts the user's key in a hash tag that Redis Cluster hashes as a
// whole, whatever braces the key holds, and keeps distinct keys distinct.
func TestRedisKeyHashTag(t *testing.T) {
	seen := map[string]string{}
	for _, k := range []string{"a", "{a}", "}{", "{}", "{", "}", "%7B", "%", "a}b{c", "ключ"} {
		full := store.RedisKey("rl:", k, "sl")
		tag := hashTag(full)
		require.NotEmpty(t, tag, "%q", k)
		require.Equal(t, full, "rl:{"+tag+"}:sl", "%q: the tag is exactly the escaped user key", k)
		require.False(t, strings.ContainsAny(tag, "{}"), "%q", k)
		if other, dup := seen[full]; dup {
			t.Fatalf("%q and %q map to one key %q", k, other, full)
		}
		seen[full] = k
	}
}

// hashTag is Redis Cluster's rule: the bytes between the first '{' and the
// first '}' after it, if non-empty; otherwise the whole key is hashed ("").
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}
