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
	why      string // for a miss: what the run shows about the cause
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
	return medianOf(r.samples[g], func(s inprocSample) float64 { return s.nsPerOp })
}

func (r *inprocResult) cpuNs(g int) float64 {
	return medianOf(r.samples[g], func(s inprocSample) float64 { return s.cpuNsPerOp })
}

func (r *inprocResult) blocked(g int) float64 {
	return medianOf(r.samples[g], func(s inprocSample) float64 { return s.blocked })
}

func (r *inprocResult) allocs(g int) float64 {
	return medianOf(r.samples[g], func(s inprocSample) float64 { return s.allocsPerOp })
}

func (r *inprocResult) bytes(g int) float64 {
	return medianOf(r.samples[g], func(s inprocSample) float64 { return s.bytesPerOp })
}

// projectedSpeedup is what g goroutines on g otherwise idle cores would
// gain over 1: g times the ratio of CPU per call, less the time the
// goroutines' threads spent blocked (on a lock, say) rather than running or
// waiting for a core; the median over rounds, each round's 1- and
// g-goroutine runs made back to back. Wall-time speed-ups cannot be measured
// while other processes hold the cores; this can, roughly.
func (r *inprocResult) projectedSpeedup(g int) float64 {
	return pairedMedian(r.samples[1], r.samples[g], func(one, many inprocSample) float64 {
		return float64(g) * one.cpuNsPerOp / many.cpuNsPerOp * (1 - many.blocked)
	})
}

// wallSpeedup is the median over rounds of the wall-time speed-up from 1 to
// g goroutines.
func (r *inprocResult) wallSpeedup(g int) float64 {
	return pairedMedian(r.samples[1], r.samples[g], func(one, many inprocSample) float64 {
		return one.nsPerOp / many.nsPerOp
	})
}

// cpuSpeedup is the median over rounds of o's CPU ns/op over r's at g
// goroutines: above 1, r is faster.
func (r *inprocResult) cpuSpeedup(o *inprocResult, g int) float64 {
	if o == nil {
		return math.NaN()
	}
	return pairedMedian(r.samples[g], o.samples[g], func(mine, theirs inprocSample) float64 {
		return theirs.cpuNsPerOp / mine.cpuNsPerOp
	})
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

	work := func(id, anchor string, want float64) string { return b.work("64 goroutines", id, anchor, want) }

	t := target{name: "Token bucket on Redis at 64 goroutines: ≥ 2× redis_rate's decisions/s (10,000 keys)"}
	r := ratioAt("fl-tb", "redis_rate", "64 goroutines")
	t.measured = fmt.Sprintf("%s (WithClock: %s); all: %s", fmtRatio(r),
		fmtRatio(ratioAt("fl-tbc", "redis_rate", "64 goroutines")), others("fl-tb", "redis_rate"))
	atLeast(&t, r, 2, "×")
	t.why = work("fl-tb", "redis_rate", 2)
	ts = append(ts, t)

	t = target{name: "Sliding-window log (limit 100) at 64 goroutines: ≥ redis_rate"}
	r = ratioAt("fl-sl", "redis_rate", "64 goroutines")
	t.measured = fmt.Sprintf("%s; all: %s", fmtRatio(r), others("fl-sl", "redis_rate"))
	atLeast(&t, r, 1, "×")
	t.why = work("fl-sl", "redis_rate", 1)
	ts = append(ts, t)

	t = target{name: "Fixed window at 64 goroutines: ≥ ulule"}
	r = ratioAt("fl-fw", "ulule", "64 goroutines")
	t.measured = fmt.Sprintf("%s; all: %s", fmtRatio(r), others("fl-fw", "ulule"))
	atLeast(&t, r, 1, "×")
	t.why = work("fl-fw", "ulule", 1)
	ts = append(ts, t)

	if sc := b.scenario("10,000 keys", "1 goroutines"); sc != nil && sc.get("incr") != nil {
		incr := sc.get("incr")
		for _, id := range []string{"fl-tb", "fl-tbc", "fl-sl", "fl-fw"} {
			s := sc.get(id)
			if s == nil {
				continue
			}
			gap := s.latencyGap(incr, 0.5)
			best := s.bestQuantile(0.5) - incr.bestQuantile(0.5)
			t = target{name: "1 goroutine: p50 within 15 µs of a plain INCR (median of per-round gaps) — " + s.c.name,
				measured: fmt.Sprintf("+%s µs per round (p50 medians over rounds: %s vs %s µs; least disturbed rounds: %s vs %s µs, +%s)",
					fmtUs(gap), fmtUs(s.quantile(0.5)), fmtUs(incr.quantile(0.5)), fmtUs(s.bestQuantile(0.5)), fmtUs(incr.bestQuantile(0.5)), fmtUs(best))}
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
		t.why = fmt.Sprintf("Redis keeps a sorted set of up to zset-max-listpack-entries (%s here) members of at most zset-max-listpack-value (%s) bytes as one compact listpack; a key holding %d members is a skip list plus a hash table, which costs about %.0f B per member at this size.",
			b.serverConfig["zset-max-listpack-entries"], b.serverConfig["zset-max-listpack-value"], l.limit, l.perRequest)
		ts = append(ts, t)
	}

	for _, st := range []struct{ id, name string }{{"tb", "token bucket"}, {"fw", "fixed window"}, {"sl", "sliding log"}} {
		lim, dec := b.inprocOf("fl-lim-"+st.id), b.inprocOf("fl-mem-"+st.id)
		if lim == nil || dec == nil {
			continue
		}
		// The issue measured go-limiter at ~97 ns/op on its reference
		// machine: 70 ns/op is 0.72x of that. The same ratio to go-limiter in
		// the same rounds holds when other work slows this machine down.
		t = target{name: "Memory store ≤ 70 ns/op at 1 goroutine (Limiter.Allow, CPU time; and ≤ 70/97 of go-limiter's time, the issue's reference) — " + st.name}
		gl := b.inprocOf("golimiter")
		t.measured = fmt.Sprintf("%.0f ns/op CPU, %.0f wall (store.Memory.Decide: %.0f CPU)", lim.cpuNs(1), lim.ns(1), dec.cpuNs(1))
		atMost(&t, lim.cpuNs(1), 70, "ns/op", 0)
		if gl != nil {
			rel := 1 / lim.cpuSpeedup(gl, 1)
			t.measured += fmt.Sprintf("; %.2f× go-limiter's time in the same rounds (go-limiter: %.0f ns/op)", rel, gl.cpuNs(1))
			if rel > refGoLimiter {
				t.met = false
				t.verdict += fmt.Sprintf("; relative: %.2f× go-limiter's time, target ≤ %.2f×, so %.0f%% too slow", rel, refGoLimiter, 100*(rel/refGoLimiter-1))
			} else {
				t.verdict += fmt.Sprintf("; relative: %.2f× go-limiter's time, target ≤ %.2f×", rel, refGoLimiter)
			}
		}
		if xr, gl := b.inprocOf("xrate"), b.inprocOf("golimiter"); xr != nil && gl != nil {
			where := "the store's own path, not the Limiter around it, is most of the cost"
			if dec.cpuNs(1) < lim.cpuNs(1)/2 {
				where = "the Limiter around the store is most of the cost"
			}
			t.why = fmt.Sprintf("CPU ns/op at 1 goroutine: Limiter.Allow %.0f, store.Memory.Decide alone %.0f; x/time/rate in a sync.Map %.0f, go-limiter %.0f: %s.",
				lim.cpuNs(1), dec.cpuNs(1), xr.cpuNs(1), gl.cpuNs(1), where)
		}
		ts = append(ts, t)
		t = target{name: "Memory store: 0 allocs/op (Limiter.Allow) — " + st.name,
			measured: fmt.Sprintf("%.2f allocs/op, %.0f B/op (Decide: %.2f allocs/op)", lim.allocs(1), lim.bytes(1), dec.allocs(1))}
		atMost(&t, lim.allocs(1), 0.005, "allocs/op", 2)
		ts = append(ts, t)
		t = target{name: "Memory store scales with cores: 2 goroutines ≥ 1.5× the decisions/s of 1 (projected to 2 idle cores) — " + st.name}
		sp := lim.projectedSpeedup(2)
		t.measured = fmt.Sprintf("CPU %.0f → %.0f ns/op, %.0f%% blocked: %s projected; wall-clock %s with other processes on the cores",
			lim.cpuNs(1), lim.cpuNs(2), 100*lim.blocked(2), fmtRatio(sp), fmtRatio(lim.wallSpeedup(2)))
		atLeast(&t, sp, 1.5, "×")
		ts = append(ts, t)
	}
	return ts
}

// work explains a throughput ratio on the 10,000-key scenario of label by
// the work per decision on each side; "" when either was not measured.
func (b *bench) work(label, id, anchor string, want float64) string {
	sc := b.scenario("10,000 keys", label)
	if sc == nil || sc.get(id) == nil || sc.get(anchor) == nil {
		return ""
	}
	f := func(s *series) string {
		t := s.totals()
		return fmt.Sprintf("%s %.2f round trips, %.1f Redis commands, %.1f µs Redis CPU, %.1f µs Go CPU, %.1f Go allocations",
			s.c.name, t.per(float64(t.rt)), t.per(float64(t.cmds)), t.cpuPerDecision()*1e6, t.per(float64(t.clientCPU))/1e3, t.per(float64(t.mallocs)))
	}
	cpu := func(s *series) float64 {
		t := s.totals()
		return t.cpuPerDecision()*1e6 + t.per(float64(t.clientCPU))/1e3
	}
	a, o := sc.get(id), sc.get(anchor)
	fair := cpu(o) / cpu(a)
	text := fmt.Sprintf("Per decision at %s: %s; %s. Redis and the Go client share this machine's %d cores, and counting both, %s uses %.1f µs of CPU per decision against %.1f µs, "+
		"so once the cores are busy it can make about %.2f× the anchor's decisions/s (measured %.2f×). ",
		label, f(a), f(o), b.meta.cores, a.c.name, cpu(a), cpu(o), fair, a.ratio(o))
	if a.ratio(o) >= want {
		return strings.TrimSpace(text)
	}
	if fair >= want {
		// CPU per decision allows the target: what is short is not CPU.
		rs := make([]float64, min(len(a.samples), len(o.samples)))
		for i := range rs {
			rs[i] = a.samples[i].rate() / o.samples[i].rate()
		}
		return text + fmt.Sprintf("That is above the %.2f× asked, so CPU does not explain the shortfall: p50 latency was %s against %s µs, and the per-round ratios' middle half spans %.2f× to %.2f× over %d rounds. "+
			"Next step: the same pair in more rounds, or on idle cores, before changing code.",
			want, fmtUs(a.quantile(0.5)), fmtUs(o.quantile(0.5)), quartile(rs, 0.25), quartile(rs, 0.75), len(rs))
	}
	return text + fmt.Sprintf("Reaching %.2f× needs %.2f× less CPU per decision: fewer round trips per decision (pipelining concurrent decisions into one) cut both sides' system calls, fewer script commands cut Redis's share.",
		want, want/fair)
}

// refGoLimiter is the memory-store target relative to go-limiter: 70 ns/op
// where the issue measured go-limiter at ~97 ns/op.
const refGoLimiter = 70.0 / 97

func (b *bench) memUsage(id string) float64 {
	for _, m := range b.memory {
		if m.c.id == id {
			return m.usage
		}
	}
	return math.NaN()
}

// leaseTargets judges issue 14's targets: what leases buy on one hot key,
// and what a decision served from a lease costs in process.
func (b *bench) leaseTargets() []target {
	var ts []target
	hot := func(g int) *scenarioResult { return b.scenario("one hot key", fmt.Sprintf("%d goroutines", g)) }

	t := target{name: "One hot key at 64 goroutines: token bucket with leases of 64 ≥ 10× redis_rate's decisions/s"}
	r := math.NaN()
	if sc := hot(64); sc != nil && sc.get("fl-tb-l64") != nil && sc.get("redis_rate") != nil {
		l, rr := sc.get("fl-tb-l64"), sc.get("redis_rate")
		r = l.ratio(rr)
		var parts []string
		for _, g := range goroutineCounts {
			if sc := hot(g); sc != nil && sc.get("fl-tb-l64") != nil {
				parts = append(parts, fmt.Sprintf("%d goroutines %s", g, fmtRatio(sc.get("fl-tb-l64").ratio(sc.get("redis_rate")))))
			}
		}
		t.measured = fmt.Sprintf("%s (%s against %s decisions/s); all: %s", fmtRatio(r), fmtRate(l.rate()), fmtRate(rr.rate()), strings.Join(parts, ", "))
	}
	atLeast(&t, r, 10, "×")
	ts = append(ts, t)

	lp := b.inprocOf("fl-lease-tb")
	t = target{name: "Local path (a decision served from a lease, Limiter.Allow, 1 goroutine): ≤ 100 ns/op"}
	ns := math.NaN()
	if lp != nil {
		ns = lp.cpuNs(1)
		t.measured = b.localPath()
		if tb := b.inprocOf("fl-lim-tb"); tb != nil {
			t.why = fmt.Sprintf("In the same rounds, Limiter.Allow over store.Memory without leases costs %.0f ns/op CPU and store.Memory.Decide alone %.0f: serving from a lease is the Limiter's own path (validation, the clock, the lease's shard lock and map lookup) without the store.",
				tb.cpuNs(1), b.inprocOf("fl-mem-tb").cpuNs(1))
		}
	}
	atMost(&t, ns, 100, "ns/op", 0)
	ts = append(ts, t)

	t = target{name: "Local path: 0 allocs/op"}
	al := math.NaN()
	if lp != nil {
		al = lp.allocs(1)
		t.measured = fmt.Sprintf("%.2f allocs/op, %.0f B/op", al, lp.bytes(1))
	}
	atMost(&t, al, 0.005, "allocs/op", 2)
	ts = append(ts, t)

	t = target{name: "Round trips per decision on one hot key, token bucket with leases of 32: ≤ 1/20 (0.050)"}
	worst := math.NaN()
	var parts []string
	for _, g := range goroutineCounts {
		sc := hot(g)
		if sc == nil || sc.get("fl-tb-l32") == nil {
			continue
		}
		x := sc.get("fl-tb-l32").totals()
		per := x.per(float64(x.rt))
		if math.IsNaN(worst) || per > worst {
			worst = per
		}
		parts = append(parts, fmt.Sprintf("%d goroutines %.4f", g, per))
	}
	t.measured = fmt.Sprintf("worst %.4f (1/32 = %.4f); %s", worst, 1.0/32, strings.Join(parts, ", "))
	atMost(&t, worst, 0.05, "round trips", 4)
	ts = append(ts, t)
	return ts
}

// leaseWork explains the leased token bucket's rate on one hot key at 64
// goroutines by the work per decision, against redis_rate's; "" when not
// measured. RESULTS.md prints it under issue 14's targets whether they are
// met or not (TestDocFiguresMatchTheirRun, in the repository's root,
// reads its figures).
func (b *bench) leaseWork() string {
	sc := b.scenario("one hot key", "64 goroutines")
	if sc == nil || sc.get("fl-tb-l64") == nil || sc.get("redis_rate") == nil {
		return ""
	}
	lt, rt := sc.get("fl-tb-l64").totals(), sc.get("redis_rate").totals()
	cpu := func(x totals) float64 { return x.cpuPerDecision()*1e6 + x.per(float64(x.clientCPU))/1e3 }
	return fmt.Sprintf("Per decision at 64 goroutines on the hot key: with leases of 64, %.3f round trips, %.2f µs of Redis CPU and %.2f µs of Go CPU; redis_rate %.2f round trips, %.2f µs and %.2f µs. "+
		"The Go process and redis-server share this machine's %d cores, so counting both, leases cut the CPU per decision %.1f× (%.2f against %.2f µs): "+
		"once the round trips are gone the cost is the limiter's own work in process (a decision served from a lease: %s), and, while a process holds one lease per key, a stall of one round trip each time the key's lease is spent, while every goroutine of that key waits for the next (a lease taken ahead, before the last is spent, is what issue 29 asks for to remove it; its table below judges this tree).",
		lt.per(float64(lt.rt)), lt.cpuPerDecision()*1e6, lt.per(float64(lt.clientCPU))/1e3,
		rt.per(float64(rt.rt)), rt.cpuPerDecision()*1e6, rt.per(float64(rt.clientCPU))/1e3,
		b.meta.cores, cpu(rt)/cpu(lt), cpu(lt), cpu(rt), b.localPath())
}

// localPath describes the in-process cost of a decision served from a
// lease, or says it was not measured.
func (b *bench) localPath() string {
	lp := b.inprocOf("fl-lease-tb")
	if lp == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.0f ns/op CPU, %.0f wall, %.2f allocs/op at 1 goroutine; %.0f ns/op CPU at 2", lp.cpuNs(1), lp.ns(1), lp.allocs(1), lp.cpuNs(2))
}
