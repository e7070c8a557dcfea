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
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// TestSettleUnderOverrides: a reservation settles under the rule that
// admitted it, whatever override (or tier) the key has been given since:
// an exemption or a block written after Reserve neither swallows the
// settle's charge nor keeps a cancel from giving the estimate back; a rule
// lowered since does not shrink its debt cap, and one raised at Reserve
// still caps it once cleared. AllowAtMost checks n against the rule that
// decides the key, its override's: a raised override grants more than
// the limiter's own maximum, a lowered one refuses an n above its own,
// recording nothing. A fixed window of 10 per hour, on every store.
func TestSettleUnderOverrides(t *testing.T) {
	ctx := context.Background()
	for name, st := range overrideStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			obs := &spy.Observer{}
			l := overrideLimiter(t, algorithm.FixedWindow(10, time.Hour), st, clock, testName(), fleetlimit.WithObserver(obs))
			do := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			reserve := func(key string, n int64) fleetlimit.Reservation {
				t.Helper()
				rv, res, err := l.Reserve(ctx, key, n)
				if err != nil || !res.Allowed {
					t.Fatalf("Reserve(%q, %d) = %+v, %v", key, n, res, err)
				}
				return rv
			}
			settle := func(rv fleetlimit.Reservation, actual, limit, cut int64) {
				t.Helper()
				obs.Take()
				res, err := rv.Settle(ctx, actual)
				if err != nil || res.Limit != limit {
					t.Fatalf("Settle(%d) = %+v, %v; want it settled under the reservation's limit %d", actual, res, err, limit)
				}
				if e := lastEvent(obs); !e.Settle || e.Cut != cut {
					t.Fatalf("the settle's event %+v, want a settle cut by %d", e, cut)
				}
			}
			left := func(key string, want int64) {
				t.Helper()
				if g, _, err := l.AllowAtMost(ctx, key, 10); err != nil || g != want {
					t.Fatalf("AllowAtMost(%q, 10) = %d, %v; want %d left", key, g, err, want)
				}
			}

			// Exempt after Reserve: the excess is charged all the same.
			rv := reserve("exempt", 4)
			do(l.SetOverride(ctx, "exempt", algorithm.Unlimited(), time.Hour))
			settle(rv, 7, 10, 0)
			do(l.ClearOverride(ctx, "exempt"))
			left("exempt", 3)

			// Blocked after Reserve: the cancel gives the estimate back.
			rv = reserve("blocked", 6)
			do(l.Block(ctx, "blocked", time.Hour))
			do(rv.Cancel(ctx))
			do(l.Unblock(ctx, "blocked"))
			left("blocked", 10)

			// Lowered to 4 after Reserve: the cap is the reservation's
			// rule's (10 past 10), so 8 + 4 is charged uncut.
			rv = reserve("lowered", 8)
			do(l.SetOverride(ctx, "lowered", algorithm.FixedWindow(4, time.Hour), time.Hour))
			settle(rv, 12, 10, 0)
			do(l.ClearOverride(ctx, "lowered"))
			left("lowered", 0)

			// Raised to 100 at Reserve, cleared before the settle: 50 + 10
			// under the raised rule, uncut (the limiter's own would cut
			// all 10: 50 is past 10 + 10).
			do(l.SetOverride(ctx, "raised", algorithm.FixedWindow(100, time.Hour), time.Hour))
			rv = reserve("raised", 50)
			do(l.ClearOverride(ctx, "raised"))
			settle(rv, 60, 100, 0)
			do(l.SetOverride(ctx, "raised", algorithm.FixedWindow(100, time.Hour), time.Hour))
			left("raised", 10) // 60 of 100 spent: the 10 asked for

			// AllowAtMost under an override: its maximum, not the limiter's.
			do(l.SetOverride(ctx, "grant", algorithm.FixedWindow(100, time.Hour), time.Hour))
			if g, res, err := l.AllowAtMost(ctx, "grant", 50); err != nil || g != 50 || res.Limit != 100 {
				t.Fatalf("AllowAtMost(50) under an override of 100 = %d, %+v, %v; want 50", g, res, err)
			}
			do(l.SetOverride(ctx, "small", algorithm.FixedWindow(5, time.Hour), time.Hour))
			obs.Take()
			if g, _, err := l.AllowAtMost(ctx, "small", 8); !errors.Is(err, fleetlimit.ErrInvalidCost) || g != 0 {
				t.Fatalf("AllowAtMost(8) under an override of 5 = %d, %v; want ErrInvalidCost", g, err)
			}
			if evs := obs.Take(); len(evs) != 0 {
				t.Fatalf("a refused grant was observed: %+v", evs)
			}
			if g, _, err := l.AllowAtMost(ctx, "small", 5); err != nil || g != 5 {
				t.Fatalf("AllowAtMost(5) under an override of 5 after a refused 8 = %d, %v; want all 5: nothing recorded", g, err)
			}
		})
	}
}

// TestSettleUnderItsTier: a reservation settles under the tier
// (WithStrategyFor) that admitted it, though the key's tier has changed
// since: reserved at 50 of a premium 100, settled at 60 after the key fell
// back to the basic 10 — under basic's rule and cap all 10 would be cut.
func TestSettleUnderItsTier(t *testing.T) {
	ctx := context.Background()
	premium := algorithm.FixedWindow(100, time.Hour)
	var basic atomic.Bool
	obs := &spy.Observer{}
	l := newReserveLimiter(t, algorithm.FixedWindow(10, time.Hour), stores.Memory(t), fakeclock.New(t0), fleetlimit.WithObserver(obs),
		fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) {
			if basic.Load() {
				return nil, nil
			}
			return premium, nil
		}))
	rv, res, err := l.Reserve(ctx, "k", 50)
	if err != nil || !res.Allowed || res.Limit != 100 {
		t.Fatalf("Reserve(50) on premium = %+v, %v", res, err)
	}
	basic.Store(true)
	obs.Take()
	if res, err := rv.Settle(ctx, 60); err != nil || res.Limit != 100 {
		t.Fatalf("Settle(60) = %+v, %v; want it settled under premium's 100", res, err)
	}
	if e := lastEvent(obs); e.Cut != 0 {
		t.Fatalf("the settle was cut by %d under basic's cap; want 0", e.Cut)
	}
}
