package proptest

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
)

// AllCase builds a composite (algorithm.All) of 2 or 3 distinct members
// drawn from the registry by EntryCase: any mix of algorithms, limits and
// the backend's windows.
func AllCase(b Backend, r *rand.Rand) StratCase { return AllCaseOf(b, r, algorithm.Registry()) }

// AllCaseOf is AllCase with members drawn from es.
func AllCaseOf(b Backend, r *rand.Rand, es []algorithm.Entry) StratCase {
	k := 2 + r.Intn(2)
	var members []algorithm.Strategy
	var cases []StratCase
	var descs []string
	for len(members) < k {
		c := EntryCase(es[r.Intn(len(es))], b, r)
		if algorithm.All(append(members, c.S)...).Validate() != nil {
			continue // the same rule twice
		}
		members = append(members, c.S)
		cases = append(cases, c)
		descs = append(descs, c.Desc)
	}
	return StratCase{Name: "all", S: algorithm.All(members...), Desc: "All(" + strings.Join(descs, ", ") + ")", Members: cases}
}

// CheckComposites is CheckEntries for generated composites (AllCase), in a
// subtest named "all", with half the cases (each composite already mixes
// the registry's algorithms).
func CheckComposites(t *testing.T, bs []Backend, check func(Backend, Scenario) (string, error)) {
	t.Helper()
	t.Run("all", func(t *testing.T) {
		for _, b := range bs {
			t.Run(b.Name, func(t *testing.T) {
				g := ScenarioGen(b, func(r *rand.Rand) StratCase { return AllCase(b, r) }, false)
				Check(t, max(1, b.Cases/2), prop.ForAll(func(s Scenario) (string, error) { return check(b, s) }, g))
			})
		}
	})
}

// SameResult reports whether a and b are the same decision, field by field
// and member by member (Results of composites compare == only to their
// copies).
func SameResult(a, b fleetlimit.Result) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter && slices.Equal(a.Limits(), b.Limits())
}

// PenaltyCase builds a penalty box (algorithm.Penalize) around a registry
// strategy (EntryCase) or, one case in four, a composite (AllCase): after 1
// to 3 denials within 1 to 3 windows, a ban of a half to two windows
// (at least a millisecond), doubling up to 1 to 6 times that (so a
// doubling can overshoot the cap).
func PenaltyCase(b Backend, r *rand.Rand) StratCase { return PenaltyCaseOf(b, r, algorithm.Registry()) }

// PenaltyCaseOf is PenaltyCase with the strategy, or the composite's
// members, drawn from es.
func PenaltyCaseOf(b Backend, r *rand.Rand, es []algorithm.Entry) StratCase {
	var inner StratCase
	if r.Intn(4) == 0 {
		inner = AllCaseOf(b, r, es)
	} else {
		inner = EntryCase(es[r.Intn(len(es))], b, r)
	}
	w := inner.S.Window()
	ban := max(time.Millisecond, (w * time.Duration(1+r.Intn(4)) / 2).Truncate(time.Microsecond))
	p := algorithm.Penalty{
		After:  1 + r.Int63n(3),
		Within: w * time.Duration(1+r.Intn(3)),
		Ban:    ban,
		MaxBan: ban * time.Duration(1+r.Intn(6)),
	}
	return StratCase{Name: "penalty", S: algorithm.Penalize(inner.S, p),
		Desc: fmt.Sprintf("Penalize(%s, %+v)", inner.Desc, p), Inner: &inner}
}

// Kind is a kind of strategy the properties generate: a registry entry's
// (EntryCase), composites (AllCase) or penalty boxes (PenaltyCase).
type Kind struct {
	Name string
	New  func(Backend, *rand.Rand) StratCase
}

// Kinds are every registry entry's kind, in the registry's order, then
// "all" and "penalty".
func Kinds(t *testing.T) []Kind {
	t.Helper()
	var ks []Kind
	for _, e := range RegistryEntries(t) {
		ks = append(ks, Kind{e.Name, EntryCases(e)})
	}
	return append(ks, Kind{"all", AllCase}, Kind{"penalty", PenaltyCase})
}

// SameAt decides ev on a and on b (Rig.At) and describes how their Results
// differ ("" when they do not); i is ev's place in s's timeline.
func SameAt(a, b *Rig, s Scenario, i int, ev Event) (string, error) {
	ra, err := a.At(ev)
	if err != nil {
		return "", err
	}
	rb, err := b.At(ev)
	if err != nil {
		return "", err
	}
	if !SameResult(ra, rb) {
		return fmt.Sprintf("request %d (%s at +%v): %+v %+v, but %+v %+v", i, ev, ev.At.Sub(s.Base), ra, ra.Limits(), rb, rb.Limits()), nil
	}
	return "", nil
}
