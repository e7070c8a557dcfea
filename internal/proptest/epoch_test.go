package proptest

import (
	"testing"
	"time"
)

// Timelines start at the first window edge at or after Epoch, which is
// itself an edge of windows of a microsecond, millisecond, second, minute,
// hour and day.
func TestEdgeAfter(t *testing.T) {
	for _, w := range []time.Duration{time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		if got := EdgeAfter(Epoch, w); !got.Equal(Epoch) {
			t.Errorf("EdgeAfter(Epoch, %v) = %v, want Epoch", w, got)
		}
	}
	w := 1234567 * time.Microsecond
	got := EdgeAfter(Epoch, w)
	if got.Before(Epoch) || !got.Before(Epoch.Add(w)) || got.UnixMicro()%w.Microseconds() != 0 {
		t.Errorf("EdgeAfter(Epoch, %v) = %v: not the first edge at or after Epoch", w, got)
	}
}
