package algorithm_test

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
)

// TestPropertyAllTwinAgreement: a composite's Go rule (store.Memory) and
// its generated Lua script (store.Redis on miniredis, the real server and
// the Cluster) return identical Results, members' figures included, on the
// same generated timelines, for peeks and decisions, clocks skewed or not.
func TestPropertyAllTwinAgreement(t *testing.T) {
	mem := proptest.Memory(t)
	names := []string{"miniredis"}
	names = append(names, proptest.RealNames(t)...)
	for _, b := range proptest.Backends(t, names...) {
		t.Run(b.Name, func(t *testing.T) {
			g := proptest.WithRefunds(proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return proptest.AllCase(b, r) }, true))
			proptest.Check(t, b.Cases, prop.ForAll(func(s proptest.Scenario) (string, error) { return checkTwins(mem, b, s) }, g))
		})
	}
}

// TestPropertyAllIsIntersection: on every store, a composite admits a
// request exactly when every member, run on its own (in a memory store) on
// the timeline of the requests the composite admitted, admits it; each
// member is charged exactly the admitted cost (its own figures after every
// decision equal the lone member's — a member charged for a denied request,
// or not charged for an admitted one, would drift from it); and the
// composite's figures follow the rule in algorithm.All: RetryAfter and
// ResetAfter the longest of the members', Limit and Remaining the tightest
// member's, each member's figures those of the lone member (uncharged, for
// a member that would have admitted a denied request).
func TestPropertyAllIsIntersection(t *testing.T) {
	names := []string{"memory", "miniredis"}
	names = append(names, proptest.RealNames(t)...)
	for _, b := range proptest.Backends(t, names...) {
		t.Run(b.Name, func(t *testing.T) {
			model := proptest.Memory(t)
			g := proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return proptest.AllCase(b, r) }, false)
			proptest.Check(t, b.Cases, prop.ForAll(func(s proptest.Scenario) (string, error) {
				composite, err := proptest.NewRig(b.Store, s.Strat.S)
				if err != nil {
					return "", err
				}
				members := s.Strat.S.(algorithm.Composite).Members()
				alone := make([]*proptest.Rig, len(members))
				for i, m := range members {
					if alone[i], err = proptest.NewRig(model, m); err != nil {
						return "", err
					}
				}
				for i, ev := range s.Events() {
					got, err := composite.At(ev)
					if err != nil {
						return "", err
					}
					want, limits, err := intersection(alone, members, ev)
					if err != nil {
						return "", err
					}
					if got.Allowed != want.Allowed || got.Limit != want.Limit || got.Remaining != want.Remaining ||
						got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter || !slices.Equal(got.Limits(), limits) {
						return fmt.Sprintf("request %d (%q n=%d at +%v): composite %+v %+v, members alone %+v %+v",
							i, ev.Key, ev.N, ev.At.Sub(s.Base), got, got.Limits(), want, limits), nil
					}
				}
				return "", nil
			}, g))
		})
	}
}

// intersection is the composite's Result for ev computed from the members
// alone, charging them only when all admit; it restates algorithm.All's
// rule independently of its code.
func intersection(alone []*proptest.Rig, members []algorithm.Strategy, ev proptest.Event) (fleetlimit.Result, []fleetlimit.LimitResult, error) {
	peeks := make([]fleetlimit.Result, len(alone))
	admit := true
	for i, r := range alone {
		p, err := r.Peek(ev)
		if err != nil {
			return fleetlimit.Result{}, nil, err
		}
		peeks[i] = p
		admit = admit && p.Allowed
	}
	limits := make([]fleetlimit.LimitResult, len(alone))
	for i, r := range alone {
		m := members[i]
		res := peeks[i]
		switch {
		case admit:
			var err error
			if res, err = r.At(ev); err != nil {
				return fleetlimit.Result{}, nil, err
			}
		case res.Allowed:
			// Uncharged: the member as it stands.
			asIs, err := r.Peek(proptest.Event{At: ev.At, Key: ev.Key, N: m.Limit() + 1})
			if err != nil {
				return fleetlimit.Result{}, nil, err
			}
			res = fleetlimit.Result{Allowed: true, Remaining: asIs.Remaining, ResetAfter: asIs.ResetAfter}
		}
		limits[i] = fleetlimit.LimitResult{Name: m.Name(), Limit: m.Limit(), Window: m.Window(),
			Remaining: res.Remaining, RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter}
	}
	want := fleetlimit.Result{Allowed: admit}
	// The tightest member: the smallest limit that ev.N exceeds, if any;
	// else the least Remaining (the first of equals).
	tight := -1
	for i, l := range limits {
		if ev.N > l.Limit && (tight < 0 || l.Limit < limits[tight].Limit) {
			tight = i
		}
	}
	if tight < 0 {
		tight = 0
		for i, l := range limits {
			if l.Remaining < limits[tight].Remaining {
				tight = i
			}
		}
	}
	want.Limit, want.Remaining = limits[tight].Limit, limits[tight].Remaining
	for _, l := range limits {
		want.RetryAfter = max(want.RetryAfter, l.RetryAfter)
		want.ResetAfter = max(want.ResetAfter, l.ResetAfter)
	}
	return want, limits, nil
}

// TestAllValidate: every configuration All refuses is refused by Validate
// (and so by fleetlimit.New) with ErrInvalidStrategy, never by a panic.
func TestAllValidate(t *testing.T) {
	tb := algorithm.TokenBucket(10, time.Second, 10)
	day := algorithm.SlidingWindowLog(1000, 24*time.Hour)
	var nilTB algorithm.Strategy
	nine := make([]algorithm.Strategy, algorithm.MaxMembers+1)
	for i := range nine {
		nine[i] = algorithm.FixedWindow(int64(i+1), time.Minute)
	}
	for _, c := range []struct {
		name    string
		members []algorithm.Strategy
		want    string
	}{
		{"none", nil, "needs 1 to 8 members"},
		{"too many", nine, "needs 1 to 8 members"},
		{"nil member", []algorithm.Strategy{tb, nilTB}, "member 1 is nil"},
		{"invalid member", []algorithm.Strategy{tb, algorithm.SlidingWindowLog(0, time.Minute)}, "member 1"},
		{"nested", []algorithm.Strategy{tb, algorithm.All(day)}, "itself a composite"},
		{"same rule twice", []algorithm.Strategy{tb, day, algorithm.TokenBucket(10, time.Second, 10)}, "members 0 and 2 are the same rule"},
		{"limit 2^53", []algorithm.Strategy{tb, algorithm.FixedWindow(algorithm.MaxInt, time.Minute)}, "below 2^53"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := algorithm.All(c.members...).Validate()
			if !errors.Is(err, algorithm.ErrInvalidStrategy) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidStrategy saying %q", err, c.want)
			}
		})
	}
	if err := algorithm.All(tb, day, algorithm.TokenBucket(20, time.Second, 10)).Validate(); err != nil {
		t.Fatalf("two token buckets with different rates are distinct rules: %v", err)
	}
}
