package store

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// tableModel is a plain Go map's account of what a Memory holds for
// identities (prefix, strategy, key) decided only at the instants of
// epochs two windows apart: within an epoch a key admits up to limit
// units, and a key last decided in an earlier epoch is back at full
// capacity (held or not, it decides as a fresh one; Sweep drops it).
type tableModel struct {
	limit int64
	epoch int
	ids   map[tableID]*tableState
}

type tableID struct{ p, s, k int }

type tableState struct {
	epoch int
	count int64
}

// decide is the model's Decide of one unit: whether it admits.
func (md *tableModel) decide(id tableID) bool {
	st := md.ids[id]
	switch {
	case st == nil:
		md.ids[id] = &tableState{epoch: md.epoch, count: 1}
	case st.epoch < md.epoch:
		st.epoch, st.count = md.epoch, 1
	case st.count < md.limit:
		st.count++
	default:
		return false
	}
	return true
}

// used is what id has spent in this epoch.
func (md *tableModel) used(id tableID) int64 {
	if st := md.ids[id]; st != nil && st.epoch == md.epoch {
		return st.count
	}
	return 0
}

func (md *tableModel) sweep() {
	for id, st := range md.ids {
		if st.epoch < md.epoch {
			delete(md.ids, id)
		}
	}
}

// A shard's table agrees with a plain map on a random interleaving of
// decisions, resets, peeks and sweeps over identities whose hashes collide
// in groups of ten (five prefixes that agree on their namespace bits times
// two algorithms whose tags have the same length), while the tables grow:
// Reset and Sweep unlink entries at the head, middle and end of chains,
// and no identity ever reads another's state. Len is checked after every
// removal, every identity's state at the end of each epoch.
func TestMemoryTableMatchesMap(t *testing.T) {
	ctx := context.Background()
	const limit, keys = 3, 1500
	window := time.Minute
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemory(WithSweepInterval(time.Hour), WithMemoryClock(func() time.Time { return now }))
	defer m.Close()
	prefixes := []string{"a:x:", "b:x:", "c:x:", "d:x:", "e:x:"}
	strategies := []algorithm.Strategy{algorithm.FixedWindow(limit, window), algorithm.SlidingWindowLog(limit, window)}
	for _, p := range prefixes[1:] {
		for _, s := range strategies {
			if namespaceBits(p, tagOf(s))<<32 != namespaceBits(prefixes[0], tagOf(strategies[0]))<<32 {
				t.Fatalf("%q %s: meant to collide with %q %s", p, tagOf(s), prefixes[0], tagOf(strategies[0]))
			}
		}
	}
	req := func(id tableID, carry bool) Request {
		r := Request{Strategy: strategies[id.s], Prefix: prefixes[id.p], Key: "k" + strconv.Itoa(id.k), N: 1}
		if carry {
			r.Now = now
		}
		return r
	}
	md := &tableModel{limit: limit, ids: map[tableID]*tableState{}}
	check := func(at string, id tableID) {
		t.Helper()
		d, err := m.Peek(ctx, req(id, false))
		if err != nil {
			t.Fatal(err)
		}
		used := md.used(id)
		if d.Allowed != (used < limit) || (d.Allowed && d.Remaining != limit-used-1) {
			t.Fatalf("%s: %+v: peek %+v, model has %d of %d used", at, req(id, false), d, used, limit)
		}
	}
	checkLen := func(at string) {
		t.Helper()
		if got, want := m.Len(), len(md.ids); got != want {
			t.Fatalf("%s: Len %d, model %d", at, got, want)
		}
		for i := range m.shards {
			sh := &m.shards[i]
			sh.mu.Lock()
			held := 0
			for _, e := range sh.table {
				for ; e != nil; e = e.next {
					held++
				}
			}
			if held != sh.n {
				sh.mu.Unlock()
				t.Fatalf("%s: shard %d: %d entries in its chains, n %d", at, i, held, sh.n)
			}
			sh.mu.Unlock()
		}
	}
	r := rand.New(rand.NewPCG(7, 44))
	randomID := func() tableID {
		return tableID{p: r.IntN(len(prefixes)), s: r.IntN(len(strategies)), k: r.IntN(keys)}
	}
	for epoch := range 6 {
		md.epoch = epoch
		// The first epochs fill the tables; later ones add fewer keys
		// than the stale ones swept.
		ops := []int{40_000, 30_000, 5_000, 20_000, 3_000, 10_000}[epoch]
		for op := range ops {
			at := fmt.Sprintf("epoch %d op %d", epoch, op)
			switch x := r.IntN(100); {
			case x < 70:
				id := randomID()
				d, err := m.Decide(ctx, req(id, x < 10))
				if err != nil {
					t.Fatal(err)
				}
				if want := md.decide(id); d.Allowed != want {
					t.Fatalf("%s: %+v: allowed %v, model %v", at, req(id, false), d.Allowed, want)
				}
			case x < 85:
				id := randomID()
				if err := m.Reset(ctx, req(id, false)); err != nil {
					t.Fatal(err)
				}
				delete(md.ids, id)
				if op%64 == 0 {
					checkLen(at + " reset")
				}
			case x < 99:
				check(at, randomID())
			default:
				if r.IntN(20) == 0 {
					m.Sweep()
					md.sweep()
					checkLen(at + " sweep")
				}
			}
		}
		checkLen(fmt.Sprintf("epoch %d end", epoch))
		for k := range keys {
			for p := range prefixes {
				for s := range strategies {
					check(fmt.Sprintf("epoch %d end", epoch), tableID{p, s, k})
				}
			}
		}
		now = now.Add(2 * window)
	}
	// Some requests carried their own time: the horizon waits for a
	// decision at the new one (see Sweep).
	md.epoch++
	if d, err := m.Decide(ctx, req(tableID{0, 0, keys}, true)); err != nil || !d.Allowed || !md.decide(tableID{0, 0, keys}) {
		t.Fatalf("a fresh key: %+v, %v", d, err)
	}
	m.Sweep()
	md.sweep()
	checkLen("last sweep")
}

// The table under concurrent decisions, resets and sweeps: goroutines on
// disjoint keys (over the same shards, whose tables they grow) each keep
// a model of their own, while Sweep runs beside them; an epoch's sweeps
// drop only the keys of earlier epochs, which decide as fresh ones either
// way, so that every decision is the model's, and after a last sweep each
// epoch the store holds exactly the models' keys. Run with -race.
func TestMemoryTableConcurrentMatchesMaps(t *testing.T) {
	ctx := context.Background()
	const limit, keys, workers = 2, 800, 3
	window := time.Minute
	var clockMu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	m := NewMemory(WithSweepInterval(time.Hour), WithMemoryClock(clock))
	defer m.Close()
	prefixes := []string{"a:x:", "b:x:", "c:x:"}
	strategies := []algorithm.Strategy{algorithm.FixedWindow(limit, window), algorithm.SlidingWindowLog(limit, window)}
	models := make([]*tableModel, workers)
	for w := range models {
		models[w] = &tableModel{limit: limit, ids: map[tableID]*tableState{}}
	}
	for epoch := range 4 {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		sweeper := make(chan struct{})
		go func() {
			defer close(sweeper)
			for {
				select {
				case <-stop:
					return
				default:
					m.Sweep()
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				md := models[w]
				md.epoch = epoch
				r := rand.New(rand.NewPCG(uint64(w), uint64(epoch)))
				for op := range 6_000 {
					id := tableID{p: r.IntN(len(prefixes)), s: r.IntN(len(strategies)), k: w + workers*r.IntN(keys)}
					rq := Request{Strategy: strategies[id.s], Prefix: prefixes[id.p], Key: "k" + strconv.Itoa(id.k), N: 1}
					if r.IntN(5) == 0 {
						if err := m.Reset(ctx, rq); err != nil {
							errs <- err
							return
						}
						delete(md.ids, id)
						continue
					}
					d, err := m.Decide(ctx, rq)
					if err != nil {
						errs <- err
						return
					}
					if want := md.decide(id); d.Allowed != want {
						errs <- fmt.Errorf("epoch %d worker %d op %d: %+v: allowed %v, model %v", epoch, w, op, rq, d.Allowed, want)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-sweeper
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		m.Sweep()
		want := 0
		for _, md := range models {
			md.sweep()
			want += len(md.ids)
		}
		if got := m.Len(); got != want {
			t.Fatalf("epoch %d: Len %d after a sweep, models %d", epoch, got, want)
		}
		clockMu.Lock()
		now = now.Add(2 * window)
		clockMu.Unlock()
	}
}

// The default clock, read inline under the shard lock, is the clock Time
// and Sweep read: each decision's time (the shard's latest) lies between
// Time's readings before and after it, and never goes back.
func TestMemoryInlineClockIsTime(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(WithSweepInterval(time.Hour))
	defer m.Close()
	req := Request{Strategy: algorithm.TokenBucket(1000, time.Second, 1000), Prefix: "p:", Key: "k", N: 1}
	_, sh, _ := m.locate(&req)
	last := int64(math.MinInt64)
	for i := range 2000 {
		before, _ := m.Time(ctx)
		if _, err := m.Decide(ctx, req); err != nil {
			t.Fatal(err)
		}
		after, _ := m.Time(ctx)
		sh.mu.Lock()
		at := sh.latest
		sh.mu.Unlock()
		if at < before.UnixMicro() || at > after.UnixMicro() || at < last {
			t.Fatalf("decision %d at %dµs: Time read %dµs before it and %dµs after, the previous decision %dµs",
				i, at, before.UnixMicro(), after.UnixMicro(), last)
		}
		last = at
	}
}
