package algorithm

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Constructor builds a strategy of one algorithm that allows limit units per
// window, so that every algorithm can be compared on the same terms.
type Constructor func(limit int64, window time.Duration) Strategy

// Entry is one algorithm in the registry.
type Entry struct {
	// Name is the algorithm's Strategy.Name.
	Name string
	// New builds a strategy allowing limit per window.
	New Constructor
	// Exact reports whether the algorithm never admits more than limit in any
	// interval of length window (the sliding-window log). The token bucket
	// bounds any interval d by burst + rate*d/per instead, and the fixed window
	// only each aligned window.
	Exact bool
}

var (
	registryMu sync.RWMutex
	registry   = []Entry{
		{Name: "sliding_window_log", New: SlidingWindowLog, Exact: true},
		{Name: "token_bucket", New: func(limit int64, window time.Duration) Strategy {
			// limit tokens refill per window and the bucket holds limit.
			return TokenBucket(limit, window, limit)
		}},
		{Name: "fixed_window", New: FixedWindow},
		{Name: "sliding_window_counter", New: SlidingWindowCounter},
	}
)

// Register adds an algorithm to the registry, so that the property tests and
// the compare tool cover it without further changes. It returns an error if
// the name is empty or already registered. Safe for concurrent use.
func Register(e Entry) error {
	if e.Name == "" || e.New == nil {
		return fmt.Errorf("algorithm: register needs a name and a constructor: %w", ErrInvalidStrategy)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if slices.ContainsFunc(registry, func(x Entry) bool { return x.Name == e.Name }) {
		return fmt.Errorf("algorithm: %q is already registered: %w", e.Name, ErrInvalidStrategy)
	}
	registry = append(registry, e)
	return nil
}

// Registry returns every registered algorithm, built-ins first, in
// registration order. The returned slice is a copy.
func Registry() []Entry {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Clone(registry)
}
