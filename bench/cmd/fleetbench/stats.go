package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// median returns the median of xs (the mean of the middle two for an even
// count); NaN for none. xs is not reordered. Every figure the harness
// reports over rounds or over sampled keys is a median taken here.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianOf is the median of f over xs: one figure per round, then the
// median over rounds. NaN when xs is empty.
func medianOf[T any](xs []T, f func(T) float64) float64 {
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = f(x)
	}
	return median(ys)
}

// pairedMedian is the median over rounds of f(a[i], b[i]), over the rounds
// both have: comparing two contenders within each round cancels drift in
// the machine's load. NaN when either is empty.
func pairedMedian[T any](a, b []T, f func(a, b T) float64) float64 {
	ys := make([]float64, min(len(a), len(b)))
	for i := range ys {
		ys[i] = f(a[i], b[i])
	}
	return median(ys)
}

// rate is the median over rounds of decisions/s.
func (s *series) rate() float64 { return medianOf(s.samples, sample.rate) }

// ratio is the median over rounds of s's decisions/s over o's in the same
// round.
func (s *series) ratio(o *series) float64 {
	if o == nil {
		return math.NaN()
	}
	return pairedMedian(s.samples, o.samples, func(a, b sample) float64 { return a.rate() / b.rate() })
}

// bestQuantile is the lowest q-quantile of any round: the latency of the
// least disturbed round.
func (s *series) bestQuantile(q float64) time.Duration {
	best := time.Duration(math.MaxInt64)
	for _, x := range s.samples {
		best = min(best, x.hist.quantile(q))
	}
	return best
}

// quantile is the median over rounds of each round's q-quantile.
func (s *series) quantile(q float64) time.Duration {
	return time.Duration(medianOf(s.samples, func(x sample) float64 { return float64(x.hist.quantile(q)) }))
}

// latencyGap is the median over rounds of s's q-quantile minus o's.
func (s *series) latencyGap(o *series, q float64) time.Duration {
	return time.Duration(pairedMedian(s.samples, o.samples, func(a, b sample) float64 {
		return float64(a.hist.quantile(q) - b.hist.quantile(q))
	}))
}

type totals struct {
	ok, errs, rt, cmds int64
	mallocs            uint64
	cpu                float64
	clientCPU, svcCPU  time.Duration
	elapsed            time.Duration
	cmdsBy             map[string]int64
}

func (s *series) totals() totals {
	t := totals{cmdsBy: map[string]int64{}}
	for _, x := range s.samples {
		t.ok += x.ok
		t.errs += x.errs
		t.rt += x.rt
		t.cmds += x.cmdTotal
		t.mallocs += x.mallocs
		t.cpu += x.cpu
		t.clientCPU += x.clientCPU
		t.svcCPU += x.svcCPU
		t.elapsed += x.elapsed
		for k, v := range x.cmds {
			t.cmdsBy[k] += v
		}
	}
	return t
}

func (t totals) calls() int64 { return t.ok + t.errs }

func (t totals) per(n float64) float64 { return n / float64(max(t.calls(), 1)) }

// cpuUtil is the Redis CPU used over the measured time, in cores.
func (t totals) cpuUtil() float64 { return t.cpu / t.elapsed.Seconds() }

// cpuPerDecision is Redis CPU seconds per admitted-or-denied decision.
func (t totals) cpuPerDecision() float64 { return t.cpu / float64(max(t.ok, 1)) }

func fmtRate(r float64) string {
	switch {
	case math.IsNaN(r):
		return "–"
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

func fmtUs(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us >= 100 {
		return fmt.Sprintf("%.0f", us)
	}
	return fmt.Sprintf("%.1f", us)
}

func fmtF(x float64, prec int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// othersMedian and othersMax summarise the load that other processes put on
// the machine during the measured cells.
func (b *bench) othersMedian() float64 {
	return median(b.othersAll())
}

func (b *bench) othersMax() float64 {
	m := 0.0
	for _, x := range b.othersAll() {
		m = max(m, x)
	}
	return m
}

func (b *bench) othersAll() []float64 {
	var xs []float64
	for _, sc := range b.scenarios {
		for _, s := range sc.series {
			for _, x := range s.samples {
				xs = append(xs, x.others)
			}
		}
	}
	for _, r := range b.inproc {
		for _, ss := range r.samples {
			for _, s := range ss {
				xs = append(xs, s.others)
			}
		}
	}
	return xs
}
