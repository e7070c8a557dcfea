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

// runInfo is what both documents say about the run as a whole.
type runInfo struct {
	Quick        bool
	Rounds       int
	Dur          time.Duration // one measured cell
	Started      time.Time
	CPU          string
	Cores        int
	GoVersion    string
	RedisVersion string
	KeyLen       int // of every Redis key
	MemUsers     int // users in the memory phase
	LeaseMaxAge  time.Duration
}

func (b *bench) runInfo() runInfo {
	return runInfo{Quick: b.cfg.quick, Rounds: b.cfg.rounds, Dur: b.cfg.dur, Started: b.started,
		CPU: b.meta.cpu, Cores: b.meta.cores, GoVersion: b.meta.goVersion, RedisVersion: b.serverInfo["redis_version"],
		KeyLen: keyLen, MemUsers: memUsers, LeaseMaxAge: leaseMaxAge}
}

// resultsPage is what the template "results" renders into RESULTS.md. A nil
// table or an empty list leaves its section (or sentence) out.
type resultsPage struct {
	runInfo
	Command            string
	Took               time.Duration
	LoadStart, LoadEnd string
	MemTotal, Kernel   string
	Clock              string
	NowCost            float64 // CPU ns per time.Now
	Allocator          string
	OthersMedian       float64 // cores
	OthersMax          float64 // cores
	Commit             string
	Modules            []modVersion

	Targets    table
	TargetsMet int
	Misses     []item // a missed target and why, each reason once

	// The same for issue 14's targets (leases).
	LeaseTargets    table
	LeaseTargetsMet int
	LeaseMisses     []item
	LeaseWork       string // the hot key's work per decision, met or not

	// The same for issue 23 (the exact path) and issue 29 (leases at 2M
	// decisions/s).
	Issue23, Issue29       table
	Issue23Met, Issue29Met int
	Issue23Misses          []item
	Issue29Misses          []item

	// Valkey is the Valkey rows' server (version, name); ValkeyNote says
	// why there are none.
	Valkey     string
	ValkeyNote string
	// Fleet is issue 29's simulated fleet, round by round; FleetDoc its set-up.
	Fleet    *table
	FleetDoc string
	// Service is fleetlimitd against Limiter.AllowN; ServiceDoc its set-up,
	// ServiceNote why it was not measured.
	Service     *table
	ServiceDoc  string
	ServiceNote string

	ClientsPool int
	Groups      []redisGroup
	HotErrors   *hotErrors
	Commands    *table

	MemLimits string
	Memory    *table
	LogSweep  *table

	SweepRounds    int
	SweepDur       time.Duration
	UsersLimits    string
	GoroutineSweep *table
	UsersSweep     *table

	InprocLimits string
	Inproc       []goroutineTable

	Checks       table
	ChecksPassed int
	FailedChecks []item

	Warm      time.Duration
	InprocDur time.Duration
	RawRedis  table
	RawInproc table
}

// redisGroup is one key set's tables, one per goroutine count.
type redisGroup struct {
	Name   string
	Limits string
	Tables []goroutineTable
	Alive  *table // keys alive after the 10,000-key scenarios
}

type goroutineTable struct {
	G     int
	Table table
}

// hotErrors is throttled's failures on one hot key at 64 goroutines.
type hotErrors struct {
	Errs, Calls int64
	Percent     float64
	First       string // the first error; "" for none
}

func (b *bench) hotErrors() *hotErrors {
	sc := b.scenario("one hot key", "64 goroutines")
	if sc == nil || sc.get("throttled") == nil {
		return nil
	}
	s := sc.get("throttled")
	t := s.totals()
	h := &hotErrors{Errs: t.errs, Calls: t.calls(), Percent: 100 * float64(t.errs) / float64(max(t.calls(), 1))}
	for _, x := range s.samples {
		if x.firstErr != "" {
			h.First = x.firstErr
			break
		}
	}
	return h
}

// results renders RESULTS.md.
func (b *bench) results() (string, error) {
	return render("results", b.resultsPage())
}

func (b *bench) resultsPage() resultsPage {
	p := resultsPage{
		runInfo:      b.runInfo(),
		Command:      strings.TrimSpace(b.meta.command),
		Took:         b.finished.Sub(b.started).Round(time.Second),
		LoadStart:    b.meta.loadStart,
		LoadEnd:      b.meta.loadEnd,
		MemTotal:     b.meta.memTotal,
		Kernel:       b.meta.kernel,
		Clock:        b.meta.clock,
		NowCost:      b.meta.nowCost,
		Allocator:    b.serverInfo["mem_allocator"],
		OthersMedian: b.othersMedian(),
		OthersMax:    b.othersMax(),
		Commit:       b.meta.commit,
		Modules:      b.meta.modules,
		ClientsPool:  b.clientsPool,
		HotErrors:    b.hotErrors(),
		MemLimits:    profileDoc[mem],
		SweepRounds:  b.cfg.sweepRounds,
		SweepDur:     b.cfg.sweepDur,
		UsersLimits:  profileDoc[users],
		InprocLimits: inprocParams,
		Warm:         b.cfg.warm,
		InprocDur:    b.cfg.inprocDur,
	}
	b.targetsTable(&p)
	b.redisTables(&p)
	b.valkeyServed(&p)
	b.fleetTable(&p)
	b.serviceTable(&p)
	b.memoryTables(&p)
	b.sweepTables(&p)
	b.inprocTables(&p)
	b.checksTable(&p)
	b.rawTables(&p)
	return p
}

func (b *bench) targetsTable(p *resultsPage) {
	p.Targets, p.TargetsMet, p.Misses = judged(b.targets())
	p.LeaseTargets, p.LeaseTargetsMet, p.LeaseMisses = judged(b.leaseTargets())
	p.LeaseWork = b.leaseWork()
	p.Issue23, p.Issue23Met, p.Issue23Misses = judged(b.issue23Targets())
	p.Issue29, p.Issue29Met, p.Issue29Misses = judged(b.issue29Targets())
}

// judged lays out targets as a table, with how many were met and, once per
// reason, why the others were missed.
func judged(ts []target) (t table, met int, misses []item) {
	t.Header = []string{"target", "measured", "verdict"}
	for _, x := range ts {
		mark := "missed"
		if x.met {
			mark = "met"
			met++
		}
		if !x.known {
			mark = "not measured"
		}
		t.Rows = append(t.Rows, []string{x.name, x.measured, "**" + mark + "**: " + x.verdict})
	}
	seen := map[string]bool{}
	for _, x := range ts {
		if x.known && !x.met && x.why != "" && !seen[x.why] {
			seen[x.why] = true
			misses = append(misses, item{x.name, x.why})
		}
	}
	return t, met, misses
}

// pairAnchors are what Acquire+Release pairs are compared with.
var pairAnchors = []struct{ id, label string }{{"fl-tb", "vs AllowN (token bucket)"}, {"incr", "vs INCR"}}

// redisHeaderFor is the header of a Redis table whose ratio columns are
// anchored on as.
func redisHeaderFor(as []struct{ id, label string }) []string {
	h := []string{"contender", "decisions/s"}
	for _, a := range as {
		h = append(h, a.label)
	}
	return append(h, redisHeader[2+len(anchors):]...)
}

func (b *bench) redisRow(sc *scenarioResult, s *series, anchors []struct{ id, label string }) []string {
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

func (b *bench) redisTables(p *resultsPage) {
	for _, group := range []struct {
		name string
		prof profile
	}{{"10,000 keys", spread}, {zipfGroup, hot}, {"one hot key", hot}, {pairsGroup, permits}, {valkeyGroup, spread}} {
		g := redisGroup{Name: group.name, Limits: profileDoc[group.prof]}
		switch group.name {
		case valkeyGroup:
			if b.valkeyInfo == nil {
				continue
			}
			g.Limits = fmt.Sprintf("the 10,000-key scenarios again on a throwaway %s, each contender with clients of its own, the same limits: %s", b.valkeyName(), g.Limits)
		case zipfGroup:
			g.Limits = fmt.Sprintf("users drawn from a Zipf distribution (s = %.1f) over 10,000 users, one fixed sequence for every contender: %s. Per user as for one hot key: %s",
				zipfS, zipfShares(10_000), g.Limits)
		}
		for _, n := range goroutineCounts {
			sc := b.scenario(group.name, fmt.Sprintf("%d goroutines", n))
			if sc == nil {
				continue
			}
			as := anchors
			if group.name == pairsGroup {
				as = pairAnchors
			}
			t := table{Header: redisHeaderFor(as)}
			for _, s := range sc.series {
				t.Rows = append(t.Rows, b.redisRow(sc, s, as))
			}
			g.Tables = append(g.Tables, goroutineTable{n, t})
		}
		if group.name == "10,000 keys" {
			g.Alive = b.aliveTable()
		}
		p.Groups = append(p.Groups, g)
	}
	if sc := b.scenario("10,000 keys", "8 goroutines"); sc != nil {
		t := &table{Header: []string{"contender", "round trips", "Redis commands per decision"}}
		for _, s := range sc.series {
			tt := s.totals()
			t.Rows = append(t.Rows, []string{s.c.name, fmtF(tt.per(float64(tt.rt)), 2), cmdBreakdown(tt.cmdsBy, tt.calls())})
		}
		p.Commands = t
	}
}

// aliveTable says how many keys outlived the 10,000-key scenarios; nil when
// none ran.
func (b *bench) aliveTable() *table {
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
	if len(rows) == 0 {
		return nil
	}
	header := []string{"goroutines"}
	for _, s := range b.scenario("10,000 keys", "1 goroutines").series {
		header = append(header, s.c.name)
	}
	return &table{header, rows}
}

func (b *bench) memoryTables(p *resultsPage) {
	if len(b.memory) == 0 {
		return
	}
	p.Memory = &table{Header: []string{"contender", "key bytes", "MEMORY USAGE B", "key-space growth per user B", "used_memory growth per user B", "keys made"}}
	for _, m := range b.memory {
		p.Memory.Rows = append(p.Memory.Rows, []string{m.c.name, fmt.Sprint(m.keyLen), fmtF(m.usage, 0), fmtF(m.growthPerKey, 0), fmtF(m.usedPerKey, 0), fmt.Sprint(m.newKeys)})
	}
	if len(b.logSweeps) == 0 {
		return
	}
	p.LogSweep = &table{Header: []string{"limit", "keys", "MEMORY USAGE per key B", "per stored request B", "marginal B per request (vs previous limit)"}}
	for i, l := range b.logSweeps {
		marginal := "–"
		if i > 0 {
			prev := b.logSweeps[i-1]
			marginal = fmtF((l.usage-prev.usage)/float64(l.limit-prev.limit), 1)
		}
		p.LogSweep.Rows = append(p.LogSweep.Rows, []string{fmt.Sprint(l.limit), fmt.Sprint(l.keys), fmtF(l.usage, 0), fmtF(l.perRequest, 1), marginal})
	}
}

// sweeps returns the scenarios of a sweep group, in the order run.
func (b *bench) sweeps(group string) []*scenarioResult {
	var scs []*scenarioResult
	for _, s := range b.scenarios {
		if s.sc.group == group {
			scs = append(scs, s)
		}
	}
	return scs
}

func (b *bench) sweepTables(p *resultsPage) {
	sweep := func(scs []*scenarioResult, ids []string, first string, ratioOf [2]string) *table {
		if len(scs) == 0 {
			return nil
		}
		header := []string{first}
		for _, s := range scs[0].among(ids) {
			header = append(header, s.c.name+" decisions/s", "p50 µs")
		}
		header = append(header, ratioOf[0]+" vs "+ratioOf[1])
		var rows [][]string
		for _, sc := range scs {
			row := []string{strings.Fields(sc.sc.label)[0]}
			for _, s := range sc.among(ids) {
				row = append(row, fmtRate(s.rate()), fmtUs(s.quantile(0.5)))
			}
			a, o := sc.get(ratioOf[0]), sc.get(ratioOf[1])
			if a != nil && o != nil {
				row = append(row, fmtRatio(a.ratio(o)))
			}
			rows = append(rows, row)
		}
		return &table{header, rows}
	}
	p.GoroutineSweep = sweep(b.sweeps("goroutine sweep"), sweepContenders, "goroutines", [2]string{"fl-tb", "redis_rate"})
	p.UsersSweep = sweep(b.sweeps("users sweep"), usersContenders, "users", [2]string{"fl-tb", "redis_rate"})
}

func (b *bench) inprocTables(p *resultsPage) {
	if len(b.inproc) == 0 {
		return
	}
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
		p.Inproc = append(p.Inproc, goroutineTable{g, table{header, rows}})
	}
}

func (b *bench) checksTable(p *resultsPage) {
	p.Checks.Header = []string{"check", "result", "detail"}
	for _, c := range b.checks {
		mark := "ok"
		if c.ok {
			p.ChecksPassed++
		} else {
			mark = "**FAILED**"
			p.FailedChecks = append(p.FailedChecks, item{c.what, c.note})
		}
		p.Checks.Rows = append(p.Checks.Rows, []string{c.what, mark, c.note})
	}
}

func (b *bench) rawTables(p *resultsPage) {
	p.RawRedis.Header = []string{"scenario", "contender", "decisions/s per round", "cores other processes used, per round"}
	for _, sc := range b.scenarios {
		for _, s := range sc.series {
			var xs, os []string
			for _, x := range s.samples {
				xs = append(xs, fmtRate(x.rate()))
				os = append(os, fmtF(x.others, 1))
			}
			p.RawRedis.Rows = append(p.RawRedis.Rows, []string{sc.sc.group + ", " + sc.sc.label, s.c.name, strings.Join(xs, " "), strings.Join(os, " ")})
		}
	}
	p.RawInproc.Header = []string{"scenario", "contender", "ns/op per round", "cores other processes used, per round"}
	for _, r := range b.inproc {
		for _, g := range inprocGoroutines {
			var xs, os []string
			for _, s := range r.samples[g] {
				xs = append(xs, fmt.Sprintf("%.0f", s.nsPerOp))
				os = append(os, fmtF(s.others, 1))
			}
			p.RawInproc.Rows = append(p.RawInproc.Rows, []string{fmt.Sprintf("in process, %d goroutine(s)", g), r.c.name, strings.Join(xs, " ") + " ns/op", strings.Join(os, " ")})
		}
	}
}

// valkeyName is the Valkey rows' server as it names itself: server_name and
// valkey_version (its redis_version is the Redis version it is compatible
// with, 7.2.4 for Valkey 8, and says nothing of Valkey's own).
func (b *bench) valkeyName() string {
	name := b.valkeyInfo["server_name"]
	if name == "" {
		name = "valkey"
	}
	v := b.valkeyInfo["valkey_version"]
	if v == "" {
		v = "unknown version (redis_version " + b.valkeyInfo["redis_version"] + ")"
	}
	return fmt.Sprintf("%s-server %s", name, v)
}

func (b *bench) valkeyServed(p *resultsPage) {
	if b.valkeyInfo == nil {
		p.ValkeyNote = b.valkeyNote
		if p.ValkeyNote == "" {
			p.ValkeyNote = "not run"
		}
		return
	}
	p.Valkey = fmt.Sprintf("%s (redis_version %s, %s)", b.valkeyName(), b.valkeyInfo["redis_version"], b.valkeyInfo["mem_allocator"])
}

// fleetTable lays out issue 29's simulated fleet, one row per round.
func (b *bench) fleetTable(p *resultsPage) {
	p.FleetDoc = fmt.Sprintf("%d Limiters, each with its own go-redis client and pool (go-redis defaults), share one key of a token bucket of %d per second, burst %d, with WithLeases(%d, %v) and WithLeaseAhead; %d goroutines in all (%d per Limiter) call Allow flat out for %v per round, each round on a fresh key. Each admitted call's start and end are recorded; a window's count is the calls that overlapped it (an upper bound) and, as an estimate, those whose midpoint fell in it. The token bucket itself allows burst + rate·d in any interval d.",
		fleetProcs, fleetRate, fleetBurst, fleetLease, leaseMaxAge, fleetGoroutines, fleetGoroutines/fleetProcs, b.fleetDur())
	if len(b.fleet) == 0 {
		return
	}
	t := &table{Header: []string{"round", "decisions/s", "admitted", "admitted/s", "round trips per decision", "errors"}}
	for _, w := range b.fleetWindows() {
		t.Header = append(t.Header, fmt.Sprintf("most admitted in %v (estimate)", w), "burst + rate·d")
	}
	for i, x := range b.fleet {
		row := []string{fmt.Sprint(i + 1), fmtRate(x.rate()), fmt.Sprint(x.admitted), fmtRate(float64(x.admitted) / x.elapsed.Seconds()),
			fmtF(float64(x.rt)/float64(max(x.decisions, 1)), 4), fmt.Sprint(x.errs)}
		for _, w := range b.fleetWindows() {
			row = append(row, fmt.Sprintf("%d (%d)", x.upper[w], x.mid[w]), fmt.Sprint(allowedIn(w)))
		}
		t.Rows = append(t.Rows, row)
	}
	p.Fleet = t
}

// serviceTable compares fleetlimitd over gRPC with Limiter.AllowN of the
// same rule in process, at each concurrency.
func (b *bench) serviceTable(p *resultsPage) {
	if b.service == nil {
		p.ServiceNote = "not run"
		return
	}
	if b.service.note != "" {
		p.ServiceNote = b.service.note
		return
	}
	p.ServiceDoc = fmt.Sprintf("cmd/fleetlimitd built with go build (%v) and started as a process of its own on the bench's redis-server (`fleetlimitd %s`), serving one rule: %q. Its client here is go-control-plane's RateLimitService client over one gRPC connection on loopback (as Envoy keeps few); each call is one ShouldRateLimit with one descriptor (user = the key), 10,000 keys walked evenly. Beside it, the same rule (algorithm.FixedWindow(%d, 1s)) through Limiter.AllowN in this process, over its own go-redis client, on the same Redis. Service CPU is fleetlimitd's own (/proc, 10 ms ticks), benchmark CPU this process's (the gRPC client, or the Limiter and go-redis); Redis commands and CPU are the server's, whoever sent them.",
		b.service.build.Round(100*time.Millisecond), b.service.args, serviceRule, serviceLimit)
	t := &table{Header: []string{"callers", "contender", "calls/s", "vs AllowN", "p50 µs", "p99 µs", "Redis cmds", "Redis CPU µs", "benchmark CPU µs", "service CPU µs", "benchmark allocs"}}
	for _, g := range goroutineCounts {
		sc := b.scenario(serviceGroup, fmt.Sprintf("%d goroutines", g))
		if sc == nil {
			continue
		}
		for _, s := range sc.series {
			x := s.totals()
			svc := "–"
			if s.c.pid != 0 {
				svc = fmtF(x.per(float64(x.svcCPU))/1e3, 1)
			}
			t.Rows = append(t.Rows, []string{fmt.Sprint(g), s.c.name, fmtRate(s.rate()), fmtRatio(s.ratio(sc.get("svc-allow"))),
				fmtUs(s.quantile(0.5)), fmtUs(s.quantile(0.99)), fmtF(x.per(float64(x.cmds)), 2), fmtF(x.cpuPerDecision()*1e6, 1),
				fmtF(x.per(float64(x.clientCPU))/1e3, 1), svc, fmtF(x.per(float64(x.mallocs)), 1)})
		}
	}
	if len(t.Rows) > 0 {
		p.Service = t
	}
}
