// Package stores builds the stores that tests run on, each closed when its
// test ends.
package stores

import (
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// Redis returns a Redis store over c, failing the test if NewRedis refuses
// it.
func Redis(t testing.TB, c redis.UniversalClient, opts ...store.RedisOption) *store.Redis {
	t.Helper()
	s, err := store.NewRedis(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Memory returns a memory store.
func Memory(t testing.TB, opts ...store.MemoryOption) *store.Memory {
	s := store.NewMemory(opts...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// All returns a fresh store of every kind a limiter is tested on: memory,
// miniredis and, when the environment names one, the real redis-server
// (see redistest.HaveReal).
func All(t testing.TB) map[string]store.Store {
	t.Helper()
	_, mini := redistest.Mini(t)
	all := map[string]store.Store{
		"memory":    Memory(t),
		"miniredis": Redis(t, mini),
	}
	if redistest.HaveReal(t) {
		all["redis"] = Redis(t, redistest.Real(t))
	}
	return all
}

// Down returns a Redis store whose server is gone: its client dials a
// loopback port where nothing listens, once per call (DialerRetries 1), so
// every call fails at once with connection refused — an outage, which a
// limiter's breaker counts and its policy decides. Closed when the test
// ends.
func Down(t testing.TB) *store.Redis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return Redis(t, c)
}
