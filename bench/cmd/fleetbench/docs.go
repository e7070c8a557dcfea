package main

import (
	"fmt"
	"math"
	"strings"
)

// guidePage is what the template "performance" renders into
// docs/performance.md: the user's guide to what fleetlimit costs, with every
// figure taken from this run. A nil table leaves its section (or sentence)
// out.
type guidePage struct {
	runInfo
	Glance       *table
	SpreadLimits string
	UsersMemory  table
	UsersSpeed   *table
	// UsersTokenBucket and HotErrors are said only beside UsersSpeed.
	UsersTokenBucket *usersTokenBucket
	HotErrors        *hotErrors
	LogSweep         *table
	Concurrency      *table
	Ceiling          *ceiling
	RedisCPU         *table
	Inproc           *table
	// Leases compares the leased contenders with their exact twins and
	// redis_rate at 64 goroutines, per key set; LocalPath is a decision
	// served from a lease, in process.
	Leases    *table
	LocalPath string
	// Spread is the leases-64 token bucket over 10,000 evenly walked keys
	// at 64 goroutines, nil when not measured.
	Spread *leaseSpread
	// Valkey compares each exact contender's ratio to redis_rate on Redis
	// and on Valkey; ValkeyName is the server. Pairs is Acquire+Release
	// against AllowN, Service fleetlimitd against AllowN. Nil when not
	// measured.
	Valkey     *table
	ValkeyName string
	Pairs      *table
	Service    *table
}

// leaseSpread says how often a key came back over 10,000 keys, and so how
// much of a lease it spent before the lease aged out.
type leaseSpread struct {
	Rate     string  // decisions/s
	PerKey   float64 // decisions per key per second
	PerLease float64 // decisions per lease: min(size, PerKey × maxAge)
	Size     int64
}

// usersTokenBucket is fleetlimit's token bucket at the fewest and the most
// users of the users sweep.
type usersTokenBucket struct {
	First, Last           string // decisions/s
	FirstUsers, LastUsers int
}

// ceiling is where the CPU went at the goroutine sweep's last step, for
// fleetlimit's token bucket.
type ceiling struct {
	G                                    int
	RedisCores, ClientCores, OthersCores float64
	CPUTotal, CPURedis, CPUClient        float64 // µs per decision
}

// performanceDoc renders docs/performance.md.
func (b *bench) performanceDoc() (string, error) {
	return render("performance", b.guidePage())
}

func (b *bench) guidePage() guidePage {
	p := guidePage{runInfo: b.runInfo(), SpreadLimits: profileDoc[spread]}
	b.guideGlance(&p)
	b.guideUsers(&p)
	b.guideLimit(&p)
	b.guideConcurrency(&p)
	b.guideCPU(&p)
	b.guideInproc(&p)
	b.guideLeases(&p)
	b.guideValkey(&p)
	b.guidePairs(&p)
	b.guideService(&p)
	return p
}

// guideValkey sets, per contender of the Valkey rows, decisions/s and the
// ratio to redis_rate on each server at 1 and 64 goroutines.
func (b *bench) guideValkey(p *guidePage) {
	if b.valkeyInfo == nil {
		return
	}
	p.ValkeyName = b.valkeyName()
	t := &table{Header: []string{"", "Redis, 1 goroutine", "Valkey, 1 goroutine", "Redis, 64 goroutines", "Valkey, 64 goroutines", "Redis CPU µs per decision, Redis / Valkey (64 goroutines)"}}
	cell := func(group string, g int, id string) string {
		sc := b.scenario(group, fmt.Sprintf("%d goroutines", g))
		if sc == nil || sc.get(id) == nil {
			return "–"
		}
		s := sc.get(id)
		return fmt.Sprintf("%s (%s)", fmtRate(s.rate()), fmtRatio(s.ratio(sc.get("redis_rate"))))
	}
	cpu := func(group, id string) string {
		sc := b.scenario(group, "64 goroutines")
		if sc == nil || sc.get(id) == nil {
			return "–"
		}
		return fmtF(sc.get(id).totals().cpuPerDecision()*1e6, 1)
	}
	for _, id := range valkeyContenders {
		sc := b.scenario(valkeyGroup, "1 goroutines")
		if sc == nil || sc.get(id) == nil {
			continue
		}
		t.Rows = append(t.Rows, []string{sc.get(id).c.name, cell("10,000 keys", 1, id), cell(valkeyGroup, 1, id),
			cell("10,000 keys", 64, id), cell(valkeyGroup, 64, id), cpu("10,000 keys", id) + " / " + cpu(valkeyGroup, id)})
	}
	if len(t.Rows) > 0 {
		p.Valkey = t
	}
}

// guidePairs sets Acquire+Release pairs against the token bucket's AllowN
// at each concurrency.
func (b *bench) guidePairs(p *guidePage) {
	t := &table{Header: []string{"goroutines", "pairs/s", "AllowN decisions/s", "pair vs AllowN", "round trips per pair", "Redis CPU µs per pair (AllowN)", "allocs per pair (AllowN)"}}
	for _, g := range goroutineCounts {
		sc := b.scenario(pairsGroup, fmt.Sprintf("%d goroutines", g))
		if sc == nil || sc.get("fl-pair") == nil || sc.get("fl-tb") == nil {
			continue
		}
		pr, al := sc.get("fl-pair"), sc.get("fl-tb")
		x, y := pr.totals(), al.totals()
		t.Rows = append(t.Rows, []string{fmt.Sprint(g), fmtRate(pr.rate()), fmtRate(al.rate()), fmtRatio(pr.ratio(al)), fmtF(x.per(float64(x.rt)), 2),
			fmt.Sprintf("%s (%s)", fmtF(x.cpuPerDecision()*1e6, 1), fmtF(y.cpuPerDecision()*1e6, 1)),
			fmt.Sprintf("%s (%s)", fmtF(x.per(float64(x.mallocs)), 1), fmtF(y.per(float64(y.mallocs)), 1))})
	}
	if len(t.Rows) > 0 {
		p.Pairs = t
	}
}

// guideService sets fleetlimitd's calls/s and latency against AllowN.
func (b *bench) guideService(p *guidePage) {
	t := &table{Header: []string{"callers", "fleetlimitd calls/s", "AllowN in process", "fleetlimitd vs AllowN", "fleetlimitd p50 / p99 µs", "AllowN p50 / p99 µs"}}
	for _, g := range goroutineCounts {
		sc := b.scenario(serviceGroup, fmt.Sprintf("%d goroutines", g))
		if sc == nil || sc.get("svc-grpc") == nil || sc.get("svc-allow") == nil {
			continue
		}
		s, a := sc.get("svc-grpc"), sc.get("svc-allow")
		t.Rows = append(t.Rows, []string{fmt.Sprint(g), fmtRate(s.rate()), fmtRate(a.rate()), fmtRatio(s.ratio(a)),
			fmtUs(s.quantile(0.5)) + " / " + fmtUs(s.quantile(0.99)), fmtUs(a.quantile(0.5)) + " / " + fmtUs(a.quantile(0.99))})
	}
	if len(t.Rows) > 0 {
		p.Service = t
	}
}

// guideLeases compares, at 64 goroutines on each key set, fleetlimit's token
// bucket and fixed window with and without leases, and redis_rate.
func (b *bench) guideLeases(p *guidePage) {
	ids := []string{"fl-tb"}
	for _, n := range leaseSizes {
		ids = append(ids, fmt.Sprintf("fl-tb-l%d", n))
	}
	ids = append(ids, "fl-fw", "fl-fw-l64", "redis_rate")
	t := &table{Header: []string{"key set (64 goroutines)", "", "decisions/s", "vs redis_rate", "round trips per decision", "Redis CPU µs per decision", "app CPU µs per decision", "p99 µs"}}
	for _, group := range []string{"one hot key", zipfGroup, "10,000 keys"} {
		sc := b.scenario(group, "64 goroutines")
		if sc == nil {
			continue
		}
		for _, s := range sc.among(ids) {
			x := s.totals()
			t.Rows = append(t.Rows, []string{group, s.c.name, fmtRate(s.rate()), fmtRatio(s.ratio(sc.get("redis_rate"))),
				fmtF(x.per(float64(x.rt)), 3), fmtF(x.cpuPerDecision()*1e6, 2), fmtF(x.per(float64(x.clientCPU))/1e3, 2), fmtUs(s.quantile(0.99))})
		}
	}
	if len(t.Rows) > 0 {
		p.Leases = t
	}
	p.LocalPath = b.localPath()
	if sc := b.scenario("10,000 keys", "64 goroutines"); sc != nil && sc.get("fl-tb-l64") != nil {
		s := sc.get("fl-tb-l64")
		perKey := s.rate() / float64(sc.sc.users)
		p.Spread = &leaseSpread{Rate: fmtRate(s.rate()), PerKey: perKey, Size: s.c.lease,
			PerLease: min(float64(s.c.lease), perKey*leaseMaxAge.Seconds())}
	}
}

func (b *bench) guideGlance(p *guidePage) {
	sc64 := b.scenario("10,000 keys", "64 goroutines")
	sc1 := b.scenario("10,000 keys", "1 goroutines")
	if sc64 == nil || sc1 == nil {
		return
	}
	p.Glance = &table{Header: []string{"", "decisions/s, 64 goroutines", "vs redis_rate", "p50 µs, 1 goroutine",
		"round trips per decision", "Redis commands per decision", "Redis CPU µs per decision", "app CPU µs per decision", "MEMORY USAGE per user, B"}}
	for _, s := range sc64.series {
		if s.c.lease > 0 {
			continue // other limits; see the leases section
		}
		t := s.totals()
		one := sc1.get(s.c.id)
		p50 := "–"
		if one != nil {
			p50 = fmtUs(one.quantile(0.5))
		}
		p.Glance.Rows = append(p.Glance.Rows, []string{s.c.name, fmtRate(s.rate()), fmtRatio(s.ratio(sc64.get("redis_rate"))), p50,
			fmtF(t.per(float64(t.rt)), 2), fmtF(t.per(float64(t.cmds)), 1), fmtF(t.cpuPerDecision()*1e6, 1), fmtF(t.per(float64(t.clientCPU))/1e3, 1), fmtF(b.memUsage(s.c.id), 0)})
	}
}

func (b *bench) guideUsers(p *guidePage) {
	p.UsersMemory.Header = []string{"", "MEMORY USAGE B", "Redis memory per user B"}
	for _, m := range b.memory {
		if !strings.HasPrefix(m.c.id, "fl-") && !m.c.anchor {
			continue
		}
		p.UsersMemory.Rows = append(p.UsersMemory.Rows, []string{m.c.name, fmtF(m.usage, 0), fmtF(m.growthPerKey, 0)})
	}

	us := b.sweeps("users sweep")
	if len(us) == 0 {
		return
	}
	p.UsersSpeed = &table{Header: []string{"users"}}
	for _, s := range us[0].among(usersContenders) {
		p.UsersSpeed.Header = append(p.UsersSpeed.Header, s.c.name)
	}
	for _, sc := range us {
		row := []string{fmt.Sprintf("%d", sc.sc.users)}
		for _, s := range sc.among(usersContenders) {
			row = append(row, fmtRate(s.rate()))
		}
		p.UsersSpeed.Rows = append(p.UsersSpeed.Rows, row)
	}
	if first, last := us[0].get("fl-tb"), us[len(us)-1].get("fl-tb"); first != nil && last != nil {
		p.UsersTokenBucket = &usersTokenBucket{First: fmtRate(first.rate()), FirstUsers: us[0].sc.users,
			Last: fmtRate(last.rate()), LastUsers: us[len(us)-1].sc.users}
	}
	p.HotErrors = b.hotErrors()
}

func fmtMB(bytes float64) string {
	if math.IsNaN(bytes) {
		return "–"
	}
	if bytes >= 1e9 {
		return fmt.Sprintf("%.2f GB", bytes/1e9)
	}
	return fmt.Sprintf("%.0f MB", bytes/1e6)
}

func (b *bench) guideLimit(p *guidePage) {
	if len(b.logSweeps) == 0 {
		return
	}
	p.LogSweep = &table{Header: []string{"limit (key full)", "MEMORY USAGE per user B", "B per stored request", "1M users all at the limit (keys alone)"}}
	for _, l := range b.logSweeps {
		p.LogSweep.Rows = append(p.LogSweep.Rows, []string{fmt.Sprint(l.limit), fmtF(l.usage, 0), fmtF(l.perRequest, 1), fmtMB(l.usage * 1e6)})
	}
}

func (b *bench) guideConcurrency(p *guidePage) {
	gs := b.sweeps("goroutine sweep")
	if len(gs) == 0 {
		return
	}
	p.Concurrency = &table{Header: []string{"goroutines"}}
	for _, s := range gs[0].among(sweepContenders) {
		p.Concurrency.Header = append(p.Concurrency.Header, s.c.name+" decisions/s", "p50 µs", "Redis cores")
	}
	for _, sc := range gs {
		row := []string{fmt.Sprint(sc.sc.g)}
		for _, s := range sc.among(sweepContenders) {
			row = append(row, fmtRate(s.rate()), fmtUs(s.quantile(0.5)), fmtF(s.totals().cpuUtil(), 2))
		}
		p.Concurrency.Rows = append(p.Concurrency.Rows, row)
	}
	last := gs[len(gs)-1]
	if s := last.get("fl-tb"); s != nil {
		t := s.totals()
		p.Ceiling = &ceiling{G: last.sc.g, RedisCores: t.cpuUtil(), ClientCores: t.clientCPU.Seconds() / t.elapsed.Seconds(),
			OthersCores: medianOf(s.samples, func(x sample) float64 { return x.others }),
			CPUTotal:    t.cpuPerDecision()*1e6 + t.per(float64(t.clientCPU))/1e3,
			CPURedis:    t.cpuPerDecision() * 1e6, CPUClient: t.per(float64(t.clientCPU)) / 1e3}
	}
}

func (b *bench) guideCPU(p *guidePage) {
	sc64 := b.scenario("10,000 keys", "64 goroutines")
	sc1 := b.scenario("10,000 keys", "1 goroutines")
	if sc64 == nil || sc1 == nil {
		return
	}
	p.RedisCPU = &table{Header: []string{"", "µs per decision, 1 caller", "µs per decision, 64 callers", "one core at 10k decisions/s", "cores at 100k decisions/s", "decisions/s per Redis core"}}
	for _, s := range sc64.series {
		if s.c.lease > 0 {
			continue
		}
		busy := s.totals().cpuPerDecision()
		idle := math.NaN()
		if one := sc1.get(s.c.id); one != nil {
			idle = one.totals().cpuPerDecision()
		}
		p.RedisCPU.Rows = append(p.RedisCPU.Rows, []string{s.c.name, fmtF(idle*1e6, 1), fmtF(busy*1e6, 1), fmtF(busy*1e4*100, 0) + "%",
			fmtF(busy*1e5, 2), fmtRate(1 / busy)})
	}
}

func (b *bench) guideInproc(p *guidePage) {
	if len(b.inproc) == 0 {
		return
	}
	p.Inproc = &table{Header: []string{"", "CPU ns/op, 1 goroutine", "allocs/op", "CPU ns/op, 2 goroutines", "projected speed-up on 2 cores"}}
	for _, r := range b.inproc {
		p.Inproc.Rows = append(p.Inproc.Rows, []string{r.c.name, fmtF(r.cpuNs(1), 0), fmtF(r.allocs(1), 2), fmtF(r.cpuNs(2), 0), fmtRatio(r.projectedSpeedup(2))})
	}
}
