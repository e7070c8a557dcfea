package main

import (
	"context"
	"fmt"
	"log"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// inprocParams documents the in-process limits for RESULTS.md.
const inprocParams = "token bucket 10^6/s burst 10^6 (x/time/rate and go-limiter alike), fixed window 10^9/1h (ulule 10^12/1h), sliding log 100/10ms, sliding-window counter 10^9/1h, concurrency 1000 permits of 10 s (an Acquire and the Release of its permit per call): at 10,000 keys nothing is denied below 100M decisions/s."

// inprocOp makes one decision for key; false when denied.
type inprocOp func(ctx context.Context, key string) bool

type inprocContender struct {
	name   string
	id     string
	anchor bool
	op     inprocOp
	close  func()
	// storeCalls, if set, counts the calls the contender made to its
	// store: the leased one checks that its timed decisions made none.
	storeCalls func() int64
}

// countingMemory is a store.Memory that counts its decisions (Decide and
// Lease): a decision served from a lease makes neither.
type countingMemory struct {
	*store.Memory
	calls atomic.Int64
}

func (m *countingMemory) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	m.calls.Add(1)
	return m.Memory.Decide(ctx, req)
}

func (m *countingMemory) Lease(ctx context.Context, req store.Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	m.calls.Add(1)
	return m.Memory.Lease(ctx, req, terms)
}

type inprocSample struct {
	ops, denied          int64
	elapsed              time.Duration
	mallocs, allocBytes  uint64
	nsPerOp, allocsPerOp float64
	bytesPerOp           float64
	cpuNsPerOp           float64 // CPU time of the calling threads per call
	blocked              float64 // share of the threads' time neither running nor waiting for a core
	others               float64 // cores other processes used meanwhile
}

type inprocResult struct {
	c       *inprocContender
	samples map[int][]inprocSample // by goroutines
	cursor  map[int][]int          // by goroutines: where each walk over the keys continues
}

func newInprocContenders() ([]*inprocContender, error) {
	var cs []*inprocContender
	strategies := []struct {
		id, name string
		s        algorithm.Strategy
	}{
		{"tb", "token bucket", algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)},
		{"fw", "fixed window", algorithm.FixedWindow(1_000_000_000, time.Hour)},
		{"sl", "sliding log", algorithm.SlidingWindowLog(100, 10*time.Millisecond)},
		{"swc", "sliding-window counter", algorithm.SlidingWindowCounter(1_000_000_000, time.Hour)},
	}
	for _, st := range strategies {
		m := store.NewMemory()
		lim, err := fleetlimit.New(st.s, m)
		if err != nil {
			return nil, err
		}
		cs = append(cs, &inprocContender{
			name: "fleetlimit Limiter.Allow, memory, " + st.name, id: "fl-lim-" + st.id,
			op: func(ctx context.Context, key string) bool {
				res, err := lim.Allow(ctx, key)
				return err == nil && res.Allowed
			},
			close: func() { _ = m.Close() },
		})
	}
	{
		// The local path: leases far larger than a key's decisions in the
		// run (a token bucket's lease is at most half of what the key has
		// left: 500,000 here), which never age out within it, so that
		// every timed decision is served from a lease (checked).
		m := &countingMemory{Memory: store.NewMemory()}
		lim, err := fleetlimit.New(strategies[0].s, m, fleetlimit.WithLeases(1<<20, time.Hour))
		if err != nil {
			return nil, err
		}
		cs = append(cs, &inprocContender{
			name: "fleetlimit Limiter.Allow, token bucket, served from a lease", id: "fl-lease-tb",
			op: func(ctx context.Context, key string) bool {
				res, err := lim.Allow(ctx, key)
				return err == nil && res.Allowed
			},
			close:      func() { _ = m.Close() },
			storeCalls: m.calls.Load,
		})
	}
	{
		// Acquire+Release pairs (issue 26), beside Limiter.Allow above: a
		// pair holds its slot for the length of one call, so at most 2 of a
		// key's 1000 are ever held.
		m := store.NewMemory()
		lim, err := fleetlimit.New(algorithm.Concurrency(1000, 10*time.Second), m)
		if err != nil {
			return nil, err
		}
		cs = append(cs, &inprocContender{
			name: "fleetlimit Acquire+Release, memory, concurrency", id: "fl-pair-mem",
			op: func(ctx context.Context, key string) bool {
				p, res, err := lim.Acquire(ctx, key)
				if err != nil || !res.Allowed {
					return false
				}
				return p.Release(ctx) == nil
			},
			close: func() { _ = m.Close() },
		})
	}
	for _, st := range strategies {
		m := store.NewMemory()
		s := st.s
		cs = append(cs, &inprocContender{
			name: "fleetlimit store.Memory.Decide, " + st.name, id: "fl-mem-" + st.id,
			op: func(ctx context.Context, key string) bool {
				d, err := m.Decide(ctx, store.Request{Strategy: s, Prefix: fleetlimit.DefaultKeyPrefix, Key: key, N: 1})
				return err == nil && d.Allowed
			},
			close: func() { _ = m.Close() },
		})
	}
	{
		var m sync.Map
		cs = append(cs, &inprocContender{
			name: "x/time/rate in a sync.Map", id: "xrate", anchor: true,
			op: func(_ context.Context, key string) bool {
				v, ok := m.Load(key)
				if !ok {
					v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Limit(1_000_000), 1_000_000))
				}
				return v.(*rate.Limiter).Allow()
			},
			close: func() {},
		})
	}
	{
		s, err := memorystore.New(&memorystore.Config{Tokens: 1_000_000, Interval: time.Second})
		if err != nil {
			return nil, err
		}
		var st golimiter.Store = s
		cs = append(cs, &inprocContender{
			name: "sethvargo/go-limiter memorystore", id: "golimiter", anchor: true,
			op: func(ctx context.Context, key string) bool {
				_, _, _, ok, err := st.Take(ctx, key)
				return err == nil && ok
			},
			close: func() { _ = st.Close(context.Background()) },
		})
	}
	{
		lim := limiter.New(ulmemory.NewStore(), limiter.Rate{Period: time.Hour, Limit: 1_000_000_000_000})
		cs = append(cs, &inprocContender{
			name: "ulule/limiter memory store", id: "ulule-mem", anchor: true,
			op: func(ctx context.Context, key string) bool {
				lc, err := lim.Get(ctx, key)
				return err == nil && !lc.Reached
			},
			close: func() {},
		})
	}
	return cs, nil
}

// runInproc calls op from g goroutines for d over keys and reports wall
// time per call (so 2 goroutines that scale perfectly halve it), the CPU
// time of the calling threads per call (unaffected by other processes taking
// the cores), and heap allocations per call.
func runInproc(ctx context.Context, op inprocOp, keys []string, g int, d time.Duration, cursor []int) inprocSample {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if m0.TotalAlloc-allocAtGC > gcEvery {
		// Garbage from earlier cells would be collected during this one.
		runtime.GC()
		runtime.ReadMemStats(&m0)
		allocAtGC = m0.TotalAlloc
	}
	var stop atomic.Bool
	var total, denied, cpu, blockedNs, spanNs atomic.Int64
	var wg sync.WaitGroup
	lm := startLoad(0)
	start := time.Now()
	for j := range g {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			run0, wait0, schedOK := threadSched()
			w0 := time.Now()
			i, n, den := cursor[j], int64(0), int64(0)
			for !stop.Load() {
				for range 256 {
					if !op(ctx, keys[i]) {
						den++
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				n += 256
			}
			cursor[j] = i
			cpu.Add(int64(threadCPU() - t0))
			if run1, wait1, ok := threadSched(); ok && schedOK {
				span := time.Since(w0)
				blockedNs.Add(int64(span - (run1 - run0) - (wait1 - wait0)))
				spanNs.Add(int64(span))
			}
			total.Add(n)
			denied.Add(den)
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	others := lm.others()
	runtime.ReadMemStats(&m1)
	s := inprocSample{ops: total.Load(), denied: denied.Load(), elapsed: elapsed,
		mallocs: m1.Mallocs - m0.Mallocs, allocBytes: m1.TotalAlloc - m0.TotalAlloc, others: others}
	s.nsPerOp = float64(elapsed.Nanoseconds()) / float64(s.ops)
	s.allocsPerOp = float64(s.mallocs) / float64(s.ops)
	s.bytesPerOp = float64(s.allocBytes) / float64(s.ops)
	s.cpuNsPerOp = float64(cpu.Load()) / float64(s.ops)
	if spanNs.Load() > 0 {
		s.blocked = max(0, float64(blockedNs.Load())/float64(spanNs.Load()))
	}
	return s
}

var inprocGoroutines = []int{1, 2}

// A cell starts with a collection once gcEvery bytes were allocated since
// the last one (allocAtGC, TotalAlloc then), so that no cell pays for the
// garbage of another. Most contenders allocate nothing: a collection before
// each of their cells would only cost time (on a loaded machine, a quarter
// of a second each).
const gcEvery = 8 << 20

var allocAtGC uint64

func (b *bench) inprocPhase(ctx context.Context) error {
	cs, err := newInprocContenders()
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%05d", i)
	}
	for _, c := range cs {
		// Create every key first: the steady state is what is measured. A
		// leased contender decides each key twice: a key's first round trip
		// is exact, and leases take hold at its next (see WithLeases).
		passes := 1
		if c.storeCalls != nil {
			passes = 2
		}
		for range passes {
			for _, k := range keys {
				c.op(ctx, k)
			}
		}
		res := &inprocResult{c: c, samples: map[int][]inprocSample{}, cursor: map[int][]int{}}
		for _, g := range inprocGoroutines {
			res.cursor[g] = newCursors(keys, g)
		}
		b.inproc = append(b.inproc, res)
	}
	calls0 := map[string]int64{}
	for _, c := range cs {
		if c.storeCalls != nil {
			calls0[c.id] = c.storeCalls()
		}
	}
	// Each round runs every contender at 1 and then 2 goroutines back to
	// back, so that the speed-up from a second goroutine compares two runs
	// made under the same outside load.
	log.Printf("in process: %d contenders x %d rounds x %v goroutines", len(cs), b.cfg.rounds, inprocGoroutines)
	for r := range b.cfg.rounds {
		for k := range b.inproc {
			res := b.inproc[(k+r)%len(b.inproc)]
			for _, g := range inprocGoroutines {
				res.samples[g] = append(res.samples[g], runInproc(ctx, res.c.op, keys, g, b.cfg.inprocDur, res.cursor[g]))
			}
		}
	}
	for _, res := range b.inproc {
		var denied, ops int64
		for _, ss := range res.samples {
			for _, s := range ss {
				denied += s.denied
				ops += s.ops
			}
		}
		b.verify(denied == 0, "in process, "+res.c.name+": nothing denied", "%d of %d calls denied", denied, ops)
		if res.c.storeCalls != nil {
			calls := res.c.storeCalls() - calls0[res.c.id]
			b.verify(calls == 0, "in process, "+res.c.name+": every timed decision served from a lease",
				"%d store calls in %d timed decisions", calls, ops)
		}
	}
	return nil
}
