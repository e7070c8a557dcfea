package rule

import (
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

func TestCircles(t *testing.T) {
	log100 := algorithm.SlidingWindowLog(100, time.Minute)
	pen := algorithm.Penalty{After: 3, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour}
	for _, c := range []struct {
		name        string
		a, b        algorithm.Strategy
		same, shape bool
	}{
		{"one value", log100, log100, true, true},
		{"built twice", log100, algorithm.SlidingWindowLog(100, time.Minute), true, true},
		{"another limit", log100, algorithm.SlidingWindowLog(200, time.Minute), false, true},
		{"another window", log100, algorithm.SlidingWindowLog(100, time.Hour), false, false},
		{"another algorithm", log100, algorithm.FixedWindow(100, time.Minute), false, false},
		{"bucket, rate and burst scaled", algorithm.TokenBucket(10, time.Second, 20), algorithm.TokenBucket(20, time.Second, 40), false, true},
		{"composites, one limit apart",
			algorithm.All(algorithm.TokenBucket(10, time.Second, 10), algorithm.FixedWindow(100, time.Hour)),
			algorithm.All(algorithm.TokenBucket(10, time.Second, 10), algorithm.FixedWindow(200, time.Hour)), false, true},
		{"composites, members swapped",
			algorithm.All(algorithm.TokenBucket(10, time.Second, 10), algorithm.FixedWindow(100, time.Hour)),
			algorithm.All(algorithm.FixedWindow(100, time.Hour), algorithm.TokenBucket(10, time.Second, 10)), false, false},
		{"penalty boxes built twice", algorithm.Penalize(log100, pen), algorithm.Penalize(algorithm.SlidingWindowLog(100, time.Minute), pen), true, true},
	} {
		if got := Same(c.a, c.b); got != c.same {
			t.Errorf("%s: Same = %v, want %v", c.name, got, c.same)
		}
		if got := ID(c.a) == ID(c.b); got != c.same {
			t.Errorf("%s: equal IDs = %v, want %v (Same): %q, %q", c.name, got, c.same, ID(c.a), ID(c.b))
		}
		if got := SameShape(c.a, c.b) == nil; got != c.shape {
			t.Errorf("%s: SameShape = %v, want shape %v", c.name, SameShape(c.a, c.b), c.shape)
		}
		if c.same && Namespace(c.a) != Namespace(c.b) {
			t.Errorf("%s: one rule, two namespaces %q, %q", c.name, Namespace(c.a), Namespace(c.b))
		}
	}
	if got := Namespace(log100); got != "100.60000000" {
		t.Errorf("Namespace of a sliding log of 100 per minute = %q, want 100.60000000", got)
	}
	if Inner(algorithm.Penalize(log100, pen)) != log100 || Inner(log100) != log100 {
		t.Error("Inner does not unwrap a penalty box, or unwraps a plain strategy")
	}
}
