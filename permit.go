package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
	"github.com/fleetlimit/fleetlimit/store"
)

// ErrPermitExpired is returned by Permit.Renew for a permit that is no
// longer held: it expired (its ttl passed since it was taken or last
// renewed) or was released. Its slot may already be someone else's; the
// permit is not brought back. Acquire a new one.
var ErrPermitExpired = errors.New("fleetlimit: permit expired")

// holdModes are the pipeline's modes of the permit operations (see mode):
// each op is a view of the store's Hold (store.Holder). Only acquire has a
// fallback: a permit taken in process is given back and renewed in
// process, directly (Permit), never through the shared store.
type holdModes struct {
	acquire, release, renew mode
	// local is the fallback store's Hold, for the permits the fallback
	// took; nil without a fallback that holds permits.
	local store.Holder
	// observer is the limiter's Observer when it is a PermitObserver;
	// else nil, and permit operations read no clock for it.
	observer PermitObserver
}

// buildHoldModes builds the permit modes when the limiter's rule holds
// permits (algorithm.Holder) and its store can (store.Holder), and refuses
// what does not compose with permits: in-process caches that would answer
// for a key whose slots a release frees at any time (WithDenialCache), and
// a penalty box.
func (l *Limiter) buildHoldModes() error {
	if !algorithm.Holds(rule.Inner(l.rule)) {
		return nil
	}
	if !algorithm.Holds(l.rule) {
		return fmt.Errorf("%w: strategy %s: a concurrency limit cannot be in a penalty box (WithPenalty, algorithm.Penalize)", ErrInvalidConfig, l.rule.Name())
	}
	if l.denials != nil {
		return fmt.Errorf("%w: WithDenialCache: a concurrency limit's denial ends when any holder releases, which no cache can know", ErrInvalidConfig)
	}
	h, ok := l.store.(store.Holder)
	if !ok {
		return nil
	}
	l.holds.observer, _ = l.cfg.observer.(PermitObserver)
	l.holds.acquire = mode{op: viewStore(h.Hold)}
	l.holds.release = mode{op: viewStore(h.Hold)}
	l.holds.renew = mode{op: viewStore(h.Hold)}
	if fb := l.fallback; fb != nil {
		if fh, ok := fb.store.(store.Holder); ok {
			l.holds.acquire.fallback = &fallback{strategy: fb.strategy, store: viewStore(fh.Hold), instances: fb.instances}
			l.holds.local = fh
		}
	}
	return nil
}

// Permit is a slot of a concurrency limit (algorithm.Concurrency) held by
// one caller, from Limiter.Acquire until Release, or until it expires: the
// strategy's ttl after it was taken or last renewed (Renew), by the
// store's clock. Each permit has its own identity (a random UUID), so
// Release and Renew act on exactly this permit and no other, even after it
// expired and its slot went to someone else.
//
// The zero Permit holds nothing: its Release and Renew do nothing and
// return nil. A Permit may be copied; the copies are the same permit. It
// is safe for concurrent use.
type Permit struct {
	l     *Limiter
	key   string
	id    string
	rule  algorithm.Strategy // the key's rule when it was taken (WithStrategyFor)
	where holder
}

// holder is where a permit is held.
type holder uint8

const (
	heldNowhere holder = iota // the zero Permit; or admitted by FailOpen or shadow mode: no slot taken
	heldInStore               // in the limiter's store
	heldLocally               // in the fallback store (FailLocal), during an outage
)

// heldBy is where an admission (of a permit or a reservation) decided as
// o holds what it took: nowhere in shadow mode or by a policy, else in the
// store that decided it.
func heldBy(shadow bool, o outcome) holder {
	switch {
	case shadow:
	case o.by() == DecidedByFallback:
		return heldLocally
	case o.by() == DecidedByStore:
		return heldInStore
	}
	return heldNowhere
}

// Acquire takes a slot of key's concurrency limit for the caller, if one
// is free: at most the strategy's limit permits are held at once per key
// by every limiter sharing the store (the instances of a fleet). The
// limiter's strategy must hold permits (algorithm.Holds): an
// algorithm.Concurrency, or a composite with one beside rate limits
// (algorithm.All: the acquire is admitted only if every member admits it,
// charges the rate members 1 and takes the slot, in one atomic step; the
// permit's Release and Renew touch the slot only), with tiers of it
// (WithStrategyFor); and its store a store.Holder (Memory and Redis are).
// Otherwise the error wraps errors.ErrUnsupported.
//
// Admitted (Result.Allowed), the caller holds the returned Permit until it
// calls Release — defer it — or until the permit expires ttl after it was
// taken or last renewed (Renew), by the store's clock: a holder that
// crashes frees its slot by itself. Result.Remaining is the slots still
// free. Denied, the Permit is the zero Permit and Result.RetryAfter is the
// time until the earliest held permit expires: an upper bound on the wait,
// since a holder may release sooner.
//
// Everything else is as AllowN: bad input (ErrInvalidKey,
// ErrClockOutOfRange) takes nothing; the timeout, the circuit breaker and
// a caller gone (denied, never admitted) apply unchanged — a slot the
// store took for a caller gone meanwhile is released before Acquire
// returns, within the limiter's timeout. When the store
// cannot answer, the failure policy decides, and the error wraps
// ErrStoreUnavailable: FailLocal takes the permit in the fallback store,
// at limit / instances (WithFallback) — an in-process semaphore, whose
// permit Release and Renew then give back and extend in process, never in
// the shared store; FailOpen admits with a Permit that holds no slot;
// FailClosed denies. In shadow mode a denial is admitted with a Permit
// that holds no slot (Result.Shadow). The Observer is told only if it is a
// PermitObserver (PermitAcquire).
//
// There is no blocking Acquire (as WaitN is for AllowN), on purpose for
// now: WaitN sleeps an exact RetryAfter, but a slot frees when some holder
// releases it, which no instance can foresee — RetryAfter here is only the
// earliest expiry — so a waiter could only poll, and a queue in one process
// would order nothing against the fleet's other instances. Retry a denial
// after a short, jittered pause of your choosing, within your context.
//
// Acquire is safe for concurrent use.
func (l *Limiter) Acquire(ctx context.Context, key string) (Permit, Result, error) {
	if l.holds.acquire.op == nil {
		return Permit{}, l.none(), fmt.Errorf("fleetlimit: acquire %q: strategy %s over store %T holds no permits (algorithm.Concurrency over a store.Holder): %w",
			key, l.rule.Name(), l.store, errors.ErrUnsupported)
	}
	start := l.permitStart()
	id := uuid.NewString()
	c := call{m: &l.holds.acquire}
	c.req.Permit = &algorithm.PermitOp{Kind: algorithm.AcquirePermit, ID: id}
	res, o, err := l.decideCall(ctx, &c, key, 1)
	if o.by() == DecidedByCaller && c.d.Allowed {
		l.giveBack(ctx, key, id, c.req.Strategy)
	}
	if l.cfg.shadow {
		decided := res.Allowed
		res = shadowed(res, o)
		l.observePermit(ctx, PermitAcquire, key, start, Result{Allowed: decided, Shadow: res.Shadow, Remaining: res.Remaining}, o, err)
	} else {
		l.observePermit(ctx, PermitAcquire, key, start, res, o, err)
	}
	if !res.Allowed {
		return Permit{}, res, err
	}
	return Permit{l: l, key: key, id: id, rule: c.req.Strategy, where: heldBy(res.Shadow, o)}, res, err
}

// giveBack releases in the store the permit id of key that the store took
// under rule for a caller gone meanwhile (denied): at once, within the
// limiter's timeout but without the caller's context, which is done; not
// told to the Observer, which was told of a denial. A release that fails
// leaves the slot held until the permit's ttl, as any failed Release does.
func (l *Limiter) giveBack(ctx context.Context, key, id string, rule algorithm.Strategy) {
	p := Permit{l: l, key: key, id: id, rule: rule, where: heldInStore}
	_, _, _ = p.release(context.WithoutCancel(ctx))
}

// Release gives the permit's slot back: exactly this permit's, never
// another's. Releasing a permit that is no longer held (released already,
// or expired) changes nothing and returns nil, so Release twice is
// harmless.
//
// A permit held in the store is given back through the store, with the
// limiter's circuit breaker and timeout. When the store cannot answer,
// Release tries again until the limiter's timeout has passed since it
// began (or ctx is done), and then returns an error wrapping
// ErrStoreUnavailable: the slot stays held in the store until the permit
// expires, ttl after it was last taken or renewed, and then frees itself.
// A release never fails silently, and never takes a slot. While the
// circuit is open it does not retry. A permit the fallback took (FailLocal,
// during an outage) is given back in the fallback store, never in the
// shared store, where it was never held.
func (p Permit) Release(ctx context.Context) error {
	if p.where == heldNowhere {
		return nil
	}
	start := p.l.permitStart()
	res, o, err := p.release(ctx)
	res.Allowed = err == nil
	p.l.observePermit(ctx, PermitRelease, p.key, start, res, o, err)
	return err
}

// release is Release of a permit held somewhere, with the Result and
// outcome of its last try.
func (p Permit) release(ctx context.Context) (Result, outcome, error) {
	l := p.l
	if p.where == heldLocally {
		return p.local(ctx, algorithm.ReleasePermit)
	}
	start := time.Now()
	backoff := max(time.Millisecond, l.cfg.timeout/8)
	for {
		res, o, err := p.remote(ctx, &l.holds.release, algorithm.ReleasePermit)
		if err == nil {
			return res, o, nil
		}
		retry := errors.Is(err, ErrStoreUnavailable) && !errors.Is(err, ErrCircuitOpen) && ctx.Err() == nil &&
			time.Since(start)+backoff < l.cfg.timeout
		if !retry {
			return res, o, fmt.Errorf("fleetlimit: release of a permit of %q (the store frees it at its ttl): %w", p.key, err)
		}
		if serr := sleepReal(ctx, backoff); serr != nil {
			return res, o, fmt.Errorf("fleetlimit: release of a permit of %q (the store frees it at its ttl): %w", p.key, err)
		}
	}
}

// Renew extends the permit: it is held until the strategy's ttl from now,
// by the store's clock, unless released first. A permit no longer held
// (it expired, or was released) is not brought back: the error is
// ErrPermitExpired. A permit held in the store is renewed there, with the
// limiter's circuit breaker and timeout, and a store that cannot answer is
// an error wrapping ErrStoreUnavailable (the permit is then still held
// until its earlier expiry); one the fallback took is renewed in the
// fallback store.
func (p Permit) Renew(ctx context.Context) error {
	if p.where == heldNowhere {
		return nil
	}
	var res Result
	var o outcome
	var err error
	start := p.l.permitStart()
	switch p.where {
	case heldLocally:
		res, o, err = p.local(ctx, algorithm.RenewPermit)
	default:
		res, o, err = p.remote(ctx, &p.l.holds.renew, algorithm.RenewPermit)
	}
	if err != nil {
		res.Allowed = false // a failure policy's Result extends nothing
	}
	p.l.observePermit(ctx, PermitRenew, p.key, start, res, o, err)
	if err != nil {
		return fmt.Errorf("fleetlimit: renew of a permit of %q: %w", p.key, err)
	}
	if !res.Allowed {
		return fmt.Errorf("fleetlimit: renew of a permit of %q: %w", p.key, ErrPermitExpired)
	}
	return nil
}

// remote applies kind to the permit in the limiter's store, through the
// pipeline in mode m (no fallback: the policy's Result comes with an
// error wrapping ErrStoreUnavailable).
func (p Permit) remote(ctx context.Context, m *mode, kind algorithm.PermitKind) (Result, outcome, error) {
	c := call{m: m}
	c.req.Permit = &algorithm.PermitOp{Kind: kind, ID: p.id}
	return p.l.decideCall(ctx, &c, p.key, 1)
}

// local applies kind to the permit in the fallback store, which took it,
// under the fallback's rule for the key (the outcome is always
// DecidedByFallback).
func (p Permit) local(ctx context.Context, kind algorithm.PermitKind) (Result, outcome, error) {
	l := p.l
	by := outcome(DecidedByFallback)
	req, err := l.request(p.key, 1)
	if err != nil {
		return l.none(), by, err
	}
	fb := l.holds.acquire.fallback
	req.Strategy = fb.ruleFor(p.rule, l.cfg.tiers != nil)
	req.Permit = &algorithm.PermitOp{Kind: kind, ID: p.id}
	d, err := l.holds.local.Hold(ctx, req)
	if err != nil {
		return l.none(), by, fmt.Errorf("fleetlimit: the fallback store: %w", err)
	}
	return resultOf(req.Strategy, d), by, nil
}
