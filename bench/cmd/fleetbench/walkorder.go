package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// walkOrder is fleetbench -walk-order: what the in-process cells' walk over
// the keys in the order they were made does to the cost of a second
// goroutine. store.Memory.Decide (token bucket), x/time/rate in a
// sync.Map, and the token bucket's Go rule on a state beside a lock of its
// own in a sync.Map (two objects per key, each written by a decision, where
// x/time/rate's limiter is one) each make the same 10,000 keys in order,
// then are walked over
// them in that order and in one shuffled order, at 1 and 2 goroutines
// (each from its own cursor, as the in-process cells walk), for d per
// cell, rounds times, every round running all cells in turn. It writes the
// median CPU ns/op of each cell to w as a table and returns the exit code.
func walkOrder(w io.Writer, rounds int, d time.Duration) int {
	cs, err := newInprocContenders()
	if err != nil {
		fmt.Fprintln(w, err)
		return 1
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	ctx := context.Background()
	made := make([]string, 10_000)
	for i := range made {
		made[i] = fmt.Sprintf("user:%05d", i)
	}
	shuffled := slices.Clone(made)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	walks := []struct {
		name string
		keys []string
	}{{"in the order made", made}, {"shuffled", shuffled}}
	type cell struct {
		c      *inprocContender
		walk   int
		g      int
		cursor []int
		cpu    []float64
	}
	var cells []*cell
	for _, c := range append(cs, lockBesideState()) {
		if c.id != "fl-mem-tb" && c.id != "xrate" && c.id != "lock-state" {
			continue
		}
		for _, k := range made {
			c.op(ctx, k)
		}
		for w := range walks {
			for _, g := range inprocGoroutines {
				cells = append(cells, &cell{c: c, walk: w, g: g, cursor: newCursors(made, g)})
			}
		}
	}
	for range rounds {
		for _, x := range cells {
			s := runInproc(ctx, x.c.op, walks[x.walk].keys, x.g, d, x.cursor)
			x.cpu = append(x.cpu, s.cpuNsPerOp)
		}
	}
	fmt.Fprintf(w, "| contender | walk | CPU ns/op, 1 goroutine | CPU ns/op, 2 goroutines |\n|---|---|---|---|\n")
	for i := 0; i < len(cells); i += len(inprocGoroutines) {
		x := cells[i]
		fmt.Fprintf(w, "| %s | %s |", x.c.name, walks[x.walk].name)
		for _, y := range cells[i : i+len(inprocGoroutines)] {
			fmt.Fprintf(w, " %.0f |", median(y.cpu))
		}
		fmt.Fprintln(w)
	}
	return 0
}

// lockBesideState is the token bucket of newInprocContenders' store cells,
// its Go rule run on each key's state under a lock of the key's own, both
// found in a sync.Map.
func lockBesideState() *inprocContender {
	type locked struct {
		mu sync.Mutex
		st algorithm.State
	}
	s := algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)
	var m sync.Map
	return &inprocContender{
		name: "token bucket rule, a lock beside its state, in a sync.Map", id: "lock-state",
		op: func(_ context.Context, key string) bool {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, &locked{st: s.NewState()})
			}
			l := v.(*locked)
			l.mu.Lock()
			d, err := s.Decide(l.st, time.Now(), 1)
			l.mu.Unlock()
			return err == nil && d.Allowed
		},
		close: func() {},
	}
}
