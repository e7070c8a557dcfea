// Package stores builds the stores that tests run on, each closed when its
// test ends.
package stores

import (
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
// miniredis and, when the environment names them, the real redis-server
// ("redis", see redistest.HaveReal) and valkey-server ("valkey",
// redistest.HaveValkey).
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
	if redistest.HaveValkey(t) {
		all["valkey"] = Redis(t, redistest.Valkey(t))
	}
	return all
}
