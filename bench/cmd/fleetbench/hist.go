package main

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: 2^subBits buckets per power of two,
// so a recorded latency is off by at most 1/64 (1.6%).
const subBits = 6

// histBuckets covers every int64 nanosecond value.
const histBuckets = (64 - subBits) << subBits

// hist is a log-linear latency histogram (the HdrHistogram layout): exact
// below 128 ns, then 64 buckets per power of two. Recording is allocation
// free; one per goroutine, merged after a run.
type hist struct {
	counts [histBuckets]int64
	total  int64
}

func bucketOf(ns int64) int {
	if ns < 0 {
		ns = 0
	}
	v := uint64(ns)
	if v < 2<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift<<subBits + int(v>>uint(shift))
}

// bucketValue is the midpoint of bucket i, in nanoseconds.
func bucketValue(i int) int64 {
	if i < 2<<subBits {
		return int64(i)
	}
	shift := i>>subBits - 1
	mant := int64(i - shift<<subBits)
	return mant<<uint(shift) + (int64(1)<<uint(shift))/2
}

func (h *hist) record(d time.Duration) {
	h.counts[bucketOf(int64(d))]++
	h.total++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
}

// quantile returns the q-quantile (0 < q <= 1): the smallest recorded value
// with at least q of all values at or below it.
func (h *hist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketValue(i))
		}
	}
	return time.Duration(bucketValue(histBuckets - 1))
}

// countAtLeast is how many recorded values are at least d (by bucket: values
// in d's bucket count).
func (h *hist) countAtLeast(d time.Duration) int64 {
	var n int64
	for i := bucketOf(int64(d)); i < histBuckets; i++ {
		n += h.counts[i]
	}
	return n
}
