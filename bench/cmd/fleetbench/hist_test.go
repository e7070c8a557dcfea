package main

import (
	"math"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	for _, ns := range []int64{0, 1, 63, 127, 128, 129, 1000, 61_000, 85_123, 1 << 30, 1 << 40} {
		got := bucketValue(bucketOf(ns))
		if rel := math.Abs(float64(got-ns)) / math.Max(float64(ns), 1); rel > 1.0/64 {
			t.Errorf("value %d lands in a bucket worth %d (off by %.2f%%)", ns, got, 100*rel)
		}
	}
	if bucketOf(math.MaxInt64) >= histBuckets {
		t.Fatalf("MaxInt64 maps to bucket %d, beyond %d", bucketOf(math.MaxInt64), histBuckets)
	}
	for ns := int64(0); ns < 1<<16; ns++ {
		if bucketOf(ns+1) < bucketOf(ns) {
			t.Fatalf("buckets not monotonic at %d", ns)
		}
	}
}

func TestQuantile(t *testing.T) {
	var h hist
	// 1..100 µs, one each: p50 is 50 µs, p99 is 99 µs.
	for i := 1; i <= 100; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	var other hist
	other.merge(&h)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}, {1, 100 * time.Microsecond}} {
		got := other.quantile(c.q)
		if d := math.Abs(float64(got - c.want)); d > float64(c.want)/64 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	var empty hist
	if empty.quantile(0.5) != 0 {
		t.Errorf("empty histogram has a median")
	}
}
