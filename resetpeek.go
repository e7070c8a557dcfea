package fleetlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/store"
)

// Reset puts key back at full capacity: its state for the limiter's
// algorithm under the limiter's key prefix is removed from the store, in one
// atomic step (store.Resetter), so the next decision on it is exactly a
// fresh key's. Every limiter sharing that prefix and algorithm (the
// instances of a fleet) sees the key reset; other keys, prefixes and
// algorithms are untouched. Under FailLocal the key's state in the fallback
// store is removed too, after the store's.
//
// Reset is an administrative write and never degrades: it does not consult
// the failure policy or the circuit breaker, and counts nothing in the
// breaker. It is bounded by the limiter's timeout, as AllowN is.
//
// Errors: an empty or over-long key is ErrInvalidKey, and nothing is
// removed; a store that does not implement store.Resetter, errors.ErrUnsupported;
// a ctx done before or during the call, an error wrapping ctx's error (the
// key may or may not have been reset); any other store failure, an error
// wrapping ErrStoreUnavailable and the cause. A failed Reset can be retried:
// resetting a fresh key changes nothing.
//
// Reset is safe for concurrent use; a decision concurrent with it sees the
// key either before or after the reset.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	rs, ok := l.store.(store.Resetter)
	if !ok {
		return fmt.Errorf("fleetlimit: reset %q: store %T does not implement store.Resetter: %w", key, l.store, errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fleetlimit: reset %q: caller gone: %w", key, err)
	}
	req := store.Request{Strategy: l.rule, Prefix: l.cfg.prefix, Key: key, Timeout: l.cfg.timeout}
	err := rs.Reset(ctx, req)
	if dc := l.denials; dc != nil {
		dc.Forget(key) // after the store's reset, even a failed one
	}
	if ls := l.leases; ls != nil {
		ls.Forget(key)
	}
	if err != nil {
		if cerr := ctxdone.Err(ctx); cerr != nil {
			return fmt.Errorf("fleetlimit: reset %q: caller gone: %w", key, cerr)
		}
		return fmt.Errorf("fleetlimit: reset %q: %w: %w", key, ErrStoreUnavailable, err)
	}
	if fb := l.fallback; fb != nil {
		if fr, ok := fb.store.(store.Resetter); ok {
			req.Strategy = fb.strategy
			if err := fr.Reset(ctx, req); err != nil {
				return fmt.Errorf("fleetlimit: reset %q in the fallback store: %w", key, err)
			}
		}
	}
	return nil
}

// Peek returns exactly what AllowN(ctx, key, n) would decide now, and
// records nothing: the key's state in the store is unchanged (in Redis its
// value and TTL), so a Peek followed by AllowN with nothing in between
// decides the same way twice. A concurrent decision on the key may of
// course change what the next AllowN sees.
//
// Everything else is as AllowN: the same input errors (ErrInvalidKey,
// ErrInvalidCost, ErrClockOutOfRange), the same timeout, and when the store
// cannot answer, the same circuit breaker (a failed peek counts as a failed
// decision) and failure policy — under FailOpen the Result is Allowed with
// an error wrapping ErrStoreUnavailable; under FailLocal the fallback store
// only peeks too (or, if it cannot peek, the Result is FailClosed's). A
// caller that is gone gets a denial and its context's error. The Observer
// is not told: a peek is not a decision.
//
// The store must implement store.Peeker and the strategy must allow a peek
// (its State an algorithm.Cloner for store.Memory, its Script.Peeks for
// store.Redis; the built-ins do); otherwise the error wraps
// errors.ErrUnsupported.
//
// Peek is safe for concurrent use. In Redis a peek is one read-only script
// (EVALSHA, pipelined as decisions are).
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (Result, error) {
	if _, err := l.request(key, n); err != nil {
		return l.none(), err
	}
	if l.peek.op == nil {
		return l.none(), fmt.Errorf("fleetlimit: peek %q: store %T does not implement store.Peeker: %w", key, l.store, errors.ErrUnsupported)
	}
	// The peek mode's stores peek (and the policy decides if the fallback
	// cannot): decide applies the breaker, the fallback and the policy
	// exactly as for AllowN.
	res, o, err := l.decide(ctx, key, n, &l.peek)
	if l.cfg.shadow {
		res = shadowed(res, o)
	}
	return res, err
}

// viewStore is a Store whose Decide is another operation of a store (its
// Peek, Refund, AtMost, Hold or Charge): a Limiter's view of its store for
// that operation, so that decide applies the breaker, fallback and policy
// to it as to AllowN. The breaker finds the circuit by the Limiter's own
// store (Limiter.shards), so a view is charged to the same circuit per
// server. It is never closed.
type viewStore func(context.Context, store.Request) (algorithm.Decision, error)

func (s viewStore) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	return s(ctx, req)
}

func (s viewStore) Close() error { return nil }
