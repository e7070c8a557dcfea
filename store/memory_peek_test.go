package store

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// snapshot is everything a Memory peek must leave as it found it: the key's
// state (a copy), the number of keys, the shard's latest decision time and
// whether callers pass their own time.
type snapshot struct {
	state      algorithm.State
	n          int
	latest     int64
	callerTime bool
}

func (m *Memory) snapshot(req Request) snapshot {
	tag, sh, h := m.locate(&req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := snapshot{n: sh.n, latest: sh.latest, callerTime: m.callerTime.Load()}
	if e, _ := sh.find(&req, tag, h); e != nil {
		s.state = e.state.(algorithm.Cloner).Clone()
	}
	return s
}

// A Memory peek changes nothing, for every registered algorithm, on random
// timelines of decisions and peeks over two keys (some past the limit, some
// with the store's own clock), and agrees with the decision that follows.
func TestMemoryPeekChangesNothing(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for _, e := range algorithm.Registry() {
		for c := range 50 {
			m := NewMemory(WithSweepInterval(time.Hour))
			limit := 1 + r.Int64N(6)
			strat := e.New(limit, time.Duration(1+r.IntN(1000))*time.Millisecond)
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range 60 {
				now = now.Add(time.Duration(r.IntN(300)) * time.Millisecond)
				req := Request{Strategy: strat, Prefix: "p:", Key: []string{"a", "b"}[r.IntN(2)], N: 1 + r.Int64N(limit+1), Now: now}
				if i == 0 && c%2 == 0 {
					req.Now = time.Time{} // the store's clock, once the peek is over
				}
				before := m.snapshot(req)
				p, err := m.Peek(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if after := m.snapshot(req); !reflect.DeepEqual(before, after) {
					t.Fatalf("%s case %d step %d: peek changed %+v to %+v", e.Name, c, i, before, after)
				}
				if req.Now.IsZero() {
					continue // the store's clock moved on: the decision may differ
				}
				d, err := m.Decide(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if p != d {
					t.Fatalf("%s case %d step %d: peek %+v, decision %+v", e.Name, c, i, p, d)
				}
			}
			_ = m.Close()
		}
	}
}
