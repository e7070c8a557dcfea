// Package spy has test doubles that watch real parts without replacing
// them: a Store that counts the decisions reaching the store it wraps, and
// an Observer that keeps every event.
package spy

import (
	"context"
	"sync/atomic"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// Store counts the decisions that reach the store it wraps: to show, for
// example, that an open breaker does not call the store at all.
type Store struct {
	store.Store
	Calls atomic.Int64
}

// Decide counts the call and passes it on.
func (s *Store) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	s.Calls.Add(1)
	return s.Store.Decide(ctx, req)
}

// Observer keeps every event it is told about. Safe for concurrent use.
type Observer struct{ kept[fleetlimit.Event] }

// Observe keeps e.
func (o *Observer) Observe(e fleetlimit.Event) { o.keep(e) }
