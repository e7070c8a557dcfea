package fleetlimit

import (
	"context"
	"errors"
	"fmt"

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
	req := store.Request{Strategy: l.strategy, Prefix: l.cfg.prefix, Key: key, Timeout: l.cfg.timeout}
	if err := rs.Reset(ctx, req); err != nil {
		if cerr := doneErr(ctx); cerr != nil {
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
