package main

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// sample is one measured run of one contender.
type sample struct {
	ok, errs, denied int64 // calls that returned a decision / an error; denials among ok
	elapsed          time.Duration
	hist             *hist // latency of every call, errors included
	rt               int64 // client round trips
	cmds             map[string]int64
	cmdTotal         int64         // server commands, all kinds
	cpu              float64       // Redis CPU seconds
	mallocs          uint64        // Go heap allocations in this process
	others           float64       // cores other processes used meanwhile
	clientCPU        time.Duration // this process's CPU time
	svcCPU           time.Duration // the contender's own process's CPU time (contender.pid)
	firstErr         string
}

// rate is decisions per second (calls that ended in an error not counted).
func (s sample) rate() float64 { return float64(s.ok) / s.elapsed.Seconds() }

func (s sample) calls() int64 { return s.ok + s.errs }

type worker struct {
	ok, errs, denied int64
	h                hist
	firstErr         string
}

func (w *worker) call(ctx context.Context, fn decideFunc, key string) {
	t0 := time.Now()
	allowed, err := fn(ctx, key)
	w.h.record(time.Since(t0))
	switch {
	case err != nil:
		w.errs++
		if w.firstErr == "" {
			w.firstErr = err.Error()
		}
	case !allowed:
		w.ok++
		w.denied++
	default:
		w.ok++
	}
}

func collect(ws []*worker, elapsed time.Duration) sample {
	s := sample{hist: &hist{}, elapsed: elapsed}
	for _, w := range ws {
		s.ok += w.ok
		s.errs += w.errs
		s.denied += w.denied
		s.hist.merge(&w.h)
		if s.firstErr == "" {
			s.firstErr = w.firstErr
		}
	}
	return s
}

// newCursors returns the starting positions of g goroutines walking keys:
// evenly spaced, so that together they cover every key equally.
func newCursors(keys []string, g int) []int {
	c := make([]int, g)
	for j := range c {
		c[j] = j * len(keys) / g
	}
	return c
}

// loadFor calls fn from g goroutines for d. Goroutine j walks keys in order
// from cursor[j] and leaves cursor[j] where it stopped, so that successive
// runs continue the walk and every key gets the same share of calls however
// short each run is. A nil cursor starts from newCursors.
func loadFor(ctx context.Context, fn decideFunc, keys []string, g int, d time.Duration, cursor []int) sample {
	if cursor == nil {
		cursor = newCursors(keys, g)
	}
	ws := make([]*worker, g)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for j := range ws {
		w := &worker{}
		ws[j] = w
		wg.Go(func() {
			i := cursor[j]
			for !stop.Load() {
				w.call(ctx, fn, keys[i])
				if i++; i == len(keys) {
					i = 0
				}
			}
			cursor[j] = i
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return collect(ws, time.Since(start))
}

// loadPass makes perKey calls in a row on every key, the keys dealt out to
// g goroutines.
func loadPass(ctx context.Context, fn decideFunc, keys []string, g, perKey int) sample {
	ws := make([]*worker, g)
	var wg sync.WaitGroup
	start := time.Now()
	for j := range ws {
		w := &worker{}
		ws[j] = w
		wg.Go(func() {
			for i := j; i < len(keys); i += g {
				for range perKey {
					w.call(ctx, fn, keys[i])
				}
			}
		})
	}
	wg.Wait()
	return collect(ws, time.Since(start))
}

// measured runs run between two readings of the server's counters, the
// contender's round-trip count and this process's allocations, and fills
// the differences into its sample.
func measured(ctx context.Context, srv *server, c *contender, run func() sample) (sample, error) {
	var m0, m1 runtime.MemStats
	before, err := srv.snapshot(ctx)
	if err != nil {
		return sample{}, err
	}
	rt0 := c.rt.n.Load()
	runtime.ReadMemStats(&m0)
	lm := startLoad(srv.pid())
	cpu0, svc0 := processCPU(), pidCPU(c.pid)
	s := run()
	s.clientCPU = processCPU() - cpu0
	s.svcCPU = pidCPU(c.pid) - svc0
	s.others = lm.others()
	runtime.ReadMemStats(&m1)
	s.rt = c.rt.n.Load() - rt0
	after, err := srv.snapshot(ctx)
	if err != nil {
		return sample{}, err
	}
	s.cmds, s.cmdTotal = delta(before, after)
	s.cpu = after.cpu - before.cpu
	s.mallocs = m1.Mallocs - m0.Mallocs
	return s, nil
}
