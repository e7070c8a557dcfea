package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

func (s *series) rates() []float64 {
	xs := make([]float64, len(s.samples))
	for i, x := range s.samples {
		xs[i] = x.rate()
	}
	return xs
}

func (s *series) rate() float64 { return median(s.rates()) }

// ratio is the median over rounds of s's decisions/s over o's in the same
// round: pairing rounds cancels drift in the machine's load.
func (s *series) ratio(o *series) float64 {
	if o == nil {
		return math.NaN()
	}
	n := min(len(s.samples), len(o.samples))
	xs := make([]float64, n)
	for i := range n {
		xs[i] = s.samples[i].rate() / o.samples[i].rate()
	}
	return median(xs)
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

func (s *series) quantile(q float64) time.Duration {
	xs := make([]float64, len(s.samples))
	for i, x := range s.samples {
		xs[i] = float64(x.hist.quantile(q))
	}
	return time.Duration(median(xs))
}

// latencyGap is the median over rounds of s's q-quantile minus o's.
func (s *series) latencyGap(o *series, q float64) time.Duration {
	n := min(len(s.samples), len(o.samples))
	xs := make([]float64, n)
	for i := range n {
		xs[i] = float64(s.samples[i].hist.quantile(q) - o.samples[i].hist.quantile(q))
	}
	return time.Duration(median(xs))
}

type totals struct {
	ok, errs, rt, cmds int64
	mallocs            uint64
	cpu                float64
	clientCPU          time.Duration
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

// table renders a markdown table.
func table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
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
