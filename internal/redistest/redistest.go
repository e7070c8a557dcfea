// Package redistest gives tests the Redis servers they run against: an
// embedded miniredis, and the real redis-server that the README's test
// command (./test.sh) starts and names in FLEETLIMIT_REDIS_ADDR.
//
// Tests that need the real server fail, never skip, when it is missing: a
// green run means the real server was exercised.
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

// RealAddr returns the real server's address, failing the test when the
// environment does not name one.
func RealAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(AddrEnv)
	if addr == "" {
		t.Fatalf("%s is not set: run the tests with ./test.sh, which starts a throwaway redis-server", AddrEnv)
	}
	return addr
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
