package fleetlimit_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// conflicts is a ConflictObserver that keeps every report.
type conflicts struct {
	mu  sync.Mutex
	got []fleetlimit.Conflict
}

func (*conflicts) Observe(fleetlimit.Event) {}

func (c *conflicts) ObserveConflict(x fleetlimit.Conflict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, x)
}

func (c *conflicts) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// registryBackends are the stores the registry runs on: memory (one
// process), miniredis and, under ./test.sh, the real redis-server,
// valkey-server and both Clusters, their keys expiring in real time as
// the registry's scripts set them (the registry runs on real time).
func registryBackends(t *testing.T) []proptest.Backend {
	return proptest.ExpiringBackends(t, append([]string{"memory", "miniredis"}, proptest.RealNames(t)...)...)
}

// process is the store another process of the fleet would use over b:
// another store value over the same server (so New's in-process claims do
// not see it), or nil for memory, which is one process's.
func process(t *testing.T, b proptest.Backend) store.Store {
	if b.Client == nil {
		return nil
	}
	return stores.Redis(t, b.Client)
}

// registered is the listing's registrations of name.
func registered(t *testing.T, st store.Store, name string) []fleetlimit.Registration {
	t.Helper()
	all, err := fleetlimit.Registered(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(r fleetlimit.Registration) bool { return r.Name != name })
}

func ids(r fleetlimit.Registration) []string {
	var out []string
	for _, i := range r.Instances {
		out = append(out, i.ID)
	}
	return out
}

// newRegistered is a limiter of s over st under name, in the registry
// with a one-minute ttl (so that no refresh runs but those the test
// makes), reporting to o.
func newRegistered(t *testing.T, s algorithm.Strategy, st store.Store, name string, o *conflicts, opts ...fleetlimit.Option) (*fleetlimit.Limiter, error) {
	t.Helper()
	l, err := fleetlimit.New(s, st, append([]fleetlimit.Option{fleetlimit.WithName(name), fleetlimit.WithRegistry(time.Minute),
		fleetlimit.WithObserver(o), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
	if err == nil {
		t.Cleanup(func() { _ = l.Close() })
	}
	return l, err
}

// TestRegistryConflicts, on every store: two instances of one name under
// one rule are one Registration with two instances and no report; an
// instance under another rule is reported once by each side (at its New,
// or at the first refresh that sees it), never again however often they
// refresh; strict mode makes it New's error and leaves no entry.
func TestRegistryConflicts(t *testing.T) {
	old, next := algorithm.SlidingWindowLog(100, time.Minute), algorithm.SlidingWindowLog(200, time.Minute)
	for _, b := range registryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			name := testName()
			var oa, ob, oc conflicts
			a, err := newRegistered(t, old, b.Store, name, &oa)
			if err != nil {
				t.Fatal(err)
			}
			other := process(t, b)
			if other == nil {
				// One process over one memory store: New's claims refuse
				// another rule before the registry is asked.
				if _, err := newRegistered(t, next, b.Store, name, &ob); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
					t.Fatalf("a second rule in one process: %v, want ErrInvalidConfig", err)
				}
				other = b.Store
			}
			same, err := newRegistered(t, old, other, name, &oc)
			if err != nil {
				t.Fatal(err)
			}
			regs := registered(t, b.Store, name)
			if len(regs) != 1 || regs[0].Rule != "sliding_window_log 100/1m" || len(regs[0].Instances) != 2 || regs[0].Prefix != a.KeyPrefix() ||
				!slices.Contains(ids(regs[0]), fleetlimit.RegistryInstance(a)) || !slices.Contains(ids(regs[0]), fleetlimit.RegistryInstance(same)) {
				t.Fatalf("two instances of one rule: %+v", regs)
			}
			fleetlimit.RefreshRegistry(a)
			if n := oa.count() + oc.count(); n != 0 {
				t.Fatalf("one rule: %d conflicts reported", n)
			}
			if b.Client == nil {
				return // memory cannot hold two rules under one name (above)
			}
			// The strict instance of the new rule fails and leaves nothing.
			if _, err := newRegistered(t, next, process(t, b), name, &ob, fleetlimit.WithStrictRegistry()); !errors.Is(err, fleetlimit.ErrRuleConflict) || !errors.Is(err, fleetlimit.ErrInvalidConfig) {
				t.Fatalf("strict, another rule: %v, want ErrRuleConflict", err)
			}
			if regs := registered(t, b.Store, name); len(regs) != 1 || ob.count() != 1 {
				t.Fatalf("after the strict refusal: %+v, %d reports; want the old rule alone, one report", regs, ob.count())
			}
			// A lax instance of the new rule reports at New, once.
			nb, err := newRegistered(t, next, process(t, b), name, &ob)
			if err != nil {
				t.Fatal(err)
			}
			if n := ob.count(); n != 2 {
				t.Fatalf("lax, another rule: %d reports in all, want 2 (the strict one's and this one's)", n)
			}
			c := ob.got[1]
			if c.Name != name || c.Rule != "sliding_window_log 200/1m" || c.Other != "sliding_window_log 100/1m" || c.Instance != fleetlimit.RegistryInstance(nb) ||
				!slices.Equal(c.Instances, slices.Sorted(slices.Values([]string{fleetlimit.RegistryInstance(a), fleetlimit.RegistryInstance(same)}))) {
				t.Fatalf("the report: %+v", c)
			}
			for range 3 {
				fleetlimit.RefreshRegistry(nb)
				fleetlimit.RefreshRegistry(a)
			}
			if ob.count() != 2 || oa.count() != 1 || oa.got[0].Other != "sliding_window_log 200/1m" {
				t.Fatalf("after 3 refreshes: new side %d reports, old side %+v; want each side's once", ob.count(), oa.got)
			}
			// The listing shows both rules under the name.
			if regs := registered(t, b.Store, name); len(regs) != 2 || regs[0].Rule != "sliding_window_log 100/1m" || len(regs[0].Instances) != 2 ||
				regs[1].Rule != "sliding_window_log 200/1m" || len(regs[1].Instances) != 1 {
				t.Fatalf("two rules: %+v", regs)
			}
			// Another prefix is another limit, not a conflict.
			var od conflicts
			if _, err := newRegistered(t, next, process(t, b), name, &od, fleetlimit.WithKeyPrefix(redistest.Prefix())); err != nil || od.count() != 0 {
				t.Fatalf("another prefix: %v, %d reports", err, od.count())
			}
		})
	}
}

// TestRegistryExpiresAndRefreshes, on every store: an instance that stops
// writing (a crashed process's entry, ttl 200ms) leaves the listing, a
// live limiter with a short ttl stays in it by its refreshes, and Close
// removes the limiter's entry at once and ends its goroutine.
func TestRegistryExpiresAndRefreshes(t *testing.T) {
	ctx := context.Background()
	for _, b := range registryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			name := testName()
			l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 20), b.Store, fleetlimit.WithName(name), fleetlimit.WithRegistry(600*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			crashed := store.RegistryWrite{Name: name, Instance: "crashed", Value: "token_bucket 10/1s burst 20\n" + l.KeyPrefix(), TTL: 200 * time.Millisecond}
			if _, err := b.Store.(store.Registrar).Register(ctx, crashed); err != nil {
				t.Fatal(err)
			}
			if regs := registered(t, b.Store, name); len(regs) != 1 || len(regs[0].Instances) != 2 {
				t.Fatalf("before the expiry: %+v", regs)
			}
			// Wait (up to 30s: no claim of speed) until the crashed entry
			// has gone and the limiter's has been written again since New.
			var regs []fleetlimit.Registration
			for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
				regs = registered(t, b.Store, name)
				if len(regs) == 1 && len(regs[0].Instances) == 1 && regs[0].Instances[0].Age < time.Since(start) {
					break
				}
				if time.Since(start) > 30*time.Second {
					t.Fatalf("after 30s: %+v; want the crashed instance gone and the live one refreshed", regs)
				}
			}
			if regs[0].Instances[0].ID != fleetlimit.RegistryInstance(l) || regs[0].Rule != "token_bucket 10/1s burst 20" {
				t.Fatalf("the live instance: %+v", regs)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-fleetlimit.RegistryDone(l):
			case <-time.After(30 * time.Second):
				t.Fatal("the refresh goroutine runs on after Close")
			}
			if regs := registered(t, b.Store, name); len(regs) != 0 {
				t.Fatalf("after Close: %+v", regs)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed {
				t.Fatalf("a decision after Close: %+v, %v", res, err)
			}
		})
	}
}

// TestRegistryDroppedLimiterStops: a limiter dropped without Close is
// collected, and its cleanup ends the refresh goroutine.
func TestRegistryDroppedLimiterStops(t *testing.T) {
	st := stores.Memory(t)
	done := func() <-chan struct{} {
		l, err := fleetlimit.New(algorithm.FixedWindow(5, time.Second), st, fleetlimit.WithName(testName()), fleetlimit.WithRegistry(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return fleetlimit.RegistryDone(l)
	}()
	for i := 0; ; i++ {
		runtime.GC()
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if i == 3000 {
			t.Fatal("the refresh goroutine of a dropped limiter still runs")
		}
	}
}

// TestRegistryStoreDown: over a store that refuses connections or hangs,
// New (strict too) returns the limiter after at most its timeout — the
// registry never fails a limiter on an outage — and Close ends the
// refresh.
func TestRegistryStoreDown(t *testing.T) {
	// No socket timeouts: only the limiter's timeout ends a call.
	hung := redis.NewClient(&redis.Options{Addr: redistest.HungAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = hung.Close() })
	for name, st := range map[string]store.Store{"refused": stores.Down(t), "hung": stores.Redis(t, hung)} {
		t.Run(name, func(t *testing.T) {
			built := make(chan error, 1)
			var l *fleetlimit.Limiter
			go func() {
				var err error
				l, err = fleetlimit.New(algorithm.FixedWindow(5, time.Second), st, fleetlimit.WithName(testName()),
					fleetlimit.WithStrictRegistry(), fleetlimit.WithTimeout(50*time.Millisecond))
				built <- err
			}()
			select {
			case err := <-built:
				if err != nil {
					t.Fatalf("New over a store %s: %v", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("New hangs on a store that does not answer")
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			<-fleetlimit.RegistryDone(l)
		})
	}
}

// TestRegistryOptions: bad ttls and stores without a registry are New's
// errors; Registered over a store without one is errors.ErrUnsupported.
func TestRegistryOptions(t *testing.T) {
	st := stores.Memory(t)
	for _, ttl := range []time.Duration{-time.Second, time.Millisecond, 2 * time.Hour} {
		if _, err := fleetlimit.New(algorithm.FixedWindow(5, time.Second), st, fleetlimit.WithRegistry(ttl)); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
			t.Fatalf("ttl %v: %v, want ErrInvalidConfig", ttl, err)
		}
	}
	plain := &spy.Store{Store: st} // a Store, and no Registrar
	if _, err := fleetlimit.New(algorithm.FixedWindow(5, time.Second), plain, fleetlimit.WithRegistry(0)); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
		t.Fatalf("WithRegistry over a store without a registry: %v, want ErrInvalidConfig", err)
	}
	for _, s := range []store.Store{nil, plain} {
		if _, err := fleetlimit.Registered(context.Background(), s); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Registered(%T): %v, want errors.ErrUnsupported", s, err)
		}
	}
}
