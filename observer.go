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
// called AllowN, after the decision is made and before AllowN returns; there
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
	// the charge: work done that no limit counted. 0 otherwise.
	Cut int64
}

// routeKey is the context key of ContextWithRoute.
type routeKey struct{}

// ContextWithRoute returns a copy of ctx that names the route a decision is
// made for: the Observer sees it as Event.Route. Adapters set it (package
// httplimit sets the ServeMux pattern); the decision itself ignores it.
func ContextWithRoute(ctx context.Context, route string) context.Context {
	return context.WithValue(ctx, routeKey{}, route)
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
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("Cause(%d)", int(c))
}

var causeNames = [...]string{CauseNone: "none", CauseUnavailable: "unavailable", CauseTimeout: "timeout",
	CauseCircuitOpen: "circuit_open", CauseRejected: "rejected"}

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

func (d Decider) String() string {
	switch d {
	case DecidedByStore:
		return "store"
	case DecidedByPolicy:
		return "policy"
	case DecidedByFallback:
		return "fallback"
	case DecidedByCaller:
		return "caller"
	case DecidedByCache:
		return "cache"
	case DecidedByLease:
		return "lease"
	case DecidedByOverride:
		return "override"
	}
	return fmt.Sprintf("Decider(%d)", int(d))
}

// observed makes a decision and tells the observer about it.
func (l *Limiter) observed(ctx context.Context, key string, n int64) (Result, error) {
	start := time.Now()
	res, o, err := l.decide(ctx, key, n, &l.allow)
	out := res
	if l.cfg.shadow {
		out = shadowed(res, o)
	}
	if !o.invalid() {
		l.cfg.observer.Observe(l.event(ctx, key, n, res, out, o, err, start))
	}
	return out, err
}

// event is the Event of a decision on key of cost n begun at start: res as
// the pipeline made it, out as the caller gets it (shadowed), o who made
// it, err its error.
func (l *Limiter) event(ctx context.Context, key string, n int64, res, out Result, o outcome, err error, start time.Time) Event {
	route, _ := ctx.Value(routeKey{}).(string)
	return Event{
		Name:        l.cfg.name,
		Route:       route,
		Algorithm:   l.strategy.Name(),
		Key:         key,
		N:           n,
		Allowed:     res.Allowed,
		Shadow:      out.Shadow,
		Remaining:   res.Remaining,
		Latency:     time.Since(start),
		Err:         err,
		Policy:      l.cfg.policy,
		DecidedBy:   o.by(),
		CircuitOpen: o.circuitOpen(),
		Breaker:     l.cfg.breaker,
	}
}
