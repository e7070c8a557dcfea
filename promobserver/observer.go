// Package promobserver exports a fleetlimit.Limiter's decisions as
// Prometheus metrics: a fleetlimit.Observer registered on a
// prometheus.Registerer you pass in.
//
// Series, each labelled by limiter (the limiter's name, WithName):
//
//	fleetlimit_decisions_total{limiter, outcome}     counter
//	    outcome: allowed, denied, degraded-allowed, degraded-denied, caller-gone
//	fleetlimit_cost_total{limiter, result}           counter: the cost (AllowN's n; fleetlimit.Event.Cost)
//	    result: admitted, denied (an AllowAtMost's grant admitted, the rest of n denied)
//	fleetlimit_shadow_admissions_total{limiter}      counter: denials let through (WithShadow)
//	fleetlimit_decision_duration_seconds{limiter}    histogram: 50µs to 100ms
//	fleetlimit_store_errors_total{limiter, cause}    counter
//	    cause: timeout, circuit-open, rejected, unavailable
//	fleetlimit_breaker_state{limiter}                gauge: 0 closed, 1 half-open, 2 open
//	fleetlimit_local_decisions_total{limiter, by}    counter: decisions made with no round trip
//	    by: lease (fleetlimit.WithLeases), cache (fleetlimit.WithDenialCache)
//	fleetlimit_permit_operations_total{limiter, op, outcome}  counter: a concurrency limit's permits
//	    op: acquire, release, renew (fleetlimit.PermitOp); outcome as for decisions
//
// Permit operations (Observer is a fleetlimit.PermitObserver) are counted
// in permit_operations_total only, never as decisions. Their outcome is the
// operation's: allowed is an admitted acquire, a permit released (or no
// longer held) and a renew that extended its permit; denied is an acquire
// denied and a renew of an expired permit; degraded-* are operations the
// store did not decide (an acquire decided by the policy or the fallback,
// a release or renew that could not reach the store).
//
// Settles (Reservation.Settle and Cancel: fleetlimit.Event.Settle) are not
// decisions either: a settle's units charged past its estimate are counted
// in cost_total, and its store errors in store_errors_total; it is counted
// in neither decisions_total nor decision_duration_seconds.
//
// Round trips saved: local decisions are counted in decisions_total too, so
// rate(local_decisions_total) / rate(decisions_total) is the share of
// decisions that made no round trip to the store.
//
// An outcome is the decision as made: a shadow limiter's "would deny" is
// outcome denied (and a shadow admission). Degraded outcomes are decisions
// the store did not make (the fallback's or the failure policy's, each
// with a store error); caller-gone is a caller whose context was done, denied
// whatever the policy, and is not a store error. The label values are
// fixed sets, and limiter names are chosen in code, so the number of
// series is bounded: the client's key is never a label.
//
// The package is a module of its own so that users of fleetlimit who do
// not use Prometheus never download client_golang.
package promobserver

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetlimit/fleetlimit"
)

// Outcomes, the values of the outcome label.
const (
	OutcomeAllowed         = "allowed"
	OutcomeDenied          = "denied"
	OutcomeDegradedAllowed = "degraded-allowed"
	OutcomeDegradedDenied  = "degraded-denied"
	OutcomeCallerGone      = "caller-gone"
)

// latencyBuckets are the histogram's upper bounds in seconds: from 50µs (a
// decision in process) through a Redis round trip on a LAN (a few hundred
// µs) to 100ms (fleetlimit.DefaultTimeout, where a decision degrades).
var latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}

// Observer is a fleetlimit.Observer that counts decisions into Prometheus
// metrics (see the package doc). Give one Observer to every limiter with
// fleetlimit.WithObserver: each limiter's series carry its name. Observe
// is safe for concurrent use, allocates nothing after a limiter's first
// decision, and takes no lock.
type Observer struct {
	decisions   *prometheus.CounterVec
	cost        *prometheus.CounterVec
	shadow      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	local       *prometheus.CounterVec
	permitOps   *prometheus.CounterVec
	breaker     *prometheus.Desc

	limiters sync.Map // name -> *limiterMetrics
}

var (
	_ fleetlimit.Observer       = (*Observer)(nil)
	_ fleetlimit.PermitObserver = (*Observer)(nil)
)

// limiterMetrics are one limiter's series, looked up once.
type limiterMetrics struct {
	outcomes                 [5]prometheus.Counter // by outcome index
	admittedCost, deniedCost prometheus.Counter
	shadow                   prometheus.Counter
	latency                  prometheus.Observer
	byLease, byCache         prometheus.Counter
	breaker                  atomic.Pointer[fleetlimit.Breaker]
	permits                  atomic.Pointer[permitCounters] // at the limiter's first permit operation
}

// permitCounters are one limiter's permit_operations_total series, by op
// (acquire, release, renew) and outcome index.
type permitCounters [3][5]prometheus.Counter

var permitOpNames = [3]fleetlimit.PermitOp{fleetlimit.PermitAcquire, fleetlimit.PermitRelease, fleetlimit.PermitRenew}

var outcomeNames = [5]string{OutcomeAllowed, OutcomeDenied, OutcomeDegradedAllowed, OutcomeDegradedDenied, OutcomeCallerGone}

// New returns an Observer whose metrics are registered on reg, e.g.
// prometheus.DefaultRegisterer. It returns an error wrapping
// fleetlimit.ErrInvalidConfig for a nil reg, and reg's error if the metrics
// are registered there already (one Observer per registry serves any
// number of limiters).
func New(reg prometheus.Registerer) (*Observer, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: promobserver: nil Registerer", fleetlimit.ErrInvalidConfig)
	}
	o := &Observer{
		decisions: counter("fleetlimit_decisions_total",
			"Rate-limit decisions, by limiter and outcome (allowed, denied, degraded-allowed, degraded-denied, caller-gone).",
			"limiter", "outcome"),
		cost: counter("fleetlimit_cost_total",
			"Cost (AllowN's n) of rate-limit decisions, by limiter and result (admitted, denied).",
			"limiter", "result"),
		shadow: counter("fleetlimit_shadow_admissions_total",
			"Denials that a limiter in shadow mode let through.",
			"limiter"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetlimit_decision_duration_seconds",
			Help:    "Time to make a rate-limit decision, the store's round trip included.",
			Buckets: latencyBuckets,
		}, []string{"limiter"}),
		storeErrors: counter("fleetlimit_store_errors_total",
			"Decisions the store did not make, by limiter and cause (timeout, circuit-open, rejected, unavailable).",
			"limiter", "cause"),
		local: counter("fleetlimit_local_decisions_total",
			"Rate-limit decisions made in process with no round trip to the store, by limiter and by what made them (lease, cache).",
			"limiter", "by"),
		permitOps: counter("fleetlimit_permit_operations_total",
			"Operations on a concurrency limit's permits, by limiter, op (acquire, release, renew) and outcome (allowed, denied, degraded-allowed, degraded-denied, caller-gone).",
			"limiter", "op", "outcome"),
		breaker: prometheus.NewDesc("fleetlimit_breaker_state",
			"State of the limiter's circuit breaker: 0 closed, 1 half-open, 2 open.", []string{"limiter"}, nil),
	}
	for _, c := range []prometheus.Collector{o.decisions, o.cost, o.shadow, o.latency, o.storeErrors, o.local, o.permitOps, breakerCollector{o}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("promobserver: %w", err)
		}
	}
	return o, nil
}

// counter is a counter vector named name, with help and the labels given.
func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// outcome is the index in outcomeNames of e's outcome.
func outcome(e fleetlimit.Event) int {
	switch {
	case e.DecidedBy == fleetlimit.DecidedByCaller:
		return 4
	case e.Degraded() && e.Allowed:
		return 2
	case e.Degraded():
		return 3
	case e.Allowed:
		return 0
	}
	return 1
}

// Observe counts e.
func (o *Observer) Observe(e fleetlimit.Event) {
	m := o.metricsOf(e)
	if !e.Settle {
		m.outcomes[outcome(e)].Inc()
		m.latency.Observe(e.Latency.Seconds())
	}
	admitted, denied := e.Cost()
	if admitted > 0 {
		m.admittedCost.Add(float64(admitted))
	}
	if denied > 0 {
		m.deniedCost.Add(float64(denied))
	}
	if e.Shadow {
		m.shadow.Inc()
	}
	switch e.DecidedBy {
	case fleetlimit.DecidedByLease:
		m.byLease.Inc()
	case fleetlimit.DecidedByCache:
		m.byCache.Inc()
	}
	if c := e.Cause(); c != fleetlimit.CauseNone {
		o.storeErrors.WithLabelValues(e.Name, causeLabel(c)).Inc()
	}
}

// ObservePermit counts a permit operation in permit_operations_total.
func (o *Observer) ObservePermit(e fleetlimit.Event) {
	i := int(e.Permit) - int(fleetlimit.PermitAcquire)
	if i < 0 || i >= len(permitOpNames) {
		return // not a permit operation this package knows
	}
	m := o.metricsOf(e)
	pc := m.permits.Load()
	if pc == nil {
		pc = new(permitCounters)
		for j, op := range permitOpNames {
			for k, name := range outcomeNames {
				pc[j][k] = o.permitOps.WithLabelValues(e.Name, op.String(), name)
			}
		}
		if !m.permits.CompareAndSwap(nil, pc) {
			pc = m.permits.Load()
		}
	}
	pc[i][outcome(e)].Inc()
}

// metricsOf returns the series of e's limiter, creating them on its first
// decision, and keeps its breaker for the gauge.
func (o *Observer) metricsOf(e fleetlimit.Event) *limiterMetrics {
	v, ok := o.limiters.Load(e.Name)
	if !ok {
		m := &limiterMetrics{
			admittedCost: o.cost.WithLabelValues(e.Name, "admitted"),
			deniedCost:   o.cost.WithLabelValues(e.Name, "denied"),
			shadow:       o.shadow.WithLabelValues(e.Name),
			latency:      o.latency.WithLabelValues(e.Name),
			byLease:      o.local.WithLabelValues(e.Name, "lease"),
			byCache:      o.local.WithLabelValues(e.Name, "cache"),
		}
		for i, name := range outcomeNames {
			m.outcomes[i] = o.decisions.WithLabelValues(e.Name, name)
		}
		v, _ = o.limiters.LoadOrStore(e.Name, m)
	}
	m := v.(*limiterMetrics)
	if m.breaker.Load() != e.Breaker {
		m.breaker.Store(e.Breaker)
	}
	return m
}

// causeLabels are the cause label's values, by fleetlimit.Cause.
var causeLabels = [...]string{
	fleetlimit.CauseUnavailable: "unavailable",
	fleetlimit.CauseTimeout:     "timeout",
	fleetlimit.CauseCircuitOpen: "circuit-open",
	fleetlimit.CauseRejected:    "rejected",
}

// causeLabel is the cause label of c, a cause other than CauseNone: one of
// causeLabels, or c's String for a cause added after this package.
func causeLabel(c fleetlimit.Cause) string {
	if int(c) < len(causeLabels) {
		return causeLabels[c]
	}
	return c.String()
}

// breakerCollector reports each limiter's breaker state when scraped. A
// limiter is known from its first decision on; one without a breaker
// (WithoutBreaker) has no series.
type breakerCollector struct{ o *Observer }

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.o.breaker }

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	c.o.limiters.Range(func(name, v any) bool {
		if b := v.(*limiterMetrics).breaker.Load(); b != nil {
			ch <- prometheus.MustNewConstMetric(c.o.breaker, prometheus.GaugeValue, float64(b.State()), name.(string))
		}
		return true
	})
}
