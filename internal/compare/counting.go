package compare

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// countingStore passes every call to the real store it wraps and counts
// the calls that decide: Decide, and Lease, which decides and takes or
// hands back a lease in the same script call. Over Redis each is one round
// trip. It implements store.Leaser (what WithLeases needs) and nothing else
// a limiter might look for (Reset, Peek, Refund, Sharded): compare uses
// none of them. Safe for concurrent use.
type countingStore struct {
	store.Store
	leaser store.Leaser // the same store; nil when it cannot lease
	calls  atomic.Int64
}

var _ store.Leaser = (*countingStore)(nil)

func newCountingStore(st store.Store) *countingStore {
	l, _ := st.(store.Leaser)
	return &countingStore{Store: st, leaser: l}
}

// Decide counts the call and passes it on.
func (c *countingStore) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	c.calls.Add(1)
	return c.Store.Decide(ctx, req)
}

// Lease counts the call and passes it on; a wrapped store that cannot
// lease refuses as the real one would (fleetlimit.New checks first).
func (c *countingStore) Lease(ctx context.Context, req store.Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	c.calls.Add(1)
	if c.leaser == nil {
		return algorithm.Grant{}, fmt.Errorf("compare: store %T cannot lease: %w: %w", c.Store, store.ErrRejected, errors.ErrUnsupported)
	}
	return c.leaser.Lease(ctx, req, terms)
}
