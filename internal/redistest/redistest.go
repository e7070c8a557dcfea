// Package redistest gives tests the Redis servers they run against: an
// embedded miniredis, and the real redis-server that the README's test
// command (./test.sh) starts and names in FLEETLIMIT_REDIS_ADDR.
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

// AddrEnv names the environment variable holding the real server's address.
const AddrEnv = "FLEETLIMIT_REDIS_ADDR"

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

// RealAddr returns the real server's address; when the environment does not
// name one the test skips (fails under RequireEnv).
func RealAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(AddrEnv)
	if addr == "" {
		missing(t, "%s is not set: run ./test.sh, which starts a throwaway redis-server", AddrEnv)
	}
	return addr
}

// HaveReal reports whether the environment names a real server. Under
// RequireEnv a missing one fails the test. For tests that run over every
// store and add the real one when it is there.
func HaveReal(t testing.TB) bool {
	t.Helper()
	if os.Getenv(AddrEnv) != "" {
		return true
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s is not set although %s=1", AddrEnv, RequireEnv)
	}
	return false
}

// Real returns a client for the real redis-server, failing the test if it is
// not configured or does not answer. Tests share the server: give every key a
// Prefix of its own rather than flushing.
func Real(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RealAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("real redis-server at %s: %v", RealAddr(t), err)
	}
	return c
}

// Prefix returns a key prefix no other test uses.
func Prefix() string { return "test:" + uuid.NewString()[:13] + ":" }
