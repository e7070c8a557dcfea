package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// registryBackends are memory, miniredis and, under ./test.sh, the real
// redis-server, valkey-server and both Clusters, their keys expiring in
// real time (TestRegistry reads the hash's PTTL).
func registryBackends(t *testing.T) []proptest.Backend {
	return proptest.ExpiringBackends(t, append([]string{"memory", "miniredis"}, proptest.RealNames(t)...)...)
}

// TestRegistry: on every store, on fixed instants, an instance's entry
// lives for its TTL from its last write and not a microsecond more, a
// write refreshes it, Deregister removes it, the listing finds every name
// (on every master of a Cluster), and a name's Redis hash expires with its
// last instance.
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	for _, b := range registryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			g := b.Store.(store.Registrar)
			base := "reg" + redistest.Prefix()
			a, other := base+"a", base+"b"
			t0 := time.Unix(1_800_000_000, 0)
			reg := func(name, inst, val string, ttl, at time.Duration) []store.RegistryEntry {
				t.Helper()
				es, err := g.Register(ctx, store.RegistryWrite{Name: name, Instance: inst, Value: val, TTL: ttl, Now: t0.Add(at)})
				if err != nil {
					t.Fatal(err)
				}
				return es
			}
			// live is the listing's entries of a and other at t0+at, as
			// "name/instance=value ttl age".
			live := func(at time.Duration) []string {
				t.Helper()
				es, truncated, err := g.Registry(ctx, t0.Add(at))
				if err != nil || truncated {
					t.Fatalf("listing: %v, truncated %v", err, truncated)
				}
				var out []string
				for _, e := range es {
					if e.Name == a || e.Name == other {
						out = append(out, fmt.Sprintf("%s/%s=%s %v %v", e.Name[len(base):], e.Instance, e.Value, e.TTL, e.Age))
					}
				}
				return out
			}
			same := func(what string, got []string, want ...string) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: %q, want %q", what, got, want)
				}
			}
			if es := reg(a, "i1", "v1", 10*time.Second, 0); len(es) != 1 || es[0].Instance != "i1" || es[0].Value != "v1" || es[0].TTL != 10*time.Second {
				t.Fatalf("first write: %+v", es)
			}
			// The second instance sees the first, 1s older.
			es := reg(a, "i2", "v2", 2*time.Second, time.Second)
			if len(es) != 2 || es[0].Instance != "i1" || es[0].Age != time.Second || es[0].TTL != 9*time.Second || es[1].Instance != "i2" || es[1].Value != "v2" {
				t.Fatalf("second write: %+v", es)
			}
			reg(other, "i1", "w", time.Minute, 0)
			// i2 lives until t0+3s exactly.
			same("at +2.999999s", live(3*time.Second-time.Microsecond), "a/i1=v1 7.000001s 2.999999s", "a/i2=v2 1µs 1.999999s", "b/i1=w 57.000001s 2.999999s")
			same("at +3s", live(3*time.Second), "a/i1=v1 7s 3s", "b/i1=w 57s 3s")
			// A write refreshes: i2 again from +2.5s, to +4.5s.
			reg(a, "i2", "v2", 2*time.Second, 2500*time.Millisecond)
			same("refreshed, at +4s", live(4*time.Second), "a/i1=v1 6s 4s", "a/i2=v2 500ms 1.5s", "b/i1=w 56s 4s")
			if err := g.Deregister(ctx, a, "i1"); err != nil {
				t.Fatal(err)
			}
			if err := g.Deregister(ctx, a, "never"); err != nil {
				t.Fatal(err)
			}
			same("i1 gone, at +4s", live(4*time.Second), "a/i2=v2 500ms 1.5s", "b/i1=w 56s 4s")
			same("at +4.5s", live(4500*time.Millisecond), "b/i1=w 55.5s 4.5s")
			if b.Client != nil {
				// The hash expires with the latest deadline its last write
				// saw (i1's, +10s, from +2.5s): a name whose instances all
				// stopped does not stay in Redis.
				pttl, err := b.Client.PTTL(ctx, store.RegistryKeyPrefix+a).Result()
				if err != nil || pttl <= 0 || pttl > 7500*time.Millisecond {
					t.Fatalf("registry hash of a: PTTL %v, %v; want an expiry within 7.5s", pttl, err)
				}
			}
			// Bad input: refused, nothing written.
			for _, w := range []store.RegistryWrite{
				{Name: "", Instance: "i", TTL: time.Second},
				{Name: a, Instance: "", TTL: time.Second},
				{Name: a, Instance: "bad", TTL: 0},
			} {
				if _, err := g.Register(ctx, w); !errors.Is(err, store.ErrRejected) {
					t.Fatalf("Register(%+v) = %v, want ErrRejected", w, err)
				}
			}
			same("after bad input, at +4.5s", live(4500*time.Millisecond), "b/i1=w 55.5s 4.5s")
		})
	}
}

// TestRegistryListsEveryName: 40 names (on a Cluster, spread over every
// master) are all listed.
func TestRegistryListsEveryName(t *testing.T) {
	ctx := context.Background()
	for _, b := range registryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			base := "reg" + redistest.Prefix()
			want := map[string]bool{}
			for i := range 40 {
				name := fmt.Sprintf("%s%d", base, i)
				want[name] = true
				if _, err := b.Store.(store.Registrar).Register(ctx, store.RegistryWrite{Name: name, Instance: "i", Value: "v", TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			if c, ok := b.Client.(*redis.ClusterClient); ok {
				nodes := map[string]bool{}
				for name := range want {
					n, err := c.MasterForKey(ctx, store.RegistryKeyPrefix+name)
					if err != nil {
						t.Fatal(err)
					}
					nodes[n.Options().Addr] = true
				}
				if len(nodes) < 2 {
					t.Fatalf("40 names on %d masters: the test proves nothing", len(nodes))
				}
			}
			es, truncated, err := b.Store.(store.Registrar).Registry(ctx, time.Time{})
			if err != nil || truncated {
				t.Fatalf("listing: %v, truncated %v", err, truncated)
			}
			for _, e := range es {
				delete(want, e.Name)
			}
			if len(want) != 0 {
				t.Fatalf("the listing misses %d of 40 names", len(want))
			}
		})
	}
}
