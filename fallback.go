package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// FailurePolicy decides a request when the store cannot. The zero value is
// the default, FailLocal.
type FailurePolicy int

const (
	// FailLocal decides the request in this process: the limiter's strategy
	// at limit / instances, applied in an in-process store (see
	// WithFallback; by default instances is 1, in a store.Memory that every
	// default limiter of the process shares). With K instances a window
	// inside an outage thus admits at most K times the limit, and one that
	// spans its start or end at most K+1 times (the fallbacks start empty
	// beside what the store admitted; TestFallbackBoundAcrossTheOutage),
	// never an unbounded flood, and a client who stays under the limit is
	// not refused. The Result is the
	// local decision's, with its real Remaining. This is the default.
	//
	// The shared default store sweeps by the latest time its callers pass
	// (see store.Memory): limiters on virtual clocks (WithClock) that run
	// behind one another are judged at the latest. Tests of outages on a
	// virtual clock should give their own store, e.g.
	// WithFallback(store.NewMemory(store.WithMemoryClock(clock)), 1).
	FailLocal FailurePolicy = iota
	// FailOpen admits the request, without any bound: a store outage costs
	// protection, not availability. The Result has Allowed true, Limit set,
	// Remaining 0, RetryAfter and ResetAfter 0.
	FailOpen
	// FailClosed denies the request: a store outage costs availability, not
	// protection. The Result has Allowed false, Limit set, Remaining 0, and
	// RetryAfter = ResetAfter = FailClosedRetryAfter.
	FailClosed
)

// FailClosedRetryAfter is the RetryAfter of a request denied by FailClosed.
const FailClosedRetryAfter = time.Second

func (p FailurePolicy) String() string {
	return enumName("FailurePolicy", int(p), failurePolicyNames[:])
}

var failurePolicyNames = [...]string{FailLocal: "fail-local", FailOpen: "fail-open", FailClosed: "fail-closed"}

// degraded decides the call, which the store did not, with the mode's
// fallback or else the policy; err (wrapping ErrStoreUnavailable) is
// returned either way.
func (l *Limiter) degraded(ctx context.Context, c *call, err error, circuitOpen bool) (Result, outcome, error) {
	if fb := c.m.fallback; fb != nil {
		req := c.req
		req.Strategy = fb.ruleFor(req.Strategy, l.cfg.tiers != nil)
		d, ferr := fb.store.Decide(ctx, req)
		if ferr == nil {
			c.d = d // for AllowAtMost, which reads the units granted
			return resultOf(req.Strategy, d), decidedBy(DecidedByFallback, circuitOpen), err
		}
		err = fmt.Errorf("%w (and the fallback failed: %w)", err, ferr)
	}
	return l.byPolicy(), decidedBy(DecidedByPolicy, circuitOpen), err
}

// byPolicy returns the policy's Result for a decision neither the store nor
// the fallback made: FailOpen admits; FailClosed, and FailLocal whose local
// store failed too (it was closed), deny.
func (l *Limiter) byPolicy() Result {
	r := l.none()
	if l.cfg.policy == FailOpen {
		r.Allowed = true
	} else {
		r.RetryAfter, r.ResetAfter = FailClosedRetryAfter, FailClosedRetryAfter
	}
	return r
}

// fallback is the in-process limiter that decides while the shared store
// cannot (FailLocal): the limiter's strategy scaled to one instance's share,
// applied in a store of this process.
type fallback struct {
	strategy  algorithm.Strategy
	store     store.Store
	instances int64
}

// ruleFor is the fallback's rule for a decision on s: its own (the
// limiter's, scaled), or with tiers (WithStrategyFor) s scaled. A strategy
// that cannot be scaled is applied at its full limit.
func (fb *fallback) ruleFor(s algorithm.Strategy, tiered bool) algorithm.Strategy {
	if !tiered {
		return fb.strategy
	}
	if fb.instances <= 1 {
		return s
	}
	if sc, ok := s.(algorithm.Scaler); ok {
		if fs := sc.Scaled(fb.instances); fs != nil && fs.Validate() == nil {
			return fs
		}
	}
	return s
}

// WithFallback sets how FailLocal (the default policy) decides while the
// shared store cannot — because the breaker is open or because the call
// failed: the limiter's strategy scaled to limit / instances (at least 1;
// see algorithm.Scaler), applied in st, a store.NewMemory() that the caller
// owns and closes (one Memory can serve the fallbacks of many limiters:
// their keys are kept apart as in Redis, by prefix and algorithm). Default:
// instances 1, in one store.Memory shared by the process's limiters,
// created by the first New that needs it and kept for the life of the
// process.
//
// With instances set to the fleet's size, the fleet keeps roughly the limit
// in total while Redis is down (about twice it in a window that spans the
// outage's start or end, beside what Redis admitted), as long as the load
// balancer spreads each client evenly; with the default 1, at most K times the limit in a window
// inside the outage with K instances, and K+1 times in one that spans its
// start or end (TestFallbackBoundAcrossTheOutage). The
// decision is still reported as degraded: AllowN returns the fallback's
// Result (with the scaled Limit and its real Remaining) and an error
// wrapping ErrStoreUnavailable, and the Observer sees DecidedByFallback. A
// caller whose context is done is denied, as always (see Limiter.AllowN).
//
// For instances > 1 the strategy must implement algorithm.Scaler (the
// built-ins do); instances must be >= 1 and st non-nil, and the policy must
// be FailLocal, or New fails with ErrInvalidConfig.
func WithFallback(st store.Store, instances int64) Option {
	return option(func(c *config) {
		if isNil(st) {
			c.errs = append(c.errs, errors.New("nil fallback store"))
		}
		if instances < 1 {
			c.errs = append(c.errs, fmt.Errorf("fallback for %d instances, want >= 1", instances))
		}
		c.fallbackStore, c.fallbackInstances = st, instances
	})
}

// localStore is the in-process store of every FailLocal limiter given no
// WithFallback.
var localStore = sync.OnceValue(func() store.Store { return store.NewMemory() })

// newFallback builds the fallback of a FailLocal limiter with strategy s,
// or returns nil for the other policies.
func newFallback(s algorithm.Strategy, c *config) (*fallback, error) {
	if c.policy != FailLocal {
		if c.fallbackStore != nil {
			return nil, fmt.Errorf("%w: WithFallback sets how FailLocal decides; the policy is %v", ErrInvalidConfig, c.policy)
		}
		return nil, nil
	}
	st, instances := c.fallbackStore, c.fallbackInstances
	if st == nil {
		st, instances = localStore(), 1
	}
	if instances == 1 {
		return &fallback{strategy: s, store: st}, nil
	}
	sc, ok := s.(algorithm.Scaler)
	if !ok {
		return nil, fmt.Errorf("%w: strategy %s does not implement algorithm.Scaler, which WithFallback needs for %d instances", ErrInvalidConfig, s.Name(), instances)
	}
	fs := sc.Scaled(instances)
	if fs == nil {
		return nil, fmt.Errorf("%w: strategy %s scaled to nil", ErrInvalidConfig, s.Name())
	}
	if err := fs.Validate(); err != nil {
		return nil, fmt.Errorf("%w: fallback strategy: %w", ErrInvalidConfig, err)
	}
	return &fallback{strategy: fs, store: st, instances: instances}, nil
}
