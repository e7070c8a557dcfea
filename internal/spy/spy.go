// Package spy has test doubles that watch real parts without replacing
// them: a Store that counts the decisions reaching the store it wraps, and
// an Observer that keeps every event.
package spy

import (
	"context"
	"sync"
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
type Observer struct {
	mu     sync.Mutex
	events []fleetlimit.Event
}

// Observe keeps e.
func (o *Observer) Observe(e fleetlimit.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

// Take returns the events since the last Take.
func (o *Observer) Take() []fleetlimit.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	ev := o.events
	o.events = nil
	return ev
}
