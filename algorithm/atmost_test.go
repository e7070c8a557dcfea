package algorithm_test

import (
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// TestAtMostSteps: the Go partial grant of a composite and of a penalty
// box, step by step on fixed instants.
func TestAtMostSteps(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0) // a whole minute
	grant := func(s algorithm.Strategy, st algorithm.State, at time.Time, n int64) algorithm.Decision {
		t.Helper()
		d, err := s.(algorithm.Granter).AtMost(st, at, n)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// 10 per second and 5 per minute: the minute is the tighter.
	all := algorithm.All(algorithm.TokenBucket(10, time.Second, 10), algorithm.FixedWindow(5, time.Minute))
	st := all.NewState()
	// 8 asked, 5 fit both: each member is charged 5.
	d := grant(all, st, t0, 8)
	if d.Granted != 5 || !d.Allowed || d.Members()[0].Remaining != 5 || d.Members()[1].Remaining != 0 {
		t.Fatalf("8 of a fresh key: %+v %+v", d, d.Members())
	}
	// The window is spent: nothing fits, and the bucket is not charged;
	// one unit fits when the minute turns.
	d = grant(all, st, t0.Add(time.Second), 3)
	if d.Granted != 0 || d.Allowed || d.RetryAfter != 59*time.Second || d.Members()[0].Remaining != 10 {
		t.Fatalf("3 of a spent window: %+v %+v", d, d.Members())
	}

	// 2 per minute, banned for a minute at the first denial.
	pen := algorithm.Penalize(algorithm.FixedWindow(2, time.Minute), algorithm.Penalty{After: 1, Within: time.Minute, Ban: time.Minute, MaxBan: time.Minute})
	st = pen.NewState()
	// 3 asked, 2 fit: an admission, not counted.
	if d = grant(pen, st, t0, 3); d.Granted != 2 || d.Ban() != 0 {
		t.Fatalf("3 of a fresh key: %+v", d)
	}
	// Nothing fits: a grant of 0 is a denial, which starts the ban.
	if d = grant(pen, st, t0.Add(time.Second), 1); d.Granted != 0 || d.Ban() != time.Minute {
		t.Fatalf("1 of a spent window: %+v", d)
	}
	// Banned: nothing is granted, though the window has turned, until the
	// ban ends.
	if d = grant(pen, st, t0.Add(time.Minute), 1); d.Granted != 0 || d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("1 while banned: %+v", d)
	}
	if d = grant(pen, st, t0.Add(61*time.Second), 5); d.Granted != 2 {
		t.Fatalf("5 after the ban: %+v", d)
	}
}
