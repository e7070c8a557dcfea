package ratelimitheader

import (
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// Adapter is what an adapter (httplimit, grpclimit) derives from its
// limiter when it is built, once, so that no request rebuilds it.
type Adapter struct {
	// Policy is the limiter's RateLimit-Policy (ForLimiter).
	Policy Policy
	// Headers reports whether responses carry the rate-limit headers (or
	// gRPC metadata): always, unless the limiter is in shadow mode
	// (fleetlimit.WithShadow) and the adapter was not told to send them
	// then (AdapterConfig.ShadowHeaders).
	Headers bool
	// Holds reports that the limiter is a concurrency limit
	// (algorithm.Holds): each request (or call) holds one permit.
	Holds bool
	// costCap is the most any strategy of the limiter's shape admits in
	// one request whatever its limit: algorithm.MaxLogCost when it is or
	// holds a sliding log, else algorithm.MaxInt (see MaxCost).
	costCap int64
}

// MaxCost is the most the key that res decided can ever admit in one
// request — algorithm.MaxCost of the key's own strategy, its tier's
// (fleetlimit.WithStrategyFor) or override's (fleetlimit.WithOverrides)
// when it has one: res.Limit, the key's, and at most algorithm.MaxLogCost
// when the limiter's strategy is or holds a sliding log. A tier or
// override keeps the limiter's shape (only the limit may differ), so it
// holds a sliding log exactly when the limiter's strategy does. For a
// composite (algorithm.All) res.Limit is the smallest member limit that
// the cost exceeds, when it exceeds one, so the bound is the composite's
// too. A request of a larger cost, denied, can never pass: waiting will
// not help.
func (a Adapter) MaxCost(res fleetlimit.Result) int64 {
	return min(res.Limit, a.costCap)
}

// costCap is Adapter.costCap for the limiter's strategy s: a penalty
// box's is its strategy's, a composite's its members' smallest.
func costCap(s algorithm.Strategy) int64 {
	if s == nil {
		return algorithm.MaxInt
	}
	s = rule.Inner(s)
	if c, ok := s.(algorithm.Composite); ok {
		most := int64(algorithm.MaxInt)
		for _, m := range c.Members() {
			most = min(most, costCap(m))
		}
		return most
	}
	if rule.SameShape(algorithm.SlidingWindowLog(1, s.Window()), s) == nil {
		return algorithm.MaxLogCost
	}
	return algorithm.MaxInt
}

// AdapterConfig is what an adapter is built from.
type AdapterConfig struct {
	// Name is the adapter's package ("httplimit"), which its errors name,
	// and Unit what it limits ("request", "call").
	Name, Unit string
	Limiter    *fleetlimit.Limiter
	// HasKey reports a key function; ShadowHeaders, that headers are sent
	// in shadow mode too; HasCost and HasSettledCost, the options WithCost
	// and WithSettledCost.
	HasKey, ShadowHeaders, HasCost, HasSettledCost bool
	// Errs are the errors the adapter's options reported.
	Errs []error
}

// Apply applies an adapter's options to target in order, each through
// apply (the adapter's Option.apply), and returns the errors they
// reported, for AdapterConfig.Errs.
func Apply[T, O any](target T, opts []O, apply func(O, T, *[]error)) []error {
	var errs []error
	for _, o := range opts {
		apply(o, target, &errs)
	}
	return errs
}

// NewAdapter checks what an adapter is built from: it returns an error
// wrapping fleetlimit.ErrInvalidConfig, naming the adapter, for a nil
// limiter, a missing key function, the errors its options reported, or a
// cost option (WithCost, WithSettledCost) beside a concurrency limit,
// whose request holds one permit whatever its cost; and otherwise what the
// adapter derives from the limiter.
func NewAdapter(c AdapterConfig) (Adapter, error) {
	l, errs := c.Limiter, c.Errs
	if l == nil {
		errs = append(errs, errors.New("nil limiter"))
	}
	if !c.HasKey {
		errs = append(errs, errors.New("nil KeyFunc"))
	}
	if len(errs) > 0 {
		return Adapter{}, fmt.Errorf("%w: %s: %w", fleetlimit.ErrInvalidConfig, c.Name, errors.Join(errs...))
	}
	a := Adapter{Policy: ForLimiter(l), Headers: !l.Shadow() || c.ShadowHeaders, Holds: algorithm.Holds(l.Strategy()),
		costCap: costCap(l.Strategy())}
	option := ""
	switch {
	case a.Holds && c.HasCost:
		option = "WithCost"
	case a.Holds && c.HasSettledCost:
		option = "WithSettledCost"
	default:
		return a, nil
	}
	return Adapter{}, fmt.Errorf("%s: %s with the concurrency limit %s, whose %s holds one permit: %w", c.Name, option, l.Name(), c.Unit, fleetlimit.ErrInvalidConfig)
}
