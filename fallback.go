package fleetlimit

import (
	"errors"
	"fmt"
	"sync"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// fallback is the in-process limiter that decides while the shared store
// cannot (FailLocal): the limiter's strategy scaled to one instance's share,
// applied in a store of this process.
type fallback struct {
	strategy  algorithm.Strategy
	store     store.Store
	instances int64
}

// strategyFor is the fallback's strategy for a decision on s: its own (the
// limiter's, scaled), or with per-key strategies (perKey, WithStrategyFor)
// s scaled. A strategy that cannot be scaled is applied at its full limit.
func (fb *fallback) strategyFor(s algorithm.Strategy, perKey bool) algorithm.Strategy {
	if !perKey {
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
		if st == nil {
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
