package keyed

import (
	"fmt"
	"testing"
	"time"
)

func TestShardsSpreadAndStable(t *testing.T) {
	s := NewShards[int](MaxShards)
	used := map[*int]bool{}
	for i := range 1000 {
		k := fmt.Sprint("key", i)
		if s.Of(k) != s.Of(k) {
			t.Fatalf("%s: two shards", k)
		}
		used[s.Of(k)] = true
	}
	if len(used) != MaxShards {
		t.Fatalf("1000 keys used %d of %d shards", len(used), MaxShards)
	}
	for _, n := range []int{-1, 0, 1} {
		sh := NewShards[int](n)
		if got := sh.Len(); got != 1 {
			t.Errorf("NewShards(%d) has %d shards, want 1", n, got)
		}
	}
	sh := NewShards[int](100)
	if got := sh.Len(); got != MaxShards {
		t.Errorf("NewShards(100) has %d shards, want %d", got, MaxShards)
	}
}

func TestClockSince(t *testing.T) {
	at := time.Unix(100, 500)
	for _, c := range []struct {
		exact bool
		now   time.Time
		want  time.Duration
	}{
		// Exact: whole microseconds of each reading, as the store reads them.
		{true, time.Unix(100, 1999), time.Microsecond},
		{true, time.Unix(100, 999), 0},
		// Monotonic: rounded up, never shorter than the true age.
		{false, time.Unix(100, 501), time.Microsecond},
		{false, time.Unix(100, 1500), time.Microsecond},
		{false, time.Unix(100, 1501), 2 * time.Microsecond},
		{false, time.Unix(99, 0), -time.Second - 500}, // a clock behind: negative, as measured
	} {
		if got := (Clock{c.exact}).Since(at, c.now); got != c.want {
			t.Errorf("exact %v, now %v: Since = %v, want %v", c.exact, c.now, got, c.want)
		}
	}
	if got := (Clock{}).Since(time.Now(), time.Time{}); got < 0 {
		t.Errorf("monotonic Since of now is %v", got)
	}
}
