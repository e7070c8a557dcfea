package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// testAtMostMatchesGoRule: for every registered algorithm that grants part
// of a request (algorithm.Grants), when the store is a store.Granter, on a
// deterministic timeline that interleaves decisions with partial grants of
// up to 6 of a limit of 8 (so that some are granted in part and some not at
// all), every answer of the store equals the strategy's Go rule applied to
// a fresh state, Granted included.
func testAtMostMatchesGoRule(t *testing.T, s store.Store) {
	const limit, window = 8, time.Minute
	g, ok := s.(store.Granter)
	if !ok {
		t.Skipf("%T is not a store.Granter", s)
	}
	for _, e := range algorithm.Registry() {
		strat := e.New(limit, window)
		if !algorithm.Grants(strat) {
			continue
		}
		st := strat.NewState()
		p := prefix()
		now := T0
		var part, none int
		for i := range 150 {
			now = now.Add(time.Duration((i*7919)%11) * time.Second).Add(time.Duration(i%7) * time.Millisecond)
			n := int64(i%6 + 1)
			req := store.Request{Strategy: strat, Prefix: p, Key: "k", N: n, Now: now}
			where := fmt.Sprintf("%s step %d at %v n=%d", e.Name, i, now.Sub(T0), n)
			if i%3 != 0 {
				want, err := strat.Decide(st, now, min(n, 2))
				noError(t, err, where)
				req.N = min(n, 2)
				equal(t, want, decide(t, s, req), "%s: decide", where)
				continue
			}
			want, err := strat.(algorithm.Granter).AtMost(st, now, n)
			noError(t, err, where)
			got, err := g.AtMost(context.Background(), req)
			noError(t, err, where)
			equal(t, want, got, "%s: at most", where)
			switch {
			case got.Granted == 0:
				none++
			case got.Granted < n:
				part++
			}
		}
		if part == 0 || none == 0 {
			t.Fatalf("%s: vacuous: %d grants of part of n, %d of nothing", e.Name, part, none)
		}
	}
}
