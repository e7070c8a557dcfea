package fleetlimit

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

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
	return l.boxes.of(s, l.strategy, l.rule, *l.cfg.penalty), nil
}

// maxBoxes is the most tiers a limiter keeps in its penalty box at once
// (penaltyBoxes).
const maxBoxes = 1024

// penaltyBoxes are the tiers (WithStrategyFor) of a limiter with a penalty
// box, each as Penalize boxed it, so that a decision does not box its
// tier again (13 allocations). A tier is found by the strategy value f
// returned: a function that returns the same strategies, as a map of
// plans does, boxes each once. At most maxBoxes are kept: a function that
// builds a new strategy at each call has each boxed at its decision, past
// the first maxBoxes. Safe for concurrent use.
type penaltyBoxes struct {
	m sync.Map // algorithm.Strategy → its Penalize
	n atomic.Int64
}

// of is s in the penalty box p: own's boxing, boxed, when s is own.
func (b *penaltyBoxes) of(s, own, boxed algorithm.Strategy, p algorithm.Penalty) algorithm.Strategy {
	if !reflect.TypeOf(s).Comparable() {
		return algorithm.Penalize(s, p) // not a map key (nor == own)
	}
	if s == own {
		return boxed
	}
	if v, ok := b.m.Load(s); ok {
		return v.(algorithm.Strategy)
	}
	r := algorithm.Penalize(s, p)
	if b.n.Load() < maxBoxes {
		if v, loaded := b.m.LoadOrStore(s, r); loaded {
			return v.(algorithm.Strategy)
		}
		b.n.Add(1)
	}
	return r
}

// isNil reports whether v is nil, or holds a nil pointer, func, map, channel
// or slice: a typed nil, refused where a store, strategy or observer is
// given (a nil func's or pointer's methods panic; a nil map's or slice's
// need not, but such a value holds nothing to decide with).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Chan, reflect.Slice:
		return r.IsNil()
	}
	return false
}
