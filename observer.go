package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/store"
)

// Observer is told about every decision a Limiter makes: to count, log or
// trace them without a metrics dependency in this package (see SlogObserver,
// and docs/http.md for Prometheus counters in ten lines).
//
// Observe is called synchronously, once per decision, on the goroutine that
// called AllowN, after the decision is made and before AllowN returns (and
// likewise once per AllowAtMost, Reserve and store-bound Settle, marked
// Event.AtMost and Event.Settle); there
// is no goroutine or queue in between. It must therefore be fast and safe for
// concurrent use, and must not retain the Event's error beyond the call if it
// cares about memory. Calls with invalid input (ErrInvalidKey,
// ErrInvalidCost, ErrClockOutOfRange) are not decisions and are not observed.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Event describes one decision.
type Event struct {
	// Name is the limiter's name (WithName; default the strategy's name):
	// the endpoint a per-endpoint limiter guards.
	Name string
	// Route is the route the decision was made for, as ContextWithRoute put
	// it in the call's context: an HTTP route or a gRPC method when an
	// adapter (package httplimit) made the call; empty otherwise.
	Route string
	// Algorithm is the strategy's name, e.g. "token_bucket".
	Algorithm string
	// Key is the client's key, e.g. a user id or an IP prefix. It is
	// unbounded in number: never use it as a metric label.
	Key string
	// N is the cost charged.
	N int64
	// Allowed is the decision, and Remaining the Remaining of the Result
	// AllowN returned. For a shadow admission Allowed is false: the
	// limiter would have denied the request (see Shadow).
	Allowed bool
	// Shadow reports a shadow admission (WithShadow): the decision denied
	// the request, and the limiter admitted it (Result.Shadow).
	Shadow    bool
	Remaining int64
	// Latency is how long the decision took, the store's round trip
	// included, on the monotonic clock (never the WithClock clock).
	Latency time.Duration

	// Err is nil when the store decided. Otherwise the decision is
	// degraded: Err is the error AllowN returned (wrapping
	// ErrStoreUnavailable, and ErrCircuitOpen when the breaker kept the
	// store out of it; or the caller's context error).
	Err error
	// Policy is the limiter's failure policy: what a degraded decision
	// applies when DecidedBy is DecidedByPolicy.
	Policy FailurePolicy
	// DecidedBy says who made the decision: the store, the failure policy,
	// the in-process fallback (WithFallback), the caller's context, the
	// denial cache (WithDenialCache) repeating the store's denial, or a
	// lease (WithLeases).
	DecidedBy Decider
	// CircuitOpen reports that the circuit breaker kept the store out of
	// this decision: the store was not called.
	CircuitOpen bool
	// Breaker is the limiter's circuit breaker (nil after WithoutBreaker),
	// for observers that report its State, e.g. as a metric read when it is
	// scraped. The same for every decision of one limiter.
	Breaker *Breaker
	// Settle reports the settling of a reservation (Reservation.Settle or
	// Cancel) rather than an admission: N is then the units charged past
	// the estimate, or, negative, the units given back; Allowed is true
	// when it was made (Err nil). A Reserve is observed as AllowN is.
	Settle bool
	// Cut is, for a Settle, the units the debt cap (WithMaxDebt) cut off
	// the charge: work done that no limit counted; for a composite, the
	// most any member cut (each member's is its LimitResult.Cut in the
	// Result Settle returns). 0 otherwise.
	Cut int64
	// AtMost reports a partial grant (Limiter.AllowAtMost) rather than an
	// AllowN: N is then the cost asked for, and Granted the units granted,
	// 0 to N, Allowed being Granted > 0. For a shadow grant (Shadow) Granted
	// is what the limiter would have granted, below N, and the caller was
	// given N. Both are zero for every other event.
	AtMost  bool
	Granted int64

	// Permit is the permit operation this event reports, for a
	// PermitObserver; NotPermit (zero) for AllowN's decisions.
	Permit PermitOp
}

// routeKey is the context key of ContextWithRoute.
type routeKey struct{}

// ContextWithRoute returns a copy of ctx that names the route a decision is
// made for: the Observer sees it as Event.Route. Adapters set it (package
// httplimit sets the ServeMux pattern); the decision itself ignores it.
func ContextWithRoute(ctx context.Context, route string) context.Context {
	return context.WithValue(ctx, routeKey{}, route)
}

// Cost splits e's units into those admitted and those denied, for
// observers that count cost (package promobserver and otelobserver): for
// an AllowN (or a Reserve), N as Allowed says; for a partial grant
// (AtMost), Granted admitted and N - Granted denied; for a settle, the
// units charged past the estimate (N > 0) admitted, and nothing for units
// given back (N < 0), which are no cost. Both are >= 0.
func (e Event) Cost() (admitted, denied int64) {
	switch {
	case e.AtMost:
		return e.Granted, e.N - e.Granted
	case e.Settle:
		return max(e.N, 0), 0
	case e.Allowed:
		return e.N, 0
	}
	return 0, e.N
}

// Degraded reports whether the store did not make this decision.
func (e Event) Degraded() bool { return e.Err != nil }

// Cause is why the store did not make a degraded decision: the one
// classification every observer reports (promobserver's cause label,
// otelobserver's error.type), read with Event.Cause. (A store used after
// Close is an error, not a decision, and is not observed.)
type Cause uint8

const (
	// CauseNone: the store decided, or the caller's context was done
	// before it could (DecidedByCaller: the caller, not the store, failed).
	CauseNone Cause = iota
	// CauseUnavailable: refused or broken connections, and Redis errors
	// such as OOM, LOADING, READONLY.
	CauseUnavailable
	// CauseTimeout: the store did not answer within the limiter's timeout.
	CauseTimeout
	// CauseCircuitOpen: the breaker kept the store out of the decision.
	CauseCircuitOpen
	// CauseRejected: the store answered and refused this request (a key of
	// another type, a malformed reply).
	CauseRejected
)

// Cause classifies e's store error; CauseNone when e is not degraded or
// was decided by the caller's context.
func (e Event) Cause() Cause {
	switch {
	case e.Err == nil || e.DecidedBy == DecidedByCaller:
		return CauseNone
	case errors.Is(e.Err, ErrCircuitOpen):
		return CauseCircuitOpen
	case errors.Is(e.Err, context.DeadlineExceeded):
		return CauseTimeout
	case errors.Is(e.Err, store.ErrRejected):
		return CauseRejected
	}
	return CauseUnavailable
}

// String is c in snake case: "none", "unavailable", "timeout",
// "circuit_open" or "rejected".
func (c Cause) String() string { return enumName("Cause", int(c), causeNames[:]) }

var causeNames = [...]string{CauseNone: "none", CauseUnavailable: "unavailable", CauseTimeout: "timeout",
	CauseCircuitOpen: "circuit_open", CauseRejected: "rejected"}

// enumName is names[v], the name of the value v of the enumeration typ, or
// "typ(v)" for a value names has not.
func enumName(typ string, v int, names []string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// Decider says who made a decision.
type Decider uint8

const (
	// DecidedByStore: the shared store decided, as it should.
	DecidedByStore Decider = iota
	// DecidedByPolicy: the store could not, and the FailurePolicy did.
	DecidedByPolicy
	// DecidedByFallback: the store could not, and the in-process fallback
	// limiter (WithFallback) did.
	DecidedByFallback
	// DecidedByCaller: the caller's context was done (cancelled, or its
	// deadline passed), so the request was denied whatever the policy.
	DecidedByCaller
	// DecidedByCache: the store had denied the same request, and the
	// limiter answered it again from its denial cache (WithDenialCache),
	// with no round trip. Err is nil: the decision is the store's.
	DecidedByCache
	// DecidedByLease: the limiter admitted the request from the units it
	// had leased from the store (WithLeases), with no round trip. Err is
	// nil.
	DecidedByLease
	// DecidedByOverride: the key is exempt (SetOverride with
	// algorithm.Unlimited) or blocked (Block), and the limiter answered in
	// process, without the store, recording nothing. Err is nil. A key
	// whose override is a rule is decided by the store as usual.
	DecidedByOverride
)

func (d Decider) String() string { return enumName("Decider", int(d), deciderNames[:]) }

var deciderNames = [...]string{DecidedByStore: "store", DecidedByPolicy: "policy", DecidedByFallback: "fallback",
	DecidedByCaller: "caller", DecidedByCache: "cache", DecidedByLease: "lease", DecidedByOverride: "override"}

// observed makes a decision and tells the observer about it.
func (l *Limiter) observed(ctx context.Context, key string, n int64) (Result, error) {
	start := time.Now()
	res, o, err := l.decide(ctx, key, n, &l.allow)
	out := res
	if l.cfg.shadow {
		out = shadowed(res, o)
	}
	if !o.invalid() {
		l.cfg.observer.Observe(l.event(ctx, key, n, start, Result{Allowed: res.Allowed, Shadow: out.Shadow, Remaining: res.Remaining}, o, err))
	}
	return out, err
}

// event is the Event of a call on key of cost n that began at start, with
// res's Allowed, Shadow and Remaining, decided as o says.
func (l *Limiter) event(ctx context.Context, key string, n int64, start time.Time, res Result, o outcome, err error) Event {
	route, _ := ctx.Value(routeKey{}).(string)
	return Event{
		Name:        l.cfg.name,
		Route:       route,
		Algorithm:   l.strategy.Name(),
		Key:         key,
		N:           n,
		Allowed:     res.Allowed,
		Shadow:      res.Shadow,
		Remaining:   res.Remaining,
		Latency:     time.Since(start),
		Err:         err,
		Policy:      l.cfg.policy,
		DecidedBy:   o.by(),
		CircuitOpen: o.circuitOpen(),
		Breaker:     l.cfg.breaker,
	}
}

// PermitOp names the operation of a concurrency limit's permit that an
// Event reports (Event.Permit; see PermitObserver).
type PermitOp uint8

const (
	// NotPermit: the event is an AllowN decision.
	NotPermit PermitOp = iota
	// PermitAcquire: Limiter.Acquire. Allowed is the acquire's admission.
	PermitAcquire
	// PermitRelease: Permit.Release. Allowed reports that the permit is
	// no longer held (released now, or before: it expired or was
	// released); false with Err set when the store could not be reached.
	PermitRelease
	// PermitRenew: Permit.Renew. Allowed reports that the permit was
	// extended; false with a nil Err when it had expired
	// (ErrPermitExpired), false with Err set when the store could not be
	// reached.
	PermitRenew
)

func (op PermitOp) String() string { return enumName("PermitOp", int(op), permitOpNames[:]) }

var permitOpNames = [...]string{NotPermit: "none", PermitAcquire: "acquire", PermitRelease: "release", PermitRenew: "renew"}

// PermitObserver is implemented by an Observer (WithObserver) that wants
// the operations on a concurrency limit's permits (algorithm.Concurrency):
// ObservePermit is called once per Limiter.Acquire, Permit.Release and
// Permit.Renew, as Observe is for AllowN (synchronously, on the caller's
// goroutine, before the call returns), with Event.Permit naming the
// operation. The Event is filled as for a decision: N is 1, Latency spans
// the whole call (a Release's retries included), Err is the store error
// the call met (ErrPermitExpired is not one: a renew of an expired permit
// is a denial, Allowed false, Err nil), DecidedBy is DecidedByStore, or
// DecidedByFallback for a permit the fallback holds (FailLocal, during an
// outage), or the policy or the caller when the store was not reached.
// Observe is never called for permit operations, so an Observer that is
// not a PermitObserver counts AllowN's decisions only. Calls with invalid
// input, and the Release and Renew of a Permit that holds no slot (the zero
// Permit, or one admitted by FailOpen or shadow mode), are not observed:
// nothing was done. Package promobserver and otelobserver count them.
type PermitObserver interface {
	ObservePermit(Event)
}

// observePermit tells the limiter's PermitObserver, if any, about a permit
// operation on key that began at start (the zero Time when there is no
// observer: see permitStart).
func (l *Limiter) observePermit(ctx context.Context, op PermitOp, key string, start time.Time, res Result, o outcome, err error) {
	to := l.holds.observer
	if to == nil || o.invalid() {
		return
	}
	e := l.event(ctx, key, 1, start, res, o, err)
	e.Permit = op
	to.ObservePermit(e)
}

// permitStart is the start of a permit operation on l: the time now when
// l has a PermitObserver, else the zero Time (no clock read).
func (l *Limiter) permitStart() time.Time {
	if l.holds.observer == nil {
		return time.Time{}
	}
	return time.Now()
}
