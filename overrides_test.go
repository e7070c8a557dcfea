package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// overrideStores are the stores the override tests run on: memory,
// miniredis and, under ./test.sh, the real redis-server and the Cluster.
func overrideStores(t *testing.T) map[string]store.Store {
	all := stores.All(t)
	if redistest.HaveReal(t) {
		all["cluster"] = stores.Redis(t, redistest.Cluster(t))
	}
	return all
}

var t0 = time.Unix(1_800_000_000, 0)

// overrideLimiter is a limiter of s with overrides refreshed every
// second, on clock, over st, under a fresh name.
func overrideLimiter(t *testing.T, s algorithm.Strategy, st store.Store, clock *fakeclock.Clock, name string, opts ...fleetlimit.Option) *fleetlimit.Limiter {
	t.Helper()
	l, err := fleetlimit.New(s, st, append([]fleetlimit.Option{fleetlimit.WithName(name), fleetlimit.WithClock(clock.Now),
		fleetlimit.WithOverrides(time.Second), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testName() string {
	return "ov" + strings.TrimSuffix(strings.TrimPrefix(redistest.Prefix(), "test:"), ":")
}

// lastEvent is the latest event o was told about.
func lastEvent(o *spy.Observer) fleetlimit.Event {
	ev := o.Take()
	return ev[len(ev)-1]
}

// TestOverrideRule: an override decides the key by its rule, for its ttl
// (the state carrying over), then the limiter's own rule decides again;
// overrides that cannot apply are refused at SetOverride and write
// nothing.
func TestOverrideRule(t *testing.T) {
	ctx := context.Background()
	for name, st := range overrideStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			l := overrideLimiter(t, algorithm.SlidingWindowLog(2, time.Hour), st, clock, testName())
			allow := func(want bool, limit int64) {
				t.Helper()
				res, err := l.Allow(ctx, "k")
				if err != nil || res.Allowed != want || res.Limit != limit {
					t.Fatalf("at +%v: %+v, %v; want allowed %v with limit %d", clock.Now().Sub(t0), res, err, want, limit)
				}
			}
			allow(true, 2) // 1 of 2 spent
			if err := l.SetOverride(ctx, "k", algorithm.SlidingWindowLog(5, time.Hour), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			// The override carries the spent unit over: 4 more of 5.
			for range 4 {
				allow(true, 5)
			}
			allow(false, 5)
			// Past its ttl the limiter's own rule: 5 spent of 2.
			clock.Advance(10 * time.Second)
			allow(false, 2)
			// ClearOverride ends it before its ttl.
			if err := l.SetOverride(ctx, "k", algorithm.SlidingWindowLog(6, time.Hour), time.Hour); err != nil {
				t.Fatal(err)
			}
			allow(true, 6)
			if err := l.ClearOverride(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			allow(false, 2)

			for _, c := range []struct {
				key string
				s   algorithm.Strategy
				ttl time.Duration
				is  error
			}{
				{"x", algorithm.FixedWindow(5, time.Hour), time.Hour, fleetlimit.ErrInvalidConfig},
				{"x", algorithm.SlidingWindowLog(5, time.Minute), time.Hour, fleetlimit.ErrInvalidConfig},
				{"x", algorithm.SlidingWindowLog(0, time.Hour), time.Hour, algorithm.ErrInvalidStrategy},
				{"x", nil, time.Hour, fleetlimit.ErrInvalidConfig},
				{"x", custom{algorithm.SlidingWindowLog(5, time.Hour)}, time.Hour, algorithm.ErrNoTextForm},
				{"x", algorithm.SlidingWindowLog(5, time.Hour), 0, fleetlimit.ErrInvalidConfig},
				{"x", algorithm.SlidingWindowLog(5, time.Hour), 11 * 365 * 24 * time.Hour, fleetlimit.ErrInvalidConfig},
				{"", algorithm.SlidingWindowLog(5, time.Hour), time.Hour, fleetlimit.ErrInvalidKey},
			} {
				if err := l.SetOverride(ctx, c.key, c.s, c.ttl); !errors.Is(err, c.is) {
					t.Errorf("SetOverride(%q, %v, %v): %v, want %v", c.key, c.s, c.ttl, err, c.is)
				}
			}
			if err := l.Block(ctx, "x", 0); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
				t.Errorf("Block for 0: %v", err)
			}
			if os, err := l.Overrides(ctx); err != nil || len(os) != 0 {
				t.Fatalf("refused overrides were written: %+v, %v", os, err)
			}
		})
	}
}

// TestUnlimitedIsNoRule: New refuses algorithm.Unlimited as a limiter's
// own rule, and WithOverrides a store that keeps no override tables.
func TestUnlimitedIsNoRule(t *testing.T) {
	if _, err := fleetlimit.New(algorithm.Unlimited(), stores.Memory(t)); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
		t.Fatalf("New(Unlimited): %v, want ErrInvalidConfig", err)
	}
	plain := struct{ store.Store }{stores.Memory(t)}
	if _, err := fleetlimit.New(algorithm.FixedWindow(1, time.Second), plain, fleetlimit.WithOverrides(0)); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
		t.Fatalf("WithOverrides over a store without tables: %v, want ErrInvalidConfig", err)
	}
	if _, err := fleetlimit.New(algorithm.FixedWindow(1, time.Second), stores.Memory(t), fleetlimit.WithOverrides(time.Millisecond)); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
		t.Fatalf("WithOverrides(1ms): %v, want ErrInvalidConfig", err)
	}
	l, _ := fleetlimit.New(algorithm.FixedWindow(1, time.Second), stores.Memory(t), fleetlimit.WithName(testName()))
	if err := l.Block(context.Background(), "k", time.Second); !errors.Is(err, fleetlimit.ErrNoOverrides) {
		t.Fatalf("Block without WithOverrides: %v, want ErrNoOverrides", err)
	}
}

// custom is a strategy of the sliding log's shape that has no text form.
type custom struct{ algorithm.Strategy }

// TestOverrideExempt: an exempt key is admitted in process
// (DecidedByOverride) and its counters are left untouched: after the
// exemption, the key's state is exactly as before it.
func TestOverrideExempt(t *testing.T) {
	ctx := context.Background()
	for name, st := range overrideStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			rec := &spy.Observer{}
			l := overrideLimiter(t, algorithm.TokenBucket(3, time.Hour, 3), st, clock, testName(), fleetlimit.WithObserver(rec))
			if res, err := l.AllowN(ctx, "k", 2); err != nil || !res.Allowed {
				t.Fatal(res, err)
			}
			before, err := l.Peek(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.SetOverride(ctx, "k", algorithm.Unlimited(), time.Minute); err != nil {
				t.Fatal(err)
			}
			for range 100 {
				res, err := l.AllowN(ctx, "k", 3)
				if err != nil || !res.Allowed || res.Limit != 3 || res.Remaining != 3 {
					t.Fatalf("exempt: %+v, %v", res, err)
				}
			}
			if e := lastEvent(rec); e.DecidedBy != fleetlimit.DecidedByOverride || !e.Allowed || e.Err != nil {
				t.Fatalf("the observer saw %+v, want an admission DecidedByOverride", e)
			}
			if err := l.ClearOverride(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			after, err := l.Peek(ctx, "k", 1)
			if err != nil || after != before {
				t.Fatalf("after the exemption Peek = %+v, %v; before it %+v", after, err, before)
			}
			if res, _ := l.AllowN(ctx, "k", 2); res.Allowed {
				t.Fatalf("1 token left, a cost of 2 admitted: %+v", res)
			}
		})
	}
}

// TestBlock: a blocked key admits nothing until the block ends, with
// RetryAfter the time left, recording nothing; then it decides as before
// the block. Unblock ends a block early, and leaves a rule override alone.
func TestBlock(t *testing.T) {
	ctx := context.Background()
	for name, st := range overrideStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			rec := &spy.Observer{}
			l := overrideLimiter(t, algorithm.FixedWindow(5, 24*time.Hour), st, clock, testName(), fleetlimit.WithObserver(rec))
			clock.Set(t0.Truncate(24 * time.Hour).Add(time.Hour))
			for range 2 {
				if res, err := l.Allow(ctx, "k"); err != nil || !res.Allowed {
					t.Fatal(res, err)
				}
			}
			before, _ := l.Peek(ctx, "k", 1)
			if err := l.Block(ctx, "k", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			for i := range 30 {
				res, err := l.Allow(ctx, "k")
				if left := 30*time.Second - time.Duration(i)*time.Second; err != nil || res.Allowed || res.RetryAfter != left || res.Remaining != 0 {
					t.Fatalf("blocked at +%ds: %+v, %v; want denied, RetryAfter %v", i, res, err, left)
				}
				if e := lastEvent(rec); e.DecidedBy != fleetlimit.DecidedByOverride || e.Allowed {
					t.Fatalf("the observer saw %+v", e)
				}
				clock.Advance(time.Second)
			}
			// The block has ended: as before it, 3 of 5 left (Peek says 2
			// after a request of 1).
			after, _ := l.Peek(ctx, "k", 1)
			if after.Remaining != before.Remaining || after.Remaining != 2 {
				t.Fatalf("after the block %+v, before it %+v", after, before)
			}
			// Unblock ends a block at once; a rule override stays.
			if err := l.Block(ctx, "k", time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := l.Unblock(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if res, _ := l.Allow(ctx, "k"); !res.Allowed {
				t.Fatalf("unblocked: %+v", res)
			}
			if err := l.SetOverride(ctx, "k", algorithm.FixedWindow(50, 24*time.Hour), time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := l.Unblock(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if res, _ := l.Allow(ctx, "k"); res.Limit != 50 {
				t.Fatalf("Unblock removed a rule override: %+v", res)
			}
			os, err := l.Overrides(ctx)
			if err != nil || len(os) != 1 || os[0].Key != "k" || os[0].Text != "fixed_window 50/24h" || os[0].Blocked || os[0].TTL != time.Hour {
				t.Fatalf("Overrides: %+v, %v", os, err)
			}
		})
	}
}

// TestOverrideReachesEveryInstance: with refresh R, a write on one
// instance applies on another to every decision that starts 2R after it
// returned, and an expiry at once; the writer applies it from its next
// decision.
func TestOverrideReachesEveryInstance(t *testing.T) {
	ctx := context.Background()
	const refresh = time.Second
	for name, st := range overrideStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			n := testName()
			a := overrideLimiter(t, algorithm.SlidingWindowLog(1, time.Hour), st, clock, n)
			b := overrideLimiter(t, algorithm.SlidingWindowLog(1, time.Hour), st, clock, n)
			limitOn := func(l *fleetlimit.Limiter, key string) int64 {
				t.Helper()
				res, err := l.Peek(ctx, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				return res.Limit
			}
			if got := limitOn(b, "k"); got != 1 { // b reads the (empty) table
				t.Fatalf("limit %d before any override", got)
			}
			if err := a.SetOverride(ctx, "k", algorithm.SlidingWindowLog(7, time.Hour), time.Minute); err != nil {
				t.Fatal(err)
			}
			if got := limitOn(a, "k"); got != 7 {
				t.Fatalf("the writer's next decision has limit %d, want 7", got)
			}
			clock.Advance(2*refresh + time.Microsecond)
			if got := limitOn(b, "k"); got != 7 {
				t.Fatalf("2R after the write, the other instance's limit is %d, want 7", got)
			}
			if err := a.ClearOverride(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2*refresh + time.Microsecond)
			if got := limitOn(b, "k"); got != 1 {
				t.Fatalf("2R after the clear, the other instance's limit is %d, want 1", got)
			}
			// An expiry applies at once on every instance.
			if err := a.Block(ctx, "k", 3*refresh); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2*refresh + time.Microsecond)
			if res, _ := b.Peek(ctx, "k", 1); res.Allowed {
				t.Fatalf("2R after the block the other instance admits: %+v", res)
			}
			clock.Advance(refresh)
			if res, _ := b.Peek(ctx, "k", 1); !res.Allowed {
				t.Fatalf("the block has expired, the other instance denies: %+v", res)
			}
		})
	}
}

// TestPropertyOverrideSwitchBound: for every registered algorithm, on
// every store, a key switched at random between the limiter's rule (the
// largest), overrides of smaller limits, and back (ClearOverride) before
// each decision admits in any interval no more than the largest rule
// admits alone, as TestPropertyTierSwitchBound proves for tiers.
func TestPropertyOverrideSwitchBound(t *testing.T) {
	// Every event writes an override (a script reading the whole table):
	// miniredis's Lua is slow at it, so it runs only without the real
	// servers.
	names := []string{"memory", "miniredis"}
	if redistest.HaveReal(t) {
		names = []string{"memory", "redis", "cluster"}
	}
	proptest.CheckEntries(t, proptest.Backends(t, names...), func(b proptest.Backend, s proptest.Scenario) (string, error) {
		largest := s.Strat.S
		limit, w := largest.Limit(), largest.Window()
		seed := fnv.New64a()
		fmt.Fprint(seed, s.String())
		r := rand.New(rand.NewSource(int64(seed.Sum64())))
		e := proptest.RegistryEntry(t, s.Strat.Name)
		rules := []algorithm.Strategy{nil} // nil: ClearOverride
		for range 1 + r.Intn(2) {
			rules = append(rules, e.New(1+r.Int63n(limit), w))
		}
		clock := &fakeclock.Clock{}
		l, err := fleetlimit.New(largest, b.Store, fleetlimit.WithClock(clock.Now),
			fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithFailurePolicy(fleetlimit.FailClosed), fleetlimit.WithOverrides(time.Second))
		if err != nil {
			return "", err
		}
		var outs []proptest.Outcome
		for _, ev := range s.Events() {
			clock.Set(ev.At)
			want := largest
			if o := rules[r.Intn(len(rules))]; o == nil {
				err = l.ClearOverride(bg, ev.Key)
			} else {
				want, err = o, l.SetOverride(bg, ev.Key, o, time.Hour)
			}
			if err != nil {
				return "", err
			}
			res, err := l.AllowN(bg, ev.Key, ev.N)
			if err != nil {
				return "", err
			}
			if res.Limit != want.Limit() {
				return fmt.Sprintf("at +%v the key's override has limit %d, the Result says %d", ev.At.Sub(s.Base), want.Limit(), res.Limit), nil
			}
			outs = append(outs, proptest.Outcome{Event: ev, Res: res})
		}
		return tierBound(s.Strat, outs), nil
	})
}

// TestOverrideRefreshFailureKeepsCopy: while the store is down, an
// instance decides by its last good copy (an exempt key stays exempt,
// without the store) and says so once in the log.
func TestOverrideRefreshFailureKeepsCopy(t *testing.T) {
	srv := redistest.StartServer(t)
	st := stores.Redis(t, srv.Client())
	logs := &spy.Log{}
	old := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(old) })

	ctx := context.Background()
	clock := fakeclock.New(t0)
	n := testName()
	short := fleetlimit.WithTimeout(50 * time.Millisecond) // a dead server's dials end sooner
	a := overrideLimiter(t, algorithm.SlidingWindowLog(1, time.Hour), st, clock, n, short)
	b := overrideLimiter(t, algorithm.SlidingWindowLog(1, time.Hour), st, clock, n, short)
	if err := a.SetOverride(ctx, "vip", algorithm.Unlimited(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Allow(ctx, "vip"); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	srv.Kill()
	for range 5 {
		clock.Advance(3 * time.Second) // each decision finds the copy stale and reads, in vain
		for range 3 {
			res, err := b.Allow(ctx, "vip")
			if err != nil || !res.Allowed {
				t.Fatalf("with the store down, the exempt key: %+v, %v", res, err)
			}
		}
		// Another key needs the store, which is down: FailClosed.
		if res, _ := b.Allow(ctx, "other"); res.Allowed {
			t.Fatalf("the store is down and FailClosed admitted: %+v", res)
		}
	}
	// Only this limiter's records: a limiter of another test, still
	// refreshing in the background, logs to the same default logger.
	var got int
	for _, r := range logs.Take() {
		if strings.Contains(r.Message, "reading the override table failed") && spy.Attrs(r)["limiter"].String() == n {
			got++
		}
	}
	if got != 1 {
		t.Fatalf("the failure was logged %d times by %s, want once", got, n)
	}
}

// TestOverridesConcurrent: decisions on two instances race their
// background reads and one instance's writes (run it with -race); every
// decision is the limiter's rule, the override's, an exemption or a block,
// and none fails.
func TestOverridesConcurrent(t *testing.T) {
	ctx := context.Background()
	st := stores.Memory(t)
	n := testName()
	var ls []*fleetlimit.Limiter
	for range 2 {
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Hour), st, fleetlimit.WithName(n), fleetlimit.WithOverrides(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	done := make(chan struct{})
	errs := make(chan error, 8)
	go func() {
		defer close(done)
		for i := range 3000 {
			key := fmt.Sprintf("k%d", i%3)
			var err error
			switch i % 4 {
			case 0:
				err = ls[0].SetOverride(ctx, key, algorithm.SlidingWindowLog(50, time.Hour), time.Hour)
			case 1:
				err = ls[0].SetOverride(ctx, key, algorithm.Unlimited(), time.Hour)
			case 2:
				err = ls[0].Block(ctx, key, time.Hour)
			default:
				err = ls[0].ClearOverride(ctx, key)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[g%2]
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				res, err := l.Allow(ctx, fmt.Sprintf("k%d", i%3))
				if err != nil || (res.Limit != 5 && res.Limit != 50) || (!res.Allowed && res.RetryAfter <= 0) {
					errs <- fmt.Errorf("decision %+v, %v", res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
