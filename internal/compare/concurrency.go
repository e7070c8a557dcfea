package compare

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// ConcurrencyScenario is the scenario comparing an in-flight limit
// (algorithm.Concurrency) with rate limits: jobs of random length offered to
// a fleet at 1.5 times what the in-flight limit can serve, one instance
// crashing mid-run with the permits it holds.
const ConcurrencyScenario = "concurrency"

// The concurrency scenario's shape. Everything is on virtual time and from a
// fixed seed, so every store gives the same figures (the rows are a
// function of the seed alone).
const (
	concSlots     = 10               // the in-flight limit
	concTTL       = 30 * time.Second // a permit not released expires this long after its acquire
	concInstances = 4                // behind a round-robin load balancer
	concRun       = 5 * time.Minute  // of arrivals
	concCrashAt   = 2 * time.Minute  // instance 0 crashes: its jobs die, its permits are never released
	concSeed      = 26
	// A job is short (0.5 to 1.5 s) 4 times in 5 and long (5 to 15 s)
	// otherwise: 2.8 s on average.
	concMeanJob = 2800 * time.Millisecond
	// Arrivals (Poisson) offer 1.5 times what concSlots slots serve.
	concLoad = 1.5
)

// ConcurrencyRow is one row of the concurrency scenario: one limit, over
// one kind of store, deciding the same jobs.
type ConcurrencyRow struct {
	// Algorithm is the strategy's name; Rule says its parameters.
	Algorithm string `json:"algorithm"`
	Rule      string `json:"rule"`
	// Store is StoreRedis (one shared store) or StoreMemory (one per
	// instance).
	Store     string `json:"store"`
	Instances int    `json:"instances"`
	// Limit is the in-flight limit (concSlots) every row stands for: the
	// rate limits are set to what it serves (Little's law: slots / mean job
	// length).
	Limit int64 `json:"limit"`
	// Offered and Admitted count jobs.
	Offered  int64 `json:"offered"`
	Admitted int64 `json:"admitted"`
	// Ideal is what one exact in-process semaphore of Limit admits from the
	// same jobs, with no crash.
	Ideal int64 `json:"ideal"`
	// MaxInFlight is the most admitted jobs running at once.
	MaxInFlight int64 `json:"max_in_flight"`
	// OverLimit is the share of the run's time with more than Limit jobs
	// running, in percent.
	OverLimit float64 `json:"over_limit_pct"`
	// LostSlotSeconds is the slot-time the crashed instance's permits held
	// in the shared store after the crash, until their ttl: slots no one
	// could use. 0 where nothing holds slots for a process that is gone.
	LostSlotSeconds float64 `json:"lost_slot_seconds"`
	// DeniedWithSlotFree counts the jobs denied while fewer than Limit
	// admitted jobs were running: a slot was free in truth. For the
	// in-flight limit on the shared store, a crashed holder's permit held
	// it; for a rate limit, the rate was spent while the slots idled.
	DeniedWithSlotFree int64 `json:"denied_with_slot_free"`
}

// job is one request of the concurrency scenario: it arrives at At and
// runs for Len, both relative to the origin.
type concJob struct {
	at, length time.Duration
}

// concJobs are the scenario's jobs, from concSeed.
func concJobs() []concJob {
	rng := rand.New(rand.NewPCG(concSeed, 0))
	rate := concLoad * concSlots / concMeanJob.Seconds() // arrivals per second
	var jobs []concJob
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)).Truncate(time.Millisecond)
		if t >= concRun {
			return jobs
		}
		length := 500*time.Millisecond + time.Duration(rng.Int64N(1000))*time.Millisecond
		if rng.IntN(5) == 0 {
			length = 5*time.Second + time.Duration(rng.Int64N(10_000))*time.Millisecond
		}
		jobs = append(jobs, concJob{at: t, length: length})
	}
}

// concLimits are the rows' strategies: the in-flight limit, and rate limits
// set to what it serves.
func concLimits() []struct {
	strat algorithm.Strategy
	rule  string
} {
	perMinute := int64(float64(concSlots) / concMeanJob.Seconds() * 60) // 214
	return []struct {
		strat algorithm.Strategy
		rule  string
	}{
		{algorithm.Concurrency(concSlots, concTTL), fmt.Sprintf("%d in flight, ttl %s", concSlots, window(concTTL))},
		{algorithm.TokenBucket(perMinute, time.Minute, concSlots), fmt.Sprintf("%d/min, burst %d", perMinute, concSlots)},
		{algorithm.SlidingWindowLog(perMinute, time.Minute), fmt.Sprintf("%d/min", perMinute)},
	}
}

// runConcurrency runs the concurrency scenario's rows: the in-flight limit
// over the shared Redis and over a memory store per instance, and each rate
// limit over the shared Redis.
func (r *runner) runConcurrency(ctx context.Context) ([]ConcurrencyRow, error) {
	jobs := concJobs()
	ideal := idealSemaphore(jobs)
	var rows []ConcurrencyRow
	for i, l := range concLimits() {
		stores := []string{StoreRedis}
		if i == 0 {
			stores = append(stores, StoreMemory)
		}
		for _, st := range stores {
			row, err := r.concurrencyRow(ctx, l.strat, st, jobs)
			if err != nil {
				return nil, fmt.Errorf("compare: %s, %s, %s store: %w", ConcurrencyScenario, l.strat.Name(), st, err)
			}
			row.Rule, row.Ideal = l.rule, ideal
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// concurrencyRow runs jobs through concInstances limiters of strat over
// kind of store, on a virtual clock: each job is decided at its arrival by
// the next live instance (Acquire for a strategy that holds permits, Allow
// otherwise) and, admitted, runs for its length, then releases its permit;
// at concCrashAt instance 0 dies with its jobs and never releases.
func (r *runner) concurrencyRow(ctx context.Context, strat algorithm.Strategy, kind string, jobs []concJob) (ConcurrencyRow, error) {
	stores, closeStores, err := r.holdingStores(kind)
	if err != nil {
		return ConcurrencyRow{}, err
	}
	defer closeStores()
	prefix := fmt.Sprintf("fleetlimit-compare:%s:conc-%s-%s:", r.runID, strat.Name(), kind)
	if r.cfg.KeyPrefix != "" {
		prefix = r.cfg.KeyPrefix
	}
	// The origin is ahead of the real time, so that on a real Redis, which
	// expires keys on its own clock, no key expires before the run is done.
	origin := time.Now().Add(time.Hour).Truncate(time.Second)
	clock := &vclock{}
	lims := make([]*fleetlimit.Limiter, concInstances)
	for i, st := range stores {
		l, err := fleetlimit.New(strat, st, fleetlimit.WithClock(clock.now), fleetlimit.WithKeyPrefix(prefix),
			fleetlimit.WithTimeout(decisionTimeout), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
		if err != nil {
			return ConcurrencyRow{}, err
		}
		lims[i] = l
	}
	sim := concSim{holds: algorithm.Holds(strat), lims: lims, clock: clock, origin: origin}
	if err := sim.run(ctx, jobs); err != nil {
		return ConcurrencyRow{}, err
	}
	if kind == StoreRedis {
		if err := r.srv.deleteKeys(ctx, []string{store.RedisKey(prefix, concKey, strat.Script().Tag)}); err != nil {
			return ConcurrencyRow{}, err
		}
	}
	row := sim.row
	row.Algorithm, row.Store, row.Instances, row.Limit = strat.Name(), kind, concInstances, concSlots
	if kind == StoreMemory {
		// The crashed process's semaphore died with it: it holds no one's slot.
		row.LostSlotSeconds = 0
	}
	return row, nil
}

// holdingStores returns concInstances stores of kind: the shared Redis
// through a client of its own per instance, or a Memory each. Unlike
// runner.stores, they are not wrapped (the concurrency rows count no
// round trips), so that they hold permits (store.Holder).
func (r *runner) holdingStores(kind string) ([]store.Store, func(), error) {
	stores := make([]store.Store, concInstances)
	var clients []interface{ Close() error }
	closeAll := func() {
		for _, s := range stores {
			if s != nil {
				_ = s.Close()
			}
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for i := range stores {
		if kind == StoreMemory {
			stores[i] = store.NewMemory(store.WithSweepInterval(24 * time.Hour))
			continue
		}
		c := r.srv.NewClient()
		clients = append(clients, c)
		st, err := store.NewRedis(c)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		stores[i] = st
	}
	return stores, closeAll, nil
}

// concKey is the one key of the concurrency scenario: a tenant's pool.
const concKey = "tenant-1"

// concSim is one run of the concurrency scenario.
type concSim struct {
	holds  bool // the strategy holds permits: Acquire and Release
	lims   []*fleetlimit.Limiter
	clock  *vclock
	origin time.Time

	running ends // admitted jobs still running, by end
	next    int  // the round robin's next instance
	crashed bool
	// Time-weighted: when the running count last changed, and the time
	// spent above the limit.
	last, over time.Duration
	row        ConcurrencyRow
}

// at sets the virtual clock to d past the origin.
func (s *concSim) at(d time.Duration) { s.clock.us.Store(s.origin.Add(d).UnixMicro()) }

// run decides every job in order of arrival, ending (and releasing) the
// jobs that end before each arrival first.
func (s *concSim) run(ctx context.Context, jobs []concJob) error {
	for _, j := range jobs {
		if err := s.endUntil(ctx, j.at); err != nil {
			return err
		}
		if !s.crashed && j.at >= concCrashAt {
			s.crash()
		}
		if err := s.decide(ctx, j); err != nil {
			return err
		}
	}
	if err := s.endUntil(ctx, concRun+time.Hour); err != nil {
		return err
	}
	s.row.OverLimit = 100 * s.over.Seconds() / s.last.Seconds()
	return nil
}

// decide decides job j on the next live instance.
func (s *concSim) decide(ctx context.Context, j concJob) error {
	s.at(j.at)
	inst := s.next
	s.next = (s.next + 1) % len(s.lims)
	if s.crashed && inst == 0 {
		inst, s.next = 1, 2%len(s.lims)
	}
	l := s.lims[inst]
	s.row.Offered++
	var p fleetlimit.Permit
	var res fleetlimit.Result
	var err error
	if s.holds {
		p, res, err = l.Acquire(ctx, concKey)
	} else {
		res, err = l.Allow(ctx, concKey)
	}
	if err != nil {
		return err
	}
	if !res.Allowed {
		if len(s.running) < concSlots {
			s.row.DeniedWithSlotFree++
		}
		return nil
	}
	s.row.Admitted++
	s.count(j.at)
	heap.Push(&s.running, running{end: j.at + j.length, start: j.at, instance: inst, permit: p})
	s.row.MaxInFlight = max(s.row.MaxInFlight, int64(len(s.running)))
	return nil
}

// endUntil ends the jobs that end before t, releasing their permits at their
// end.
func (s *concSim) endUntil(ctx context.Context, t time.Duration) error {
	for len(s.running) > 0 && s.running[0].end <= t {
		s.count(s.running[0].end)
		j := heap.Pop(&s.running).(running)
		s.at(j.end)
		if err := j.permit.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// crash kills instance 0 at concCrashAt: its running jobs die, and the
// permits they hold stay held until their ttl.
func (s *concSim) crash() {
	s.crashed = true
	s.count(concCrashAt)
	kept := s.running[:0]
	for _, j := range s.running {
		if j.instance != 0 {
			kept = append(kept, j)
			continue
		}
		if s.holds {
			s.row.LostSlotSeconds += (j.start + concTTL - concCrashAt).Seconds()
		}
	}
	s.running = kept
	heap.Init(&s.running)
}

// count adds the time since the last change of the running count, before
// it changes at t.
func (s *concSim) count(t time.Duration) {
	if len(s.running) > concSlots {
		s.over += t - s.last
	}
	s.last = t
}

// idealSemaphore is what one exact semaphore of concSlots admits from jobs,
// with no crash.
func idealSemaphore(jobs []concJob) int64 {
	var ends []time.Duration
	var admitted int64
	for _, j := range jobs {
		live := ends[:0]
		for _, e := range ends {
			if e > j.at {
				live = append(live, e)
			}
		}
		ends = live
		if len(ends) < concSlots {
			admitted++
			ends = append(ends, j.at+j.length)
		}
	}
	return admitted
}

// running is an admitted job until its end.
type running struct {
	end, start time.Duration
	instance   int
	permit     fleetlimit.Permit
}

// ends is a min-heap of running jobs by end.
type ends []running

func (h ends) Len() int           { return len(h) }
func (h ends) Less(i, j int) bool { return h[i].end < h[j].end }
func (h ends) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ends) Push(x any)        { *h = append(*h, x.(running)) }
func (h *ends) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// concurrencyCells are the concurrency scenario's table, as text and
// markdown show it, and its notes; nil without its rows.
func (rep *Report) concurrencyCells() (head []string, rows [][]string, notes []string) {
	if len(rep.Concurrency) == 0 {
		return nil, nil, nil
	}
	head = []string{"algorithm", "rule", "store", "inst", "offered", "admitted", "ideal", "max in flight", "over limit", "slot·s lost to the crash", "denied, a slot free"}
	for _, r := range rep.Concurrency {
		rows = append(rows, []string{r.Algorithm, r.Rule, r.Store, fmt.Sprint(r.Instances), thousands(r.Offered), thousands(r.Admitted), thousands(r.Ideal),
			fmt.Sprintf("%d / %d", r.MaxInFlight, r.Limit), fmt.Sprintf("%.1f%%", r.OverLimit), fmt.Sprintf("%.1f", r.LostSlotSeconds), thousands(r.DeniedWithSlotFree)})
	}
	notes = []string{
		fmt.Sprintf("Jobs of 0.5 to 1.5 s (4 in 5) and 5 to 15 s (1 in 5), %s on average, arriving at random (seed %d) for %s at %.1f times what %d slots serve, through %d instances in round robin; at %s instance 0 crashes: its jobs die and it never releases their permits.",
			concMeanJob, concSeed, window(concRun), concLoad, concSlots, concInstances, window(concCrashAt)),
		"concurrency: Limiter.Acquire at a job's start, Permit.Release at its end; the rate limits: Limiter.Allow at its start, set to what the slots serve (slots / mean job length). Virtual time: the same figures on every store.",
		"ideal: what one exact semaphore of the limit admits from the same jobs, with no crash. max in flight: the most admitted jobs running at once, against the limit. over limit: the share of the run's time with more running than the limit.",
		fmt.Sprintf("slot·s lost to the crash: the time the crashed instance's permits held slots in the shared store after the crash, until their ttl (%s after their acquire). A memory store per instance loses none (its semaphore dies with the process) but admits up to instances × the limit.", window(concTTL)),
		"denied, a slot free: jobs denied while fewer than the limit were running: for the in-flight limit, slots held by the crashed holder's permits; for a rate limit, the rate spent while slots idled.",
	}
	return head, rows, notes
}
