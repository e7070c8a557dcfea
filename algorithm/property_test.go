package algorithm_test

// Boundary-burst and result properties of every strategy on every store.
// docs/guarantees.md states in plain words what each test proves.

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"
	"golang.org/x/time/rate"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/store"
)

// tightTiming names the algorithms whose RetryAfter and ResetAfter are exact
// to the microsecond: one microsecond earlier the request (or a request of
// the whole capacity) is still denied. Any other registered algorithm is
// held to the bounds only.
var tightTiming = map[string]bool{
	"sliding_window_log":     true,
	"token_bucket":           true,
	"fixed_window":           true,
	"sliding_window_counter": true,
}

// resetWindows is how many windows an algorithm's ResetAfter may reach, if
// more than one: the sliding-window counter's count weighs until the end of
// the window after the one it was made in.
var resetWindows = map[string]time.Duration{
	"sliding_window_counter": 2,
}

// TestPropertyExactWindow: for every algorithm registered as Exact, in every
// interval of length W the admitted cost of a key is at most the limit. For
// the sliding-window log it also checks that the log is not over-strict: a
// request is denied only when the window (t-W, t] already holds more than
// limit-n (or n > limit), and Remaining is exactly what the window has left.
func TestPropertyExactWindow(t *testing.T) {
	bs := proptest.Backends(t)
	found := false
	for _, e := range proptest.RegistryEntries(t) {
		if !e.Exact {
			continue
		}
		found = true
		t.Run(e.Name, func(t *testing.T) {
			proptest.CheckOnBackends(t, bs, proptest.EntryCases(e), func(s proptest.Scenario, outs []proptest.Outcome) string {
				if msg := checkExactWindow(outs, s.Strat.S); msg != "" || e.Name != "sliding_window_log" {
					return msg
				}
				return checkSlidingLogModel(outs, s.Strat.S)
			})
		})
	}
	if !found {
		t.Fatal("no algorithm in the registry is Exact; the sliding-window log should be")
	}
}

// checkExactWindow reports an interval of length W holding more than the
// limit.
func checkExactWindow(outs []proptest.Outcome, s algorithm.Strategy) string {
	most, from, to := proptest.MaxAdmittedIn(outs, s.Window())
	if most > s.Limit() {
		return fmt.Sprintf("admitted %d > limit %d within %v (from %s to %s), an interval shorter than the window %v",
			most, s.Limit(), to.Sub(from), from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), s.Window())
	}
	return ""
}

// checkSlidingLogModel compares every decision with the sliding-log model
// computed from the admissions alone: a unit admitted at a counts at t iff
// a > t - W.
func checkSlidingLogModel(outs []proptest.Outcome, s algorithm.Strategy) string {
	limit, w := s.Limit(), s.Window().Microseconds()
	type adm struct{ at, n int64 }
	hist := make(map[string][]adm)
	for i, o := range outs {
		t := o.At.UnixMicro()
		var live int64
		for _, a := range hist[o.Key] {
			if a.at > t-w {
				live += a.n
			}
		}
		fits := o.N <= limit && o.N <= algorithm.MaxLogCost && live+o.N <= limit
		switch {
		case o.Res.Allowed && !fits:
			return fmt.Sprintf("request %d (%q n=%d at +%v) admitted while the window held %d of %d",
				i, o.Key, o.N, o.At.Sub(outs[0].At), live, limit)
		case !o.Res.Allowed && fits:
			return fmt.Sprintf("request %d (%q n=%d at +%v) denied although the window held only %d of %d: over-strict",
				i, o.Key, o.N, o.At.Sub(outs[0].At), live, limit)
		}
		want := limit - live
		if o.Res.Allowed {
			want -= o.N
			hist[o.Key] = append(hist[o.Key], adm{t, o.N})
		}
		if o.Res.Remaining != want {
			return fmt.Sprintf("request %d (%q n=%d): Remaining %d, want %d (window holds %d of %d)",
				i, o.Key, o.N, o.Res.Remaining, want, limit-want, limit)
		}
	}
	return ""
}

// TestPropertyTokenBucket: a token bucket of rate per period and burst
// admits at most burst + rate*d/per in every closed interval of length d,
// and decides every request exactly as golang.org/x/time/rate's
// Limiter.AllowN(t, n) does on the same timeline.
func TestPropertyTokenBucket(t *testing.T) {
	e := proptest.RegistryEntry(t, "token_bucket")
	newStrat := func(b proptest.Backend, r *rand.Rand) proptest.StratCase { return proptest.TokenBucketCase(e, b, r) }
	proptest.CheckOnBackends(t, proptest.Backends(t), newStrat, func(s proptest.Scenario, outs []proptest.Outcome) string {
		if msg := checkAgainstXTimeRate(outs, s.Strat); msg != "" {
			return msg
		}
		return checkTokenBucketBound(outs, s.Strat)
	})
}

// checkAgainstXTimeRate replays the outcomes on one x/time/rate Limiter per
// key. Its Limit is computed as a float from rate and per, not with
// rate.Every(per/rate), whose integer division would round the interval.
func checkAgainstXTimeRate(outs []proptest.Outcome, sc proptest.StratCase) string {
	refs := make(map[string]*rate.Limiter)
	for i, o := range outs {
		ref, ok := refs[o.Key]
		if !ok {
			ref = rate.NewLimiter(rate.Limit(float64(sc.Rate)/sc.Per.Seconds()), int(sc.Burst))
			refs[o.Key] = ref
		}
		tokens := ref.TokensAt(o.At)
		if want := ref.AllowN(o.At, int(o.N)); want != o.Res.Allowed {
			return fmt.Sprintf("request %d (%q n=%d at +%v): Allowed %v, x/time/rate AllowN says %v (it held %.9f tokens)",
				i, o.Key, o.N, o.At.Sub(outs[0].At), o.Res.Allowed, want, tokens)
		}
	}
	return ""
}

// checkTokenBucketBound checks burst + rate·d/per over every interval d.
func checkTokenBucketBound(outs []proptest.Outcome, sc proptest.StratCase) string {
	return proptest.TokenBucketBound(outs, sc.Rate, sc.Per, sc.Burst)
}

// TestPropertyFixedWindow: the fixed window admits at most the limit in each
// window aligned to the Unix epoch, exactly as the per-window counter model
// says (not over-strict either), and never more than 2*limit in any interval
// of length W: the flaw is bounded by two windows.
func TestPropertyFixedWindow(t *testing.T) {
	proptest.CheckOnBackends(t, proptest.Backends(t), proptest.EntryCases(proptest.RegistryEntry(t, "fixed_window")), func(s proptest.Scenario, outs []proptest.Outcome) string {
		if msg := checkFixedWindowModel(outs, s.Strat.S); msg != "" {
			return msg
		}
		if most, from, to := proptest.MaxAdmittedIn(outs, s.Strat.S.Window()); most > 2*s.Strat.S.Limit() {
			return fmt.Sprintf("admitted %d > 2*limit within %v (from %s)", most, to.Sub(from), from.Format(time.RFC3339Nano))
		}
		return ""
	})
}

// checkFixedWindowModel compares every decision with a counter per key and
// aligned window [i*W, (i+1)*W).
func checkFixedWindowModel(outs []proptest.Outcome, s algorithm.Strategy) string {
	limit, w := s.Limit(), s.Window().Microseconds()
	type win struct {
		key string
		idx int64
	}
	count := make(map[win]int64)
	for i, o := range outs {
		k := win{o.Key, o.At.UnixMicro() / w} // times are after 1970: division floors
		fits := o.N <= limit && count[k]+o.N <= limit
		if o.Res.Allowed != fits {
			return fmt.Sprintf("request %d (%q n=%d at +%v): Allowed %v, but its aligned window held %d of %d",
				i, o.Key, o.N, o.At.Sub(outs[0].At), o.Res.Allowed, count[k], limit)
		}
		if o.Res.Allowed {
			count[k] += o.N
		}
		if want := limit - count[k]; o.Res.Remaining != want {
			return fmt.Sprintf("request %d (%q n=%d): Remaining %d, want %d", i, o.Key, o.N, o.Res.Remaining, want)
		}
		if count[k] > limit {
			return fmt.Sprintf("aligned window %d of key %q admitted %d > limit %d", k.idx, o.Key, count[k], limit)
		}
	}
	return ""
}

// edgeBurst is the boundary-burst timeline: costs First, all at Delta
// before a window edge, then costs Second, all at the edge; each sums to
// Limit.
type edgeBurst struct {
	Limit         int64
	Window, Delta time.Duration
	First, Second []int64
}

func (eb edgeBurst) String() string {
	return fmt.Sprintf("limit %d per %v: costs %v at edge-%v, then %v at the edge", eb.Limit, eb.Window, eb.First, eb.Delta, eb.Second)
}

// edgeBurstGen generates boundary bursts; Delta is 1 to 3 grains or anywhere
// below the window.
func edgeBurstGen(b proptest.Backend) gopter.Gen {
	split := func(r *rand.Rand, total int64) []int64 {
		var cs []int64
		for total > 0 {
			c := 1 + r.Int63n(min(total, 4))
			if r.Intn(4) == 0 {
				c = total
			}
			cs = append(cs, c)
			total -= c
		}
		return cs
	}
	return func(p *gopter.GenParameters) *gopter.GenResult {
		r := p.Rng
		large := r.Intn(8) == 0
		eb := edgeBurst{Limit: 1 + r.Int63n(10)}
		if large {
			eb.Limit = 100 + r.Int63n(401)
		}
		eb.Window = b.Window(r, large)
		grains := int64(eb.Window / b.Grain())
		if r.Intn(2) == 0 || grains < 2 {
			eb.Delta = time.Duration(1+r.Int63n(min(3, max(1, grains-1)))) * b.Grain()
		} else {
			eb.Delta = time.Duration(1+r.Int63n(grains-1)) * b.Grain()
		}
		eb.First, eb.Second = split(r, eb.Limit), split(r, eb.Limit)
		return gopter.NewGenResult(eb, gopter.NoShrinker)
	}
}

func (eb edgeBurst) events() (edge time.Time, evs []proptest.Event) {
	edge = proptest.EdgeAfter(proptest.Epoch, eb.Window).Add(eb.Window)
	for _, c := range eb.First {
		evs = append(evs, proptest.Event{At: edge.Add(-eb.Delta), Key: "alice", N: c})
	}
	for _, c := range eb.Second {
		evs = append(evs, proptest.Event{At: edge, Key: "alice", N: c})
	}
	return edge, evs
}

// TestPropertyFixedWindowBoundaryBurst proves the fixed window's flaw: limit
// spent Delta before a window edge and limit again at the edge are all
// admitted, so an interval of length Delta < W admits 2*limit, and the most
// admitted in any interval of length W is exactly 2*limit. Every Exact
// algorithm given the same timeline admits exactly limit.
func TestPropertyFixedWindowBoundaryBurst(t *testing.T) {
	fixed := proptest.RegistryEntry(t, "fixed_window")
	var exact []algorithm.Entry
	for _, e := range proptest.RegistryEntries(t) {
		if e.Exact {
			exact = append(exact, e)
		}
	}
	for _, b := range proptest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			proptest.Check(t, b.Cases, prop.ForAll(func(eb edgeBurst) (string, error) {
				_, evs := eb.events()
				r, err := proptest.NewRig(b.Store, fixed.New(eb.Limit, eb.Window))
				if err != nil {
					return "", err
				}
				outs, err := r.Run(evs)
				if err != nil {
					return "", err
				}
				for i, o := range outs {
					if !o.Res.Allowed {
						return fmt.Sprintf("fixed window denied request %d (n=%d at %s): %+v", i, o.N, o.At.Format(time.RFC3339Nano), o.Res), nil
					}
				}
				most, from, to := proptest.MaxAdmittedIn(outs, eb.Window)
				if most != 2*eb.Limit || to.Sub(from) != eb.Delta {
					return fmt.Sprintf("most admitted in an interval of length W is %d within %v, want exactly 2*limit = %d within %v",
						most, to.Sub(from), 2*eb.Limit, eb.Delta), nil
				}
				for _, e := range exact {
					r, err := proptest.NewRig(b.Store, e.New(eb.Limit, eb.Window))
					if err != nil {
						return "", err
					}
					outs, err := r.Run(evs)
					if err != nil {
						return "", err
					}
					var total int64
					for _, o := range outs {
						if o.Res.Allowed {
							total += o.N
						}
					}
					if total != eb.Limit {
						return fmt.Sprintf("exact %s admitted %d on the boundary burst, want exactly the limit %d", e.Name, total, eb.Limit), nil
					}
				}
				return "", nil
			}, edgeBurstGen(b)))
		})
	}
}

// TestPropertyFixedWindowFlawFound runs the exactness property of
// TestPropertyExactWindow against the fixed window and requires gopter to
// falsify it: the boundary burst is found by search, not only by the
// hand-built timeline above. The counterexample is logged.
func TestPropertyFixedWindowFlawFound(t *testing.T) {
	e := proptest.RegistryEntry(t, "fixed_window")
	for _, b := range proptest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			exact := proptest.ScenarioProp(b, proptest.EntryCases(e), func(s proptest.Scenario, outs []proptest.Outcome) string {
				return checkExactWindow(outs, s.Strat.S)
			})
			params := proptest.Params(t, b.Cases)
			res := exact.Check(params)
			if res.Status != gopter.TestFailed || len(res.Args) != 1 {
				var out strings.Builder
				gopter.NewFormatedReporter(true, 1<<20, &out).ReportTestResult(t.Name(), res)
				t.Fatalf("want the exactness property falsified for the fixed window, got: %s\nseed %d", out.String(), params.Seed())
			}
			s := res.Args[0].Arg.(proptest.Scenario)
			outs, err := proptest.RunScenario(b.Store, s)
			if err != nil {
				t.Fatal(err)
			}
			most, _, _ := proptest.MaxAdmittedIn(outs, s.Strat.S.Window())
			if limit := s.Strat.S.Limit(); most <= limit || most > 2*limit {
				t.Fatalf("counterexample %v admits %d in a window, want more than the limit %d and at most twice it", s, most, limit)
			}
			t.Logf("falsified after %d cases, as it must be: %s\ncounterexample (shrunk): %v", res.Succeeded, checkExactWindow(outs, s.Strat.S), s)
		})
	}
}

// TestPropertyResultConsistency holds every registered algorithm, on every
// store, to the Result contract: Limit is the strategy's; 0 <= Remaining <=
// Limit (and <= Limit-n after admitting n); RetryAfter > 0 exactly when
// denied; 0 <= ResetAfter <= Window (2 x Window for the sliding-window
// counter), > 0 after an admission; a never-passable
// n gets RetryAfter = ResetAfter (or Window); a denial records nothing. At the
// end of each timeline it probes the last decision with no other traffic:
// Remaining+1 is denied and Remaining admitted at the same instant; the same
// request retried exactly RetryAfter later is admitted; a request of the
// whole capacity is admitted exactly ResetAfter later (Remaining 0). For the
// built-in algorithms both waits are also tight: one microsecond earlier is
// denied.
func TestPropertyResultConsistency(t *testing.T) {
	proptest.CheckEntries(t, proptest.Backends(t), func(b proptest.Backend, s proptest.Scenario) (string, error) {
		return checkConsistency(b.Store, s, tightTiming[s.Strat.Name])
	})
}

// resultInvariants checks one Result against the contract.
func resultInvariants(s algorithm.Strategy, ev proptest.Event, r fleetlimit.Result) string {
	limit, w := s.Limit(), s.Window()
	switch {
	case r.Limit != limit:
		return fmt.Sprintf("Limit %d, want %d", r.Limit, limit)
	case r.Remaining < 0 || r.Remaining > limit:
		return fmt.Sprintf("Remaining %d outside [0, %d]", r.Remaining, limit)
	case r.Allowed && r.Remaining > limit-ev.N:
		return fmt.Sprintf("admitted n=%d but Remaining %d > limit-n", ev.N, r.Remaining)
	case r.Allowed && r.RetryAfter != 0:
		return fmt.Sprintf("admitted with RetryAfter %v", r.RetryAfter)
	case !r.Allowed && r.RetryAfter <= 0:
		return fmt.Sprintf("denied with RetryAfter %v", r.RetryAfter)
	case r.ResetAfter < 0 || r.ResetAfter > max(1, resetWindows[s.Name()])*w:
		return fmt.Sprintf("ResetAfter %v outside [0, %d x Window %v]", r.ResetAfter, max(1, resetWindows[s.Name()]), w)
	case r.Allowed && r.ResetAfter == 0:
		return "admitted, yet ResetAfter 0 says the key is at full capacity"
	case ev.N > limit && r.Allowed:
		return fmt.Sprintf("admitted n=%d above the limit %d", ev.N, limit)
	case ev.N > limit && r.ResetAfter > 0 && r.RetryAfter != r.ResetAfter:
		return fmt.Sprintf("never-passable n=%d: RetryAfter %v, want ResetAfter %v", ev.N, r.RetryAfter, r.ResetAfter)
	case ev.N > limit && r.ResetAfter == 0 && r.RetryAfter != w:
		return fmt.Sprintf("never-passable n=%d on a full key: RetryAfter %v, want Window %v", ev.N, r.RetryAfter, w)
	}
	return ""
}

// checkConsistency runs the scenario (sorted: time never runs backwards for
// a key) checking every Result, then probes its last decision.
func checkConsistency(st store.Store, s proptest.Scenario, tight bool) (string, error) {
	strat := s.Strat.S
	evs := s.Events()
	if len(evs) == 0 {
		return "", nil
	}
	main, err := proptest.NewRig(st, strat)
	if err != nil {
		return "", err
	}
	var last proptest.Outcome
	for i, ev := range evs {
		res, err := main.At(ev)
		if err != nil {
			return "", err
		}
		if msg := resultInvariants(strat, ev, res); msg != "" {
			return fmt.Sprintf("request %d (%q n=%d at +%v): %s: %+v", i, ev.Key, ev.N, ev.At.Sub(s.Base), msg, res), nil
		}
		if !res.Allowed {
			again, err := main.At(ev)
			if err != nil {
				return "", err
			}
			if again != res {
				return fmt.Sprintf("request %d (%q n=%d) denied with %+v, then the same request at the same instant got %+v: the denial was recorded",
					i, ev.Key, ev.N, res, again), nil
			}
		}
		last = proptest.Outcome{Event: ev, Res: res}
	}

	ev, r := last.Event, last.Res
	limit := strat.Limit()
	probe := func(rg *proptest.Rig, at time.Time, n int64) (fleetlimit.Result, error) {
		return rg.At(proptest.Event{At: at, Key: ev.Key, N: n})
	}
	// replay decides the last key's events again on a fresh rig.
	replay := func() (*proptest.Rig, error) {
		rg, err := proptest.NewRig(st, strat)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Key == ev.Key {
				if _, err := rg.At(e); err != nil {
					return nil, err
				}
			}
		}
		return rg, nil
	}
	desc := fmt.Sprintf("after the last request (%q n=%d at +%v) got %+v", ev.Key, ev.N, ev.At.Sub(s.Base), r)

	// Remaining is the cost that can still pass right now.
	if p, err := probe(main, ev.At, r.Remaining+1); err != nil || p.Allowed {
		return fmt.Sprintf("%s, Remaining+1 = %d at the same instant got %+v", desc, r.Remaining+1, p), err
	}
	if !r.Allowed && ev.N <= limit {
		if tight {
			if p, err := probe(main, ev.At.Add(r.RetryAfter-time.Microsecond), ev.N); err != nil || p.Allowed {
				return fmt.Sprintf("%s, the same request 1µs before RetryAfter was admitted: RetryAfter is not tight: %+v", desc, p), err
			}
		}
		if p, err := probe(main, ev.At.Add(r.RetryAfter), ev.N); err != nil || !p.Allowed {
			return fmt.Sprintf("%s, the same request retried exactly RetryAfter later was denied: %+v", desc, p), err
		}
	}
	if r.Remaining > 0 {
		rg, err := replay()
		if err != nil {
			return "", err
		}
		if p, err := probe(rg, ev.At, r.Remaining); err != nil || !p.Allowed || p.Remaining != 0 {
			return fmt.Sprintf("%s, a request of Remaining = %d at the same instant got %+v", desc, r.Remaining, p), err
		}
	}
	rg, err := replay()
	if err != nil {
		return "", err
	}
	if tight && r.ResetAfter > 0 {
		if p, err := probe(rg, ev.At.Add(r.ResetAfter-time.Microsecond), limit); err != nil || p.Allowed {
			return fmt.Sprintf("%s, the whole capacity passed 1µs before ResetAfter: ResetAfter is not tight: %+v", desc, p), err
		}
	}
	if p, err := probe(rg, ev.At.Add(r.ResetAfter), limit); err != nil || !p.Allowed || p.Remaining != 0 {
		return fmt.Sprintf("%s, the whole capacity %d exactly ResetAfter later got %+v: the key was not back at full capacity", desc, limit, p), err
	}
	return "", nil
}
