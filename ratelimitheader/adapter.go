package ratelimitheader

import (
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
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
	a := Adapter{Policy: ForLimiter(l), Headers: !l.Shadow() || c.ShadowHeaders, Holds: algorithm.Holds(l.Strategy())}
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
