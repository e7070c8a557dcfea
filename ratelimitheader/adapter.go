package ratelimitheader

import (
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit"
)

// Adapter is what an adapter (httplimit, grpclimit) derives from its
// limiter when it is built, once, so that no request rebuilds it.
type Adapter struct {
	// Policy is the limiter's RateLimit-Policy (ForLimiter).
	Policy Policy
	// Headers reports whether responses carry the rate-limit headers (or
	// gRPC metadata): always, unless the limiter is in shadow mode
	// (fleetlimit.WithShadow) and the adapter was not told to send them
	// then (shadowHeaders).
	Headers bool
}

// NewAdapter checks what an adapter named name is built from: it returns
// an error wrapping fleetlimit.ErrInvalidConfig, naming the adapter, for a
// nil limiter, a missing key function (hasKey false), or the errors its
// options reported (errs); and otherwise what the adapter derives from l.
func NewAdapter(name string, l *fleetlimit.Limiter, hasKey, shadowHeaders bool, errs []error) (Adapter, error) {
	if l == nil {
		errs = append(errs, errors.New("nil limiter"))
	}
	if !hasKey {
		errs = append(errs, errors.New("nil KeyFunc"))
	}
	if len(errs) > 0 {
		return Adapter{}, fmt.Errorf("%w: %s: %w", fleetlimit.ErrInvalidConfig, name, errors.Join(errs...))
	}
	return Adapter{Policy: ForLimiter(l), Headers: !l.Shadow() || shadowHeaders}, nil
}
