// Package observertest drives limiters through one known sequence of
// decisions, for the tests of the metrics observers (promobserver,
// otelobserver): each checks what its own metrics say about the same
// decisions.
package observertest

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// Key is the client key of every decision Run makes: it must appear in no
// metric.
const Key = "alice"

// slowMachine is the timeout of decisions a healthy store must make.
const slowMachine = 5 * time.Second

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// Run makes these decisions, each limiter with obs as its observer and,
// but for login and search, st as its store (fixed windows of a minute on
// a pinned clock), failing the test if one is not as said:
//
//   - api (3 a minute): costs 1 and 2 admitted (3 of 3); 1 and 4 denied by
//     the store; 1 denied for a caller gone (not a store error); a cost of
//     0 rejected as bad input (not a decision: nothing is observed).
//   - login (fail-closed, on a closed store, with a breaker that opens on
//     the first failure and stays open): 2 denied by the policy, the
//     first with a store error of cause closed, which opens the breaker,
//     the second with circuit-open. Its breaker ends open.
//   - search (fail-open, on the same closed store, default breaker): 1
//     admitted by the policy, a store error of cause closed; its breaker
//     stays closed.
//   - rollout (3 a minute, shadow): 3 admitted, 2 denied by the store and
//     let through (shadow admissions).
//   - leased (8 a minute, WithLeases(4), WithDenialCache): the key's first
//     round trip is exact (7 left); the next ones take leases of 3, 2 and
//     1 (the fair share of the 7, 4 and 2 left), each admitting one
//     request and leaving 2, 1 and 0 units; the last, a lease of no more
//     than the request, installs none, so the next round trip is exact
//     again (0 left): 5 admitted by the store, 3 by a lease; then 1 denied
//     by the store and its repeat denied by the cache.
//   - bare (3 a minute, WithoutBreaker): a cost of 2 admitted by the store.
//   - permits (algorithm.Concurrency(2, a minute)): permits a and b
//     acquired (1 and 0 slots left), c denied by the store; a renewed; a
//     released, and released again (harmless: no longer held); a renewed
//     again, denied (expired: ErrPermitExpired); b released. Observed by a
//     PermitObserver only: 3 acquires (2 admitted), 3 releases, 2 renews
//     (1 extended), all decided by the store, and no AllowN decision.
//   - permits-down (the same, on the dead store; FailLocal, the
//     default): one permit acquired by the fallback with a store error
//     (connection refused), then released in the fallback without error.
//
// The decisions of one limiter are made in that order, one at a time.
func Run(t testing.TB, st store.Store, obs fleetlimit.Observer) {
	t.Helper()
	bg := context.Background()
	clock := fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(15 * time.Second)))
	newWith := func(s algorithm.Strategy, st store.Store, name string, opts ...fleetlimit.Option) *fleetlimit.Limiter {
		t.Helper()
		l, err := fleetlimit.New(s, st, append([]fleetlimit.Option{
			fleetlimit.WithName(name), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine),
			fleetlimit.WithObserver(obs), clock}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	newLimiter := func(st store.Store, name string, limit int64, opts ...fleetlimit.Option) *fleetlimit.Limiter {
		t.Helper()
		return newWith(algorithm.FixedWindow(limit, time.Minute), st, name, opts...)
	}
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Fatalf(format, args...)
		}
	}
	dead := stores.Down(t) // refused connections: an outage
	breaker, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1,
		Clock: fixedClock(proptest.Epoch), Logger: slog.New(slog.DiscardHandler)})
	check(err == nil, "NewBreaker: %v", err)

	api := newLimiter(st, "api", 3)
	login := newLimiter(dead, "login", 3, fleetlimit.WithFailurePolicy(fleetlimit.FailClosed), fleetlimit.WithBreaker(breaker))
	search := newLimiter(dead, "search", 3, fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	rollout := newLimiter(st, "rollout", 3, fleetlimit.WithShadow())
	leased := newLimiter(st, "leased", 8, fleetlimit.WithLeases(4, time.Hour), fleetlimit.WithDenialCache(8))
	bare := newLimiter(st, "bare", 3, fleetlimit.WithoutBreaker())

	for i, n := range []int64{1, 2, 1, 4} {
		res, err := api.AllowN(bg, Key, n)
		check(err == nil && res.Allowed == (i < 2), "api decision %d: %+v, %v", i, res, err)
	}
	gone, cancel := context.WithCancel(bg)
	cancel()
	res, err := api.Allow(gone, Key)
	check(!res.Allowed && errors.Is(err, context.Canceled), "api, caller gone: %+v, %v", res, err)
	_, err = api.AllowN(bg, Key, 0)
	check(errors.Is(err, fleetlimit.ErrInvalidCost), "api, cost 0: %v", err)

	for i := range 2 {
		res, err := login.Allow(bg, Key)
		check(!res.Allowed && errors.Is(err, fleetlimit.ErrStoreUnavailable) && errors.Is(err, fleetlimit.ErrCircuitOpen) == (i == 1),
			"login decision %d: %+v, %v", i, res, err)
	}
	check(breaker.State() == fleetlimit.BreakerOpen, "login's breaker: %v", breaker.State())

	res, err = search.Allow(bg, Key)
	check(res.Allowed && errors.Is(err, fleetlimit.ErrStoreUnavailable), "search: %+v, %v", res, err)

	for i := range 5 {
		res, err := rollout.Allow(bg, Key)
		check(err == nil && res.Allowed && res.Shadow == (i >= 3), "rollout decision %d: %+v, %v", i, res, err)
	}

	for i := range 10 {
		res, err := leased.Allow(bg, Key)
		check(err == nil && res.Allowed == (i < 8), "leased decision %d: %+v, %v", i, res, err)
	}

	res, err = bare.AllowN(bg, Key, 2)
	check(err == nil && res.Allowed, "bare: %+v, %v", res, err)

	runPermits(t, st, dead, newWith)
}

// runPermits makes the permits and permits-down operations of Run.
func runPermits(t testing.TB, st, dead store.Store, newWith func(algorithm.Strategy, store.Store, string, ...fleetlimit.Option) *fleetlimit.Limiter) {
	t.Helper()
	bg := context.Background()
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Fatalf(format, args...)
		}
	}
	conc := algorithm.Concurrency(2, time.Minute)
	permits := newWith(conc, st, "permits")
	var held []fleetlimit.Permit
	for i := range 3 {
		p, res, err := permits.Acquire(bg, Key)
		check(err == nil && res.Allowed == (i < 2) && (i == 2 || res.Remaining == int64(1-i)), "permits acquire %d: %+v, %v", i, res, err)
		held = append(held, p)
	}
	a, b := held[0], held[1]
	check(a.Renew(bg) == nil, "permits: renew a")
	check(a.Release(bg) == nil, "permits: release a")
	check(a.Release(bg) == nil, "permits: release a again")
	err := a.Renew(bg)
	check(errors.Is(err, fleetlimit.ErrPermitExpired), "permits: renew a released: %v", err)
	check(b.Release(bg) == nil, "permits: release b")

	down := newWith(conc, dead, "permits-down")
	p, res, err := down.Acquire(bg, Key)
	check(res.Allowed && errors.Is(err, fleetlimit.ErrStoreUnavailable), "permits-down acquire: %+v, %v", res, err)
	check(p.Release(bg) == nil, "permits-down: release in the fallback")
}

// GrantsAndSettles runs, on a limiter named "grants" (a fixed window of 10
// per hour over a fresh memory store) observed by obs, two partial grants
// (4 of 4, then 6 of 10), a reservation of 5 cancelled and one of 3
// settled at 5: 20 units admitted (4 + 6 + 5 + 3 + the settle's 2), 4
// denied, six events allowed (four decisions, a cancel and a settle); a cancel's units given back are no cost.
func GrantsAndSettles(t testing.TB, obs fleetlimit.Observer) {
	t.Helper()
	ctx := context.Background()
	mem := store.NewMemory()
	t.Cleanup(func() { _ = mem.Close() })
	lim, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), mem, fleetlimit.WithName("grants"), fleetlimit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]int64{{4, 4}, {10, 6}} {
		if g, _, err := lim.AllowAtMost(ctx, "k", c[0]); err != nil || g != c[1] {
			t.Fatalf("AllowAtMost(%d) = %d, %v; want %d", c[0], g, err, c[1])
		}
	}
	rv, _, err := lim.Reserve(ctx, "j", 5)
	if err == nil {
		err = rv.Cancel(ctx)
	}
	if err == nil {
		rv, _, err = lim.Reserve(ctx, "i", 3)
	}
	if err == nil {
		_, err = rv.Settle(ctx, 5)
	}
	if err != nil {
		t.Fatal(err)
	}
}
