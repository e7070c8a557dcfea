package fleetlimit_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/big"
	"math/rand"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// leaseBackends: memory, miniredis and, under ./test.sh, the real server
// and the real Cluster.
func leaseBackends(t *testing.T) []proptest.Backend { return resetPeekBackends(t, proptest.Backends) }

// TestPropertyLeaseBound: K = 1..16 instances, each a limiter with leases
// of a random size (1 to 64) and max age, share one store (memory,
// miniredis, the real server, the Cluster) and decide a generated timeline
// on a virtual clock, each request sent to a random instance. For each
// leasing registry strategy it asserts the bound of docs/guarantees.md
// exactly as written, with H the most units the fleet holds in leases of
// one key: K·(size−1), or K·(size+⌊size/2⌋) for the half of the plans with
// lease-ahead (WithLeaseAhead); half the plans also adapt sizes from a
// random floor (WithLeaseFloor), size the largest:
//   - over-admission: a token bucket admits at most burst + rate·d/per + H
//     in any interval d; a fixed window at most limit + H in any aligned
//     window; a sliding log at most limit + H in any interval of length W
//     (sliding, not aligned); a sliding-window counter admits each request
//     only where the counter's own rule, applied to what was admitted
//     (spent) and relaxed by H, admits it: e µs into window i of W µs,
//     ⌈P·(W−e)/W⌉ + C <= limit + H, with P the units admitted in window
//     i−1 and C those admitted in window i up to and including it; and in
//     any interval of length W at most its own bound plus H,
//     2·limit − ⌈2·limit/W⌉ + H;
//   - under-admission: after every decision the store can still admit at
//     least what the admitted requests alone would leave, less the units
//     observed in leases (at most H; a model charges every admitted request
//     at its time, exactly); for all but the token bucket also at most that
//     plus H;
//   - the hand-back, exactly, for a sliding log or counter on its own:
//     after every decision the store can admit exactly what a ledger of
//     the leases taken (each charged at its time) and handed back (by the
//     rule docs/guarantees.md states, restated in the ledger) leaves;
//   - round trips: a round trip only when the instance's lease cannot
//     serve the request, and every lease takes its whole fair share;
//   - the fair share: a round trip that admits takes from the store at most
//     max(n, ⌊available/2⌋) units, available being what it held just before
//     (asserted as: it took at most max(n, what it left), which is the same
//     thing, and holds with a hand-back in the same round trip too).
//
// Composites (algorithm.All of 2 or 3 leasing registry strategies) meet
// each member's bound with the same H, and a round trip takes from every
// member at most max(n, ⌊A/2⌋), A the tightest member's available units
// after the hand-back (asserted as: it took from each at most max(n, what
// it left in the tightest)). Penalty boxes (around a leasing registry
// strategy or such a composite) meet the inner strategy's bounds, and
// lease ahead as every other strategy does (a lease taken ahead and denied
// is no strike: the Go rule and the Lua twin agree on it below, and
// TestLeaseAheadDenialIsNoStrike shows it step by step): a ban only
// denies; the under-admission is asserted at the moments the key is not
// banned (a ban withholds what the store holds, on purpose).
//
// On miniredis, the real server and the Cluster every Result must also
// equal the one the Go rule (store.Memory) gives on the same timeline: the
// lease mode's Lua twin agrees with its Go rule.
func TestPropertyLeaseBound(t *testing.T) {
	mem := proptest.Memory(t)
	leasing := leasingEntries(t)
	var every leaseCounts // over every strategy and backend
	defer func() {
		// The rarer moves of lease-ahead ran somewhere: a spend from the
		// newer lease retiring the older, a round trip keeping the newer
		// beside its own.
		if !t.Failed() && (every.retired == 0 || every.kept == 0) {
			t.Errorf("lease-ahead's rarer moves never ran: %+v", every)
		}
	}()
	for _, name := range []string{"token_bucket", "fixed_window", "sliding_window_log", "sliding_window_counter", "all", "penalty"} {
		t.Run(name, func(t *testing.T) {
			var all leaseCounts // over every backend (some run few cases)
			for _, b := range leaseBackends(t) {
				t.Run(b.Name, func(t *testing.T) {
					newStrat := func(r *rand.Rand) proptest.StratCase {
						switch name {
						case "token_bucket":
							return proptest.TokenBucketCase(proptest.RegistryEntry(t, name), b, r)
						case "all":
							return proptest.AllCaseOf(b, r, leasing)
						case "penalty":
							return proptest.PenaltyCaseOf(b, r, leasing)
						}
						return proptest.EntryCase(proptest.RegistryEntry(t, name), b, r)
					}
					g := proptest.ScenarioGen(b, newStrat, false)
					var seen leaseCounts
					proptest.Check(t, max(1, b.Cases/2), prop.ForAll(func(s proptest.Scenario) (string, error) {
						msg, outs, err := checkLeases(b.Store, s, &seen)
						if msg != "" || err != nil || b.Store == store.Store(mem) {
							return msg, err
						}
						_, want, err := checkLeases(mem, s, &leaseCounts{})
						if err != nil {
							return "", err
						}
						for i := range outs {
							if !proptest.SameResult(outs[i].Res, want[i].Res) {
								return fmt.Sprintf("request %d (%q n=%d at +%v): Lua %+v %+v, Go rule %+v %+v", i, outs[i].Key, outs[i].N, outs[i].At.Sub(s.Base),
									outs[i].Res, outs[i].Res.Limits(), want[i].Res, want[i].Res.Limits()), nil
							}
						}
						return "", nil
					}, g))
					t.Logf("leases taken ahead %d (retiring the older %d, denied %d), round trips keeping the newer %d, leases asking for less than size %d",
						seen.ahead, seen.retired, seen.denied, seen.kept, seen.adapted)
					all.ahead, all.retired, all.kept, all.adapted = all.ahead+seen.ahead, all.retired+seen.retired, all.kept+seen.kept, all.adapted+seen.adapted
					all.denied += seen.denied
				})
			}
			// Not vacuous: lease-ahead ran, and leases of adapted sizes,
			// for every strategy (penalty boxes too).
			every.retired, every.kept = every.retired+all.retired, every.kept+all.kept
			if all.adapted == 0 {
				t.Errorf("no lease asked for less than size: %+v", all)
			}
			if all.ahead == 0 {
				t.Errorf("no lease was taken ahead: %+v", all)
			}
		})
	}
}

// leaseCounts are what checkLeases saw of lease-ahead, over a property's
// cases.
type leaseCounts struct{ ahead, retired, kept, adapted, denied int }

// leasingEntries are the registry's strategies that lease, for the
// composites and penalty boxes of TestPropertyLeaseBound.
func leasingEntries(t *testing.T) []algorithm.Entry {
	var es []algorithm.Entry
	for _, e := range proptest.RegistryEntries(t) {
		s := e.New(10, time.Second)
		if _, ok := s.(algorithm.Leaser); ok && s.Script().Leases {
			es = append(es, e)
		}
	}
	require.NotEmpty(t, es)
	return es
}

// leaseParts are the strategies whose bounds a leased strategy meets: a
// plain strategy's own, a composite's members', a penalty box's inner
// strategy's.
func leaseParts(sc proptest.StratCase) []proptest.StratCase {
	switch {
	case sc.Inner != nil:
		return leaseParts(*sc.Inner)
	case sc.Members != nil:
		return sc.Members
	}
	return []proptest.StratCase{sc}
}

// partsAvailable is what each of leaseParts can still admit, from a peek
// at a cost of 1 (see available): a member of a composite that would admit
// a denied peek shows its figures uncharged.
func partsAvailable(peek fleetlimit.Result) []int64 {
	if len(peek.Limits()) == 0 {
		return []int64{available(peek)}
	}
	var out []int64
	for _, m := range peek.Limits() {
		a := m.Remaining
		if peek.Allowed {
			a++
		}
		out = append(out, a)
	}
	return out
}

// leasePlan is a scenario's fleet: K instances with leases of size and
// maxAge, and the instance each request goes to.
type leasePlan struct {
	K      int
	Size   int64
	MaxAge time.Duration
	To     []int
	Sweep  []bool // whether every instance sweeps its leases before the request
	Ahead  bool   // WithLeaseAhead
	Floor  int64  // WithLeaseFloor; 0: sizes fixed
}

func planFor(s proptest.Scenario, n int) leasePlan {
	h := fnv.New64a()
	fmt.Fprint(h, s.String())
	r := rand.New(rand.NewSource(int64(h.Sum64())))
	p := leasePlan{K: 1 + r.Intn(16), Size: []int64{1, 2, 3, 8, 64}[r.Intn(5)]}
	w := s.Strat.S.Window()
	p.MaxAge = max(algorithm.MinWindow, []time.Duration{w / 10, w / 2, w, 3 * w}[r.Intn(4)])
	for range n {
		p.To = append(p.To, r.Intn(p.K))
		p.Sweep = append(p.Sweep, r.Intn(3) == 0)
	}
	p.Ahead = r.Intn(2) == 0
	if r.Intn(2) == 0 && p.Size >= 2 {
		p.Floor = 2 + r.Int63n(p.Size-1)
	}
	return p
}

// want is the size of the lease an instance of p asks for after l (nil:
// none), at at — the rule of WithLeaseFloor, restated: fixed at size
// without a floor; else floor for a key's first; twice l's after a lease
// spent down to half of what it asked for within maxAge/8; half after one
// holding more than half; as many after any other; between floor and size.
func (p leasePlan) want(l *heldLease, at time.Time) int64 {
	if p.Floor == 0 || p.Floor >= p.Size {
		return p.Size
	}
	if l == nil {
		return p.Floor
	}
	age := at.Sub(l.at)
	switch {
	case l.left <= l.want/2 && age >= 0 && age < p.MaxAge/8:
		return min(p.Size, 2*l.want)
	case l.left > l.want/2:
		return max(p.Floor, l.want/2)
	}
	return l.want
}

// most is the most units one instance of p may hold of a key: size−1, or
// with lease-ahead size + ⌊size/2⌋ (WithLeaseAhead).
func (p leasePlan) most() int64 {
	if p.Ahead {
		return p.Size + p.Size/2
	}
	return p.Size - 1
}

func checkLeases(st store.Store, s proptest.Scenario, counts *leaseCounts) (string, []proptest.Outcome, error) {
	evs := s.Events()
	plan := planFor(s, len(evs))
	prefix := redistest.Prefix()
	var decidedBy fleetlimit.Decider
	opts := []fleetlimit.Option{fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithLeases(plan.Size, plan.MaxAge),
		fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) { decidedBy = e.DecidedBy }))}
	if plan.Ahead {
		opts = append(opts, fleetlimit.WithLeaseAhead())
	}
	if plan.Floor > 0 {
		opts = append(opts, fleetlimit.WithLeaseFloor(plan.Floor))
	}
	rigs := make([]*proptest.Rig, plan.K)
	sweeps := make([]func(time.Time), plan.K)
	for i := range rigs {
		r, err := proptest.NewRig(st, s.Strat.S, opts...)
		if err != nil {
			return "", nil, err
		}
		rigs[i], sweeps[i] = r, fleetlimit.SweepLeasesByHand(r.Limiter())
	}
	exact, err := proptest.NewRig(st, s.Strat.S, fleetlimit.WithKeyPrefix(prefix))
	if err != nil {
		return "", nil, err
	}
	held := int64(plan.K) * plan.most()
	parts := leaseParts(s.Strat)
	models := make([]*chargeModel, len(parts))
	for i, p := range parts {
		models[i] = newChargeModel(p)
	}
	ledger := newLeaseLedger(s.Strat) // nil but for a sliding log or counter on its own
	_, penalized := s.Strat.S.(interface{ Unwrap() algorithm.Strategy })
	// Each instance's leases of each key, older first, as observed; and
	// its lease table as the rule of WithLeases keeps it: entries, when
	// each key's newest lease was taken (a key with a lease, spent or not);
	// seen, when each key was decided exactly, its first round trip.
	leases := make([]map[string][]*heldLease, plan.K)
	entries, seen := make([]map[string]time.Time, plan.K), make([]map[string]time.Time, plan.K)
	waits := make([]int64, plan.K) // each instance's decisions that waited on a round trip
	for i := range leases {
		leases[i], entries[i], seen[i] = map[string][]*heldLease{}, map[string]time.Time{}, map[string]time.Time{}
	}
	young := func(since, at time.Time) bool { age := at.Sub(since); return age >= 0 && age < plan.MaxAge }
	serves := func(l *heldLease, at time.Time, n int64) bool { return l.left >= n && young(l.at, at) }
	var outs []proptest.Outcome
	for i, ev := range evs {
		if plan.Sweep[i] {
			for j, r := range rigs {
				r.SetClock(ev.At)
				sweeps[j](ev.At)
				for k, ls := range leases[j] {
					var keep []*heldLease
					for _, l := range ls {
						if young(l.at, ev.At) {
							keep = append(keep, l)
						} else {
							ledger.giveBack(k, l, ev.At) // handed back
						}
					}
					leases[j][k] = keep
				}
				for _, m := range []map[string]time.Time{entries[j], seen[j]} {
					for k, since := range m {
						if !young(since, ev.At) {
							delete(m, k) // forgotten
						}
					}
				}
			}
		}
		peek, err := exact.Peek(proptest.Event{At: ev.At, Key: ev.Key, N: 1})
		if err != nil {
			return "", nil, err
		}
		before, banPeek := partsAvailable(peek), peek
		inst := plan.To[i]
		mine := leases[inst][ev.Key]
		from := slices.IndexFunc(mine, func(l *heldLease) bool { return serves(l, ev.At, ev.N) }) // the lease that can serve, the older first; -1: none
		desc := fmt.Sprint(lefts(mine))
		res, err := rigs[inst].At(ev)
		if err != nil {
			return "", nil, err
		}
		fleetlimit.SettleLeases(rigs[inst].Limiter()) // a round trip taken ahead lands
		outs = append(outs, proptest.Outcome{Event: ev, Res: res})
		if peek, err = exact.Peek(proptest.Event{At: ev.At, Key: ev.Key, N: 1}); err != nil {
			return "", nil, err
		}
		after := partsAvailable(peek)
		where := fmt.Sprintf("request %d (%q n=%d at +%v) to instance %d of %d, leases of %d (floor %d) for %v (ahead %v), %v",
			i, ev.Key, ev.N, ev.At.Sub(s.Base), inst, plan.K, plan.Size, plan.Floor, plan.MaxAge, plan.Ahead, decidedBy)
		if len(before) != len(parts) || len(after) != len(parts) {
			return fmt.Sprintf("%s: a peek read %d and %d parts of %d", where, len(before), len(after), len(parts)), outs, nil
		}
		if res.Allowed {
			for _, m := range models {
				m.charge(ev)
			}
		}
		// A composite's parts are its members: its lease is judged by its
		// tightest member (the fewest available), and charges every member
		// alike; a plain strategy is its own one part.
		tightBefore, tightAfter := slices.Min(before), slices.Min(after)
		// fair checks that a round trip that took took units for a request
		// of cost n took its whole fair share and no more: at most max(n,
		// ⌊A/2⌋) of the A the tightest part held after the hand-back — so
		// it left every part at least what it took, and took from each that
		// less what it handed back — and (a hand-back only adds) at least
		// the share of what the tightest held before it.
		fair := func(took, n, want int64) string {
			if took > want {
				return fmt.Sprintf("%s: a lease took %d, more than it asked for, max(n, its size) = %d", where, took, want)
			}
			for j := range parts {
				if net := before[j] - after[j]; net > max(n, tightAfter) {
					return fmt.Sprintf("%s: the store (part %d, %s) went from %d to %d available: a lease took %d, more than the fair share (it left %d in the tightest part)",
						where, j, parts[j].Desc, before[j], after[j], net, tightAfter)
				}
			}
			if least := min(want, max(n, tightBefore/2)); took < least {
				return fmt.Sprintf("%s: a lease took %d of %d available, less than the fair share %d", where, took, tightBefore, least)
			}
			return ""
		}
		switch decidedBy {
		case fleetlimit.DecidedByLease:
			// Served in process: only from a live lease that holds n, the
			// older first.
			if from < 0 {
				return fmt.Sprintf("%s: admitted from a lease, but the instance's leases (%s) cannot serve it", where, desc), outs, nil
			}
			l := mine[from]
			l.left -= ev.N
			want := l.left
			if from == 0 && len(mine) == 2 {
				want += mine[1].left
			}
			if res.Remaining != want {
				return fmt.Sprintf("%s: Remaining %d, but the leases (%s before) hold %d", where, res.Remaining, desc, want), outs, nil
			}
			// Lease-ahead: a spend that leaves the last lease with at most
			// half of what it asked for takes the next, once per lease,
			// handing back the older if it was served by the newer.
			if !plan.Ahead || from != len(mine)-1 || l.left > l.want/2 || l.started {
				for j := range parts {
					if before[j] != after[j] {
						return fmt.Sprintf("%s: served from a lease with no round trip due, but the store (part %d) went from %d to %d available", where, j, before[j], after[j]), outs, nil
					}
				}
				break
			}
			l.started = true
			asked := plan.want(l, ev.At)
			if asked != plan.Size {
				counts.adapted++
			}
			counts.ahead++
			if from == 1 {
				counts.retired++
				ledger.giveBack(ev.Key, mine[0], ev.At)
				mine = mine[1:]
			}
			got := fleetlimit.LeaseLefts(rigs[inst].Limiter(), ev.Key)
			if len(got) == len(mine) {
				// Denied: only when the key has nothing left, or a penalty
				// box bans it (the exact peek denied, what it shows of the
				// store aside).
				if tightBefore > 0 && !(penalized && !banPeek.Allowed) {
					return fmt.Sprintf("%s: the lease taken ahead got nothing of %d available", where, tightBefore), outs, nil
				}
				counts.denied++
			} else if len(got) == len(mine)+1 {
				took := got[len(got)-1]
				ledger.add(ev.Key, ev.At, took)
				if msg := fair(took, 1, asked); msg != "" {
					return msg, outs, nil
				}
				mine = append(mine, &heldLease{left: took, at: ev.At, want: asked})
				entries[inst][ev.Key] = ev.At
			}
			leases[inst][ev.Key] = mine
		case fleetlimit.DecidedByStore:
			waits[inst]++
			// The round-trip bound: a round trip only when the leases
			// cannot serve the request.
			if from >= 0 {
				return fmt.Sprintf("%s: a round trip while the instance's leases (%s) held the cost", where, desc), outs, nil
			}
			// Leases only where they pay: a round trip of a key the
			// instance holds no lease of and decided none of exactly
			// within maxAge is exact — it takes nothing and holds nothing
			// (so no bound gets worse) — and the key's next within maxAge
			// takes a lease.
			_, leased := entries[inst][ev.Key]
			if since, ok := seen[inst][ev.Key]; !leased && (!ok || !young(since, ev.At)) {
				if res.Allowed {
					if took := res.Remaining - tightAfter + ev.N; took != ev.N {
						return fmt.Sprintf("%s: the key's first round trip on the instance took %d units, want an exact decision of %d", where, took, ev.N), outs, nil
					}
					ledger.add(ev.Key, ev.At, ev.N)
				}
				seen[inst][ev.Key] = ev.At
				break
			}
			delete(seen[inst], ev.Key)
			var newest *heldLease
			if len(mine) > 0 {
				newest = mine[len(mine)-1]
			}
			want := plan.want(newest, ev.At)
			if want != plan.Size {
				counts.adapted++
			}
			// The older lease is handed back in the round trip; the newer
			// (taken ahead) is kept if it is live, else handed back apart.
			var kept []*heldLease
			for j, l := range mine {
				if j == 1 && serves(l, ev.At, 1) {
					kept = append(kept, l)
					counts.kept++
				} else {
					ledger.giveBack(ev.Key, l, ev.At)
				}
			}
			mine = kept
			if res.Allowed {
				// The units the lease took: what it reports beyond the
				// store's (a composite reports its tightest member's).
				took := res.Remaining - tightAfter + ev.N
				ledger.add(ev.Key, ev.At, took)
				if msg := fair(took, ev.N, max(ev.N, want)); msg != "" {
					return msg, outs, nil
				}
				if took > ev.N {
					mine = append(mine, &heldLease{left: took - ev.N, at: ev.At, want: want})
				}
			}
			if len(mine) == 0 {
				delete(entries[inst], ev.Key)
			} else {
				entries[inst][ev.Key] = mine[len(mine)-1].at
			}
			leases[inst][ev.Key] = mine
		default:
			return fmt.Sprintf("%s: decided by %v with the store up", where, decidedBy), outs, nil
		}
		// The instance's leases are as followed from outside, and hold at
		// most what one instance may; the decisions that waited on a round
		// trip are its round trips.
		if got, want := fleetlimit.LeaseLefts(rigs[inst].Limiter(), ev.Key), lefts(leases[inst][ev.Key]); !slices.Equal(got, want) {
			return fmt.Sprintf("%s: the instance holds leases of %v, want %v (before: %s)", where, got, want, desc), outs, nil
		}
		if got := fleetlimit.LeaseWaits(rigs[inst].Limiter()); got != waits[inst] {
			return fmt.Sprintf("%s: %d decisions counted as waiting on a round trip, want %d", where, got, waits[inst]), outs, nil
		}
		// Under-admission: the store is short of what the admitted
		// requests alone would leave by at most the units held in leases
		// as observed (at most H), part by part; unless a penalty box may
		// be banning the key, when the peek shows nothing of the store.
		var inLeases int64
		for j := range leases {
			var mineHeld int64
			for _, l := range leases[j][ev.Key] {
				mineHeld += l.left
			}
			if mineHeld > plan.most() {
				return fmt.Sprintf("%s: instance %d holds %d units in leases, more than %d", where, j, mineHeld, plan.most()), outs, nil
			}
			inLeases += mineHeld
		}
		if inLeases > held {
			return fmt.Sprintf("%s: the fleet holds %d units in leases, more than H = %d", where, inLeases, held), outs, nil
		}
		if penalized && !peek.Allowed {
			continue
		}
		for j, m := range models {
			if floor := m.available(ev.Key, ev.At) - inLeases; after[j] < floor {
				return fmt.Sprintf("%s: the store (part %d, %s) can admit %d, less than the %d the admitted requests leave minus %d held in leases",
					where, j, parts[j].Desc, after[j], floor+inLeases, inLeases), outs, nil
			}
			if ceiling := m.available(ev.Key, ev.At) + held; parts[j].Name != "token_bucket" && after[j] > ceiling {
				return fmt.Sprintf("%s: the store (part %d, %s) can admit %d, more than the %d the admitted requests leave plus %d held in leases",
					where, j, parts[j].Desc, after[j], ceiling-held, held), outs, nil
			}
		}
		if ledger != nil {
			if want := max(0, ledger.available(ev.Key, ev.At)); after[0] != want {
				return fmt.Sprintf("%s: the store can admit %d; by the leases taken and handed back it should be %d", where, after[0], want), outs, nil
			}
		}
	}
	if msg, err := checkClosed(s, evs, rigs, exact, parts, models); msg != "" || err != nil {
		return msg, outs, err
	}
	for j, p := range parts {
		if msg := leaseBound(p, outs, held); msg != "" {
			return fmt.Sprintf("K=%d, leases of %d: part %d (%s): %s", plan.K, plan.Size, j, p.Desc, msg), outs, nil
		}
	}
	return "", outs, nil
}

// exactHandBack are the strategies whose every unspent unit is back once
// every instance has closed: the store then holds at least what the
// admitted requests alone leave, with no slack for leases.
var exactHandBack = map[string]bool{"token_bucket": true, "fixed_window": true}

// checkClosed closes every instance at the last request's time, handing
// back every lease, and then asserts that no unit of an exactHandBack part
// is lost: each key's store can admit at least what the model leaves
// (unless a penalty box bans the key).
func checkClosed(s proptest.Scenario, evs []proptest.Event, rigs []*proptest.Rig, exact *proptest.Rig, parts []proptest.StratCase, models []*chargeModel) (string, error) {
	if len(evs) == 0 {
		return "", nil
	}
	end := evs[len(evs)-1].At
	for _, r := range rigs {
		if err := r.Close(end); err != nil {
			return "", err
		}
	}
	keys := map[string]bool{}
	for _, ev := range evs {
		if keys[ev.Key] {
			continue
		}
		keys[ev.Key] = true
		peek, err := exact.Peek(proptest.Event{At: end, Key: ev.Key, N: 1})
		if err != nil {
			return "", err
		}
		if _, penalized := s.Strat.S.(interface{ Unwrap() algorithm.Strategy }); penalized && !peek.Allowed {
			continue
		}
		after := partsAvailable(peek)
		for j, m := range models {
			if want := m.available(ev.Key, end); exactHandBack[parts[j].Name] && after[j] < want {
				return fmt.Sprintf("after every instance closed at +%v, %q (%s) can admit %d, less than the %d the admitted requests leave: units lost",
					end.Sub(s.Base), ev.Key, parts[j].Desc, after[j], want), nil
			}
		}
	}
	return "", nil
}

// leaseBound reports where the admitted requests of outs (in time order)
// exceed the over-admission bound of docs/guarantees.md for the strategy of
// sc, H = held (see TestPropertyLeaseBound), or "".
func leaseBound(sc proptest.StratCase, outs []proptest.Outcome, held int64) string {
	limit, w := sc.S.Limit(), sc.S.Window().Microseconds()
	switch sc.Name {
	case "token_bucket":
		return proptest.TokenBucketBound(outs, sc.Rate, sc.Per, sc.Burst+held)
	case "fixed_window":
		count := map[string]int64{}
		for _, o := range outs {
			if o.Res.Allowed {
				k := fmt.Sprintf("%s/%d", o.Key, o.At.UnixMicro()/w)
				if count[k] += o.N; count[k] > limit+held {
					return fmt.Sprintf("aligned window %s admitted %d > limit %d + %d", k, count[k], limit, held)
				}
			}
		}
	case "sliding_window_log":
		if most, from, to := proptest.MaxAdmittedIn(outs, sc.S.Window()); most > limit+held {
			return fmt.Sprintf("admitted %d from %s to %s, within %v: > limit %d + %d",
				most, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), sc.S.Window(), limit, held)
		}
	case "sliding_window_counter":
		// The counter's own bound over any interval of length W, plus H.
		bound := 2*limit - (2*limit+w-1)/w + held
		if most, from, to := proptest.MaxAdmittedIn(outs, sc.S.Window()); most > bound {
			return fmt.Sprintf("admitted %d from %s to %s, within %v: > 2·limit − ⌈2·limit/W⌉ + %d = %d",
				most, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), sc.S.Window(), held, bound)
		}
		m := newChargeModel(sc)
		for _, o := range outs {
			if o.Res.Allowed {
				m.charge(o.Event)
				if est := limit - m.available(o.Key, o.At); est > limit+held {
					return fmt.Sprintf("request %q n=%d at %s: the estimate of what was admitted is %d > limit %d + %d",
						o.Key, o.N, o.At.Format(time.RFC3339Nano), est, limit, held)
				}
			}
		}
	default:
		return "no lease bound for " + sc.Name
	}
	return ""
}

// newLeaseLedger restates what the store must hold for a sliding log or a
// counter (nil for another strategy), from what the test observes: every
// lease's units charged at its time (add), and the units an instance's
// lease did not spend given back by the strategy's hand-back rule
// (giveBack) at its next round trip for the key or at the sweep that finds
// it maxAge old.
func newLeaseLedger(sc proptest.StratCase) *chargeModel {
	if sc.Name != "sliding_window_log" && sc.Name != "sliding_window_counter" {
		return nil
	}
	return newChargeModel(sc)
}

// heldLease is an instance's lease of a key as the test observes it: the
// units it holds (a round trip's Remaining beyond the store's, less what
// was spent since) and when it was taken.
type heldLease struct {
	left    int64
	at      time.Time
	started bool  // a round trip to take the next lease ahead was started for it
	want    int64 // the size it asked for (leasePlan.want)
}

// lefts is what each of ls holds.
func lefts(ls []*heldLease) []int64 {
	var out []int64
	for _, l := range ls {
		out = append(out, l.left)
	}
	return out
}

// available is the whole units a key can still admit, from a peek at a
// cost of 1: its Remaining, plus the unit when the peek admits it.
func available(peek fleetlimit.Result) int64 {
	if peek.Allowed {
		return peek.Remaining + 1
	}
	return peek.Remaining
}

// chargeModel is what the admitted requests alone would leave in the
// store: every admitted request charged at its time, with no capacity
// check, by the strategy's own arithmetic.
type chargeModel struct {
	sc    proptest.StratCase
	debt  map[string]*big.Rat // token bucket: tokens owed
	last  map[string]time.Time
	count map[string]int64           // fixed window, counter: key/window -> units
	log   map[string]map[int64]int64 // sliding log: key -> µs -> units admitted then
}

func newChargeModel(sc proptest.StratCase) *chargeModel {
	return &chargeModel{sc: sc, debt: map[string]*big.Rat{}, last: map[string]time.Time{}, count: map[string]int64{},
		log: map[string]map[int64]int64{}}
}

func (m *chargeModel) refill(key string, at time.Time) *big.Rat {
	d, ok := m.debt[key]
	if !ok {
		d = new(big.Rat)
		m.debt[key] = d
	}
	if last, ok := m.last[key]; ok && at.After(last) {
		us := at.UnixMicro() - last.UnixMicro()
		d.Sub(d, big.NewRat(m.sc.Rate*us, m.sc.Per.Microseconds()))
		if d.Sign() < 0 {
			d.SetInt64(0)
		}
	}
	m.last[key] = at
	return d
}

func (m *chargeModel) windowKey(key string, idx int64) string {
	return fmt.Sprintf("%s/%d", key, idx)
}

// window is the index of the aligned window at holds, and how many µs into
// it at is.
func (m *chargeModel) window(at time.Time) (idx, e int64) {
	w := m.sc.S.Window().Microseconds()
	return at.UnixMicro() / w, at.UnixMicro() % w
}

func (m *chargeModel) charge(ev proptest.Event) { m.add(ev.Key, ev.At, ev.N) }

// add charges n units to key at at; on a nil model it does nothing.
func (m *chargeModel) add(key string, at time.Time, n int64) {
	if m == nil {
		return
	}
	switch m.sc.Name {
	case "token_bucket":
		d := m.refill(key, at)
		d.Add(d, big.NewRat(n, 1))
	case "sliding_window_log":
		if m.log[key] == nil {
			m.log[key] = map[int64]int64{}
		}
		m.log[key][at.UnixMicro()] += n
	default:
		idx, _ := m.window(at)
		m.count[m.windowKey(key, idx)] += n
	}
}

// giveBack is the hand-back at now of l, a lease of key, by the rule
// docs/guarantees.md states, restated independently: its l.left units come
// off what was charged at l.at — a sliding log's units of that instant
// while they are live, a counter's count of that window while it is the
// current or the previous one — at most to 0. On a nil model, or for no
// lease, it does nothing.
func (m *chargeModel) giveBack(key string, l *heldLease, now time.Time) {
	if m == nil || l == nil || l.left <= 0 {
		return
	}
	at, n := l.at, l.left
	idx, _ := m.window(at)
	nowIdx, _ := m.window(now)
	switch m.sc.Name {
	case "sliding_window_log":
		if now.Sub(at) < m.sc.S.Window() {
			m.log[key][at.UnixMicro()] -= min(n, m.log[key][at.UnixMicro()])
		}
	case "sliding_window_counter":
		if idx == nowIdx || idx == nowIdx-1 {
			k := m.windowKey(key, idx)
			m.count[k] -= min(n, m.count[k])
		}
	default:
		panic("no hand-back model for " + m.sc.Name)
	}
}

// available is the whole units the model leaves at at (negative when it
// has charged past the capacity).
func (m *chargeModel) available(key string, at time.Time) int64 {
	limit := m.sc.S.Limit()
	idx, e := m.window(at)
	switch m.sc.Name {
	case "token_bucket":
		left := new(big.Rat).Sub(big.NewRat(m.sc.Burst, 1), m.refill(key, at))
		q := new(big.Int).Div(left.Num(), left.Denom()) // floor, Euclidean for a positive denominator
		return q.Int64()
	case "sliding_window_log":
		// Units admitted at or before at − W have left the window.
		live := limit
		for us, n := range m.log[key] {
			if at.Sub(time.UnixMicro(us)) < m.sc.S.Window() {
				live -= n
			}
		}
		return live
	case "sliding_window_counter":
		// The counter's estimate: the previous window's count weighted by
		// the share of it [at − W, at) still covers, rounded up, plus the
		// current window's.
		w := m.sc.S.Window().Microseconds()
		prev := big.NewRat(m.count[m.windowKey(key, idx-1)]*(w-e), w)
		weighted := new(big.Int).Div(new(big.Int).Add(prev.Num(), new(big.Int).Sub(prev.Denom(), big.NewInt(1))), prev.Denom())
		return limit - m.count[m.windowKey(key, idx)] - weighted.Int64()
	}
	return limit - m.count[m.windowKey(key, idx)]
}

// Leases step by step on a virtual clock: the fair share, the hand-back at
// the next round trip after maxAge, the local admissions the observer sees
// as DecidedByLease, Peek from the lease, Close handing back.
func TestLeaseSteps(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			p := redistest.Prefix()
			var by []fleetlimit.Decider
			newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, append([]fleetlimit.Option{
					fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(clock.Now), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
				require.NoError(t, err)
				return l
			}
			l := fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(4, time.Minute),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) { by = append(by, e.DecidedBy) }))))
			exact := newLim()
			avail := func() int64 {
				res, err := exact.Peek(bg, "u", 1)
				require.NoError(t, err)
				return available(res)
			}
			// 10 available: the lease takes min(4, max(1, 5)) = 4.
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Hour}, res, "the store's 6 and the lease's 3")
			require.Equal(t, int64(6), avail())
			// Two more from the lease: no round trip.
			for want := int64(2); want >= 1; want-- {
				res, err = l.Allow(bg, "u")
				require.NoError(t, err)
				require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 10, Remaining: want, ResetAfter: time.Hour}, res)
			}
			// Peek answers from the lease and spends nothing.
			res, err = l.Peek(bg, "u", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, int64(6), avail())
			require.Equal(t, []fleetlimit.Decider{fleetlimit.DecidedByStore, fleetlimit.DecidedByLease, fleetlimit.DecidedByLease}, by)
			// A minute later the lease has aged out: the next request hands
			// back its 1 unit (7 available) and leases min(4, 3) = 3.
			clock.Set(proptest.Epoch.Add(time.Minute))
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, int64(4), avail(), "7 after the hand-back, less a lease of 3")
			// Close hands back the 2 unspent: the store is short of exactly
			// the 4 admitted.
			require.NoError(t, l.Close())
			require.Equal(t, int64(10-4), avail())
		})
	}
}

func TestWithLeasesRejects(t *testing.T) {
	st := stores.Memory(t)
	for _, c := range []struct {
		s    algorithm.Strategy
		opts []fleetlimit.Option
		what string
	}{
		{algorithm.All(algorithm.TokenBucket(1, time.Second, 5), noLease{algorithm.FixedWindow(10, time.Second)}), []fleetlimit.Option{fleetlimit.WithLeases(4, time.Second)}, "its member 1"},
		{noLease{algorithm.FixedWindow(10, time.Second)}, []fleetlimit.Option{fleetlimit.WithLeases(4, time.Second), fleetlimit.WithPenalty(1, time.Second, time.Second, time.Second)}, "cannot lease"},
		{algorithm.All(algorithm.TokenBucket(1, time.Second, 5), noLease{algorithm.FixedWindow(10, time.Second)}), []fleetlimit.Option{fleetlimit.WithLeases(4, time.Second), fleetlimit.WithPenalty(1, time.Second, time.Second, time.Second)}, "its member 1"},
		{algorithm.FixedWindow(10, time.Second), []fleetlimit.Option{fleetlimit.WithLeases(0, time.Second)}, "lease size"},
		{algorithm.FixedWindow(10, time.Second), []fleetlimit.Option{fleetlimit.WithLeases(4, 0)}, "max age"},
		{algorithm.FixedWindow(10, time.Second), []fleetlimit.Option{fleetlimit.WithLeases(4, time.Millisecond-time.Microsecond)}, "max age"},
		{algorithm.FixedWindow(10, time.Second), []fleetlimit.Option{fleetlimit.WithLeases(-1, time.Second)}, "lease size"},
		{noLease{algorithm.FixedWindow(10, time.Second)}, []fleetlimit.Option{fleetlimit.WithLeases(4, time.Second)}, "cannot lease"},
	} {
		_, err := fleetlimit.New(c.s, st, c.opts...)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, c.s.Name())
		require.ErrorContains(t, err, c.what)
	}
	// Composites of leasing members, and penalty boxes around leasing
	// strategies, lease.
	for _, s := range []algorithm.Strategy{
		algorithm.All(algorithm.TokenBucket(1, time.Second, 5), algorithm.FixedWindow(10, time.Second)),
		algorithm.Penalize(algorithm.FixedWindow(10, time.Second), algorithm.Penalty{After: 1, Within: time.Second, Ban: time.Second, MaxBan: time.Second}),
	} {
		_, err := fleetlimit.New(s, stores.Memory(t), fleetlimit.WithLeases(4, time.Second))
		require.NoError(t, err, s.Name())
	}
	_, err := fleetlimit.New(algorithm.All(algorithm.TokenBucket(1, time.Second, 5), algorithm.FixedWindow(10, time.Second)), stores.Memory(t),
		fleetlimit.WithLeases(4, time.Second), fleetlimit.WithPenalty(1, time.Second, time.Second, time.Second))
	require.NoError(t, err)
	_, err = fleetlimit.New(algorithm.FixedWindow(10, time.Second), noLeaseStore{st}, fleetlimit.WithLeases(4, time.Second))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	require.ErrorContains(t, err, "cannot lend")
}

// noLeaseStore is a store that cannot lease.
type noLeaseStore struct{ s store.Store }

func (n noLeaseStore) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	return n.s.Decide(ctx, req)
}
func (n noLeaseStore) Close() error { return nil }

// A fixed window takes a lease's units back only in the window the lease
// was taken in: a lease from the window before an edge, handed back after
// it, must not lower the new window's count, which it never charged.
func TestLeaseHandBackStaysInItsWindow(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			edge := proptest.EdgeAfter(proptest.Epoch, time.Hour)
			clock.Set(edge.Add(-time.Second))
			p := redistest.Prefix()
			newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, append([]fleetlimit.Option{
					fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(clock.Now), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
				require.NoError(t, err)
				return l
			}
			l, exact := fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(4, time.Minute))), newLim()
			res, err := l.Allow(bg, "u") // a lease of 4 in the old window, 3 unspent
			require.NoError(t, err)
			require.True(t, res.Allowed)
			clock.Set(edge.Add(time.Minute))
			res, err = exact.AllowN(bg, "u", 5) // 5 of the new window's 10
			require.NoError(t, err)
			require.True(t, res.Allowed)
			// The stale lease's 3 are not given back: 5 available, a lease
			// of max(1, 5/2) = 2 leaves 3.
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			peek, err := exact.Peek(bg, "u", 1)
			require.NoError(t, err)
			require.Equal(t, int64(3), available(peek))
		})
	}
}

// leaseRig is a leasing limiter and an exact one of strategy s over one key
// prefix of st, on one virtual clock.
type leaseRig struct {
	clock         *fakeclock.Clock
	leased, exact *fleetlimit.Limiter
}

func newLeaseRig(t *testing.T, st store.Store, s algorithm.Strategy, start time.Time, size int64, maxAge time.Duration) *leaseRig {
	t.Helper()
	r := &leaseRig{clock: &fakeclock.Clock{}}
	r.clock.Set(start)
	p := redistest.Prefix()
	newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
		l, err := fleetlimit.New(s, st, append([]fleetlimit.Option{
			fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(r.clock.Now), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
		require.NoError(t, err)
		return l
	}
	r.leased, r.exact = fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(size, maxAge))), newLim()
	return r
}

// at sets the clock to start + d.
func (r *leaseRig) at(start time.Time, d time.Duration) { r.clock.Set(start.Add(d)) }

// allow admits n through l, failing t if it is denied.
func (r *leaseRig) allow(t *testing.T, l *fleetlimit.Limiter, n int64) {
	t.Helper()
	res, err := l.AllowN(bg, "u", n)
	require.NoError(t, err)
	require.True(t, res.Allowed, "%+v", res)
}

// available is what the key can still admit, by the exact limiter's peek.
func (r *leaseRig) available(t *testing.T) int64 {
	t.Helper()
	res, err := r.exact.Peek(bg, "u", 1)
	require.NoError(t, err)
	return available(res)
}

// A sliding log takes back only the units of the lease being handed back
// (those admitted at its instant), never newer units that other requests
// were charged, and only while they still count.
func TestSlidingLogLeaseHandBack(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			t0 := proptest.Epoch
			r := newLeaseRig(t, st, algorithm.SlidingWindowLog(10, time.Hour), t0, 4, time.Minute)
			r.allow(t, r.leased, 1) // a lease of min(4, max(1, 10/2)) = 4 at t0, 3 unspent
			r.at(t0, time.Second)
			r.allow(t, r.exact, 2) // 2 newer units: 4 available
			require.Equal(t, int64(4), r.available(t))
			// The lease has aged out: the next request hands back its 3
			// units of t0 (7 available) and leases min(4, max(1, 7/2)) = 3.
			r.at(t0, time.Minute)
			r.allow(t, r.leased, 1)
			require.Equal(t, int64(4), r.available(t))
			// An hour after t0 its one spent unit has left the window; the
			// 2 units of t0+1s and the lease of 3 at t0+1m still count. Had
			// the hand-back taken the 3 newest units instead (2 of them
			// not the lease's), 7 would be available.
			r.at(t0, time.Hour)
			require.Equal(t, int64(10-2-3), r.available(t))
			// Close hands back the 2 unspent units of t0+1m, and only them.
			require.NoError(t, r.leased.Close())
			require.Equal(t, int64(10-2-1), r.available(t))
			// A lease whose units have left the window gives back nothing:
			// a lease at t0+1h (of max(1, 7/2) = 3, 2 unspent) is handed
			// back at t0+2h, after the 2 units of t0+1h+1s that must stay.
			r.allow(t, r.leased, 1)
			r.at(t0, time.Hour+time.Second)
			r.allow(t, r.exact, 2)
			r.at(t0, 2*time.Hour+time.Second/2) // the lease's units have gone
			require.NoError(t, r.leased.Close())
			require.Equal(t, int64(10-2), r.available(t))
		})
	}
}

// A sliding-window counter takes a lease's unspent units back off the
// count of the window the lease was taken in: the current one's, or the
// previous one's while it still weighs; never another window's.
func TestCounterLeaseHandBack(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			edge := proptest.EdgeAfter(proptest.Epoch, time.Hour)
			r := newLeaseRig(t, st, algorithm.SlidingWindowCounter(10, time.Hour), edge, 4, time.Minute)
			// Window i: a lease of 4 at 6 minutes before its end, 3 unspent.
			r.at(edge, 54*time.Minute)
			r.allow(t, r.leased, 1)
			// 6 minutes into window i+1 the lease (aged out) hands back its
			// 3 to window i's count, which weighs 54/60 here: prev 4 → 1,
			// weighing ⌈54/60⌉ = 1; 9 available; a lease of min(4, 4) = 4.
			// (Kept in prev, its 3 would weigh ⌈4·54/60⌉ = 4: 6 available.)
			r.at(edge, time.Hour+6*time.Minute)
			r.allow(t, r.leased, 1)
			require.Equal(t, int64(10-1-4), r.available(t))
			// A refund takes the current window's 4 off (the lease's, as it
			// happens); the hand-back of its 3 then finds nothing left in
			// window i+1 and must not spill onto window i's 1 (a refund
			// would): 9 available, a lease of min(4, 4) = 4.
			_, err := r.exact.Refund(bg, "u", 4)
			require.NoError(t, err)
			require.Equal(t, int64(9), r.available(t))
			r.at(edge, time.Hour+8*time.Minute)
			r.allow(t, r.leased, 1)
			require.Equal(t, int64(9-4), r.available(t))
			// Two windows later window i+1's count weighs nothing: the
			// lease's 3 are not given back to the count of window i+3.
			r.at(edge, 3*time.Hour)
			r.allow(t, r.exact, 6)
			require.Equal(t, int64(4), r.available(t))
			require.NoError(t, r.leased.Close())
			require.Equal(t, int64(4), r.available(t))
		})
	}
}

// Leases under real concurrency and the store's clock (Redis TIME, or the
// memory store's): K = 4 instances with leases of 8 share a token bucket of
// 100 per hour; 8 goroutines send 60 requests each to random instances.
// The fleet admits at most burst + the refill + H (K·(size−1), with
// lease-ahead K·(size + ⌊size/2⌋)), and once every
// instance has closed (handing its leases back) the store is short of
// exactly what was admitted, less what refilled.
func TestLeasesConcurrent(t *testing.T) {
	const k, size, burst = 4, 8, 100
	for name, st := range stores.All(t) {
		for _, ahead := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ahead=%v", name, ahead), func(t *testing.T) {
				p := redistest.Prefix()
				newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
					l, err := fleetlimit.New(algorithm.TokenBucket(1, time.Hour, burst), st, append([]fleetlimit.Option{
						fleetlimit.WithKeyPrefix(p), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
					require.NoError(t, err)
					return l
				}
				var fleet [k]*fleetlimit.Limiter
				held := int64(k * (size - 1))
				for i := range fleet {
					if ahead {
						fleet[i], held = newLim(fleetlimit.WithLeases(size, time.Hour), fleetlimit.WithLeaseAhead()), k*(size+size/2)
					} else {
						fleet[i] = newLim(fleetlimit.WithLeases(size, time.Hour))
					}
				}
				start := time.Now()
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewSource(int64(g)))
						for range 60 {
							res, err := fleet[r.Intn(k)].Allow(bg, "hot")
							if err != nil {
								t.Error(err)
								return
							}
							if res.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				for _, l := range fleet {
					require.NoError(t, l.Close())
				}
				refill := int64(time.Since(start)/time.Hour) + 1
				require.LessOrEqual(t, admitted.Load(), burst+refill+held)
				peek, err := newLim().Peek(bg, "hot", 1)
				require.NoError(t, err)
				require.GreaterOrEqual(t, available(peek), burst-admitted.Load(), "units lost after every lease was handed back")
				require.LessOrEqual(t, available(peek), burst-admitted.Load()+refill)
			})
		}
	}
}

// BenchmarkLeases: one hot key that never runs out (a token bucket of 10^9
// per second), without leases and with leases of 32, 64 and 1,024, of 64
// and 1,024 taken ahead (WithLeaseAhead), and of 2 to 1,024 taken ahead
// (WithLeaseFloor), on
// memory, miniredis and the real server, from 1 goroutine and from 64.
// "store-calls/op" is the round trips per decision; "waited/op" the
// decisions that waited on a round trip (their own or another's), per
// decision.
func BenchmarkLeases(b *testing.B) {
	type config struct {
		name  string
		size  int64
		ahead bool
		floor int64
	}
	configs := []config{{"size=0", 0, false, 0}, {"size=32", 32, false, 0}, {"size=64", 64, false, 0},
		{"size=64+ahead", 64, true, 0}, {"size=1024", 1024, false, 0}, {"size=1024+ahead", 1024, true, 0}, {"size=2-1024+ahead", 1024, true, 2}}
	for _, name := range []string{"memory", "miniredis", "redis"} {
		for _, cf := range configs {
			for _, procs := range []int{1, 64} {
				b.Run(fmt.Sprintf("%s/%s/goroutines=%d", name, cf.name, procs), func(b *testing.B) {
					var st store.Store
					switch name {
					case "memory":
						st = stores.Memory(b)
					case "miniredis":
						_, c := redistest.Mini(b)
						st = stores.Redis(b, c)
					case "redis":
						st = stores.Redis(b, redistest.Real(b))
					}
					var storeCalls atomic.Int64
					opts := []fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10 * time.Second),
						fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
							if e.DecidedBy == fleetlimit.DecidedByStore {
								storeCalls.Add(1)
							}
						}))}
					if cf.size > 0 {
						opts = append(opts, fleetlimit.WithLeases(cf.size, time.Second))
					}
					if cf.ahead {
						opts = append(opts, fleetlimit.WithLeaseAhead())
					}
					if cf.floor > 0 {
						opts = append(opts, fleetlimit.WithLeaseFloor(cf.floor))
					}
					l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000), st, opts...)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					b.SetParallelism(max(1, procs/runtime.GOMAXPROCS(0)))
					b.ResetTimer()
					if procs == 1 {
						for b.Loop() {
							if res, err := l.Allow(bg, "hot"); err != nil || !res.Allowed {
								b.Fatalf("%+v, %v", res, err)
							}
						}
					} else {
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								if res, err := l.Allow(bg, "hot"); err != nil || !res.Allowed {
									b.Errorf("%+v, %v", res, err)
									return
								}
							}
						})
					}
					b.StopTimer()
					b.ReportMetric(float64(storeCalls.Load())/float64(b.N), "store-calls/op")
					if cf.size > 0 {
						b.ReportMetric(float64(fleetlimit.LeaseWaits(l))/float64(b.N), "waited/op")
						if err := l.Close(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkLeaseLocalPath: a decision served from a lease, the path that
// makes no round trip: one key, a lease of 2^20 units of a bucket that
// never runs out, memory store, no observer, 1 goroutine.
func BenchmarkLeaseLocalPath(b *testing.B) {
	l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000), stores.Memory(b),
		fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithLeases(1<<20, time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := l.Allow(bg, "hot")
		if err != nil || !res.Allowed {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}

// TestLeaseSweepReturnsStrandedUnits: an instance that takes leases and
// then goes quiet does not keep their units from the fleet: its sweep
// (the real timer, judging ages by the limiter's clock — here a virtual
// one, so that nothing ages before the test says) hands them back once
// they are maxAge old and forgets the leases, so a limiter that has seen
// many keys holds no lease of a key it has not seen for maxAge.
func TestLeaseSweepReturnsStrandedUnits(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			p := redistest.Prefix()
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			const maxAge = 20 * time.Millisecond
			quiet, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(clock.Now),
				fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithLeases(8, maxAge))
			require.NoError(t, err)
			fleetlimit.LeaseFromTheFirst(quiet)
			exact, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(clock.Now),
				fleetlimit.WithTimeout(proptest.Timeout))
			require.NoError(t, err)
			avail := func(key string) int64 {
				res, err := exact.Peek(bg, key, 1)
				require.NoError(t, err)
				return available(res)
			}
			keys := make([]string, 200)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
				res, err := quiet.Allow(bg, keys[i])
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			time.Sleep(3 * maxAge) // the timer fires, on the virtual clock nothing is old
			require.Equal(t, 200, fleetlimit.LeasesHeld(quiet))
			for _, k := range keys {
				require.Equal(t, int64(10-5), avail(k), "%s: the lease took min(8, max(1, ⌊10/2⌋)) = 5", k)
			}
			clock.Set(proptest.Epoch.Add(maxAge)) // every lease is maxAge old: the next sweep returns them
			require.Eventually(t, func() bool {
				for _, k := range keys {
					if avail(k) != 10-1 {
						return false
					}
				}
				return true
			}, 20*time.Second, time.Millisecond, "the 4 unspent units of each lease are back")
			require.Equal(t, 0, fleetlimit.LeasesHeld(quiet), "the sweep forgets every lease maxAge old")
			// The limiter stays usable, and a new lease arms a new sweep.
			res, err := quiet.Allow(bg, keys[0])
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, 1, fleetlimit.LeasesHeld(quiet))
			clock.Set(proptest.Epoch.Add(2 * maxAge))
			require.Eventually(t, func() bool { return avail(keys[0]) == 10-2 }, 20*time.Second, time.Millisecond)
			require.Equal(t, 0, fleetlimit.LeasesHeld(quiet))
		})
	}
}

// A flood of one-shot keys with leases, on every store: each key's one
// request is an exact decision (one round trip, DecidedByStore, exactly its
// own unit charged: no lease holds units of it), the limiter holds no
// lease, and it remembers the keys it decided exactly only until the sweep
// finds them maxAge old — at most the keys first seen within the last
// 9/8·maxAge when the sweep runs every maxAge/8, as its timer does at the
// least. A key's second request within maxAge takes a lease.
func TestLeaseFloodOfOneShotKeys(t *testing.T) {
	const (
		maxAge  = time.Second
		step    = maxAge / 8
		perStep = 50
		steps   = 24 // 3·maxAge
	)
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			p := redistest.Prefix()
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			var byStore, byLease int
			l, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(clock.Now),
				fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithLeases(8, maxAge),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
					switch e.DecidedBy {
					case fleetlimit.DecidedByStore:
						byStore++
					case fleetlimit.DecidedByLease:
						byLease++
					}
				})))
			require.NoError(t, err)
			sweep := fleetlimit.SweepLeasesByHand(l)
			exact, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(clock.Now),
				fleetlimit.WithTimeout(proptest.Timeout))
			require.NoError(t, err)
			for s := range steps {
				at := proptest.Epoch.Add(time.Duration(s) * step)
				clock.Set(at)
				sweep(at)
				for i := range perStep {
					res, err := l.Allow(bg, fmt.Sprintf("k%d-%d", s, i))
					require.NoError(t, err)
					require.True(t, res.Allowed)
					require.Equal(t, int64(9), res.Remaining, "an exact decision's Remaining is the store's")
				}
				require.Zero(t, fleetlimit.LeasesHeld(l), "step %d: a lease of a key seen once", s)
				require.LessOrEqual(t, fleetlimit.LeaseKeysSeen(l), 9*perStep, "step %d: more keys remembered than seen within 9/8·maxAge", s)
				require.GreaterOrEqual(t, fleetlimit.LeaseKeysSeen(l), min(s+1, 8)*perStep, "step %d: a key younger than maxAge forgotten", s)
			}
			require.Equal(t, steps*perStep, byStore, "one round trip per one-shot key")
			require.Zero(t, byLease)
			res, err := exact.Peek(bg, "k0-0", 1)
			require.NoError(t, err)
			require.Equal(t, int64(10-1), available(res), "the store charged the key's one unit and holds nothing for a lease")
			end := proptest.Epoch.Add(steps*step + maxAge)
			clock.Set(end)
			sweep(end)
			require.Zero(t, fleetlimit.LeaseKeysSeen(l), "every key maxAge old is forgotten")

			// Repeat traffic: the second request within maxAge takes a lease
			// (min(8, max(1, ⌊(10−1)/2⌋)) = 4 units), the third spends it.
			for i, want := range []fleetlimit.Decider{fleetlimit.DecidedByStore, fleetlimit.DecidedByStore, fleetlimit.DecidedByLease} {
				byStore, byLease = 0, 0
				res, err := l.Allow(bg, "hot")
				require.NoError(t, err)
				require.True(t, res.Allowed)
				require.Equal(t, want == fleetlimit.DecidedByLease, byLease == 1, "request %d", i)
			}
			require.Equal(t, 1, fleetlimit.LeasesHeld(l))
			require.Zero(t, fleetlimit.LeaseKeysSeen(l), "a leased key is no longer remembered as seen")
			res, err = exact.Peek(bg, "hot", 1)
			require.NoError(t, err)
			require.Equal(t, int64(10-1-4), available(res))
			require.NoError(t, l.Close())
		})
	}
}
