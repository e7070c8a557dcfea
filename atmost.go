package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// AllowAtMost admits as much of a request of cost n by key as fits now —
// granted, from 0 to n — and records it, in one atomic step: for a batch
// worker that asks for up to n items and processes what it is given.
// granted is exactly what AllowN(ctx, key, granted) would have admitted at
// that instant, and the most: granted+1 would have been denied, unless
// granted is n (TestPropertyAllowAtMostGrantsTheMostThatFits); the key is
// left exactly as that AllowN would have left it. A composite
// (algorithm.All) grants the most every member can take and charges every
// member exactly that, in the same one round trip; a penalty box
// (WithPenalty) grants nothing while the key is banned, and a grant of 0
// outside a ban counts toward one as a denied AllowN does.
//
// The Result is the grant's: Allowed is granted > 0; Remaining is what can
// still pass right after the grant; RetryAfter is 0 when anything was
// granted, and otherwise how long until a request of 1 would pass with no
// other traffic (as AllowN(1) reports it); ResetAfter and Limits as
// AllowN's. A grant below n is not an error.
//
// Errors, each with nothing granted or recorded and a Result that has only
// Limit set: an empty or over-long key (ErrInvalidKey), n < 1 or n above
// the most the key's rule can ever admit at once, algorithm.MaxCost (its
// Limit; a sliding log's at most algorithm.MaxLogCost; a composite's the
// smallest member's) — ask for at most that (ErrInvalidCost) — and a clock
// out of range (ErrClockOutOfRange). A strategy that cannot grant part of
// a request (algorithm.Grants: the four built-in rate strategies, and All
// and Penalize around them, can; Concurrency cannot) or a store that cannot
// (a store.Granter: Memory and Redis are) is an error wrapping
// errors.ErrUnsupported. n is checked against the rule that decides the
// key: its tier (WithStrategyFor) or its override's rule (WithOverrides),
// whose maximum may be above or below the limiter's own; an exempt key is
// granted all of n, and a blocked one nothing.
//
// When the store cannot answer, the decision is degraded as AllowN's is,
// and the error wraps ErrStoreUnavailable: FailLocal grants from the
// in-process fallback, by the same rule at its scaled limit; FailOpen
// grants all of n; FailClosed grants 0. A caller that is gone is granted 0
// and told so by an error wrapping its context's error, whatever the
// policy (units the store had granted by then stay charged, as with
// AllowN). In shadow mode (WithShadow) a grant below n is raised to n, with
// Result.Shadow set and the rest of the Result the real grant's. With
// leases (WithLeases), a request the key's lease holds in full is granted
// from it in process, as AllowN would be; any other is an exact round trip
// in the store's atmost mode, which leaves the lease as it is. The
// denial cache (WithDenialCache) is neither consulted nor taught.
//
// The Observer sees each call that AllowN would have it see (not one with
// invalid input, nor one refused as unsupported), once, as an Event with
// AtMost set: N is the n asked for, Granted the units granted (in shadow
// mode the real grant, before it is raised to n), Allowed is Granted > 0,
// and the rest as for AllowN's decision.
//
// AllowAtMost is safe for concurrent use. In Redis it is one script call
// (EVALSHA, pipelined as decisions are).
func (l *Limiter) AllowAtMost(ctx context.Context, key string, n int64) (granted int64, res Result, err error) {
	if l.atMost.op == nil {
		if _, err := l.request(key, n); err != nil {
			return 0, l.none(), err
		}
		return 0, l.none(), fmt.Errorf("fleetlimit: allow at most %d for %q: store %T does not implement store.Granter: %w", n, key, l.store, errors.ErrUnsupported)
	}
	var start time.Time
	if l.cfg.observer != nil {
		start = time.Now()
	}
	c := call{m: &l.atMost}
	res, o, err := l.decideCall(ctx, &c, key, n)
	switch by := o.by(); {
	case !res.Allowed:
	case o.invalid():
	case by == DecidedByStore || by == DecidedByFallback:
		granted = c.d.Granted
	default:
		// The policy (FailOpen), an override's exemption or the key's
		// lease admitted the whole request.
		granted = n
	}
	real := granted
	if l.cfg.shadow && granted < n && !o.invalid() && o.by() != DecidedByCaller {
		granted, res.Allowed, res.Shadow = n, true, true
	}
	if obs := l.cfg.observer; obs != nil && !o.invalid() {
		e := l.event(ctx, key, n, start, Result{Allowed: real > 0, Shadow: res.Shadow, Remaining: res.Remaining}, o, err)
		e.AtMost, e.Granted = true, real
		obs.Observe(e)
	}
	return granted, res, err
}

// buildAtMostMode builds AllowAtMost's mode when the store can grant part
// of a request (store.Granter): its op is a view of the store's AtMost, and
// under FailLocal its fallback grants in the fallback store when that one
// can. With leases its local stage spends from a lease that holds the
// whole cost; it never takes one.
func (l *Limiter) buildAtMostMode() {
	g, ok := l.store.(store.Granter)
	if !ok {
		return
	}
	l.atMost = mode{op: viewStore(g.AtMost), spends: l.leases, local: l.leases != nil, grants: true}
	if fb := l.fallback; fb != nil {
		if fg, ok := fb.store.(store.Granter); ok {
			l.atMost.fallback = &fallback{strategy: fb.strategy, store: viewStore(fg.AtMost), instances: fb.instances}
		}
	}
}

// checkGrant refuses a partial grant that the request's rule cannot make:
// a rule that does not grant (errors.ErrUnsupported) or a cost above its
// maximum (ErrInvalidCost).
func checkGrant(req store.Request) error {
	if !algorithm.Grants(req.Strategy) {
		return fmt.Errorf("fleetlimit: allow at most %d for %q: strategy %s cannot grant part of a request: %w", req.N, req.Key, req.Strategy.Name(), errors.ErrUnsupported)
	}
	if most := algorithm.MaxCost(req.Strategy); req.N > most {
		return fmt.Errorf("%w: %d, above the %d that strategy %s can ever admit at once", ErrInvalidCost, req.N, most, req.Strategy.Name())
	}
	return nil
}
