package fleetlimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// holdStores is every store a concurrency limit is tested on: memory,
// miniredis, the real server and the Cluster when the environment names
// them.
func holdStores(t *testing.T) map[string]store.Store {
	all := stores.All(t)
	if redistest.HaveCluster(t) {
		all["cluster"] = stores.Redis(t, redistest.Cluster(t))
	}
	return all
}

// newHoldLimiter is a limiter of Concurrency(limit, ttl) over st on the
// virtual clock c, failing closed.
func newHoldLimiter(t *testing.T, st store.Store, c *fakeclock.Clock, limit int64, ttl time.Duration, opts ...fleetlimit.Option) *fleetlimit.Limiter {
	t.Helper()
	lim, err := fleetlimit.New(algorithm.Concurrency(limit, ttl), st, append([]fleetlimit.Option{
		fleetlimit.WithClock(c.Now), fleetlimit.WithKeyPrefix(redistest.Prefix()),
		fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestAcquireReleaseRenew steps a limit of 2 permits with a one-minute ttl
// through acquires, releases and renews on fixed instants, on every store.
func TestAcquireReleaseRenew(t *testing.T) {
	ctx := context.Background()
	for name, st := range holdStores(t) {
		t.Run(name, func(t *testing.T) {
			t0 := proptest.Epoch
			c := fakeclock.New(t0)
			lim := newHoldLimiter(t, st, c, 2, time.Minute)
			at := func(d time.Duration) { c.Set(t0.Add(d)) }
			acquire := func(step string, allowed bool, remaining int64, retry time.Duration) fleetlimit.Permit {
				t.Helper()
				p, res, err := lim.Acquire(ctx, "user")
				if err != nil || res.Allowed != allowed || res.Remaining != remaining || res.RetryAfter != retry {
					t.Fatalf("%s: Acquire = %+v, %v; want allowed %v, remaining %d, retry after %v", step, res, err, allowed, remaining, retry)
				}
				if (p == fleetlimit.Permit{}) == allowed {
					t.Fatalf("%s: Acquire's permit %+v with allowed %v", step, p, allowed)
				}
				return p
			}
			ok := func(step string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
			}
			a := acquire("a: the first of two slots", true, 1, 0)
			at(time.Second)
			b := acquire("b: the second slot", true, 0, 0)
			at(2 * time.Second)
			// Full: a, the earliest held, expires at +60s.
			acquire("c: full, waits for a's expiry", false, 0, 58*time.Second)
			at(3 * time.Second)
			ok("a.Release", a.Release(ctx))
			c2 := acquire("c2: a's slot, released", true, 0, 0)
			// A second release of a frees nothing: b and c2 hold both slots.
			ok("a.Release again", a.Release(ctx))
			acquire("d: a released twice frees nothing else", false, 0, 58*time.Second)
			at(30 * time.Second)
			ok("b.Renew", b.Renew(ctx)) // b now expires at +90s
			at(61 * time.Second)
			// b was renewed; c2 (taken at +3s) expires at +63s.
			acquire("d: b renewed, c2 still held", false, 0, 2*time.Second)
			at(63 * time.Second)
			e := acquire("e: c2 expired exactly a ttl after it was taken", true, 0, 0)
			if err := c2.Renew(ctx); !errors.Is(err, fleetlimit.ErrPermitExpired) {
				t.Fatalf("c2.Renew after its expiry = %v, want ErrPermitExpired", err)
			}
			ok("c2.Release after its expiry", c2.Release(ctx))
			acquire("f: c2's renew and release touched neither b nor e", false, 0, 27*time.Second)
			at(90*time.Second - time.Microsecond)
			acquire("f: b is held until a ttl after its renew", false, 0, time.Microsecond)
			at(90 * time.Second)
			f := acquire("f: b expired exactly a ttl after its renew", true, 0, 0)
			ok("e.Release", e.Release(ctx))
			ok("f.Release", f.Release(ctx))
			ok("the zero Permit's Release", fleetlimit.Permit{}.Release(ctx))
			acquire("g: all released", true, 1, 0)
		})
	}
}

// TestAcquireRefusals: what cannot hold permits says so, with a clear
// error, and a caller gone takes nothing.
func TestAcquireRefusals(t *testing.T) {
	ctx := context.Background()
	mem := stores.Memory(t)
	c := fakeclock.New(proptest.Epoch)
	cc := algorithm.Concurrency(2, time.Minute)
	for _, tc := range []struct {
		name string
		s    algorithm.Strategy
		opts []fleetlimit.Option
	}{
		{"denial cache", cc, []fleetlimit.Option{fleetlimit.WithDenialCache(10)}},
		{"leases", cc, []fleetlimit.Option{fleetlimit.WithLeases(4, time.Second)}},
		{"penalty box", cc, []fleetlimit.Option{fleetlimit.WithPenalty(3, time.Minute, time.Minute, time.Hour)}},
		{"composite in a penalty box", algorithm.All(algorithm.TokenBucket(10, time.Hour, 10), cc), []fleetlimit.Option{fleetlimit.WithPenalty(3, time.Minute, time.Minute, time.Hour)}},
		{"two concurrency limits in a composite", algorithm.All(cc, algorithm.Concurrency(3, time.Minute)), nil},
	} {
		if _, err := fleetlimit.New(tc.s, mem, tc.opts...); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", tc.name, err)
		}
	}
	tb, err := fleetlimit.New(algorithm.TokenBucket(10, time.Hour, 10), mem, fleetlimit.WithKeyPrefix(redistest.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	if p, res, err := tb.Acquire(ctx, "user"); !errors.Is(err, errors.ErrUnsupported) || res.Allowed || (p != fleetlimit.Permit{}) {
		t.Errorf("Acquire on a token bucket = %+v, %+v, %v; want a denial wrapping errors.ErrUnsupported", p, res, err)
	}
	lim := newHoldLimiter(t, mem, c, 1, time.Minute)
	if _, res, err := lim.Acquire(ctx, ""); !errors.Is(err, fleetlimit.ErrInvalidKey) || res.Allowed {
		t.Errorf("Acquire of an empty key = %+v, %v; want ErrInvalidKey", res, err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if p, res, err := lim.Acquire(gone, "user"); !errors.Is(err, context.Canceled) || res.Allowed || (p != fleetlimit.Permit{}) {
		t.Errorf("Acquire by a caller gone = %+v, %+v, %v; want a denial wrapping context.Canceled", p, res, err)
	}
	// Nothing was taken by the refused calls: the one slot is free.
	if _, res, err := lim.Acquire(ctx, "user"); err != nil || !res.Allowed {
		t.Errorf("Acquire after the refusals = %+v, %v; want the free slot", res, err)
	}
}

// countingHolder counts the permit operations that reach a Redis store.
type countingHolder struct {
	*store.Redis
	holds atomic.Int64
}

func (s *countingHolder) Hold(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	s.holds.Add(1)
	return s.Redis.Hold(ctx, req)
}

// TestAcquireDuringOutage: under FailLocal a permit taken while Redis is
// down is taken in the fallback store, at limit / instances, and given
// back there — never in Redis, even once Redis is back; a permit taken in
// Redis whose release cannot reach it is retried within the timeout and
// then reported (ErrStoreUnavailable), and is still held in Redis until
// its ttl frees it.
func TestAcquireDuringOutage(t *testing.T) {
	ctx := context.Background()
	mr, client := redistest.Mini(t)
	st := &countingHolder{Redis: stores.Redis(t, client)}
	c := fakeclock.New(proptest.Epoch)
	fb := stores.Memory(t, store.WithMemoryClock(c.Now))
	lim := newHoldLimiter(t, st, c, 4, time.Minute, fleetlimit.WithFailurePolicy(fleetlimit.FailLocal),
		fleetlimit.WithFallback(fb, 2), fleetlimit.WithTimeout(2*time.Second), fleetlimit.WithoutBreaker())

	inRedis, res, err := lim.Acquire(ctx, "user")
	if err != nil || !res.Allowed {
		t.Fatalf("Acquire with Redis up = %+v, %v", res, err)
	}
	// Every command fails fast, as a server still loading its data does.
	mr.SetError("LOADING Redis is loading the dataset in memory")
	calls := st.holds.Load()
	if err := inRedis.Release(ctx); !errors.Is(err, fleetlimit.ErrStoreUnavailable) {
		t.Fatalf("Release with Redis down = %v, want ErrStoreUnavailable", err)
	}
	if tries := st.holds.Load() - calls; tries < 2 {
		t.Errorf("Release with Redis down tried %d times, want retries within the timeout", tries)
	}
	// The fallback's semaphore: 4 / 2 instances = 2 slots in process.
	var local []fleetlimit.Permit
	for i := range 3 {
		p, res, err := lim.Acquire(ctx, "user")
		if !errors.Is(err, fleetlimit.ErrStoreUnavailable) || res.Allowed != (i < 2) || res.Limit != 2 {
			t.Fatalf("Acquire %d with Redis down = %+v, %v; want the fallback's 2 slots", i, res, err)
		}
		if res.Allowed {
			local = append(local, p)
		}
	}
	mr.SetError("")
	calls = st.holds.Load()
	for i, p := range local {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release of local permit %d = %v", i, err)
		}
		if err := p.Renew(ctx); !errors.Is(err, fleetlimit.ErrPermitExpired) {
			t.Fatalf("Renew of released local permit %d = %v, want ErrPermitExpired", i, err)
		}
	}
	if n := st.holds.Load() - calls; n != 0 {
		t.Errorf("releasing and renewing the fallback's permits sent %d operations to Redis, want 0", n)
	}
	// In Redis, the permit whose release was lost is still held.
	if _, res, err := lim.Acquire(ctx, "user"); err != nil || !res.Allowed || res.Remaining != 2 {
		t.Errorf("Acquire with Redis back = %+v, %v; want 2 left (the lost release still holds one)", res, err)
	}
	c.Set(proptest.Epoch.Add(time.Minute))
	if _, res, err := lim.Acquire(ctx, "user"); err != nil || !res.Allowed || res.Remaining != 3 {
		t.Errorf("Acquire a ttl later = %+v, %v; want 3 left (the lost release's permit and the last one expired)", res, err)
	}
}

// TestAcquireTiers: per-key concurrency limits (WithStrategyFor) hold per
// key, and a permit is released under its key's tier.
func TestAcquireTiers(t *testing.T) {
	ctx := context.Background()
	for name, st := range holdStores(t) {
		t.Run(name, func(t *testing.T) {
			pro := algorithm.Concurrency(3, time.Minute)
			lim := newHoldLimiter(t, st, fakeclock.New(proptest.Epoch), 1, time.Minute,
				fleetlimit.WithStrategyFor(func(_ context.Context, key string) (algorithm.Strategy, error) {
					if key == "pro" {
						return pro, nil
					}
					return nil, nil
				}))
			for _, tc := range []struct {
				key   string
				slots int
			}{{"pro", 3}, {"free", 1}} {
				var first fleetlimit.Permit
				for i := range tc.slots + 1 {
					p, res, err := lim.Acquire(ctx, tc.key)
					if err != nil || res.Allowed != (i < tc.slots) || res.Limit != int64(tc.slots) {
						t.Fatalf("%s: acquire %d = %+v, %v; want %d slots", tc.key, i, res, err, tc.slots)
					}
					if i == 0 {
						first = p
					}
				}
				if err := first.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if _, res, err := lim.Acquire(ctx, tc.key); err != nil || !res.Allowed {
					t.Fatalf("%s: acquire after a release = %+v, %v", tc.key, res, err)
				}
			}
		})
	}
}
