package compare

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// job is one row: a plan run with one algorithm over one kind of store.
type job struct {
	plan        plan
	entry       algorithm.Entry
	store       string
	lease       int64 // fleetlimit.WithLeases size; 0 for none
	floor       int64 // fleetlimit.WithLeaseFloor; 0 for fixed sizes
	index, jobs int
}

func (j job) label() string {
	return fmt.Sprintf("%s, %s, %s x%d", j.plan.name, algorithmLabel(j.entry.Name, j.lease, j.floor), j.store, j.plan.instances)
}

// algorithmLabel names an algorithm with its lease size, if any, and the
// floor of adaptive sizes.
func algorithmLabel(name string, lease, floor int64) string {
	switch {
	case lease == 0:
		return name
	case floor > 0:
		return fmt.Sprintf("%s, leases of %d to %d", name, floor, lease)
	}
	return fmt.Sprintf("%s, leases of %d", name, lease)
}

type runner struct {
	cfg   Config
	srv   *Server
	runID string
}

// vclock is a virtual clock, in µs since the Unix epoch.
type vclock struct{ us atomic.Int64 }

func (c *vclock) now() time.Time { return time.UnixMicro(c.us.Load()) }

// settleTime is how long a memory measurement waits for Redis to finish
// rehashing its keyspace (activerehashing, at the default hz 10).
const settleTime = 300 * time.Millisecond

// decisionTimeout bounds one decision: far above any healthy round trip,
// even under the race detector, so that a timeout is a real failure.
const decisionTimeout = 10 * time.Second

// userKey names user u; every name has the same length, so that memory per
// key does not vary with the user.
func userKey(u int) string { return fmt.Sprintf("user-%07d", u) }

// outcome is what one job's traffic produced.
type outcome struct {
	admitted   []Event // sorted by time, At on the relative axis
	latencies  []time.Duration
	memory     []float64 // MEMORY USAGE (or its estimate) of sampled keys
	storeCalls int64     // calls to the counted stores while deciding
}

// run runs one job and measures it.
func (r *runner) run(ctx context.Context, j job) (Row, *Series, error) {
	p := j.plan
	strat := j.entry.New(p.limit, r.cfg.Window)
	if err := strat.Validate(); err != nil {
		return Row{}, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// The origin is a window edge at least one window ahead of the real
	// time: virtual time never lags real time, and keys on a real Redis
	// outlive their use (see the package doc).
	w := r.cfg.Window.Microseconds()
	//
	// An odd multiple of the window, so that the sliding log's member names
	// (which begin with the time modulo two windows) have the same length in
	// every run: memory per key does not vary from run to run.
	origin := (time.Now().UnixMicro()/w + 2) * w
	if origin/w%2 == 0 {
		origin += w
	}
	// A fixed-width job number keeps key names, and so MEMORY USAGE, alike.
	prefix := fmt.Sprintf("fleetlimit-compare:%s:%04d:", r.runID, j.index)
	if r.cfg.KeyPrefix != "" {
		prefix = r.cfg.KeyPrefix
	}
	measure := j.store == StoreRedis && !r.srv.Embedded()
	// Memory per key is measured on a real Redis and estimated on the
	// embedded one (memoryUsage).
	sampleMemory := j.store == StoreRedis

	stores, closeStores := r.stores(j)
	defer closeStores()
	newLimiter := func(st store.Store, clock *vclock) (*fleetlimit.Limiter, error) {
		opts := []fleetlimit.Option{fleetlimit.WithClock(clock.now), fleetlimit.WithKeyPrefix(prefix),
			fleetlimit.WithTimeout(decisionTimeout), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed)}
		if j.lease > 0 {
			opts = append(opts, fleetlimit.WithLeases(j.lease, r.cfg.LeaseMaxAge))
		}
		if j.floor > 0 {
			opts = append(opts, fleetlimit.WithLeaseFloor(j.floor))
		}
		return fleetlimit.New(strat, st, opts...)
	}

	var before, after snapshot
	var err error
	if measure {
		if before, err = r.srv.snapshot(ctx); err != nil {
			return Row{}, nil, err
		}
	}
	var out outcome
	if p.parallel {
		out, err = r.runParallel(ctx, j, stores[0], newLimiter, origin, measure, sampleMemory, prefix, strat.Script().Tag)
	} else {
		out, err = r.runInOrder(ctx, j, stores, newLimiter, origin, measure)
	}
	if err != nil {
		return Row{}, nil, err
	}
	if measure {
		if p.parallel {
			// A keyspace that has just grown is still rehashing into its
			// larger table, both tables allocated; Redis's cron finishes the
			// move within a few of its 100 ms ticks. Read memory after it.
			select {
			case <-time.After(settleTime):
			case <-ctx.Done():
				return Row{}, nil, ctx.Err()
			}
		}
		if after, err = r.srv.snapshot(ctx); err != nil {
			return Row{}, nil, err
		}
	}
	if j.store == StoreRedis {
		keys := make([]string, p.users)
		for u := range keys {
			keys[u] = store.RedisKey(prefix, userKey(u), strat.Script().Tag)
		}
		if err := r.srv.deleteKeys(ctx, keys); err != nil {
			return Row{}, nil, err
		}
	}

	row, err := r.row(j, strat, origin, out)
	if err != nil {
		return Row{}, nil, err
	}
	switch {
	case measure:
		r.addMeasurements(&row, before, after, out)
	case j.store == StoreRedis:
		row.NotMeasured = "embedded"
		addMemory(&row, snapshot{}, snapshot{}, out)
		row.MemoryEstimated = row.MemoryUsage != nil
	default:
		row.NotMeasured = "memory store"
	}
	if row.MemoryUsage != nil {
		row.KeyBytes = len(store.RedisKey(prefix, userKey(0), strat.Script().Tag))
	}
	if j.store == StoreRedis {
		row.StoreCalls = out.storeCalls
		if row.Decisions > 0 {
			rt := float64(out.storeCalls) / float64(row.Decisions)
			row.RoundTrips = &rt
		}
	}
	var series *Series
	if p.chart || j.lease > 0 {
		series = &Series{
			Scenario: p.name, Algorithm: j.entry.Name, Lease: j.lease, Floor: j.floor, Store: j.store, Instances: p.instances,
			Limit: p.limit, Admitted: ofUser(out.admitted, 0), From: p.from, To: p.to,
		}
	}
	return row, series, nil
}

// stores returns the job's stores, one per instance: the same Redis through
// a client of its own per instance, each wrapped in a countingStore, or a
// Memory each.
func (r *runner) stores(j job) ([]store.Store, func()) {
	k := j.plan.instances
	stores := make([]store.Store, k)
	var clients []interface{ Close() error }
	for i := range stores {
		if j.store == StoreRedis {
			c := r.srv.NewClient()
			clients = append(clients, c)
			st, err := store.NewRedis(c)
			if err != nil {
				panic(err) // the tool's own clients have ContextTimeoutEnabled
			}
			stores[i] = newCountingStore(st)
		} else {
			// The sweeper drops idle keys on real time; a day keeps it out
			// of the run's way.
			stores[i] = store.NewMemory(store.WithSweepInterval(24 * time.Hour))
		}
	}
	return stores, func() {
		for _, s := range stores {
			_ = s.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
}

// runInOrder sends the traffic in time order, request i through instance
// i mod K (a round-robin load balancer).
func (r *runner) runInOrder(ctx context.Context, j job, stores []store.Store,
	newLimiter func(store.Store, *vclock) (*fleetlimit.Limiter, error), origin int64, measure bool) (outcome, error) {
	clock := &vclock{}
	lims := make([]*fleetlimit.Limiter, len(stores))
	for i, st := range stores {
		l, err := newLimiter(st, clock)
		if err != nil {
			return outcome{}, err
		}
		lims[i] = l
	}
	var out outcome
	traffic := j.plan.traffic
	if measure {
		out.latencies = make([]time.Duration, 0, len(traffic))
	}
	for i, ev := range traffic {
		clock.us.Store(origin + ev.At)
		t0 := time.Now()
		res, err := lims[i%len(lims)].AllowN(ctx, userKey(ev.User), ev.N)
		if err != nil {
			return outcome{}, err
		}
		if measure {
			out.latencies = append(out.latencies, time.Since(t0))
		}
		if res.Allowed {
			out.admitted = append(out.admitted, ev)
		}
		if i%256 == 0 {
			r.progress(j, i, len(traffic))
		}
	}
	out.storeCalls = countCalls(stores)
	// Hand back what the leases hold, as a fleet shutting down would.
	for _, l := range lims {
		if err := l.Close(); err != nil {
			return outcome{}, err
		}
	}
	return out, nil
}

// countCalls adds up the calls counted by the countingStores among stores.
func countCalls(stores []store.Store) int64 {
	var n int64
	for _, st := range stores {
		if c, ok := st.(*countingStore); ok {
			n += c.calls.Load()
		}
	}
	return n
}

// runParallel sends each user's requests in order on one of Config.Workers
// clients, each with a clock of its own. With sampleMemory it reads the
// memory of about a hundred sampled keys right after they are written (on a
// real Redis MEMORY USAGE, on the embedded one the model's estimate), so that
// no key can expire before it is measured.
func (r *runner) runParallel(ctx context.Context, j job, st store.Store,
	newLimiter func(store.Store, *vclock) (*fleetlimit.Limiter, error), origin int64,
	measure, sampleMemory bool, prefix, tag string) (outcome, error) {
	traffic := j.plan.traffic
	workers := min(r.cfg.Workers, j.plan.users)
	sampleEvery := max(1, j.plan.users/100)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		out   outcome
		errs  []error
		done  atomic.Int64
		tick  = make(chan struct{}, 1)
		total = len(traffic)
	)
	for w := range workers {
		wg.Go(func() {
			var mine outcome
			err := func() error {
				clock := &vclock{}
				lim, err := newLimiter(st, clock)
				if err != nil {
					return err
				}
				for _, ev := range traffic {
					if ev.User%workers != w {
						continue
					}
					clock.us.Store(origin + ev.At)
					t0 := time.Now()
					res, err := lim.AllowN(ctx, userKey(ev.User), ev.N)
					if err != nil {
						return err
					}
					if measure {
						mine.latencies = append(mine.latencies, time.Since(t0))
					}
					if res.Allowed {
						mine.admitted = append(mine.admitted, ev)
					}
					if sampleMemory && ev.User%sampleEvery == 0 {
						n, err := r.srv.memoryUsage(ctx, store.RedisKey(prefix, userKey(ev.User), tag))
						if err != nil {
							return err
						}
						mine.memory = append(mine.memory, n)
					}
					if done.Add(1)%256 == 0 {
						select {
						case tick <- struct{}{}:
						default:
						}
					}
				}
				return nil
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				cancel()
			}
			out.admitted = append(out.admitted, mine.admitted...)
			out.latencies = append(out.latencies, mine.latencies...)
			out.memory = append(out.memory, mine.memory...)
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for waiting := true; waiting; {
		select {
		case <-tick:
			r.progress(j, int(done.Load()), total)
		case <-finished:
			waiting = false
		}
	}
	if len(errs) > 0 {
		return outcome{}, errors.Join(errs...)
	}
	out.storeCalls = countCalls([]store.Store{st})
	slices.SortFunc(out.admitted, func(a, b Event) int {
		if a.At != b.At {
			return compareInt(a.At, b.At)
		}
		return a.User - b.User
	})
	return out, nil
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *runner) progress(j job, done, total int) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(Progress{Job: j.index, Jobs: j.jobs, Label: j.label(), Done: done, Total: total})
	}
}

// row computes a job's accuracy figures.
func (r *runner) row(j job, strat algorithm.Strategy, origin int64, out outcome) (Row, error) {
	p := j.plan
	w := r.cfg.Window.Microseconds()
	row := Row{
		Scenario: p.name, Algorithm: j.entry.Name, Store: j.store, Lease: j.lease, LeaseFloor: j.floor, Instances: p.instances,
		Users: p.users, Limit: p.limit, Decisions: int64(len(p.traffic)),
		Ideal: idealAdmitted(p.traffic, p.limit, w),
	}
	for _, ev := range p.traffic {
		row.Sent += ev.N
	}
	for _, ev := range out.admitted {
		row.Admitted += ev.N
	}
	one, err := oneInstance(strat, p.traffic, origin)
	if err != nil {
		return Row{}, err
	}
	row.OneInstance = one
	if row.Ideal > 0 {
		row.OverAdmission = 100 * float64(row.Admitted-row.Ideal) / float64(row.Ideal)
	}
	row.WorstWindow = float64(worstWindow(out.admitted, w)) / float64(p.limit)
	return row, nil
}

// addMeasurements fills the real-Redis columns of row.
func (r *runner) addMeasurements(row *Row, before, after snapshot, out outcome) {
	f := func(v float64) *float64 { return &v }
	if row.Decisions > 0 {
		row.Commands = f(float64(commandsSince(before, after)) / float64(row.Decisions))
	}
	if len(out.latencies) > 0 {
		slices.Sort(out.latencies)
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		row.LatencyP50 = f(us(percentile(out.latencies, 0.50)))
		row.LatencyP99 = f(us(percentile(out.latencies, 0.99)))
	}
	addMemory(row, before, after, out)
}

// addMemory fills the memory columns of row: the mean of the sampled keys'
// memory, and used_memory's growth per key when before and after measured
// it.
func addMemory(row *Row, before, after snapshot, out outcome) {
	if len(out.memory) == 0 {
		return
	}
	var sum float64
	for _, m := range out.memory {
		sum += m
	}
	mean := sum / float64(len(out.memory))
	row.MemoryUsage = &mean
	if keys := after.keys - before.keys; keys > 0 {
		perKey := float64(after.usedMemory-before.usedMemory) / float64(keys)
		row.UsedMemory = &perKey
	}
}
