package algorithm_test

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestPropertyAtMostTwinAgreement: for every registered algorithm, for
// composites and for penalty boxes, the Go partial grant (Granter.AtMost,
// run by store.Memory) and the Lua twin's atmost mode (run by store.Redis,
// on miniredis, the real redis-server and valkey-server) grant the same
// units with identical Results, members included, on the same generated
// timeline of decisions and partial grants (one arrival in four) over
// several keys, one timeline in three unsorted; and both refuse a cost
// above algorithm.MaxCost alike. A change to one twin's atmost mode that
// is not made in the other fails here.
func TestPropertyAtMostTwinAgreement(t *testing.T) {
	mem := proptest.Memory(t)
	bs := luaBackends(t)
	for _, k := range proptest.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			for _, b := range bs {
				t.Run(b.Name, func(t *testing.T) {
					g := proptest.WithAtMosts(proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return k.New(b, r) }, true))
					proptest.Check(t, max(1, b.Cases/2), prop.ForAll(func(s proptest.Scenario) (string, error) { return checkAtMostTwins(mem, b, s) }, g))
				})
			}
		})
	}
}

// checkAtMostTwins runs s on the Go rule (mem) and on the Lua script (b)
// and reports the first grant or Result that differs.
func checkAtMostTwins(mem *store.Memory, b proptest.Backend, s proptest.Scenario) (string, error) {
	goRule, err := proptest.NewRig(mem, s.Strat.S)
	if err != nil {
		return "", err
	}
	lua, err := proptest.NewRig(b.Store, s.Strat.S)
	if err != nil {
		return "", err
	}
	for i, ev := range s.Events() {
		if !ev.AtMost {
			if diff, err := proptest.SameAt(goRule, lua, s, i, ev); diff != "" || err != nil {
				return "the Go rule, then the Lua script: " + diff, err
			}
			continue
		}
		gn, g, gerr := goRule.AtMost(ev)
		ln, l, lerr := lua.AtMost(ev)
		above := ev.N > algorithm.MaxCost(s.Strat.S)
		if above != errors.Is(gerr, fleetlimit.ErrInvalidCost) || above != errors.Is(lerr, fleetlimit.ErrInvalidCost) {
			return fmt.Sprintf("request %d (%s): above the most %d: %v; Go rule's error %v, Lua's %v", i, ev, algorithm.MaxCost(s.Strat.S), above, gerr, lerr), nil
		}
		if !above && (gerr != nil || lerr != nil) {
			return "", errors.Join(gerr, lerr)
		}
		if gn != ln || !proptest.SameResult(g, l) {
			return fmt.Sprintf("at most, request %d (%s at +%v): Go rule granted %d %+v %+v, Lua script %d %+v %+v",
				i, ev, ev.At.Sub(s.Base), gn, g, g.Limits(), ln, l, l.Limits()), nil
		}
	}
	return "", nil
}
