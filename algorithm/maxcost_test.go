package algorithm_test

import (
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// MaxCost of a nil strategy, or of a composite or penalty box around one,
// is 0 (it admits nothing), not a panic.
func TestMaxCostOfNil(t *testing.T) {
	var typed algorithm.Strategy = (*struct{ algorithm.Strategy })(nil)
	for name, s := range map[string]algorithm.Strategy{
		"nil":              nil,
		"typed nil":        typed,
		"All(nil)":         algorithm.All(nil),
		"All(tb, nil)":     algorithm.All(algorithm.TokenBucket(10, time.Second, 10), nil),
		"Penalize(nil, …)": algorithm.Penalize(nil, algorithm.Penalty{}),
	} {
		if got := algorithm.MaxCost(s); got != 0 {
			t.Errorf("%s: MaxCost %d, want 0", name, got)
		}
	}
	if got := algorithm.MaxCost(algorithm.SlidingWindowLog(3*algorithm.MaxLogCost, time.Minute)); got != algorithm.MaxLogCost {
		t.Errorf("a sliding log above MaxLogCost: MaxCost %d, want %d", got, algorithm.MaxLogCost)
	}
}
