package fleetlimit

import (
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// fallback is the in-process limiter that decides while the shared store
// cannot: the limiter's strategy scaled to one instance's share, applied in
// a store of this process.
type fallback struct {
	strategy algorithm.Strategy
	store    store.Store
}

// WithFallback decides every decision the shared store cannot make —
// because the breaker is open or because the call failed — with an
// in-process limiter instead of the failure policy: the limiter's strategy
// scaled to limit / instances (at least 1; see algorithm.Scaler) applied in
// st, normally a store.NewMemory() that the caller owns and closes (one
// Memory can serve the fallbacks of many limiters: their keys are kept
// apart as in Redis, by prefix and algorithm).
//
// Fail-open without a fallback admits everything while Redis is down:
// minutes of uncapped traffic. With it, a fleet of instances instances keeps
// roughly the limit in total, as long as the load balancer spreads each
// client evenly; each instance enforces its share on its own. The decision
// is still reported as degraded: AllowN returns the fallback's Result (with
// the scaled Limit and its real Remaining) and an error wrapping
// ErrStoreUnavailable, and the Observer sees DecidedByFallback. The fallback
// replaces the FailurePolicy for both policies: FailClosed with a fallback
// admits each instance's share rather than nothing. A caller whose context
// is done is denied, as without a fallback (see Limiter.AllowN).
//
// The strategy must implement algorithm.Scaler (the built-ins do); instances
// must be >= 1 and st non-nil, or New fails with ErrInvalidConfig.
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

// newFallback builds the fallback for strategy s, or returns nil when none is
// configured.
func newFallback(s algorithm.Strategy, c *config) (*fallback, error) {
	if c.fallbackStore == nil || c.fallbackInstances < 1 {
		return nil, nil
	}
	sc, ok := s.(algorithm.Scaler)
	if !ok {
		return nil, fmt.Errorf("%w: strategy %s does not implement algorithm.Scaler, which WithFallback needs", ErrInvalidConfig, s.Name())
	}
	fs := sc.Scaled(c.fallbackInstances)
	if fs == nil {
		return nil, fmt.Errorf("%w: strategy %s scaled to nil", ErrInvalidConfig, s.Name())
	}
	if err := fs.Validate(); err != nil {
		return nil, fmt.Errorf("%w: fallback strategy: %w", ErrInvalidConfig, err)
	}
	return &fallback{strategy: fs, store: c.fallbackStore}, nil
}
