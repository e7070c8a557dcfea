package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/store"
)

// ErrReservationDone is returned by a Reservation's Settle or Cancel after
// the first of them: a reservation settles once, so that nothing is
// charged or given back twice.
var ErrReservationDone = errors.New("fleetlimit: reservation already settled or cancelled")

// WithMaxDebt caps how far a settled reservation may take a key past its
// limit: at most units past it (see Reservation.Settle), so that one
// runaway call cannot lock a client out for long. Default: the limit —
// for a composite (algorithm.All), each member's own limit. What the cap
// cuts off is charged to no one and is reported to the Observer
// (Event.Cut). units must be between 0 (no debt: a charge stops at the
// limit) and 2^53, or New fails with ErrInvalidConfig.
//
// The cap per strategy (algorithm.Charger): a token bucket's level goes
// down to -units tokens, so any interval of length d takes at most burst +
// rate*d/per + units tokens; a sliding log holds at most limit + units live
// units, in any window-long interval; a fixed window and a sliding-window
// counter count at most limit + units in one aligned window. A composite
// charges each member under its own cap (units for every member, or by
// default each member's own limit), so each member's bound holds with its
// own cap and members may cut different amounts (LimitResult.Cut; Event.Cut
// is the most any cut); a penalty box's cap and bound are its strategy's
// (TestPropertyReserveBound).
func WithMaxDebt(units int64) Option {
	return option(func(c *config) {
		if units < 0 || units > algorithm.MaxInt {
			c.errs = append(c.errs, fmt.Errorf("WithMaxDebt(%d): want 0 to 2^53 units", units))
		}
		c.maxDebt = units
	})
}

// reserveModes are the pipeline's modes of a reservation (see mode):
// Reserve decides as AllowN does, with the fallback and the denial cache
// but no leases (a reservation is always the store's, or the fallback's);
// its Settle charges through the store's Charge (store.Charger) or gives
// back through the refund mode, with no fallback and no caches. A
// reservation the fallback took settles in the fallback store, directly.
type reserveModes struct {
	reserve, charge mode
	// localCharge and localRefund are the fallback store's, for the
	// reservations the fallback took; nil without a fallback that can.
	localCharge store.Charger
	localRefund store.Refunder
}

// buildReserveModes builds the reservation modes when the store can charge
// and refund; otherwise Reserve refuses.
func (l *Limiter) buildReserveModes() {
	ch, ok := l.store.(store.Charger)
	if !ok || l.refund.op == nil {
		return
	}
	maxDebt := l.cfg.maxDebt
	l.reserves.reserve = mode{op: l.store, fallback: l.fallback, denials: l.denials, bans: true, local: l.denials != nil}
	l.reserves.charge = mode{op: viewStore(func(ctx context.Context, req store.Request) (algorithm.Decision, error) {
		return ch.Charge(ctx, req, maxDebt)
	})}
	if fb := l.fallback; fb != nil {
		fc, okc := fb.store.(store.Charger)
		fr, okr := fb.store.(store.Refunder)
		if okc && okr {
			l.reserves.localCharge, l.reserves.localRefund = fc, fr
		}
	}
}

// Reservation is an estimate of a cost admitted by Limiter.Reserve, to be
// settled once the real cost is known (Settle) or given back (Cancel).
// It settles or cancels once; a second call is ErrReservationDone.
//
// The zero Reservation (what a denied Reserve returns) holds nothing: its
// Settle and Cancel do nothing and return nil. A Reservation may be
// copied; the copies are the same reservation. It is safe for concurrent
// use.
type Reservation struct {
	l        *Limiter
	key      string
	estimate int64
	rule     algorithm.Strategy // the key's rule when it was reserved (WithStrategyFor)
	where    holder             // where the estimate was charged (heldNowhere: nowhere)
	res      Result             // Reserve's
	done     *atomic.Bool
}

// Reserve admits or denies a request of cost estimate by key exactly as
// AllowN(ctx, key, estimate) does, and returns a Reservation to settle
// once the real cost is known: Settle charges the difference (past the
// limit, up to WithMaxDebt, when the work cost more), Cancel gives the
// estimate back. Everything AllowN says holds — its input errors, the
// timeout, the breaker, the failure policy, shadow mode, overrides and
// the Observer, which sees the Reserve as a decision — except that with
// WithLeases the estimate is always decided by the store, never from a
// lease: a reservation's units are then where Settle finds them.
//
// Admitted, the estimate is charged where the decision was made: in the
// store, or, during an outage under FailLocal, in the fallback store,
// where the reservation then settles. A reservation admitted with nothing
// charged (by FailOpen, shadow mode or an exempt key) settles nothing.
// Denied, the Reservation is the zero Reservation.
//
// The limiter's strategy must be an algorithm.Charger whose script
// charges (algorithm.Charges; the built-ins, All of them and penalty boxes
// are), and its store a store.Charger and store.Refunder (Memory and
// Redis are); otherwise the error wraps errors.ErrUnsupported and nothing
// is recorded.
//
// Reserve is safe for concurrent use.
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64) (Reservation, Result, error) {
	if _, err := l.request(key, estimate); err != nil {
		return Reservation{}, l.none(), err
	}
	if l.reserves.reserve.op == nil || !algorithm.Charges(l.rule) {
		return Reservation{}, l.none(), fmt.Errorf("fleetlimit: reserve %q: strategy %s over store %T cannot be charged past its limit (algorithm.Charger over a store.Charger and store.Refunder): %w",
			key, l.rule.Name(), l.store, errors.ErrUnsupported)
	}
	start := time.Now()
	c := call{m: &l.reserves.reserve}
	res, o, err := l.decideCall(ctx, &c, key, estimate)
	out := res
	if l.cfg.shadow {
		out = shadowed(res, o)
	}
	if l.cfg.observer != nil && !o.invalid() {
		l.cfg.observer.Observe(l.event(ctx, key, estimate, start, Result{Allowed: res.Allowed, Shadow: out.Shadow, Remaining: res.Remaining}, o, err))
	}
	if !out.Allowed {
		return Reservation{}, out, err
	}
	return Reservation{l: l, key: key, estimate: estimate, rule: c.req.Strategy, res: out, done: new(atomic.Bool), where: heldBy(out.Shadow, o)}, out, err
}

// Estimate is the cost the reservation admitted.
func (r Reservation) Estimate() int64 { return r.estimate }

// Settle charges the reservation's real cost actual (>= 0) in place of its
// estimate, and returns the key's standing after it (Allowed true,
// Remaining, ResetAfter; 0 Remaining while the key is in debt):
//
//   - actual > estimate: the excess is charged at once, past the limit if
//     need be — the key goes into debt, which later requests repay before
//     they pass — but never further past the limit than WithMaxDebt
//     allows. What the cap cuts off is reported to the Observer
//     (Event.Cut); the excess is recorded at the settle's time (the
//     strategy's Charge, algorithm.Charger).
//   - actual < estimate: the rest is given back, as Refund gives back.
//   - actual = estimate: nothing changes, and no round trip is made: the
//     Result is Reserve's.
//
// Settle runs once per reservation: a second Settle or a Cancel returns
// ErrReservationDone and changes nothing. A negative actual (or one above
// 2^53) is ErrInvalidCost, and a ctx done before the call its error: both
// change nothing and leave the reservation unsettled. A ctx done during
// the call returns its error, and the settle may or may not have been
// made.
//
// The settle goes where the estimate was charged: through the store, with
// the limiter's breaker and timeout, or into the fallback store for a
// reservation the fallback took. When the store cannot answer, Settle
// tries again until the limiter's timeout has passed since it began (or
// ctx is done), except after a timeout or a connection broken mid-call,
// after which the store may have made the charge and a second try could
// make it twice; then it returns an error wrapping ErrStoreUnavailable,
// reported to the Observer too, and the reservation is spent. A settle is
// a write the store makes or does not, and the failure policy never
// decides one.
//
// After a Settle or Cancel error, other than ErrInvalidCost and a ctx done
// before the call, the reservation is spent: do not settle it again — a
// second Settle or Cancel returns ErrReservationDone and sends nothing, so
// nothing is charged or given back twice (TestSettleFailureNeverChargesTwice).
// What the store holds then depends on the error: after one the store
// answered with or a refused connection the settle was not made, and the
// estimate stays charged as it was; after a timeout or a connection
// broken mid-call (errors.Is(err, context.DeadlineExceeded), a net
// timeout, io.EOF, ECONNRESET, EPIPE) it may have been made. Either way the
// key stays within its bound: what was charged was admitted or capped.
// Count or log the error (the Observer has it, Event.Settle with Err) as
// work that may have gone uncounted; do not charge the difference some
// other way, since it may have been charged already. store.Redis never
// lets go-redis resend a script, whatever the client's MaxRetries, so a
// charge is never run twice. The Observer sees every settle that goes to a store (Event.Settle): not one at the estimate, nor
// one of a reservation that charged nothing.
//
// A settle is made under the reservation's rule: the key's rule when
// Reserve admitted it (its tier, WithStrategyFor, or its override's rule,
// WithOverrides), whatever the key has been given since. The units were
// charged under that rule, and the settle corrects that charge: an
// override written since (another limit, an exemption, a block) or a new
// tier neither swallows the excess nor keeps the estimate from being given
// back, and the debt cap's default is that rule's limit
// (TestSettleUnderOverrides, TestSettleUnderItsTier). Overrides only
// change a limit, never the shape of the key's state (rule.SameShape), so
// the charge always lands in the right state; but under a limit lowered
// since, the key may stand further past its new limit than WithMaxDebt,
// as spent units carry over into any lower tier.
//
// Settle is safe for concurrent use: of concurrent Settles and Cancels of
// one reservation, exactly one settles it.
func (r Reservation) Settle(ctx context.Context, actual int64) (Result, error) {
	if r.l == nil {
		return Result{}, nil
	}
	if actual < 0 || actual > algorithm.MaxInt {
		return r.l.none(), fmt.Errorf("%w: actual cost %d, want 0 to 2^53", ErrInvalidCost, actual)
	}
	return r.settle(ctx, actual)
}

// Cancel gives the reservation's whole estimate back, as Settle(ctx, 0)
// does: with nothing else charged to the key meanwhile, the key is as if
// the reservation had been denied, where the strategy's refund is exact
// (see Refund). It returns Settle's errors.
func (r Reservation) Cancel(ctx context.Context) error {
	if r.l == nil {
		return nil
	}
	_, err := r.settle(ctx, 0)
	return err
}

// settle is Settle for a valid actual: once, where the estimate was
// charged.
func (r Reservation) settle(ctx context.Context, actual int64) (Result, error) {
	l := r.l
	if err := ctxdone.Err(ctx); err != nil {
		return l.none(), fmt.Errorf("fleetlimit: settle of a reservation of %q: caller gone, nothing settled: %w", r.key, err)
	}
	if !r.done.CompareAndSwap(false, true) {
		return l.none(), fmt.Errorf("fleetlimit: settle of a reservation of %q: %w", r.key, ErrReservationDone)
	}
	diff := actual - r.estimate
	if diff == 0 || r.where == heldNowhere {
		return r.res, nil
	}
	start := time.Now()
	var res Result
	var cut int64
	var err error
	if r.where == heldLocally {
		res, cut, err = r.local(ctx, diff)
	} else {
		res, cut, err = r.remote(ctx, diff)
	}
	if err != nil {
		err = fmt.Errorf("fleetlimit: settle of a reservation of %q (estimate %d, actual %d): %w", r.key, r.estimate, actual, err)
		res = l.none()
	}
	if o := l.cfg.observer; o != nil {
		by := DecidedByStore
		if r.where == heldLocally {
			by = DecidedByFallback
		}
		e := l.event(ctx, r.key, diff, start, res, outcome(by), err)
		e.Settle, e.Cut = true, cut
		o.Observe(e)
	}
	return res, err
}

// remote charges diff (> 0) or gives -diff back in the store, through the
// pipeline, trying again while the store fails fast (see Settle), and
// returns the standing and the units the cap cut off.
func (r Reservation) remote(ctx context.Context, diff int64) (Result, int64, error) {
	l := r.l
	m, n := &l.reserves.charge, diff
	if diff < 0 {
		m, n = &l.refund, -diff
	}
	start := time.Now()
	backoff := max(time.Millisecond, l.cfg.timeout/8)
	for {
		c := call{m: m, rule: r.rule}
		res, _, err := l.decideCall(ctx, &c, r.key, n)
		if diff < 0 {
			if dc := l.denials; dc != nil {
				dc.Forget(r.key) // the units given back may let a cached denial pass
			}
		}
		if err == nil {
			return res, c.d.Cut(), nil
		}
		retry := errors.Is(err, ErrStoreUnavailable) && !errors.Is(err, ErrCircuitOpen) && !maybeApplied(err) && ctx.Err() == nil &&
			time.Since(start)+backoff < l.cfg.timeout
		if !retry {
			return res, 0, err
		}
		if serr := sleepReal(ctx, backoff); serr != nil {
			return res, 0, err
		}
	}
}

// maybeApplied reports whether err may have come after the store applied
// the call: a timeout, or a connection broken once the call was sent (end
// of stream, reset, broken pipe). A dial refused, or an error the store
// answered with (LOADING, READONLY, a command refused), applied nothing.
func maybeApplied(err error) bool {
	var op interface{ Timeout() bool }
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &op) && op.Timeout() {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// local charges diff (> 0) or gives -diff back in the fallback store,
// which took the reservation, under the fallback's rule for the key.
func (r Reservation) local(ctx context.Context, diff int64) (Result, int64, error) {
	l := r.l
	if l.reserves.localCharge == nil {
		return l.none(), 0, fmt.Errorf("fleetlimit: the fallback store %T cannot charge and refund (store.Charger, store.Refunder): %w", l.fallback.store, errors.ErrUnsupported)
	}
	n := max(diff, -diff)
	req, err := l.request(r.key, n)
	if err != nil {
		return l.none(), 0, err
	}
	req.Strategy = l.fallback.ruleFor(r.rule, l.cfg.tiers != nil)
	var d algorithm.Decision
	if diff > 0 {
		d, err = l.reserves.localCharge.Charge(ctx, req, l.cfg.maxDebt)
	} else {
		d, err = l.reserves.localRefund.Refund(ctx, req)
	}
	if err != nil {
		return l.none(), 0, fmt.Errorf("fleetlimit: the fallback store: %w", err)
	}
	return resultOf(req.Strategy, d), d.Cut(), nil
}
