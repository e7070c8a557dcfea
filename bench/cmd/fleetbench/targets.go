package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// target is one of issue 6's targets, judged from this run.
type target struct {
	name     string
	measured string
	met      bool
	known    bool // false when the run did not measure it
	verdict  string
}

func (b *bench) scenario(group, label string) *scenarioResult {
	for _, s := range b.scenarios {
		if s.sc.group == group && s.sc.label == label {
			return s
		}
	}
	return nil
}

func (b *bench) inprocOf(id string) *inprocResult {
	for _, r := range b.inproc {
		if r.c.id == id {
			return r
		}
	}
	return nil
}

func (r *inprocResult) ns(g int) float64 {
	var xs []float64
	for _, s := range r.samples[g] {
		xs = append(xs, s.nsPerOp)
	}
	return median(xs)
}

func (r *inprocResult) allocs(g int) float64 {
	var xs []float64
	for _, s := range r.samples[g] {
		xs = append(xs, s.allocsPerOp)
	}
	return median(xs)
}

func (r *inprocResult) bytes(g int) float64 {
	var xs []float64
	for _, s := range r.samples[g] {
		xs = append(xs, s.bytesPerOp)
	}
	return median(xs)
}

// speedup is the median over rounds of o's ns/op over r's at g goroutines:
// above 1, r is faster.
func (r *inprocResult) speedup(o *inprocResult, g int) float64 {
	if o == nil {
		return math.NaN()
	}
	n := min(len(r.samples[g]), len(o.samples[g]))
	xs := make([]float64, n)
	for i := range n {
		xs[i] = o.samples[g][i].nsPerOp / r.samples[g][i].nsPerOp
	}
	return median(xs)
}

// atLeast judges got >= want (a ratio); the verdict says how far short.
func atLeast(t *target, got, want float64, unit string) {
	t.known = !math.IsNaN(got)
	t.met = got >= want
	switch {
	case !t.known:
		t.verdict = "not measured"
	case t.met:
		t.verdict = fmt.Sprintf("met (%.2f%s, target %.2f%s)", got, unit, want, unit)
	default:
		t.verdict = fmt.Sprintf("missed: %.2f%s of %.2f%s, short by %.0f%%", got, unit, want, unit, 100*(want-got)/want)
	}
}

// atMost judges got <= want; the verdict says by how much it is over.
func atMost(t *target, got, want float64, unit string, prec int) {
	t.known = !math.IsNaN(got)
	t.met = got <= want
	switch {
	case !t.known:
		t.verdict = "not measured"
	case t.met:
		t.verdict = fmt.Sprintf("met (%.*f %s, target ≤ %.*f)", prec, got, unit, prec, want)
	default:
		t.verdict = fmt.Sprintf("missed by %.*f %s (%.*f, target ≤ %.*f)", prec, got-want, unit, prec, got, prec, want)
	}
}

func (b *bench) targets() []target {
	var ts []target
	ratioAt := func(id, anchor, label string) float64 {
		sc := b.scenario("10,000 keys", label)
		if sc == nil || sc.get(id) == nil {
			return math.NaN()
		}
		return sc.get(id).ratio(sc.get(anchor))
	}
	others := func(id, anchor string) string {
		var parts []string
		for _, g := range goroutineCounts {
			parts = append(parts, fmt.Sprintf("%d goroutines %s", g, fmtRatio(ratioAt(id, anchor, fmt.Sprintf("%d goroutines", g)))))
		}
		return strings.Join(parts, ", ")
	}

	t := target{name: "Token bucket on Redis at 64 goroutines: ≥ 2× redis_rate's decisions/s (10,000 keys)"}
	r := ratioAt("fl-tb", "redis_rate", "64 goroutines")
	t.measured = fmt.Sprintf("%s (WithClock: %s); all: %s", fmtRatio(r),
		fmtRatio(ratioAt("fl-tbc", "redis_rate", "64 goroutines")), others("fl-tb", "redis_rate"))
	atLeast(&t, r, 2, "×")
	ts = append(ts, t)

	t = target{name: "Sliding-window log (limit 100) at 64 goroutines: ≥ redis_rate"}
	r = ratioAt("fl-sl", "redis_rate", "64 goroutines")
	t.measured = fmt.Sprintf("%s; all: %s", fmtRatio(r), others("fl-sl", "redis_rate"))
	atLeast(&t, r, 1, "×")
	ts = append(ts, t)

	t = target{name: "Fixed window at 64 goroutines: ≥ ulule"}
	r = ratioAt("fl-fw", "ulule", "64 goroutines")
	t.measured = fmt.Sprintf("%s; all: %s", fmtRatio(r), others("fl-fw", "ulule"))
	atLeast(&t, r, 1, "×")
	ts = append(ts, t)

	if sc := b.scenario("10,000 keys", "1 goroutines"); sc != nil && sc.get("incr") != nil {
		incr := sc.get("incr")
		for _, id := range []string{"fl-tb", "fl-tbc", "fl-sl", "fl-fw"} {
			s := sc.get(id)
			if s == nil {
				continue
			}
			gap := s.latencyGap(incr, 0.5)
			t = target{name: "1 goroutine: p50 within 15 µs of a plain INCR — " + s.c.name,
				measured: fmt.Sprintf("p50 %s µs vs INCR %s µs: +%s µs", fmtUs(s.quantile(0.5)), fmtUs(incr.quantile(0.5)), fmtUs(gap))}
			atMost(&t, float64(gap)/float64(time.Microsecond), 15, "µs", 1)
			ts = append(ts, t)
		}
	}

	for _, m := range b.memory {
		if m.c.id != "fl-tb" {
			continue
		}
		t = target{name: fmt.Sprintf("Token bucket key ≤ 72 B by MEMORY USAGE (keys of %d B for every library)", m.keyLen),
			measured: fmt.Sprintf("%.0f B (redis_rate %s B, ulule %s B, throttled %s B)", m.usage,
				fmtF(b.memUsage("redis_rate"), 0), fmtF(b.memUsage("ulule"), 0), fmtF(b.memUsage("throttled"), 0))}
		atMost(&t, m.usage, 72, "B", 0)
		ts = append(ts, t)
	}
	for _, l := range b.logSweeps {
		t = target{name: fmt.Sprintf("Sliding log: ≤ 64 B per stored request (limit %d, key full)", l.limit),
			measured: fmt.Sprintf("%.0f B per key / %d = %.1f B", l.usage, l.limit, l.perRequest)}
		atMost(&t, l.perRequest, 64, "B", 1)
		ts = append(ts, t)
	}

	for _, st := range []struct{ id, name string }{{"tb", "token bucket"}, {"fw", "fixed window"}, {"sl", "sliding log"}} {
		lim, dec := b.inprocOf("fl-lim-"+st.id), b.inprocOf("fl-mem-"+st.id)
		if lim == nil || dec == nil {
			continue
		}
		t = target{name: "Memory store ≤ 70 ns/op at 1 goroutine (Limiter.Allow) — " + st.name,
			measured: fmt.Sprintf("%.0f ns/op (store.Memory.Decide: %.0f ns/op)", lim.ns(1), dec.ns(1))}
		atMost(&t, lim.ns(1), 70, "ns/op", 0)
		ts = append(ts, t)
		t = target{name: "Memory store: 0 allocs/op (Limiter.Allow) — " + st.name,
			measured: fmt.Sprintf("%.2f allocs/op, %.0f B/op (Decide: %.2f allocs/op)", lim.allocs(1), lim.bytes(1), dec.allocs(1))}
		atMost(&t, lim.allocs(1), 0.005, "allocs/op", 2)
		ts = append(ts, t)
		t = target{name: "Memory store scales with cores: 2 goroutines ≥ 1.5× the decisions/s of 1 — " + st.name}
		sp := lim.ns(1) / lim.ns(2)
		t.measured = fmt.Sprintf("%.0f → %.0f ns/op: %s", lim.ns(1), lim.ns(2), fmtRatio(sp))
		atLeast(&t, sp, 1.5, "×")
		ts = append(ts, t)
	}
	return ts
}

func (b *bench) memUsage(id string) float64 {
	for _, m := range b.memory {
		if m.c.id == id {
			return m.usage
		}
	}
	return math.NaN()
}
