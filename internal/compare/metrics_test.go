package compare

import (
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

func TestIdealAdmitted(t *testing.T) {
	// An exact limiter of 2 per 10µs, one step per request.
	traffic := []Event{
		{At: 0, N: 1},           // admitted: 1 live
		{At: 1, N: 1},           // admitted: 2 live
		{At: 2, N: 1},           // denied: full
		{At: 2, User: 1, N: 2},  // another user has its own limit: admitted
		{At: 10, N: 1},          // the unit of 0 left at 10 (0 <= 10-10): admitted
		{At: 11, N: 1},          // the unit of 1 left: admitted
		{At: 12, N: 1},          // 10 and 11 live: denied
		{At: 12, User: 1, N: 1}, // user 1 still holds 2 until 12: its units of 2 left, admitted
		{At: 30, N: 3},          // costs more than the limit: never admitted
	}
	if got := idealAdmitted(traffic, 2, 10); got != 7 {
		t.Fatalf("ideal admitted %d, want 7", got)
	}
}

func TestWorstWindow(t *testing.T) {
	admitted := []Event{
		{At: 0, N: 1}, {At: 5, N: 1}, {At: 9, N: 2}, // 4 within [0, 10)
		{At: 10, N: 1}, // with 5 and 9: 4 within [5, 15)
		{At: 3, User: 1, N: 3},
		{At: 100, N: 1},
	}
	if got := worstWindow(admitted, 10); got != 4 {
		t.Fatalf("worst window %d, want 4", got)
	}
	// A window of 1µs holds only same-instant admissions.
	if got := worstWindow(admitted, 1); got != 3 {
		t.Fatalf("worst 1µs window %d, want 3 (user 1's single request)", got)
	}
}

func TestOneInstanceFixedWindowBoundary(t *testing.T) {
	// The boundary plan lets a fixed window through twice, an exact limiter
	// once.
	p := boundaryPlan(50, time.Minute.Microseconds(), nil)
	origin := 1000 * time.Minute.Microseconds() // a window edge
	fw, err := oneInstance(algorithm.FixedWindow(50, time.Minute), p.traffic, origin)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := oneInstance(algorithm.SlidingWindowLog(50, time.Minute), p.traffic, origin)
	if err != nil {
		t.Fatal(err)
	}
	if fw != 100 || sl != 50 {
		t.Fatalf("fixed window admits %d, sliding log %d; want 100, 50", fw, sl)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0.001, 1}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}

func TestMulDiv(t *testing.T) {
	// 3e11 * 8.64e10 overflows int64; the quotient does not.
	if got := mulDiv(300_000_000_000, 86_400_000_000, 1_000_000_000); got != 25_920_000_000_000 {
		t.Fatalf("mulDiv = %d", got)
	}
	if got := mulDiv(7, 3, 2); got != 10 {
		t.Fatalf("mulDiv(7, 3, 2) = %d, want 10", got)
	}
}
