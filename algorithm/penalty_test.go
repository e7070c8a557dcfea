package algorithm_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/store"
)

// penaltyBackends: memory, miniredis and, under ./test.sh, the real servers
// and clusters of Redis and Valkey (proptest.RealNames), from backends
// (proptest.Backends, or proptest.ExpiringBackends for a test that reads
// TTLs).
func penaltyBackends(t *testing.T, backends func(*testing.T, ...string) []proptest.Backend) []proptest.Backend {
	names := []string{"memory", "miniredis"}
	names = append(names, proptest.RealNames(t)...)
	return backends(t, names...)
}

// TestPropertyPenaltyTwinAgreement: a penalty box's Go rule (store.Memory)
// and its Lua script (the inner strategy's script wrapped, then
// scripts/penalty.lua) return identical Results, members included, for
// peeks and decisions, around every registered algorithm and composites,
// on miniredis, the real server and the Cluster, clocks skewed or not.
// Around a leasing strategy, one request in three is first preceded by a
// lease round trip (the store's Lease, as WithLeases sends it) on random
// terms — a lease, a hand-back of part of the key's last grant, or both,
// and half of them taken ahead (LeaseTerms.Ahead, the script's "ahead"
// mode) — whose Grants must agree too: units, time and decision, members
// and ban included. A denied lease counts toward a ban and one taken ahead
// does not, in both twins, or the decisions after it part.
func TestPropertyPenaltyTwinAgreement(t *testing.T) {
	mem := proptest.Memory(t)
	var leases, ahead, deniedAhead int
	for _, b := range penaltyBackends(t, proptest.Backends)[1:] {
		t.Run(b.Name, func(t *testing.T) {
			g := proptest.WithRefunds(proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return proptest.PenaltyCase(b, r) }, true))
			proptest.Check(t, b.Cases, prop.ForAll(func(s proptest.Scenario) (string, error) {
				tw := &leaseTwins{r: rand.New(rand.NewSource(seedOf(s))), last: map[string]algorithm.Grant{}}
				msg, err := checkTwinsWith(mem, b, s, tw.lease)
				leases, ahead, deniedAhead = leases+tw.leases, ahead+tw.ahead, deniedAhead+tw.deniedAhead
				return msg, err
			}, g))
		})
	}
	t.Logf("lease round trips compared %d, taken ahead %d (denied %d)", leases, ahead, deniedAhead)
	if !t.Failed() && deniedAhead == 0 {
		t.Error("no lease taken ahead was denied: the ahead mode's one difference never ran")
	}
}

// seedOf is a seed drawn from s, so that a scenario (and what it shrinks
// to) replays the same lease round trips.
func seedOf(s proptest.Scenario) int64 {
	h := fnv.New64a()
	fmt.Fprint(h, s.String())
	return int64(h.Sum64())
}

// leaseTwins sends lease round trips to both twins of a penalty box (see
// TestPropertyPenaltyTwinAgreement): r draws them, last is each key's
// latest grant (whose units a later round trip may hand back).
type leaseTwins struct {
	r                          *rand.Rand
	last                       map[string]algorithm.Grant
	leases, ahead, deniedAhead int
}

// lease is checkTwinsWith's before: one request in three around a leasing
// strategy, a lease round trip on both twins, whose Grants must agree.
func (tw *leaseTwins) lease(goRule, lua *proptest.Rig, _ int, ev proptest.Event) (string, error) {
	if sc := goRule.Limiter().Strategy().Script(); !sc.Leases || tw.r.Intn(3) != 0 {
		return "", nil
	}
	var terms algorithm.LeaseTerms
	terms.Ahead = tw.r.Intn(2) == 0
	if terms.Ahead {
		ev.N = 1 // as the limiter's round trip taken ahead asks
	}
	if last := tw.last[ev.Key]; last.Units > 0 && tw.r.Intn(2) == 0 {
		terms.Back, terms.BackAt = 1+tw.r.Int63n(last.Units), last.At
		delete(tw.last, ev.Key)
	}
	if terms.Back > 0 && tw.r.Intn(4) == 0 {
		ev.N = 0 // a hand-back only
	} else {
		terms.Want = ev.N + tw.r.Int63n(8)
	}
	g, err := goRule.Lease(ev, terms)
	if err != nil {
		return "", err
	}
	l, err := lua.Lease(ev, terms)
	if err != nil {
		return "", err
	}
	tw.leases++
	if terms.Ahead && terms.Want > 0 {
		tw.ahead++
		if g.Units == 0 {
			tw.deniedAhead++
		}
	}
	if gs, ls := grantString(g), grantString(l); gs != ls {
		return fmt.Sprintf("lease %s at %s on %+v: Go rule %s, Lua script %s", ev, ev.At.Format(time.RFC3339Nano), terms, gs, ls), nil
	}
	if g.Units > 0 {
		tw.last[ev.Key] = g
	}
	return "", nil
}

// grantString is every figure of g, members and ban included.
func grantString(g algorithm.Grant) string {
	return fmt.Sprintf("{Units:%d At:%d Decision:%s}", g.Units, g.At, decisionString(g.Decision))
}

func decisionString(d algorithm.Decision) string {
	var ms []string
	for _, m := range d.Members() {
		ms = append(ms, decisionString(m))
	}
	return fmt.Sprintf("{Allowed:%v Limit:%d Remaining:%d RetryAfter:%v ResetAfter:%v Ban:%v Members:%v}",
		d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Ban(), ms)
}

// penaltyModel is one key's penalty state, restated from the doc of
// algorithm.Penalize independently of its code.
type penaltyModel struct {
	denials, since, until, strikes int64
}

// TestPropertyPenaltyTimeline: on every store, a penalty box decides each
// request of a timeline as its doc says, checked against the inner
// strategy run alone (in memory) and a model of the ban state: a banned
// request is denied, charges nothing, is not counted, and waits exactly
// the ban's remaining time or the inner strategy's own wait, whichever is
// longer, with Remaining 0; otherwise the inner strategy decides, and its
// After-th denial within Within starts a ban of Ban, doubling with each
// strike up to MaxBan, strikes forgotten MaxBan after a ban ends. On Redis
// the ban key always has a TTL, never longer than what it must remember.
func TestPropertyPenaltyTimeline(t *testing.T) {
	for _, b := range penaltyBackends(t, proptest.ExpiringBackends) {
		t.Run(b.Name, func(t *testing.T) {
			model := proptest.Memory(t)
			g := proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return proptest.PenaltyCase(b, r) }, false)
			proptest.Check(t, b.Cases, prop.ForAll(func(s proptest.Scenario) (string, error) {
				return checkPenaltyTimeline(b, model, s)
			}, g))
		})
	}
}

func checkPenaltyTimeline(b proptest.Backend, model *store.Memory, s proptest.Scenario) (string, error) {
	ps := s.Strat.S
	inner := ps.(interface{ Unwrap() algorithm.Strategy }).Unwrap()
	p := penaltyOf(s.Strat.Desc)
	boxed, err := proptest.NewRig(b.Store, ps)
	if err != nil {
		return "", err
	}
	alone, err := proptest.NewRig(model, inner)
	if err != nil {
		return "", err
	}
	within, ban, maxBan := p.Within.Microseconds(), p.Ban.Microseconds(), p.MaxBan.Microseconds()
	keys := map[string]*penaltyModel{}
	for i, ev := range s.Events() {
		m := keys[ev.Key]
		if m == nil {
			m = &penaltyModel{}
			keys[ev.Key] = m
		}
		t := ev.At.UnixMicro()
		if m.strikes > 0 && t >= m.until && t-m.until >= maxBan {
			m.strikes = 0
		}
		got, err := boxed.At(ev)
		if err != nil {
			return "", err
		}
		var want fleetlimit.Result
		wrote := false // a denial outside a ban writes the penalty's key
		if t < m.until {
			in, err := alone.Peek(ev)
			if err != nil {
				return "", err
			}
			wait := time.Duration(m.until-t) * time.Microsecond
			if !in.Allowed {
				wait = max(wait, in.RetryAfter)
			}
			want = fleetlimit.Result{Allowed: false, Limit: got.Limit, Remaining: 0, RetryAfter: wait}
		} else {
			in, err := alone.At(ev)
			if err != nil {
				return "", err
			}
			want = in
			if !in.Allowed {
				wrote = true
				if m.since == 0 || t-m.since >= within {
					m.since, m.denials = t, 0
				}
				m.denials++
				if m.denials >= p.After {
					d := ban
					for range m.strikes {
						d = min(2*d, maxBan)
					}
					m.until, m.strikes, m.denials, m.since = t+d, m.strikes+1, 0, 0
					want.Remaining = 0
					want.RetryAfter = max(want.RetryAfter, time.Duration(d)*time.Microsecond)
				}
			}
		}
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter ||
			(want.Allowed && !proptest.SameResult(got, want)) {
			return fmt.Sprintf("request %d (%q n=%d at +%v): %+v, want %+v (ban until +%v, strike %d)",
				i, ev.Key, ev.N, ev.At.Sub(s.Base), got, want, time.UnixMicro(m.until).Sub(s.Base), m.strikes), nil
		}
		if b.Client != nil && wrote {
			// Right after the write (miniredis's TTLs do not run on the
			// virtual clock; the real server's run in real time).
			keys := boxed.RedisKeys(ev.Key)
			ttl, err := b.Client.PTTL(context.Background(), keys[len(keys)-1]).Result()
			if err != nil {
				return "", err
			}
			var most int64
			if m.denials > 0 {
				most = m.since + within - t
			}
			if m.strikes > 0 {
				most = max(most, m.until+maxBan-t)
			}
			if ttl <= 0 || ttl > time.Duration(most)*time.Microsecond+time.Millisecond {
				return fmt.Sprintf("request %d: the ban key's TTL is %v, want above 0 and at most the %vµs it must remember", i, ttl, most), nil
			}
		}
	}
	return "", nil
}

// penaltyOf reads the Penalty back from a PenaltyCase's description.
func penaltyOf(desc string) algorithm.Penalty {
	var p algorithm.Penalty
	i := strings.LastIndex(desc, "{After:")
	var within, ban, maxBan string
	if _, err := fmt.Sscanf(desc[i:], "{After:%d Within:%s Ban:%s MaxBan:%s", &p.After, &within, &ban, &maxBan); err != nil {
		panic(err)
	}
	p.Within, _ = time.ParseDuration(within)
	p.Ban, _ = time.ParseDuration(ban)
	p.MaxBan, _ = time.ParseDuration(strings.TrimSuffix(strings.TrimSuffix(maxBan, ")"), "}"))
	return p
}

// TestPenaltyValidate: bad penalties and strategies are refused by
// Validate with ErrInvalidStrategy, never by a panic.
func TestPenaltyValidate(t *testing.T) {
	tb := algorithm.TokenBucket(10, time.Second, 10)
	ok := algorithm.Penalty{After: 3, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour}
	for _, c := range []struct {
		name string
		s    algorithm.Strategy
		p    algorithm.Penalty
		want string
	}{
		{"after 0", tb, algorithm.Penalty{After: 0, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour}, "after"},
		{"no within", tb, algorithm.Penalty{After: 1, Ban: time.Minute, MaxBan: time.Hour}, "within"},
		{"max below ban", tb, algorithm.Penalty{After: 1, Within: time.Minute, Ban: time.Hour, MaxBan: time.Minute}, "shorter than the first ban"},
		{"nil strategy", nil, ok, "nil strategy"},
		{"twice", algorithm.Penalize(tb, ok), ok, "already has a penalty box"},
		{"invalid strategy", algorithm.TokenBucket(0, time.Second, 1), ok, "rate"},
	} {
		err := algorithm.Penalize(c.s, c.p).Validate()
		if !errors.Is(err, algorithm.ErrInvalidStrategy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidStrategy saying %q", c.name, err, c.want)
		}
	}
	if err := algorithm.All(tb, algorithm.Penalize(algorithm.FixedWindow(5, time.Minute), ok)).Validate(); err == nil {
		t.Error("All accepted a penalized member: the penalty goes around the whole")
	}
}
