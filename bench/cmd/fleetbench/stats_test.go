package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, c := range []struct {
		name string
		xs   []float64
		want float64 // NaN: want NaN
	}{
		// No rounds, no figure: the tables print "–" for NaN.
		{"nil", nil, nan},
		{"empty", []float64{}, nan},
		{"one", []float64{7}, 7},
		// Odd counts take the middle value of the sorted copy.
		{"odd, unsorted", []float64{3, 1, 2}, 2},
		{"odd, repeated", []float64{5, 1, 1}, 1},
		// Even counts take the mean of the middle two.
		{"even, unsorted", []float64{4, 1, 3, 2}, 2.5},
		{"even, repeated", []float64{9, 2, 2, 2}, 2},
		{"even, negative", []float64{-3, -1}, -2},
		// Ratios over a round that measured nothing are ±Inf or NaN; they
		// sort as floats do: -Inf first, +Inf last, NaN before everything.
		{"odd, an infinity", []float64{inf, 1, 2}, 2},
		{"even, both infinities", []float64{-inf, inf}, nan},
		{"odd, a NaN sorts first", []float64{3, nan, 1}, 1},
		{"even, a NaN in the middle two", []float64{1, nan}, nan},
		// The mean of the middle two is computed as (a+b)/2.
		{"even, overflowing mean", []float64{math.MaxFloat64, math.MaxFloat64}, inf},
	} {
		in := slices.Clone(c.xs)
		got := median(in)
		if math.IsNaN(c.want) != math.IsNaN(got) || (!math.IsNaN(c.want) && got != c.want) {
			t.Errorf("%s: median(%v) = %v, want %v", c.name, c.xs, got, c.want)
		}
		if !slices.EqualFunc(in, c.xs, func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }) {
			t.Errorf("%s: median reordered its input: %v", c.name, in)
		}
	}
}

// TestRoundMedians pins the per-round medians of series and inprocResult: a
// figure is the median over rounds, a comparison the median of per-round
// comparisons over the rounds both sides have.
func TestRoundMedians(t *testing.T) {
	mk := func(rates ...float64) *series {
		s := &series{}
		for _, r := range rates {
			h := &hist{}
			h.record(time.Duration(r)) // below 128 ns the histogram is exact
			s.samples = append(s.samples, sample{ok: int64(r), elapsed: time.Second, hist: h})
		}
		return s
	}
	a, o := mk(10, 40, 20, 30), mk(5, 10, 20)
	check := func(what string, got, want float64) {
		t.Helper()
		if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && got != want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("rate", a.rate(), 25)
	// Rounds 1-3 only: 10/5, 40/10, 20/20.
	check("ratio", a.ratio(o), 2)
	check("ratio to nothing", a.ratio(nil), math.NaN())
	check("ratio over no rounds", a.ratio(&series{}), math.NaN())
	check("quantile", float64(a.quantile(0.5)), 25)
	// Per-round gaps 5, 30, 0 ns.
	check("latencyGap", float64(a.latencyGap(o, 0.5)), 5)

	r := &inprocResult{samples: map[int][]inprocSample{
		1: {{nsPerOp: 100, cpuNsPerOp: 90, allocsPerOp: 0, bytesPerOp: 0}, {nsPerOp: 120, cpuNsPerOp: 80, allocsPerOp: 1, bytesPerOp: 16}},
		2: {{nsPerOp: 50, cpuNsPerOp: 100, blocked: 0.5}, {nsPerOp: 80, cpuNsPerOp: 80, blocked: 0}, {nsPerOp: 1, cpuNsPerOp: 1, blocked: 0}},
	}}
	other := &inprocResult{samples: map[int][]inprocSample{1: {{nsPerOp: 200, cpuNsPerOp: 270}}}}
	check("ns", r.ns(1), 110)
	check("cpuNs", r.cpuNs(1), 85)
	check("allocs", r.allocs(1), 0.5)
	check("bytes", r.bytes(1), 8)
	check("blocked", r.blocked(2), 0)
	check("ns at no goroutine count measured", r.ns(3), math.NaN())
	// Rounds 1-2: 2·90/100·0.5 = 0.9 and 2·80/80·1 = 2.
	check("projectedSpeedup", r.projectedSpeedup(2), 1.45)
	// Rounds 1-2: 100/50 and 120/80.
	check("wallSpeedup", r.wallSpeedup(2), 1.75)
	// Round 1 only: 270/90.
	check("cpuSpeedup", r.cpuSpeedup(other, 1), 3)
	check("cpuSpeedup over nothing", r.cpuSpeedup(nil, 1), math.NaN())
}
