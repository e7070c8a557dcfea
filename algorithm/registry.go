package algorithm

import (
	"time"
)

// Constructor builds a strategy of one algorithm that allows limit units per
// window, so that every algorithm can be compared on the same terms.
type Constructor func(limit int64, window time.Duration) Strategy

// Entry is one built-in algorithm.
type Entry struct {
	// Name is the algorithm's Strategy.Name.
	Name string
	// New builds a strategy allowing limit per window.
	New Constructor
	// Exact reports whether the algorithm never admits more than limit in any
	// interval of length window (the sliding-window log). The token bucket
	// bounds any interval d by burst + rate*d/per instead, the fixed window
	// only each aligned window, and the sliding-window counter each aligned
	// window and any window-long interval below 2*limit.
	Exact bool
}

// Registry returns every built-in algorithm, in a fixed order, so that the
// property tests, the conformance suite and the compare tool cover each one
// on the same terms. The returned slice is new on every call: changing it
// changes nothing else. A strategy of your own runs on every store without
// being listed here; test it with store/storetest and your own properties
// (see the package's Example_customStrategy).
func Registry() []Entry {
	return []Entry{
		{Name: "sliding_window_log", New: SlidingWindowLog, Exact: true},
		{Name: "token_bucket", New: func(limit int64, window time.Duration) Strategy {
			// limit tokens refill per window and the bucket holds limit.
			return TokenBucket(limit, window, limit)
		}},
		{Name: "fixed_window", New: FixedWindow},
		{Name: "sliding_window_counter", New: SlidingWindowCounter},
	}
}
