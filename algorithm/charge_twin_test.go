package algorithm_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestPropertyChargeTwinAgreement: the charge mode (algorithm.Charger, the
// scripts' "charge") of every registered algorithm, of composites
// (algorithm.All) and of penalty boxes gives the same Decision — Cut
// included, member by member — from the Go rule (store.Memory) and from
// the Lua script (store.Redis on miniredis, the real redis-server, and the
// Cluster when ./test.sh runs it), on generated timelines that mix
// decisions, refunds and charges of up to four times the cost, under debt
// caps of the limit (-1), 0, 1 and twice the limit. Both are
// peeked at before every step (at its time: on the real server a key
// expires in real time), so that a state that differs is caught even before
// it changes a decision. A change to one twin's charge not made in the
// other fails here.
func TestPropertyChargeTwinAgreement(t *testing.T) {
	mem := proptest.Memory(t)
	names := []string{"miniredis"}
	if redistest.HaveReal(t) {
		names = append(names, "redis", "cluster")
	}
	bs := proptest.Backends(t, names...)
	cases := map[string]func(proptest.Backend, *rand.Rand) proptest.StratCase{
		"all":     proptest.AllCase,
		"penalty": proptest.PenaltyCase,
	}
	for _, e := range proptest.RegistryEntries(t) {
		cases[e.Name] = proptest.EntryCases(e)
	}
	for name, newCase := range cases {
		t.Run(name, func(t *testing.T) {
			for _, b := range bs {
				t.Run(b.Name, func(t *testing.T) {
					g := proptest.WithRefunds(proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return newCase(b, r) }, true))
					n := b.Cases
					if name == "all" || name == "penalty" {
						n = max(1, n/2)
					}
					proptest.Check(t, n, prop.ForAll(func(s proptest.Scenario) (string, error) { return checkChargeTwins(mem, b.Store, s) }, g))
				})
			}
		})
	}
}

// checkChargeTwins runs s on the Go rule (mem) and the Lua script (lua),
// every third decision made a charge, and reports the first Decision that
// differs.
func checkChargeTwins(mem, lua store.Store, s proptest.Scenario) (string, error) {
	st := s.Strat.S
	if err := st.Validate(); err != nil {
		return "", err
	}
	prefix := redistest.Prefix()
	ctx := context.Background()
	caps := []int64{-1, 0, 1, 2 * st.Limit()}
	for i, ev := range s.Events() {
		req := store.Request{Strategy: st, Prefix: prefix, Key: ev.Key, N: ev.N, Now: ev.At}
		what := "decision"
		op := func(x store.Store) (algorithm.Decision, error) { return x.Decide(ctx, req) }
		switch {
		case ev.Refund:
			what = "refund"
			op = func(x store.Store) (algorithm.Decision, error) { return x.(store.Refunder).Refund(ctx, req) }
		case i%3 == 1:
			req.N = min(ev.N*int64(1+i%4), algorithm.MaxInt)
			maxDebt := caps[(i/3)%len(caps)]
			what = fmt.Sprintf("charge (debt cap %d)", maxDebt)
			op = func(x store.Store) (algorithm.Decision, error) { return x.(store.Charger).Charge(ctx, req, maxDebt) }
		}
		look := store.Request{Strategy: st, Prefix: prefix, Key: ev.Key, N: 1, Now: ev.At}
		peek := func(x store.Store) (algorithm.Decision, error) { return x.(store.Peeker).Peek(ctx, look) }
		if msg, err := agree(fmt.Sprintf("peek before %s %d (%q at +%v)", what, i, ev.Key, ev.At.Sub(s.Base)), peek, mem, lua); msg != "" || err != nil {
			return msg, err
		}
		if msg, err := agree(fmt.Sprintf("%s %d (%q n=%d at +%v)", what, i, ev.Key, req.N, ev.At.Sub(s.Base)), op, mem, lua); msg != "" || err != nil {
			return msg, err
		}
	}
	return "", nil
}

// agree runs op (what it is) on the Go rule's store and on the Lua
// script's, and reports their Decisions when they differ (sameCharge).
func agree(what string, op func(store.Store) (algorithm.Decision, error), mem, lua store.Store) (string, error) {
	g, err := op(mem)
	if err != nil {
		return "", fmt.Errorf("Go rule: %s: %w", what, err)
	}
	l, err := op(lua)
	if err != nil {
		return "", fmt.Errorf("Lua script: %s: %w", what, err)
	}
	if !sameCharge(g, l) {
		return fmt.Sprintf("%s: Go rule %s, Lua script %s", what, showDecision(g), showDecision(l)), nil
	}
	return "", nil
}

// sameCharge is sameDecision, and the same Cut and Ban, member by member.
func sameCharge(a, b algorithm.Decision) bool {
	if !sameDecision(a, b) || a.Cut() != b.Cut() || a.Ban() != b.Ban() {
		return false
	}
	for i, m := range a.Members() {
		if m.Cut() != b.Members()[i].Cut() {
			return false
		}
	}
	return true
}

func showDecision(d algorithm.Decision) string {
	s := fmt.Sprintf("{Allowed:%v Limit:%d Remaining:%d RetryAfter:%v ResetAfter:%v Cut:%d Ban:%v}", d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Cut(), d.Ban())
	for _, m := range d.Members() {
		s += " " + showDecision(m)
	}
	return s
}
