package fleetlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Refund gives back n units that key was charged, for a request that
// should not have counted (it failed, or its cost was estimated too high),
// and returns the key's standing after it: Allowed true, Limit, Remaining
// (the cost that can pass right after the refund) and ResetAfter as AllowN
// reports them, RetryAfter 0. In Redis it is one script, atomic with every
// decision on the key.
//
// What is given back is the strategy's refund rule (algorithm.Refunder):
// never above full capacity; a token bucket gets n tokens back; a sliding
// log loses its n newest live units; a fixed window's count is lowered only
// while the window that holds now is the one the key counted in — after the
// window has turned, the old count limits nothing and the refund changes
// nothing; a sliding-window counter takes n off the current window's count,
// then off the previous window's. The store cannot tell which request the
// units came from: refunding the key's latest admission, with nothing else
// charged to the key in between, leaves it exactly as if that admission had
// never been made (TestPropertyRefundRestores); in every case a refund of n
// lets at most n more units through (TestPropertyRefundMintsNothing).
//
// A refund is not idempotent: refunding twice gives back twice (up to full
// capacity). Refund only what AllowN admitted, once.
//
// Errors, each with a Result that has only Limit set: an empty or
// over-long key, n < 1 or above 2^53, or a clock out of range are
// ErrInvalidKey, ErrInvalidCost, ErrClockOutOfRange, and nothing changes; a
// strategy that is not an algorithm.Refunder, or a store that is not a
// store.Refunder, wraps errors.ErrUnsupported. A ctx done before the call
// changes nothing and returns its error; one done during it returns its
// error, and the refund may or may not have been made. The limiter's
// timeout and circuit breaker apply as to AllowN (a failed refund counts as
// a failed decision; while the circuit is open the store is not called);
// when the store cannot answer, under every failure policy, the error
// wraps ErrStoreUnavailable and nothing is given back, not even in the
// FailLocal fallback store: the limiter cannot know where the units were
// charged, and giving back locally units charged in the shared store would
// let this instance admit more than its share. A lost refund only makes the
// limit stricter. The Observer is not told: a refund is not a decision.
//
// Refund is safe for concurrent use.
func (l *Limiter) Refund(ctx context.Context, key string, n int64) (Result, error) {
	none := l.none()
	if _, err := l.request(key, n); err != nil {
		return none, err
	}
	if _, ok := l.strategy.(algorithm.Refunder); !ok {
		return none, fmt.Errorf("fleetlimit: refund %q: strategy %s does not implement algorithm.Refunder: %w", key, l.strategy.Name(), errors.ErrUnsupported)
	}
	if l.refund.op == nil {
		return none, fmt.Errorf("fleetlimit: refund %q: store %T does not implement store.Refunder: %w", key, l.store, errors.ErrUnsupported)
	}
	// The refund mode has no fallback, denial cache or leases: decide
	// applies the timeout and the breaker exactly as for AllowN.
	res, _, err := l.decide(ctx, key, n, &l.refund)
	if dc := l.denials; dc != nil {
		dc.Forget(key) // the units given back may let a cached denial pass
	}
	if err != nil {
		return none, err
	}
	return res, nil
}
