// Package otelobserver records a fleetlimit.Limiter's decisions as
// OpenTelemetry metrics: a fleetlimit.Observer whose instruments are made
// by the metric.MeterProvider you pass in, under the meter named ScopeName.
//
// Instruments (docs/metrics.md maps each to its Prometheus series in
// package promobserver):
//
//	fleetlimit.decisions           counter {decision}
//	    fleetlimit.limiter, fleetlimit.result, fleetlimit.decider
//	fleetlimit.cost                counter {cost}: the cost, AllowN's n; an AllowAtMost's grant allowed and the rest of n denied (fleetlimit.Event.Cost)
//	    fleetlimit.limiter, fleetlimit.result, fleetlimit.decider
//	fleetlimit.shadow_admissions   counter {decision}: denials let through (WithShadow)
//	    fleetlimit.limiter
//	fleetlimit.decision.duration   histogram s: 50µs to 100ms
//	    fleetlimit.limiter, fleetlimit.decider
//	fleetlimit.store.errors        counter {error}
//	    fleetlimit.limiter, error.type
//	fleetlimit.breaker.state       observable gauge {state}: 0 closed, 1 half-open, 2 open
//	    fleetlimit.limiter
//	fleetlimit.permit.operations   counter {operation}: a concurrency limit's permits
//	    fleetlimit.limiter, fleetlimit.permit.op, fleetlimit.result, fleetlimit.decider
//
// Attribute values:
//
//	fleetlimit.limiter   the limiter's name (fleetlimit.WithName)
//	fleetlimit.result    allowed, denied
//	fleetlimit.decider   store, cache, lease, policy, fallback, caller (fleetlimit.Decider)
//	error.type           timeout, circuit_open, rejected, unavailable
//	fleetlimit.permit.op acquire, release, renew (fleetlimit.PermitOp)
//
// Permit operations (Observer is a fleetlimit.PermitObserver) are recorded
// on fleetlimit.permit.operations only, never as decisions: result allowed
// is an admitted acquire, a permit released (or no longer held) and a
// renew that extended its permit; denied is an acquire denied, a renew of
// an expired permit, and a release or renew that could not reach the store
// (decider policy).
//
// Settles (Reservation.Settle and Cancel: fleetlimit.Event.Settle) are not
// decisions either: a settle's units charged past its estimate are
// recorded on fleetlimit.cost, and its store errors on
// fleetlimit.store.errors; it is recorded on neither fleetlimit.decisions
// nor fleetlimit.decision.duration.
//
// The names follow ASP.NET Core's rate-limiting metrics
// (aspnetcore.rate_limiting.requests with an aspnetcore.rate_limiting.result
// attribute), the closest stable OpenTelemetry convention for rate limiting,
// and OpenTelemetry's style: dotted names in the fleetlimit namespace, UCUM
// units, error.type for the cause of a failure.
//
// A result is the decision as made: a shadow limiter's "would deny" is
// result denied (and a shadow admission). The decider says who made it:
// store, cache (the denial cache, WithDenialCache) and lease (WithLeases)
// are the store's decisions, the last two made in process with no round
// trip; policy and fallback are degraded decisions, each with a store
// error; caller is a caller whose context was done, denied whatever the
// policy, and is not a store error.
//
// Every attribute takes values from a fixed set, except the limiter's
// name, which is chosen in code, so the number of attribute sets is
// bounded. The client's key is never an attribute; nor is the route
// (Event.Route), which fleetlimit.ContextWithRoute lets any caller set to
// anything: the limiter's name already says which endpoint it guards.
//
// The package is a module of its own so that users of fleetlimit who do
// not use OpenTelemetry never download it.
package otelobserver

import (
	"context"
	"errors"

	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fleetlimit/fleetlimit"
)

// ScopeName is the instrumentation scope of the meter New asks the
// MeterProvider for.
const ScopeName = "github.com/fleetlimit/fleetlimit/otelobserver"

// Attribute keys.
const (
	// LimiterKey names the limiter (fleetlimit.WithName).
	LimiterKey = attribute.Key("fleetlimit.limiter")
	// ResultKey is the decision: ResultAllowed or ResultDenied.
	ResultKey = attribute.Key("fleetlimit.result")
	// DeciderKey says who decided: fleetlimit.Decider's String.
	DeciderKey = attribute.Key("fleetlimit.decider")
	// ErrorTypeKey is the cause of a store error (OpenTelemetry's
	// error.type): fleetlimit.Cause's String.
	ErrorTypeKey = attribute.Key("error.type")
	// PermitOpKey is a permit operation: fleetlimit.PermitOp's String.
	PermitOpKey = attribute.Key("fleetlimit.permit.op")
)

// Results, the values of ResultKey.
const (
	ResultAllowed = "allowed"
	ResultDenied  = "denied"
)

// latencyBuckets are the histogram's bounds in seconds: from 50µs (a
// decision in process) through a Redis round trip on a LAN (a few hundred
// µs) to 100ms (fleetlimit.DefaultTimeout, where a decision degrades).
// The same as promobserver's.
var latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}

// numDeciders is the number of fleetlimit.Decider values known here; a
// later one is recorded with attributes built for the call.
const numDeciders = int(fleetlimit.DecidedByLease) + 1

var results = [2]string{ResultAllowed, ResultDenied}

// numCauses is the number of fleetlimit.Cause values known here; a later
// one is recorded with attributes built for the call.
const numCauses = int(fleetlimit.CauseRejected) + 1

// Observer is a fleetlimit.Observer that records decisions on
// OpenTelemetry instruments (see the package doc). Give one Observer to
// every limiter with fleetlimit.WithObserver: each limiter's measurements
// carry its name; limiters that share a name share their points, and the
// breaker gauge reports the breaker of the latest decision. Observe is
// safe for concurrent use and takes no lock of its own: it builds a
// limiter's attribute sets at its first decision and reuses them, so that
// after it an Observe on the SDK's MeterProvider allocates nothing
// (BenchmarkObserve; TestObserveDoesNotAllocate).
type Observer struct {
	decisions   metric.Int64Counter
	cost        metric.Int64Counter
	shadow      metric.Int64Counter
	latency     metric.Float64Histogram
	storeErrors metric.Int64Counter
	breaker     metric.Int64ObservableGauge
	permitOps   metric.Int64Counter

	limiters sync.Map // limiter name -> *limiterSets
}

var (
	_ fleetlimit.Observer       = (*Observer)(nil)
	_ fleetlimit.PermitObserver = (*Observer)(nil)
)

// limiterSets are one limiter's attribute sets, each wrapped once in the
// option that the instruments take.
type limiterSets struct {
	name     string
	decision [2][numDeciders][]metric.AddOption // by result (0 allowed), decider
	latency  [numDeciders][]metric.RecordOption // by decider
	shadow   []metric.AddOption
	errors   [numCauses][]metric.AddOption // by fleetlimit.Cause
	gauge    []metric.ObserveOption
	breaker  atomic.Pointer[fleetlimit.Breaker]
	permits  atomic.Pointer[permitSets] // at the limiter's first permit operation
}

// permitOps are the permit operations recorded, by index.
var permitOps = [3]fleetlimit.PermitOp{fleetlimit.PermitAcquire, fleetlimit.PermitRelease, fleetlimit.PermitRenew}

// permitSets are one limiter's attribute sets of permit operations, by op
// index, result (0 allowed) and decider.
type permitSets [len(permitOps)][2][numDeciders][]metric.AddOption

// New returns an Observer whose instruments are made by mp's meter named
// ScopeName. It returns an error wrapping fleetlimit.ErrInvalidConfig for a
// nil mp, and mp's error if it cannot make an instrument. One Observer
// serves any number of limiters; the breaker gauge's callback stays
// registered for the life of mp.
func New(mp metric.MeterProvider) (*Observer, error) {
	if mp == nil {
		return nil, fmt.Errorf("%w: otelobserver: nil MeterProvider", fleetlimit.ErrInvalidConfig)
	}
	m := mp.Meter(ScopeName)
	o := &Observer{}
	var errs [8]error
	o.decisions, errs[0] = m.Int64Counter("fleetlimit.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by limiter, result (allowed, denied) and decider (store, cache, lease, policy, fallback, caller)."))
	o.cost, errs[1] = m.Int64Counter("fleetlimit.cost", metric.WithUnit("{cost}"),
		metric.WithDescription("Cost (AllowN's n) of rate-limit decisions, by limiter, result and decider."))
	o.shadow, errs[2] = m.Int64Counter("fleetlimit.shadow_admissions", metric.WithUnit("{decision}"),
		metric.WithDescription("Denials that a limiter in shadow mode let through."))
	o.latency, errs[3] = m.Float64Histogram("fleetlimit.decision.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to make a rate-limit decision, the store's round trip included, by limiter and decider."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	o.storeErrors, errs[4] = m.Int64Counter("fleetlimit.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Decisions the store did not make, by limiter and error.type (timeout, circuit_open, rejected, unavailable)."))
	o.breaker, errs[5] = m.Int64ObservableGauge("fleetlimit.breaker.state", metric.WithUnit("{state}"),
		metric.WithDescription("State of the limiter's circuit breaker: 0 closed, 1 half-open, 2 open."))
	if errs[5] == nil {
		_, errs[6] = m.RegisterCallback(o.observeBreakers, o.breaker)
	}
	o.permitOps, errs[7] = m.Int64Counter("fleetlimit.permit.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Operations on a concurrency limit's permits, by limiter, fleetlimit.permit.op (acquire, release, renew), result and decider."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otelobserver: %w", err)
	}
	return o, nil
}

// Observe records e.
func (o *Observer) Observe(e fleetlimit.Event) {
	ctx := context.Background()
	s := o.setsOf(e)
	r := 0
	if !e.Allowed {
		r = 1
	}
	decision, latency := o.optionsFor(s, r, e.DecidedBy)
	if !e.Settle {
		o.decisions.Add(ctx, 1, decision...)
		o.latency.Record(ctx, e.Latency.Seconds(), latency...)
	}
	admitted, denied := e.Cost()
	if admitted > 0 {
		allowed, _ := o.optionsFor(s, 0, e.DecidedBy)
		o.cost.Add(ctx, admitted, allowed...)
	}
	if denied > 0 {
		refused, _ := o.optionsFor(s, 1, e.DecidedBy)
		o.cost.Add(ctx, denied, refused...)
	}
	if e.Shadow {
		o.shadow.Add(ctx, 1, s.shadow...)
	}
	if c := e.Cause(); c != fleetlimit.CauseNone {
		o.storeErrors.Add(ctx, 1, s.errorOptions(c)...)
	}
}

// ObservePermit records a permit operation on fleetlimit.permit.operations.
func (o *Observer) ObservePermit(e fleetlimit.Event) {
	i := int(e.Permit) - int(fleetlimit.PermitAcquire)
	if i < 0 || i >= len(permitOps) {
		return // not an operation this package knows
	}
	s := o.setsOf(e)
	ps := s.permits.Load()
	if ps == nil {
		ps = newPermitSets(s.name)
		if !s.permits.CompareAndSwap(nil, ps) {
			ps = s.permits.Load()
		}
	}
	r := 0
	if !e.Allowed {
		r = 1
	}
	if int(e.DecidedBy) < numDeciders {
		o.permitOps.Add(context.Background(), 1, ps[i][r][e.DecidedBy]...)
		return
	}
	o.permitOps.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(s.name),
		PermitOpKey.String(permitOps[i].String()), ResultKey.String(results[r]), DeciderKey.String(e.DecidedBy.String()))))
}

// newPermitSets builds the permit attribute sets of the limiter named name.
func newPermitSets(name string) *permitSets {
	ps := new(permitSets)
	for i, op := range permitOps {
		for r, result := range results {
			for d := range numDeciders {
				ps[i][r][d] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name),
					PermitOpKey.String(op.String()), ResultKey.String(result), DeciderKey.String(fleetlimit.Decider(d).String())))}
			}
		}
	}
	return ps
}

// optionsFor returns the options of a decision with result r (0 allowed)
// by d, and of its latency: s's when d is a known Decider, else built now.
func (o *Observer) optionsFor(s *limiterSets, r int, d fleetlimit.Decider) ([]metric.AddOption, []metric.RecordOption) {
	if int(d) < numDeciders {
		return s.decision[r][d], s.latency[d]
	}
	by := DeciderKey.String(d.String())
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(s.name), ResultKey.String(results[r]), by))},
		[]metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(s.name), by))}
}

// setsOf returns the attribute sets of e's limiter, building them at its
// first decision, and keeps its breaker for the gauge.
func (o *Observer) setsOf(e fleetlimit.Event) *limiterSets {
	v, ok := o.limiters.Load(e.Name)
	if !ok {
		v, _ = o.limiters.LoadOrStore(e.Name, newLimiterSets(e.Name))
	}
	s := v.(*limiterSets)
	if s.breaker.Load() != e.Breaker {
		s.breaker.Store(e.Breaker)
	}
	return s
}

// newLimiterSets builds the attribute sets of the limiter named name.
func newLimiterSets(name string) *limiterSets {
	limiter := LimiterKey.String(name)
	s := &limiterSets{name: name}
	for d := range numDeciders {
		by := DeciderKey.String(fleetlimit.Decider(d).String())
		for r, result := range results {
			s.decision[r][d] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limiter, ResultKey.String(result), by))}
		}
		s.latency[d] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(limiter, by))}
	}
	for c := range numCauses {
		s.errors[c] = causeOptions(limiter, fleetlimit.Cause(c))
	}
	only := metric.WithAttributeSet(attribute.NewSet(limiter))
	s.shadow = []metric.AddOption{only}
	s.gauge = []metric.ObserveOption{only}
	return s
}

// errorOptions are the options of a store error of cause c: s's when c is
// a known Cause, else built now.
func (s *limiterSets) errorOptions(c fleetlimit.Cause) []metric.AddOption {
	if int(c) < numCauses {
		return s.errors[c]
	}
	return causeOptions(LimiterKey.String(s.name), c)
}

// causeOptions are the options of a store error of cause c.
func causeOptions(limiter attribute.KeyValue, c fleetlimit.Cause) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limiter, ErrorTypeKey.String(c.String())))}
}

// observeBreakers reports each limiter's breaker state when the reader
// collects. A limiter is known from its first decision on; one without a
// breaker (WithoutBreaker) reports nothing.
func (o *Observer) observeBreakers(_ context.Context, ob metric.Observer) error {
	o.limiters.Range(func(_, v any) bool {
		s := v.(*limiterSets)
		if b := s.breaker.Load(); b != nil {
			ob.ObserveInt64(o.breaker, int64(b.State()), s.gauge...)
		}
		return true
	})
	return nil
}
