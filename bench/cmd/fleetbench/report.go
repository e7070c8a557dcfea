package main

import (
	"fmt"
	"strings"
	"time"
)

// anchors are the Redis libraries each row is compared with.
var anchors = []struct{ id, label string }{
	{"redis_rate", "vs redis_rate"}, {"ulule", "vs ulule"}, {"throttled", "vs throttled"}, {"incr", "vs INCR"},
}

func (b *bench) mode() string {
	if b.cfg.quick {
		return fmt.Sprintf("quick (smoke test: %d round of %v per cell; figures are not results)", b.cfg.rounds, b.cfg.dur)
	}
	return fmt.Sprintf("full: %d rounds of %v per cell", b.cfg.rounds, b.cfg.dur)
}

func (b *bench) results() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("# Benchmark results: fleetlimit beside the Go rate limiters people use\n\n")
	p("Written by `%s` (in `bench/`) on %s, in %v. Mode: %s.\n\n", strings.TrimSpace(b.meta.command),
		b.started.UTC().Format("2006-01-02 15:04 UTC"), b.finished.Sub(b.started).Round(time.Second), b.mode())
	p("**This machine is shared.** It has %d cores, and other engineers' test suites may run on it, or beside it on the same host, during the benchmark (load average %s at the start, %s at the end). "+
		"Every scenario therefore interleaves its contenders round by round (A B C …, then B C … A, …) and reports medians over rounds; "+
		"a ratio is the median of the per-round ratios, so outside load that hits one round hits every contender of that round alike. "+
		"Single figures move by ±20%% between runs; only the side-by-side ratios count. The Go client and redis-server share the same cores.\n\n",
		b.meta.cores, b.meta.loadStart, b.meta.loadEnd)

	p("## Machine and versions\n\n")
	rows := [][]string{
		{"CPU", fmt.Sprintf("%s, %d cores (GOMAXPROCS %d)", b.meta.cpu, b.meta.cores, b.meta.cores)},
		{"Memory, kernel", fmt.Sprintf("%s, Linux %s, clock source %s: one time.Now costs %.0f ns of CPU", b.meta.memTotal, b.meta.kernel, b.meta.clock, b.meta.nowCost)},
		{"Go", b.meta.goVersion},
		{"Redis", fmt.Sprintf("%s (%s), on loopback, no persistence, started by the benchmark", b.serverInfo["redis_version"], b.serverInfo["mem_allocator"])},
		{"Other processes in this machine", fmt.Sprintf("kept %.2f cores busy during the measured cells (median per cell; max %.2f). Load from outside this virtual machine is not visible here: it shows as rounds in which every contender, and its CPU time per decision, is slower", b.othersMedian(), b.othersMax())},
		{"fleetlimit commit", b.meta.commit},
	}
	for _, m := range b.meta.modules {
		rows = append(rows, []string{"`" + m.path + "`", m.version})
	}
	p("%s\n", table([]string{"", ""}, rows))

	b.writeTargets(&w)
	b.writeRedis(&w)
	b.writeMemory(&w)
	b.writeSweeps(&w)
	b.writeInproc(&w)
	b.writeChecks(&w)
	b.writeMethod(&w)
	b.writeRaw(&w)
	return w.String()
}

func (b *bench) writeTargets(w *strings.Builder) {
	fmt.Fprintf(w, "## Targets of issue 6\n\nJudged from this run's medians. A miss says by how much.\n\n")
	var rows [][]string
	met := 0
	ts := b.targets()
	for _, t := range ts {
		mark := "missed"
		if t.met {
			mark = "met"
			met++
		}
		if !t.known {
			mark = "not measured"
		}
		rows = append(rows, []string{t.name, t.measured, "**" + mark + "**: " + t.verdict})
	}
	fmt.Fprintf(w, "%s\n%d of %d met.\n\n", table([]string{"target", "measured", "verdict"}, rows), met, len(ts))
	seen := map[string]bool{}
	var whys []string
	for _, t := range ts {
		if t.known && !t.met && t.why != "" && !seen[t.why] {
			seen[t.why] = true
			whys = append(whys, fmt.Sprintf("- **%s**: %s", t.name, t.why))
		}
	}
	if len(whys) > 0 {
		fmt.Fprintf(w, "Why the misses, from this run's figures:\n\n%s\n\n", strings.Join(whys, "\n"))
	}
}

func (b *bench) redisRow(sc *scenarioResult, s *series) []string {
	t := s.totals()
	row := []string{s.c.name, fmtRate(s.rate())}
	for _, a := range anchors {
		if s.c.id == a.id {
			row = append(row, "1")
			continue
		}
		row = append(row, fmtRatio(s.ratio(sc.get(a.id))))
	}
	errRate := "0"
	if t.errs > 0 {
		errRate = fmt.Sprintf("%.1f%%", 100*float64(t.errs)/float64(t.calls()))
	}
	row = append(row,
		fmtUs(s.quantile(0.5)), fmtUs(s.quantile(0.99)),
		fmtF(t.per(float64(t.rt)), 2), fmtF(t.per(float64(t.cmds)), 2),
		fmtF(t.cpuPerDecision()*1e6, 1), fmtF(t.cpuUtil(), 2), fmtF(t.per(float64(t.clientCPU))/1e3, 1),
		fmtF(t.per(float64(t.mallocs)), 1), errRate)
	return row
}

var redisHeader = []string{"contender", "decisions/s", "vs redis_rate", "vs ulule", "vs throttled", "vs INCR",
	"p50 µs", "p99 µs", "round trips", "Redis cmds", "Redis CPU µs", "Redis cores", "Go CPU µs", "Go allocs", "errors"}

func (b *bench) writeRedis(w *strings.Builder) {
	fmt.Fprintf(w, "## Redis\n\n")
	fmt.Fprintf(w, "Per decision: round trips (counted by a go-redis hook: each command or pipeline sent), Redis commands (INFO commandstats: the EVALSHA and every command the script runs), Redis CPU (INFO cpu, user+sys), the benchmark process's CPU (getrusage: the Go client, its library and the load loop) and Go heap allocations. CPU times are inflated much less than decisions/s and latency by other processes on the machine (only through contention for the host's cores and caches). "+
		"\"Redis cores\" is Redis CPU over wall time: near 1.0 the single-threaded server is the limit. Ratios: decisions/s over the anchor's, median of per-round ratios. "+
		"go-redis clients have their default pool (%d connections), one client per contender; every Redis key is %d bytes long.\n\n", b.clientsPool, keyLen)
	for _, group := range []string{"10,000 keys", "one hot key"} {
		prof := spread
		if group == "one hot key" {
			prof = hot
		}
		fmt.Fprintf(w, "### %s\n\nLimits: %s\n\n", group, profileDoc[prof])
		for _, g := range goroutineCounts {
			sc := b.scenario(group, fmt.Sprintf("%d goroutines", g))
			if sc == nil {
				continue
			}
			var rows [][]string
			for _, s := range sc.series {
				rows = append(rows, b.redisRow(sc, s))
			}
			fmt.Fprintf(w, "**%s, %d goroutines**\n\n%s\n", group, g, table(redisHeader, rows))
		}
		if group == "10,000 keys" {
			b.writeAlive(w)
		}
	}
	if sc := b.scenario("one hot key", "64 goroutines"); sc != nil && sc.get("throttled") != nil {
		t := sc.get("throttled").totals()
		first := ""
		for _, s := range sc.get("throttled").samples {
			if s.firstErr != "" {
				first = s.firstErr
				break
			}
		}
		fmt.Fprintf(w, "throttled on one hot key at 64 goroutines: %d of %d calls (%.1f%%) returned an error", t.errs, t.calls(), 100*float64(t.errs)/float64(max(t.calls(), 1)))
		if first != "" {
			fmt.Fprintf(w, " (%q)", first)
		}
		fmt.Fprintf(w, ": its compare-and-swap loop gives up after 10 attempts when other goroutines keep changing the key. The decisions/s column counts only calls that returned a decision.\n\n")
	}
	if sc := b.scenario("10,000 keys", "8 goroutines"); sc != nil {
		var rows [][]string
		for _, s := range sc.series {
			t := s.totals()
			rows = append(rows, []string{s.c.name, fmtF(t.per(float64(t.rt)), 2), cmdBreakdown(t.cmdsBy, t.calls())})
		}
		fmt.Fprintf(w, "### Commands per decision (10,000 keys, 8 goroutines)\n\nINFO commandstats deltas over the rounds, divided by decisions. Commands a script runs are counted under their own names.\n\n%s\n",
			table([]string{"contender", "round trips", "Redis commands per decision"}, rows))
	}
}

// writeAlive says how many keys outlived the 10,000-key scenarios.
func (b *bench) writeAlive(w *strings.Builder) {
	var rows [][]string
	for _, g := range goroutineCounts {
		sc := b.scenario("10,000 keys", fmt.Sprintf("%d goroutines", g))
		if sc == nil {
			continue
		}
		row := []string{fmt.Sprint(g)}
		for _, s := range sc.series {
			cell := fmt.Sprint(s.alive)
			if s.c.id == "fl-sl" {
				cell += fmt.Sprintf(" (%.1f requests each)", s.members)
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	if len(rows) > 0 {
		header := []string{"goroutines"}
		for _, s := range b.scenario("10,000 keys", "1 goroutines").series {
			header = append(header, s.c.name)
		}
		fmt.Fprintf(w, "Keys of the 10,000 users that existed in Redis after each 10,000-key scenario's last round (a key that expired was re-created by its next decision):\n\n%s\n", table(header, rows))
	}
}

func (b *bench) writeMemory(w *strings.Builder) {
	if len(b.memory) == 0 {
		return
	}
	var rows [][]string
	for _, m := range b.memory {
		rows = append(rows, []string{m.c.name, fmt.Sprint(m.keyLen), fmtF(m.usage, 0), fmtF(m.growthPerKey, 0), fmtF(m.usedPerKey, 0), fmt.Sprint(m.newKeys)})
	}
	fmt.Fprintf(w, "## Redis memory per user\n\n%d users, one decision each, on an emptied server (limits: %s) MEMORY USAGE is the median over 100 sampled keys. Key-space growth is MEMORY STATS dataset.bytes plus db0's main and expiry hash tables: what the keys cost, hash-table slots and expiry entries included; used_memory growth also moves with connection buffers.\n\n%s\n",
		memUsers, profileDoc[mem], table([]string{"contender", "key bytes", "MEMORY USAGE B", "key-space growth per user B", "used_memory growth per user B", "keys made"}, rows))
	if len(b.logSweeps) > 0 {
		rows = nil
		for i, l := range b.logSweeps {
			marginal := "–"
			if i > 0 {
				prev := b.logSweeps[i-1]
				marginal = fmtF((l.usage-prev.usage)/float64(l.limit-prev.limit), 1)
			}
			rows = append(rows, []string{fmt.Sprint(l.limit), fmt.Sprint(l.keys), fmtF(l.usage, 0), fmtF(l.perRequest, 1), marginal})
		}
		fmt.Fprintf(w, "### Sliding log: memory vs limit\n\nEach key filled to its limit one decision at a time (window 1 h), then one more decision each, which must be denied. MEMORY USAGE with SAMPLES 0 (every member counted).\n\n%s\n",
			table([]string{"limit", "keys", "MEMORY USAGE per key B", "per stored request B", "marginal B per request (vs previous limit)"}, rows))
	}
}

func (b *bench) writeSweeps(w *strings.Builder) {
	var gs []*scenarioResult
	var us []*scenarioResult
	for _, s := range b.scenarios {
		switch s.sc.group {
		case "goroutine sweep":
			gs = append(gs, s)
		case "users sweep":
			us = append(us, s)
		}
	}
	sweep := func(title, intro string, scs []*scenarioResult, ids []string, first string, ratioOf [2]string) {
		if len(scs) == 0 {
			return
		}
		header := []string{first}
		for _, id := range ids {
			if s := scs[0].get(id); s != nil {
				header = append(header, s.c.name+" decisions/s", "p50 µs")
			}
		}
		header = append(header, ratioOf[0]+" vs "+ratioOf[1])
		var rows [][]string
		for _, sc := range scs {
			row := []string{strings.Fields(sc.sc.label)[0]}
			for _, id := range ids {
				if s := sc.get(id); s != nil {
					row = append(row, fmtRate(s.rate()), fmtUs(s.quantile(0.5)))
				}
			}
			a, o := sc.get(ratioOf[0]), sc.get(ratioOf[1])
			if a != nil && o != nil {
				row = append(row, fmtRatio(a.ratio(o)))
			}
			rows = append(rows, row)
		}
		fmt.Fprintf(w, "### %s\n\n%s\n\n%s\n", title, intro, table(header, rows))
	}
	fmt.Fprintf(w, "## How cost grows\n\n")
	sweep("Decisions/s vs goroutines (10,000 keys)", fmt.Sprintf("%d rounds of %v per cell; limits as in the 10,000-key tables.", b.cfg.sweepRounds, b.cfg.sweepDur),
		gs, sweepContenders, "goroutines", [2]string{"fl-tb", "redis_rate"})
	sweep("Decisions/s vs users (8 goroutines)", fmt.Sprintf("%d rounds of %v per cell after one untimed pass over every user (checked: it made exactly one Redis key per user). Limits: %s", b.cfg.sweepRounds, b.cfg.sweepDur, profileDoc[users]),
		us, usersContenders, "users", [2]string{"fl-tb", "redis_rate"})
}

func (b *bench) writeInproc(w *strings.Builder) {
	if len(b.inproc) == 0 {
		return
	}
	fmt.Fprintf(w, "## In process (10,000 keys)\n\n"+
		"CPU ns/op is the CPU time of the calling goroutines' threads (each locked to its thread) per call: other processes taking the cores do not inflate it as they do wall time, so it is the figure to compare on a shared machine; contention on the host beneath this virtual machine still slows every core, which is why the \"vs\" ratios, taken within rounds, are the steadiest figures. "+
		"Wall ns/op is elapsed time over calls (two goroutines that scale perfectly halve it). \"blocked\" is the share of the threads' time spent neither running nor waiting for a core (/proc/thread-self/schedstat): time lost to locks. "+
		"Each round runs a contender at 1 and 2 goroutines back to back; speed-ups are medians of those pairs. Projected speed-up = goroutines × (CPU ns/op at 1 goroutine ÷ at g) × (1 − blocked): roughly what idle cores would give (CPU per call also moves with what shares the core's caches, so values a little above 2 are noise). "+
		"\"vs\" columns: the anchor's CPU ns/op over this row's (above 1: faster). Allocations from runtime.MemStats. Every key is created before timing. Limits: %s\n\n", inprocParams)
	ids := []struct{ id, label string }{{"xrate", "vs x/time/rate"}, {"golimiter", "vs go-limiter"}, {"ulule-mem", "vs ulule"}}
	for _, g := range inprocGoroutines {
		var rows [][]string
		for _, r := range b.inproc {
			row := []string{r.c.name, fmtF(r.cpuNs(g), 0), fmtF(r.ns(g), 0), fmtF(r.allocs(g), 2), fmtF(r.bytes(g), 0)}
			for _, a := range ids {
				if a.id == r.c.id {
					row = append(row, "1")
				} else {
					row = append(row, fmtRatio(r.cpuSpeedup(b.inprocOf(a.id), g)))
				}
			}
			if g > 1 {
				row = append(row, fmtF(100*r.blocked(g), 1)+"%", fmtRatio(r.projectedSpeedup(g)), fmtRatio(r.wallSpeedup(g)))
			}
			rows = append(rows, row)
		}
		header := []string{"contender", "CPU ns/op", "wall ns/op", "allocs/op", "B/op", ids[0].label, ids[1].label, ids[2].label}
		if g > 1 {
			header = append(header, "blocked", "projected speed-up vs 1", "wall speed-up vs 1")
		}
		fmt.Fprintf(w, "**%d goroutine(s)**\n\n%s\n", g, table(header, rows))
	}
}

func (b *bench) writeChecks(w *strings.Builder) {
	failed := 0
	var rows [][]string
	for _, c := range b.checks {
		mark := "ok"
		if !c.ok {
			mark = "**FAILED**"
			failed++
		}
		rows = append(rows, []string{c.what, mark, c.note})
	}
	fmt.Fprintf(w, "## Set-up checks\n\nWhat the run verified about its own set-up: %d of %d passed.\n\n<details><summary>all checks</summary>\n\n%s\n</details>\n\n",
		len(b.checks)-failed, len(b.checks), table([]string{"check", "result", "detail"}, rows))
	if failed > 0 {
		fmt.Fprintf(w, "Failed checks:\n\n")
		for _, c := range b.checks {
			if !c.ok {
				fmt.Fprintf(w, "- %s: %s\n", c.what, c.note)
			}
		}
		fmt.Fprintln(w)
	}
}

func (b *bench) writeMethod(w *strings.Builder) {
	fmt.Fprintf(w, `## Method

- One redis-server (%s) on a free loopback port, started and stopped by the benchmark; nothing else uses it.
- Each contender has its own go-redis client, built with go-redis defaults plus ContextTimeoutEnabled. fleetlimit runs through fleetlimit.Limiter.Allow over store.NewRedis with default options (server TIME, key prefix %q) unless the row says WithClock, except WithTimeout: every other library is bounded only by go-redis's read timeout (5 s), so fleetlimit gets that bound too instead of its 100 ms default, and a stall of this shared machine cannot turn into errors for fleetlimit alone.
- Load: G goroutines call the contender back to back for the cell's duration; goroutine j walks the key set in order from offset j·K/G, so every key gets the same share. Latency is every call's, errors included. decisions/s counts calls that returned a decision (allowed or denied).
- A scenario warms every contender up (%v, untimed), then runs %d rounds; round r runs the contenders in the order rotated by r. Sweeps run %d rounds of %v.
- Every Redis key is %d bytes: each library's own prefix (and fleetlimit's hash-tag braces and algorithm tag) plus a user key padded to fit. The memory table checks that the keys exist under exactly the names computed here.
- In process: the same loop without latency timing, %v per cell, %d rounds, 1 and 2 goroutines, GOMAXPROCS %d.
- Not measured here: networks slower than loopback (add the round-trip time to every latency; decisions/s at a fixed number of goroutines falls accordingly), Redis Cluster, TLS.

`, b.serverInfo["redis_version"], "ratelimit:", b.cfg.warm, b.cfg.rounds, b.cfg.sweepRounds, b.cfg.sweepDur, keyLen, b.cfg.inprocDur, b.cfg.rounds, b.meta.cores)
}

func (b *bench) writeRaw(w *strings.Builder) {
	fmt.Fprintf(w, "## Raw rounds\n\n<details><summary>decisions/s of every round, in round order</summary>\n\n")
	var rows [][]string
	for _, sc := range b.scenarios {
		for _, s := range sc.series {
			var xs, os []string
			for _, x := range s.samples {
				xs = append(xs, fmtRate(x.rate()))
				os = append(os, fmtF(x.others, 1))
			}
			rows = append(rows, []string{sc.sc.group + ", " + sc.sc.label, s.c.name, strings.Join(xs, " "), strings.Join(os, " ")})
		}
	}
	fmt.Fprintf(w, "%s\n", table([]string{"scenario", "contender", "decisions/s per round", "cores other processes used, per round"}, rows))
	rows = nil
	for _, r := range b.inproc {
		for _, g := range inprocGoroutines {
			var xs, os []string
			for _, s := range r.samples[g] {
				xs = append(xs, fmt.Sprintf("%.0f", s.nsPerOp))
				os = append(os, fmtF(s.others, 1))
			}
			rows = append(rows, []string{fmt.Sprintf("in process, %d goroutine(s)", g), r.c.name, strings.Join(xs, " ") + " ns/op", strings.Join(os, " ")})
		}
	}
	fmt.Fprintf(w, "%s\n</details>\n", table([]string{"scenario", "contender", "ns/op per round", "cores other processes used, per round"}, rows))
}
