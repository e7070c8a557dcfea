package fleetlimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// newReserveLimiter is a limiter of s over st on the virtual clock c,
// failing closed, with opts last.
func newReserveLimiter(t *testing.T, s algorithm.Strategy, st store.Store, c *fakeclock.Clock, opts ...fleetlimit.Option) *fleetlimit.Limiter {
	t.Helper()
	lim, err := fleetlimit.New(s, st, append([]fleetlimit.Option{
		fleetlimit.WithClock(c.Now), fleetlimit.WithKeyPrefix(redistest.Prefix()),
		fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestReserveSettleCancel steps a token bucket of 10 tokens refilling one
// a minute (the real server's TTLs run in real time) through reservations, settles and cancels on fixed instants, on
// every store (the Cluster too when ./test.sh runs it).
func TestReserveSettleCancel(t *testing.T) {
	ctx := context.Background()
	for name, st := range holdStores(t) {
		t.Run(name, func(t *testing.T) {
			t0 := proptest.Epoch
			c := fakeclock.New(t0)
			obs := &spy.Observer{}
			lim := newReserveLimiter(t, algorithm.TokenBucket(10, 10*time.Minute, 10), st, c, fleetlimit.WithObserver(obs))
			reserve := func(step string, n int64, allowed bool, remaining int64) fleetlimit.Reservation {
				t.Helper()
				rv, res, err := lim.Reserve(ctx, "user", n)
				if err != nil || res.Allowed != allowed || res.Remaining != remaining {
					t.Fatalf("%s: Reserve(%d) = %+v, %v; want allowed %v, remaining %d", step, n, res, err, allowed, remaining)
				}
				if (rv == fleetlimit.Reservation{}) == allowed {
					t.Fatalf("%s: Reserve's reservation %+v with allowed %v", step, rv, allowed)
				}
				return rv
			}
			settled := func(step string, n, cut int64) {
				t.Helper()
				var got []fleetlimit.Event
				for _, e := range obs.Take() {
					if e.Settle {
						got = append(got, e)
					}
				}
				if len(got) != 1 || got[0].N != n || got[0].Cut != cut || got[0].Err != nil || !got[0].Allowed {
					t.Fatalf("%s: the observer saw settles %+v; want one of N %d, Cut %d", step, got, n, cut)
				}
			}

			// 4 of 10 reserved; the work cost 9: 5 more are charged.
			rv := reserve("reserve 4", 4, true, 6)
			if res, err := rv.Settle(ctx, 9); err != nil || !res.Allowed || res.Remaining != 1 || res.ResetAfter != 9*time.Minute {
				t.Fatalf("Settle(9) = %+v, %v; want 1 left, full in 9m", res, err)
			}
			settled("settle 9", 5, 0)
			if _, err := rv.Settle(ctx, 9); !errors.Is(err, fleetlimit.ErrReservationDone) {
				t.Fatalf("second Settle = %v, want ErrReservationDone", err)
			}
			if err := rv.Cancel(ctx); !errors.Is(err, fleetlimit.ErrReservationDone) {
				t.Fatalf("Cancel after Settle = %v, want ErrReservationDone", err)
			}
			// Denied: the zero reservation, which settles nothing.
			denied := reserve("reserve 2 of 1", 2, false, 1)
			if res, err := denied.Settle(ctx, 100); err != nil || res != (fleetlimit.Result{}) {
				t.Fatalf("Settle of a denied reservation = %+v, %v; want nothing", res, err)
			}
			// The last token, then a runaway call: 25 is 24 past the
			// estimate, and the debt cap (the limit, 10 tokens) cuts 14.
			rv = reserve("reserve 1", 1, true, 0)
			if _, err := rv.Settle(ctx, -1); !errors.Is(err, fleetlimit.ErrInvalidCost) {
				t.Fatalf("Settle(-1) = %v, want ErrInvalidCost", err)
			}
			if res, err := rv.Settle(ctx, 25); err != nil || res.Remaining != 0 || res.ResetAfter != 20*time.Minute {
				t.Fatalf("Settle(25) = %+v, %v; want the level at -10: nothing left, full in 20m", res, err)
			}
			settled("settle 25", 24, 14)
			// 10m later the debt is repaid and the bucket is empty: a
			// reservation waits for the refill.
			c.Set(t0.Add(10 * time.Minute))
			reserve("reserve 1 while repaying", 1, false, 0)
			// 15m in the bucket holds 5; a cancelled reservation of all 5
			// leaves them there.
			c.Set(t0.Add(15 * time.Minute))
			rv = reserve("reserve 5", 5, true, 0)
			if err := rv.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			settled("cancel 5", -5, 0)
			if res, err := lim.Peek(ctx, "user", 5); err != nil || !res.Allowed || res.Remaining != 0 {
				t.Fatalf("Peek(5) after Cancel = %+v, %v; want the 5 back", res, err)
			}
			// Bad input records nothing.
			if _, _, err := lim.Reserve(ctx, "user", 0); !errors.Is(err, fleetlimit.ErrInvalidCost) {
				t.Fatalf("Reserve(0) = %v, want ErrInvalidCost", err)
			}
			if _, _, err := lim.Reserve(ctx, "", 1); !errors.Is(err, fleetlimit.ErrInvalidKey) {
				t.Fatalf("Reserve of an empty key = %v, want ErrInvalidKey", err)
			}
			if res, err := lim.Peek(ctx, "user", 5); err != nil || !res.Allowed {
				t.Fatalf("Peek(5) after bad input = %+v, %v; want the key unchanged", res, err)
			}
		})
	}
}

// TestReserveRefusals: a strategy that cannot be charged past its limit
// (a concurrency limit) and a bad debt cap are refused.
func TestReserveRefusals(t *testing.T) {
	c := fakeclock.New(proptest.Epoch)
	lim := newReserveLimiter(t, algorithm.Concurrency(2, time.Minute), stores.Memory(t), c)
	if _, _, err := lim.Reserve(context.Background(), "user", 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve on a concurrency limit = %v, want errors.ErrUnsupported", err)
	}
	for _, units := range []int64{-1, algorithm.MaxInt + 1} {
		if _, err := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 1), stores.Memory(t), fleetlimit.WithMaxDebt(units)); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
			t.Errorf("WithMaxDebt(%d) = %v, want ErrInvalidConfig", units, err)
		}
	}
}

// countingCharger counts the charges that reach Redis.
type countingCharger struct {
	*store.Redis
	charges atomic.Int64
}

func (s *countingCharger) Charge(ctx context.Context, req store.Request, maxDebt int64) (algorithm.Decision, error) {
	s.charges.Add(1)
	return s.Redis.Charge(ctx, req, maxDebt)
}

// TestSettleDuringOutage: a settle that cannot reach Redis (every command
// fails fast) is retried within the timeout, then reported — its error
// wraps ErrStoreUnavailable and the Observer sees it — and the reservation
// is spent; a reservation the FailLocal fallback took while Redis was down
// settles in the fallback store, at its scaled limit, and never in Redis.
func TestSettleDuringOutage(t *testing.T) {
	ctx := context.Background()
	mr, client := redistest.Mini(t)
	st := &countingCharger{Redis: stores.Redis(t, client)}
	c := fakeclock.New(proptest.Epoch)
	fb := stores.Memory(t, store.WithMemoryClock(c.Now))
	obs := &spy.Observer{}
	lim := newReserveLimiter(t, algorithm.FixedWindow(10, time.Minute), st, c, fleetlimit.WithFailurePolicy(fleetlimit.FailLocal),
		fleetlimit.WithFallback(fb, 2), fleetlimit.WithTimeout(2*time.Second), fleetlimit.WithoutBreaker(), fleetlimit.WithObserver(obs))

	inRedis, res, err := lim.Reserve(ctx, "user", 2)
	if err != nil || !res.Allowed {
		t.Fatalf("Reserve with Redis up = %+v, %v", res, err)
	}
	mr.SetError("LOADING Redis is loading the dataset in memory")
	obs.Take()
	if _, err := inRedis.Settle(ctx, 5); !errors.Is(err, fleetlimit.ErrStoreUnavailable) {
		t.Fatalf("Settle with Redis down = %v, want ErrStoreUnavailable", err)
	}
	if tries := st.charges.Load(); tries < 2 {
		t.Errorf("Settle with Redis down tried %d times, want retries within the timeout", tries)
	}
	if evs := obs.Take(); len(evs) != 1 || !evs[0].Settle || !errors.Is(evs[0].Err, fleetlimit.ErrStoreUnavailable) {
		t.Errorf("the observer saw %+v, want the failed settle", evs)
	}
	if _, err := inRedis.Settle(ctx, 5); !errors.Is(err, fleetlimit.ErrReservationDone) {
		t.Errorf("Settle again = %v, want ErrReservationDone: the first may have been charged", err)
	}
	// The fallback: 10 / 2 instances = 5 in process.
	local, res, err := lim.Reserve(ctx, "user", 3)
	if !errors.Is(err, fleetlimit.ErrStoreUnavailable) || !res.Allowed || res.Limit != 5 || res.Remaining != 2 {
		t.Fatalf("Reserve with Redis down = %+v, %v; want the fallback's 5, 2 left", res, err)
	}
	mr.SetError("")
	obs.Take()
	charges := st.charges.Load()
	if res, err := local.Settle(ctx, 8); err != nil || res.Limit != 5 || res.Remaining != 0 {
		t.Fatalf("Settle of the fallback's reservation = %+v, %v; want it charged in the fallback store", res, err)
	}
	if n := st.charges.Load() - charges; n != 0 {
		t.Errorf("settling the fallback's reservation sent %d charges to Redis, want 0", n)
	}
	if evs := obs.Take(); len(evs) != 1 || evs[0].DecidedBy != fleetlimit.DecidedByFallback || evs[0].N != 5 || evs[0].Cut != 0 {
		t.Errorf("the observer saw %+v, want the fallback's settle of 5", evs)
	}
	// In Redis, only the first estimate: the lost settle charged nothing.
	if res, err := lim.Peek(ctx, "user", 1); err != nil || res.Remaining != 7 {
		t.Errorf("Peek with Redis back = %+v, %v; want 8 left after the 1 peeked, 7", res, err)
	}
}

// TestSettleCompositeAllOrNone: a composite's settle charges every member
// past its own limit, each under its own cap; when one member's key holds
// something else, the settle fails and no member is charged (one script).
func TestSettleCompositeAllOrNone(t *testing.T) {
	ctx := context.Background()
	clients := map[string]redis.UniversalClient{}
	_, clients["miniredis"] = redistest.Mini(t)
	if redistest.HaveReal(t) {
		clients["redis"] = redistest.Real(t)
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			st := stores.Redis(t, client)
			// Slow enough that the real server's TTLs (in real time) never
			// pass during the test.
			s := algorithm.All(algorithm.TokenBucket(10, time.Hour, 10), algorithm.FixedWindow(20, time.Hour))
			lim := newReserveLimiter(t, s, st, fakeclock.New(proptest.Epoch))
			rv, res, err := lim.Reserve(ctx, "user", 4)
			if err != nil || !res.Allowed {
				t.Fatalf("Reserve = %+v, %v", res, err)
			}
			// 26 is 22 past the estimate: the bucket goes to -10 (its cap,
			// 10, cuts 6), the window to 26 of 20.
			res, err = rv.Settle(ctx, 26)
			ls := res.Limits()
			if err != nil || len(ls) != 2 || ls[0].Remaining != 0 || ls[0].ResetAfter != 2*time.Hour || ls[1].Remaining != 0 {
				t.Fatalf("Settle(26) = %+v %+v, %v; want both members charged", res, ls, err)
			}
			// A second key whose window member holds a string.
			rv, _, err = lim.Reserve(ctx, "other", 1)
			if err != nil {
				t.Fatal(err)
			}
			sc := s.Script()
			if err := client.Set(ctx, store.RedisKey(lim.KeyPrefix(), "other", sc.Keys[1]), "not a window", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := rv.Settle(ctx, 5); !errors.Is(err, store.ErrWrongType) {
				t.Fatalf("Settle with a member's key holding a string = %v, want store.ErrWrongType", err)
			}
			if err := client.Del(ctx, store.RedisKey(lim.KeyPrefix(), "other", sc.Keys[1])).Err(); err != nil {
				t.Fatal(err)
			}
			if res, err := lim.Peek(ctx, "other", 1); err != nil || res.Limits()[0].Remaining != 8 {
				t.Fatalf("Peek after the failed settle = %+v %+v, %v; want the bucket charged only its estimate (9 left, 8 after the peek)", res, res.Limits(), err)
			}
		})
	}
}

// TestReserveWithLeases: with leases a reservation is always decided by
// the store, never from a lease.
func TestReserveWithLeases(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			obs := &spy.Observer{}
			c := fakeclock.New(proptest.Epoch)
			lim := newReserveLimiter(t, algorithm.FixedWindow(100, time.Hour), st, c,
				fleetlimit.WithLeases(10, time.Minute), fleetlimit.WithObserver(obs))
			t.Cleanup(func() { _ = lim.Close() })
			for range 3 { // repeat traffic: the key's lease takes hold
				if _, err := lim.AllowN(ctx, "user", 1); err != nil {
					t.Fatal(err)
				}
			}
			obs.Take()
			rv, res, err := lim.Reserve(ctx, "user", 1)
			if err != nil || !res.Allowed || res.Remaining != 88 {
				t.Fatalf("Reserve(1) = %+v, %v; want 88 left (11 taken: the first exact, then a lease of 10)", res, err)
			}
			if evs := obs.Take(); len(evs) != 1 || evs[0].DecidedBy != fleetlimit.DecidedByStore {
				t.Fatalf("Reserve's events %+v, want one decided by the store, not the lease", evs)
			}
			if res, err := rv.Settle(ctx, 89); err != nil || res.Remaining != 0 {
				t.Fatalf("Settle(89) = %+v, %v; want the window full", res, err)
			}
		})
	}
}

// TestSettleForgetsCachedDenials: with a denial cache, a settle that gives
// units back lets a remembered denial pass again.
func TestSettleForgetsCachedDenials(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			lim := newReserveLimiter(t, algorithm.FixedWindow(100, time.Hour), st, fakeclock.New(proptest.Epoch), fleetlimit.WithDenialCache(100))
			rv, res, err := lim.Reserve(ctx, "user", 90)
			if err != nil || !res.Allowed {
				t.Fatalf("Reserve(90) = %+v, %v", res, err)
			}
			// 11 with 10 left: remembered (its Remaining is n-1), and the
			// second is answered from the cache.
			for range 2 {
				if res, _ := lim.AllowN(ctx, "user", 11); res.Allowed {
					t.Fatalf("AllowN(11) with 10 left = %+v", res)
				}
			}
			if _, err := rv.Settle(ctx, 10); err != nil {
				t.Fatal(err)
			}
			if res, err := lim.AllowN(ctx, "user", 11); err != nil || !res.Allowed {
				t.Fatalf("AllowN(11) after 80 were given back = %+v, %v; want the cached denial forgotten", res, err)
			}
		})
	}
}

// TestSettleOnceConcurrently: of 8 goroutines settling copies of one
// reservation at once, exactly one settles it; the others get
// ErrReservationDone, and the key is charged once.
func TestSettleOnceConcurrently(t *testing.T) {
	ctx := context.Background()
	lim := newReserveLimiter(t, algorithm.FixedWindow(100, time.Hour), stores.Memory(t), fakeclock.New(proptest.Epoch))
	rv, _, err := lim.Reserve(ctx, "user", 10)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func(rv fleetlimit.Reservation) {
			_, err := rv.Settle(ctx, 30)
			errs <- err
		}(rv)
	}
	settled := 0
	for range 8 {
		switch err := <-errs; {
		case err == nil:
			settled++
		case !errors.Is(err, fleetlimit.ErrReservationDone):
			t.Errorf("Settle = %v, want nil or ErrReservationDone", err)
		}
	}
	if settled != 1 {
		t.Errorf("%d settles succeeded, want exactly 1", settled)
	}
	if res, err := lim.Peek(ctx, "user", 1); err != nil || res.Remaining != 69 {
		t.Errorf("Peek = %+v, %v; want 70 left (30 charged once), 69 after the peeked unit", res, err)
	}
}

// TestSettleFailureNeverChargesTwice: a settle whose charge reached Redis
// and was applied, but whose reply was lost — delayed past the limiter's
// timeout, or its connection reset mid-call (a proxy between the client
// and miniredis) — is sent once, not retried, returned as an error
// wrapping ErrStoreUnavailable and observed; the reservation is spent: a
// second Settle and a Cancel are ErrReservationDone and send nothing, and
// the key holds the charge exactly once (a fixed window of 10: Reserve(4),
// Settle(7), then 3 left; twice would leave 0). A settle that failed fast
// and applied nothing (LOADING) is spent too, the key holding the
// estimate alone (6 left).
func TestSettleFailureNeverChargesTwice(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	p := redistest.NewProxy(t, mr.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true}) // go-redis's MaxRetries: 3
	t.Cleanup(func() { _ = client.Close() })
	st := &countingCharger{Redis: stores.Redis(t, client)}
	obs := &spy.Observer{}
	const timeout = 300 * time.Millisecond
	lim := newReserveLimiter(t, algorithm.FixedWindow(10, time.Hour), st, fakeclock.New(proptest.Epoch),
		fleetlimit.WithTimeout(timeout), fleetlimit.WithoutBreaker(), fleetlimit.WithObserver(obs))
	left := func(key string, want int64) {
		t.Helper()
		if g, _, err := lim.AllowAtMost(ctx, key, 10); err != nil || g != want {
			t.Fatalf("AllowAtMost(%q, 10) = %d, %v; want %d left", key, g, err, want)
		}
	}
	for _, tc := range []struct {
		name    string
		fault   func()
		healed  func()
		applied bool
	}{
		{"timeout", func() { p.SetLatency(3 * timeout) }, func() { p.SetLatency(0) }, true},
		{"reset", func() {
			p.SetLatency(3 * timeout)
			time.AfterFunc(timeout/3, p.ResetAll)
		}, func() { p.SetLatency(0) }, true},
		{"loading", func() { mr.SetError("LOADING Redis is loading the dataset in memory") }, func() { mr.SetError("") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "user-" + tc.name
			rv, res, err := lim.Reserve(ctx, key, 4)
			if err != nil || !res.Allowed {
				t.Fatalf("Reserve(4) = %+v, %v", res, err)
			}
			obs.Take()
			sent := st.charges.Load()
			tc.fault()
			_, err = rv.Settle(ctx, 7)
			tc.healed()
			if !errors.Is(err, fleetlimit.ErrStoreUnavailable) {
				t.Fatalf("Settle(7) with the reply lost = %v, want ErrStoreUnavailable", err)
			}
			if n := st.charges.Load() - sent; tc.applied && n != 1 {
				t.Fatalf("the settle sent %d charges, want 1: it may have been applied, a retry could charge twice", n)
			}
			if evs := obs.Take(); len(evs) != 1 || !evs[0].Settle || !errors.Is(evs[0].Err, fleetlimit.ErrStoreUnavailable) {
				t.Fatalf("the observer saw %+v, want the failed settle", evs)
			}
			time.Sleep(3 * timeout) // the late reply, if any, is long gone
			sent = st.charges.Load()
			if _, err := rv.Settle(ctx, 7); !errors.Is(err, fleetlimit.ErrReservationDone) {
				t.Fatalf("Settle again = %v, want ErrReservationDone", err)
			}
			if err := rv.Cancel(ctx); !errors.Is(err, fleetlimit.ErrReservationDone) {
				t.Fatalf("Cancel after it = %v, want ErrReservationDone", err)
			}
			if n := st.charges.Load() - sent; n != 0 {
				t.Fatalf("a spent reservation sent %d charges", n)
			}
			if tc.applied {
				left(key, 3)
			} else {
				left(key, 6)
			}
		})
	}
}
