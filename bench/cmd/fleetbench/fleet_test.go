package main

import "testing"

// TestWindowCounts: the worst-window counts on hand-made calls, so that the
// fleet's over-admission figures count what they say.
func TestWindowCounts(t *testing.T) {
	// Calls A [0,1], B [2,3], C [10,20], D [11,12], E [30,31]; sorted
	// starts and ends.
	starts := []int64{0, 2, 10, 11, 30}
	ends := []int64{1, 3, 12, 20, 31}
	for _, c := range []struct{ w, want int64 }{
		{0, 2},  // the instant 11 (or 12) is inside C and D
		{1, 2},  // [1,2] touches A and B
		{9, 3},  // [1,10] touches A, B, C; [3,12] B, C, D
		{30, 5}, // [1,31] touches every call
	} {
		if got := mostOverlapping(starts, ends, c.w); got != c.want {
			t.Errorf("mostOverlapping(w=%d) = %d, want %d", c.w, got, c.want)
		}
	}
	// A window's ends are inside it: [0,0] and [5,5] both touch [0,5].
	if got := mostOverlapping([]int64{0, 5}, []int64{0, 5}, 5); got != 2 {
		t.Errorf("mostOverlapping of two instants 5 apart, w=5: %d, want 2", got)
	}
	mids := []int64{0, 2, 11, 15, 30}
	for _, c := range []struct{ w, want int64 }{
		{0, 1},  // no two instants coincide
		{2, 2},  // [0,2]
		{4, 2},  // [11,15]
		{19, 4}, // [0,19]
		{30, 5}, // [0,30]
	} {
		if got := mostWithin(mids, c.w); got != c.want {
			t.Errorf("mostWithin(w=%d) = %d, want %d", c.w, got, c.want)
		}
	}
}
