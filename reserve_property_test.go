package fleetlimit_test

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// reserveBackends are memory, miniredis, and the real servers ./test.sh
// starts: redis-server and its Cluster, valkey-server.
func reserveBackends(t *testing.T) []proptest.Backend {
	names := []string{"memory", "miniredis"}
	if redistest.HaveReal(t) {
		names = append(names, "redis", "cluster")
	}
	if redistest.HaveValkey(t) {
		names = append(names, "valkey")
	}
	bs := proptest.Backends(t, names...)
	for i := range bs {
		bs[i].Cases /= 2 // the root package's properties share go test's ten minutes
	}
	return bs
}

// debtCap is the cap a property's scenario runs under, by scenario: the
// default (the limit; each member's own for a composite: units -1), none,
// one unit, twice the limit.
func debtCap(s proptest.Scenario) (opt []fleetlimit.Option, units int64) {
	limit := s.Strat.S.Limit()
	switch len(s.Arrivals) % 4 {
	case 1:
		return []fleetlimit.Option{fleetlimit.WithMaxDebt(0)}, 0
	case 2:
		return []fleetlimit.Option{fleetlimit.WithMaxDebt(1)}, 1
	case 3:
		return []fleetlimit.Option{fleetlimit.WithMaxDebt(2 * limit)}, 2 * limit
	}
	return nil, -1
}

// settledCost is the real cost a timeline's i-th reservation of estimate n
// settles at: cancelled, half, the estimate, twice it, or far above it.
func settledCost(i int, n, limit int64) int64 {
	return []int64{0, n / 2, n, 2 * n, 3*n + limit}[i%5]
}

// cutsSeen counts, by kind of strategy (a registry entry's name, "all",
// "penalty"), the settles whose charge the debt cap cut, over every case
// of TestPropertyReserveBound: the cap must be reached, or the property
// proves nothing about it.
var cutsSeen sync.Map // string -> *atomic.Int64

func sawCut(kind string) {
	c, _ := cutsSeen.LoadOrStore(kind, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

// TestPropertyReserveBound: on every store (memory, miniredis, redis-server,
// its Cluster, valkey-server), for every registered algorithm, composites
// (algorithm.All) and penalty boxes, each arrival of a generated timeline
// is a reservation of its cost, settled at the key's next arrival (or at
// the end) at a real cost of 0 (Cancel), half, the estimate, twice it or
// 3*estimate + limit, under a debt cap (WithMaxDebt) of the limit (the
// default), 0, 1 or twice the limit. Each reservation is counted at its
// time as its estimate, and each settle at its time as what it charged
// (its excess less what the cap cut: Event.Cut, or a composite member's
// LimitResult.Cut) or what it gave back (at most what the key owes). Then
// the net units obey the strategy's bound with the limit raised by the
// cap D:
//
//   - sliding_window_log: at most limit + D in every interval of length W;
//   - token_bucket: at most burst + D + rate*d/per in every closed
//     interval of length d;
//   - fixed_window and sliding_window_counter: at most limit + D in every
//     aligned window;
//   - a composite: each member's own bound, counted with that member's
//     cuts, D being WithMaxDebt's units for every member, or by default
//     each member's own limit;
//   - a penalty box: its strategy's bound (a settle neither starts nor
//     lifts a ban).
//
// The caps are reached: some settles of each kind are cut (cutsSeen).
func TestPropertyReserveBound(t *testing.T) {
	bs := reserveBackends(t)
	check := func(b proptest.Backend, s proptest.Scenario) (string, error) { return checkReserveBound(b, s) }
	proptest.CheckEntries(t, bs, check)
	proptest.CheckComposites(t, bs, check)
	checkPenalties(t, bs, check)
	if t.Failed() {
		return
	}
	for _, k := range proptest.Kinds(t) {
		if c, ok := cutsSeen.Load(k.Name); !ok || c.(*atomic.Int64).Load() == 0 {
			t.Errorf("no settle of a %s reached the debt cap: the property checked no cap there", k.Name)
		}
	}
}

// checkPenalties is CheckComposites for generated penalty boxes
// (proptest.PenaltyCase), in a subtest named "penalty".
func checkPenalties(t *testing.T, bs []proptest.Backend, check func(proptest.Backend, proptest.Scenario) (string, error)) {
	t.Helper()
	t.Run("penalty", func(t *testing.T) {
		for _, b := range bs {
			t.Run(b.Name, func(t *testing.T) {
				g := proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return proptest.PenaltyCase(b, r) }, false)
				proptest.Check(t, max(1, b.Cases/2), prop.ForAll(func(s proptest.Scenario) (string, error) { return check(b, s) }, g))
			})
		}
	})
}

// bounded are the strategies whose bounds a scenario's strategy sc must
// obey: itself, a composite's members, a penalty box's strategy's.
func bounded(sc proptest.StratCase) []proptest.StratCase {
	switch {
	case sc.Inner != nil:
		return bounded(*sc.Inner)
	case len(sc.Members) > 0:
		return sc.Members
	}
	return []proptest.StratCase{sc}
}

func checkReserveBound(b proptest.Backend, s proptest.Scenario) (string, error) {
	opts, units := debtCap(s)
	var cut int64
	opts = append(opts, fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
		if e.Settle {
			cut = e.Cut
		}
	})))
	rig, err := proptest.NewRig(b.Store, s.Strat.S, opts...)
	if err != nil {
		return "", err
	}
	type pending struct {
		rv fleetlimit.Reservation
		i  int
	}
	ms := bounded(s.Strat)
	limit := s.Strat.S.Limit()
	open := make(map[string]pending)
	byKey := make([]map[string][]credited, len(ms)) // by member
	owed := make([]map[string]int64, len(ms))
	for m := range ms {
		byKey[m], owed[m] = make(map[string][]credited), make(map[string]int64)
	}
	settle := func(key string, at time.Time) error {
		p, ok := open[key]
		if !ok {
			return nil
		}
		delete(open, key)
		est := p.rv.Estimate()
		actual := settledCost(p.i, est, limit)
		cut = 0
		res, err := rig.Settle(p.rv, at, actual)
		if err != nil {
			return err
		}
		if cut > 0 {
			sawCut(s.Strat.Name)
		}
		for m := range ms {
			c := cut
			if len(ms) > 1 || len(res.Limits()) > 0 {
				if c = 0; len(res.Limits()) == len(ms) {
					c = res.Limits()[m].Cut
				}
			}
			net := actual - est - c
			if net < 0 {
				net = -min(-net, owed[m][key])
			}
			owed[m][key] += net
			byKey[m][key] = append(byKey[m][key], credited{at.UnixMicro(), net})
		}
		return nil
	}
	evs := s.Events()
	for i, ev := range evs {
		if err := settle(ev.Key, ev.At); err != nil {
			return "", err
		}
		rv, res, err := rig.Reserve(ev)
		if err != nil {
			return "", err
		}
		if res.Allowed {
			open[ev.Key] = pending{rv, i}
			for m := range ms {
				owed[m][ev.Key] += ev.N
				byKey[m][ev.Key] = append(byKey[m][ev.Key], credited{ev.At.UnixMicro(), ev.N})
			}
		}
	}
	if len(evs) > 0 {
		end := evs[len(evs)-1].At
		for _, key := range proptest.Keys {
			if err := settle(key, end); err != nil {
				return "", err
			}
		}
	}
	for m, sc := range ms {
		d := units
		if d < 0 {
			d = sc.S.Limit()
		}
		if msg := netBound(sc, byKey[m], d); msg != "" {
			if len(ms) > 1 {
				msg = fmt.Sprintf("member %d (%s): %s", m, sc.Desc, msg)
			}
			return msg, nil
		}
	}
	return "", nil
}

// netBound checks the net units of each key (byKey, in time order) against
// the bound of strategy sc with its limit raised by the debt cap d (see
// TestPropertyReserveBound).
func netBound(sc proptest.StratCase, byKey map[string][]credited, d int64) string {
	strat := sc.S
	limit, w := strat.Limit()+d, strat.Window().Microseconds()
	for key, cs := range byKey {
		switch sc.Name {
		case "sliding_window_log":
			if msg := maxNetIn(key, cs, w, limit); msg != "" {
				return msg
			}
		case "sliding_window_counter", "fixed_window":
			perWindow := make(map[int64]int64)
			for _, c := range cs {
				perWindow[c.at/w] += c.net
				if perWindow[c.at/w] > limit {
					return fmt.Sprintf("key %q: aligned window %d holds %d net, above the limit + debt cap %d", key, c.at/w, perWindow[c.at/w], limit)
				}
			}
		case "token_bucket":
			if msg := bucketNetBound(key, cs, sc.Rate, sc.Per.Microseconds(), sc.Burst+d); msg != "" {
				return msg
			}
		default:
			return fmt.Sprintf("no debt bound for algorithm %q: state it here and in docs/guarantees.md", sc.Name)
		}
	}
	return ""
}

// TestPropertyReserveRestores: on every store, for every registered
// algorithm, composites and penalty boxes (whose bans a reservation's
// settle or cancel leaves as they were), the first request of a
// generated timeline from its middle on that AllowN would admit is made a
// reservation instead, settled halfway to its key's next request (or half
// a window later). Settled at its estimate, every later decision equals
// the timeline's with AllowN; cancelled, every later decision equals the
// timeline's without the request — and Cancel is exact: Reserve then
// Cancel leaves the key as if the reservation had been denied.
func TestPropertyReserveRestores(t *testing.T) {
	bs := reserveBackends(t)
	for i := range bs {
		bs[i].Cases /= 2 // each case runs a timeline twice
	}
	check := func(b proptest.Backend, s proptest.Scenario) (string, error) { return checkReserveRestores(b, s) }
	proptest.CheckEntries(t, bs, check)
	proptest.CheckComposites(t, bs, check)
	checkPenalties(t, bs, check)
}

func checkReserveRestores(b proptest.Backend, s proptest.Scenario) (string, error) {
	evs := s.Events()
	cancel := len(s.Arrivals)%2 == 0
	plain, err := proptest.NewRig(b.Store, s.Strat.S)
	if err != nil {
		return "", err
	}
	outs, err := plain.Run(evs)
	if err != nil {
		return "", err
	}
	j := -1
	for i := len(evs) / 2; i < len(evs) && j < 0; i++ {
		if outs[i].Res.Allowed {
			j = i
		}
	}
	if j < 0 {
		return "", nil
	}
	want := outs[j+1:]
	if cancel {
		without, err := proptest.NewRig(b.Store, s.Strat.S)
		if err != nil {
			return "", err
		}
		rest := append(append([]proptest.Event(nil), evs[:j]...), evs[j+1:]...)
		if want, err = without.Run(rest); err != nil {
			return "", err
		}
		want = want[j:]
	}
	rig, err := proptest.NewRig(b.Store, s.Strat.S)
	if err != nil {
		return "", err
	}
	if _, err := rig.Run(evs[:j]); err != nil {
		return "", err
	}
	ev := evs[j]
	rv, res, err := rig.Reserve(ev)
	if err != nil {
		return "", err
	}
	if !proptest.SameResult(res, outs[j].Res) {
		return fmt.Sprintf("reserve %d (%s at +%v): %+v, but AllowN %+v", j, ev, ev.At.Sub(s.Base), res, outs[j].Res), nil
	}
	at := ev.At.Add(s.Strat.S.Window() / 2)
	for _, next := range evs[j+1:] {
		if next.Key == ev.Key {
			at = ev.At.Add(next.At.Sub(ev.At) / 2)
			break
		}
	}
	actual, what := ev.N, "settled at its estimate"
	if cancel {
		actual, what = 0, "cancelled"
	}
	if _, err := rig.Settle(rv, at, actual); err != nil {
		return "", err
	}
	got, err := rig.Run(evs[j+1:])
	if err != nil {
		return "", err
	}
	for i := range got {
		if !proptest.SameResult(got[i].Res, want[i].Res) {
			o := got[i]
			return fmt.Sprintf("reservation %d (%s at +%v) %s at +%v, then request %d (%s at +%v): %+v, want %+v",
				j, ev, ev.At.Sub(s.Base), what, at.Sub(s.Base), j+1+i, o.Event, o.At.Sub(s.Base), o.Res, want[i].Res), nil
		}
	}
	return "", nil
}
