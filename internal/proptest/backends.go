package proptest

import (
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// Backend is a store every property runs on.
type Backend struct {
	Name string
	// Real is the real redis-server, which expires keys in real time while
	// the timelines run on a virtual clock: its timelines are in whole
	// seconds (plus under 10ms of jitter) and its windows are minutes, so
	// that every key's TTL stays near or above a second (see Grain).
	//
	// From Backends, a real server's client keeps every key a script
	// touches from expiring in real time (redistest.PersistScriptKeys): a
	// key whose TTL the virtual clock has not run out is still there when
	// the next request comes, however long the case took in real time.
	// ExpiringBackends' keys expire as the scripts set them, for tests
	// that read TTLs.
	Real  bool
	Store store.Store
	// Client is the Redis client under Store; nil for memory.
	Client redis.UniversalClient
	Cases  int // property cases per strategy
}

// Case counts per property and strategy: hundreds on every store.
// miniredis (Lua interpreted in Go, under -race) is the slowest.
const (
	memoryCases = 300
	miniCases   = 200
	realCases   = 200
	// clusterCases is fewer: three servers on a loaded machine, each case
	// a round trip per request through the cluster client.
	clusterCases = 100
	// Valkey runs the same Lua as Redis: its cases check that the server
	// runs it the same way, at half the count, to keep ./test.sh's time in
	// proportion.
	valkeyCases        = realCases / 2
	valkeyClusterCases = clusterCases / 2
)

// realServers are the real servers a Backend can run on, by name: how to
// get a client for each (see redistest) and its case count.
var realServers = map[string]struct {
	dial  func(testing.TB) redis.UniversalClient
	cases int
}{
	"redis":          {func(t testing.TB) redis.UniversalClient { return redistest.Real(t) }, realCases},
	"cluster":        {func(t testing.TB) redis.UniversalClient { return redistest.Cluster(t) }, clusterCases},
	"valkey":         {func(t testing.TB) redis.UniversalClient { return redistest.Valkey(t) }, valkeyCases},
	"valkey-cluster": {func(t testing.TB) redis.UniversalClient { return redistest.ValkeyCluster(t) }, valkeyClusterCases},
}

// Backends returns the stores to run on: "memory", "miniredis", "redis"
// and "valkey" (the real servers that ./test.sh starts), all four when none
// is named — the real ones only when the environment names them
// (redistest.HaveReal, HaveValkey) — and, only when named, "cluster" and
// "valkey-cluster" (the real 3-master clusters; see RealNames).
func Backends(t *testing.T, names ...string) []Backend {
	t.Helper()
	return backends(t, true, names)
}

// ExpiringBackends returns the stores Backends does, but on the real
// servers the keys expire in real time as the scripts set them (PEXPIRE,
// SET PX): for tests that read a key's TTL (PTTL), with timelines whose
// TTLs outlast the real time a case takes.
func ExpiringBackends(t *testing.T, names ...string) []Backend {
	t.Helper()
	return backends(t, false, names)
}

// backends is Backends with persist, ExpiringBackends without.
func backends(t *testing.T, persist bool, names []string) []Backend {
	t.Helper()
	if len(names) == 0 {
		names = []string{"memory", "miniredis"}
		if redistest.HaveReal(t) {
			names = append(names, "redis")
		}
		if redistest.HaveValkey(t) {
			names = append(names, "valkey")
		}
	}
	var bs []Backend
	for _, name := range names {
		switch name {
		case "memory":
			bs = append(bs, Backend{Name: name, Store: Memory(t), Cases: memoryCases})
		case "miniredis":
			_, c := redistest.Mini(t)
			bs = append(bs, Backend{Name: name, Store: stores.Redis(t, c), Client: c, Cases: miniCases})
		default:
			srv, ok := realServers[name]
			if !ok {
				t.Fatalf("unknown backend %q", name)
			}
			c := srv.dial(t)
			bs = append(bs, Backend{Name: name, Real: true, Store: stores.Redis(t, c), Client: c, Cases: srv.cases})
			if persist {
				redistest.PersistScriptKeys(c)
			}
		}
	}
	return bs
}

// RealNames are the names of the real servers the environment names, for
// Backends: "redis" and "cluster" when redistest.HaveReal, "valkey" and
// "valkey-cluster" when redistest.HaveValkey (under RequireEnv a missing one
// fails the test).
func RealNames(t *testing.T) []string {
	t.Helper()
	var names []string
	if redistest.HaveReal(t) {
		names = append(names, "redis", "cluster")
	}
	if redistest.HaveValkey(t) {
		names = append(names, "valkey", "valkey-cluster")
	}
	return names
}

// Memory returns a Memory store for the whole test. Its sweeper is kept
// from running: the properties' rigs run different virtual clocks on one
// store, and the sweeper judges every key of a shard by the latest decision
// time seen there, so it could drop a key that is not full on its own clock.
func Memory(t *testing.T) *store.Memory {
	m := store.NewMemory(store.WithSweepInterval(24 * time.Hour))
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// Grain is the time step of generated timelines around window edges: a
// microsecond, or on the real server a second (the fixed window's TTL is
// the time to the window's end, so an arrival a microsecond before an edge
// would write a key that expires in a millisecond of real time).
func (b Backend) Grain() time.Duration {
	if b.Real {
		return time.Second
	}
	return time.Microsecond
}

// maxJitter is the most sub-grain time added to a scenario's arrivals
// (Scenario.Jitter), in µs: on the real server up to 10ms, so that its Lua
// still sees microsecond times.
func (b Backend) maxJitter() int64 {
	if b.Real {
		return 10_000
	}
	return 0
}

// Window picks a window or period. Large limits get long windows on the
// real server, so that a token bucket's time per token stays >= 1.5s.
func (b Backend) Window(r *rand.Rand, large bool) time.Duration {
	if b.Real {
		if large {
			return time.Duration(1800+r.Intn(1801)) * time.Second
		}
		ws := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute}
		if i := r.Intn(len(ws) + 1); i < len(ws) {
			return ws[i]
		}
		return time.Duration(60+r.Intn(541)) * time.Second
	}
	ws := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, time.Minute, time.Hour}
	if i := r.Intn(len(ws) + 1); i < len(ws) {
		return ws[i]
	}
	return time.Duration(1000+r.Int63n(10_000_000)) * time.Microsecond
}
