// Package redistest gives tests the Redis servers they run against: an
// embedded miniredis, and the real servers that the README's test command
// (./test.sh) starts: a redis-server (FLEETLIMIT_REDIS_ADDR), a 3-master
// Redis Cluster (FLEETLIMIT_REDIS_CLUSTER_ADDRS), and the same pair of
// Valkey (FLEETLIMIT_VALKEY_ADDR, FLEETLIMIT_VALKEY_CLUSTER_ADDRS).
//
// A test that needs a real server skips, with a one-line reason, when the
// environment names none — unless FLEETLIMIT_REQUIRE_REDIS=1, which the
// README's test command sets: then it fails, so that a green ./test.sh means
// the real servers were exercised, and plain `go test ./...` passes
// anywhere on miniredis alone.
package redistest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// AddrEnv names the environment variable holding the real redis-server's
// address.
const AddrEnv = "FLEETLIMIT_REDIS_ADDR"

// ValkeyAddrEnv names the environment variable holding the real
// valkey-server's address.
const ValkeyAddrEnv = "FLEETLIMIT_VALKEY_ADDR"

// Mini starts a miniredis for the duration of the test and returns it with a
// client for it. The server's clock is frozen unless the test moves it
// (FastForward, SetTime), so virtual-time tests never see keys expire early.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

// RequireEnv names the environment variable that turns a missing real
// server from a skip into a failure ("1").
const RequireEnv = "FLEETLIMIT_REQUIRE_REDIS"

// missing skips the test, or fails it when RequireEnv is "1".
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// RealAddr returns the real redis-server's address; when the environment
// does not name one the test skips (fails under RequireEnv).
func RealAddr(t testing.TB) string {
	t.Helper()
	return envAddr(t, AddrEnv, "redis-server")
}

// ValkeyAddr returns the real valkey-server's address; when the environment
// does not name one the test skips (fails under RequireEnv).
func ValkeyAddr(t testing.TB) string {
	t.Helper()
	return envAddr(t, ValkeyAddrEnv, "valkey-server")
}

func envAddr(t testing.TB, env, server string) string {
	t.Helper()
	addr := os.Getenv(env)
	if addr == "" {
		missing(t, "%s is not set: run ./test.sh, which starts a throwaway %s", env, server)
	}
	return addr
}

// HaveReal reports whether the environment names a real redis-server. Under
// RequireEnv a missing one fails the test. For tests that run over every
// store and add the real one when it is there.
func HaveReal(t testing.TB) bool {
	t.Helper()
	return haveEnv(t, AddrEnv)
}

// HaveValkey reports whether the environment names a real valkey-server, as
// HaveReal does for redis-server (under RequireEnv a missing one fails).
func HaveValkey(t testing.TB) bool {
	t.Helper()
	return haveEnv(t, ValkeyAddrEnv)
}

func haveEnv(t testing.TB, env string) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return true
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s is not set although %s=1", env, RequireEnv)
	}
	return false
}

// Real returns a client for the real redis-server (with
// ContextTimeoutEnabled, then opts), failing the test if it is not
// configured or does not answer. Tests share the server: give every key a
// Prefix of its own rather than flushing.
func Real(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	return dial(t, RealAddr(t), "redis-server", opts)
}

// Valkey returns a client for the real valkey-server, as Real does for
// redis-server.
func Valkey(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	return dial(t, ValkeyAddr(t), "valkey-server", opts)
}

func dial(t testing.TB, addr, server string, opts []func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("real %s at %s: %v", server, addr, err)
	}
	return c
}

// Prefix returns a key prefix no other test uses.
func Prefix() string { return "test:" + uuid.NewString()[:13] + ":" }
