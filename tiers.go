package fleetlimit

import (
	"context"
	"fmt"
	"reflect"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// WithStrategyFor sets per-key limits (tiers, plans, overrides): before each
// decision on a key (AllowN, Peek) the limiter asks f which strategy applies
// to it, and applies that one; f returning nil means the limiter's own.
// (Reset needs no answer: every tier keeps its state in the same keys.) A typical f looks the user's plan up in a map or cache; it runs on
// every decision, so it must be fast and safe for concurrent use, and is
// given the decision's ctx.
//
// Every strategy f returns must be the limiter's algorithm over the same
// window (for a composite, the same members' algorithms, in order, each
// over its window): only the limit may differ — and, for a token bucket,
// rate and burst together, keeping the time to refill from empty. Then a
// key's state carries over when its tier changes, and is fair both ways: a
// user moved from 100 to 1,000 per minute mid-window keeps what was already
// spent (a sliding log keeps its entries, a window its count, a token
// bucket its debt, measured in time), and switching back and forth never
// grants a fresh allowance: in any interval, a key admits at most what the
// largest of its tiers admits alone (TestPropertyTierSwitchBound). A
// strategy of another shape is refused at the decision.
//
// An error from f, or a strategy that is invalid or of another shape, is
// returned by AllowN (wrapped; ErrInvalidConfig for the strategy) with a
// denied Result that has only the limiter's Limit set, and nothing is
// recorded. The parameters travel as the script's arguments, as always:
// still one round trip per decision. While the store is down, the fallback
// (FailLocal) applies the key's strategy at its share. The limiter's name,
// key prefix and the middleware's static headers are the limiter's own;
// the Result's Limit is the key's.
func WithStrategyFor(f func(ctx context.Context, key string) (algorithm.Strategy, error)) Option {
	return option(func(c *config) {
		if f == nil {
			c.errs = append(c.errs, fmt.Errorf("nil WithStrategyFor function"))
		}
		c.tiers = f
	})
}

// tierFor returns the strategy that applies to key: the limiter's own
// unless WithStrategyFor says otherwise.
func (l *Limiter) tierFor(ctx context.Context, key string) (algorithm.Strategy, error) {
	f := l.cfg.tiers
	if f == nil {
		return l.strategy, nil
	}
	s, err := f(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("fleetlimit: strategy for %q: %w", key, err)
	}
	if isNil(s) {
		return l.strategy, nil
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("fleetlimit: strategy for %q: %w: %w", key, ErrInvalidConfig, err)
	}
	if err := rule.SameShape(l.strategy, s); err != nil {
		return nil, fmt.Errorf("fleetlimit: strategy for %q: %w: %w", key, ErrInvalidConfig, err)
	}
	return s, nil
}

// ruleFor is key's tier as applied to its keys: in the limiter's penalty
// box, if it has one (WithPenalty).
func (l *Limiter) ruleFor(ctx context.Context, key string) (algorithm.Strategy, error) {
	s, err := l.tierFor(ctx, key)
	if err != nil || l.cfg.penalty == nil {
		return s, err
	}
	return algorithm.Penalize(s, *l.cfg.penalty), nil
}

// isNil reports whether v is nil or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}
