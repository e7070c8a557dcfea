package denial

import (
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/keyed"
)

var t0 = time.Unix(1_700_000_000, 0)

// decisions runs s on one fresh state at t0, for each cost in ns in turn,
// and returns the decisions: real figures of the Go rule.
func decisions(t *testing.T, s algorithm.Strategy, ns ...int64) []algorithm.Decision {
	t.Helper()
	st := s.NewState()
	var ds []algorithm.Decision
	for _, n := range ns {
		d, err := s.Decide(st, t0, n)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return ds
}

func TestStanding(t *testing.T) {
	fw := algorithm.FixedWindow(3, time.Second)
	// Three admitted, then denials of 1 (Remaining 0 = n-1: stands for the
	// window's rest) and of 2 (Remaining 0 != 1: could move, not kept), and
	// a cost above the limit (its wait is not known to age).
	ds := decisions(t, fw, 1, 1, 1, 1, 2, 4)
	for i, c := range []struct {
		d    algorithm.Decision
		n    int64
		want time.Duration
	}{
		{ds[0], 1, 0},
		{ds[3], 1, ds[3].RetryAfter},
		{ds[4], 2, 0},
		{ds[5], 4, 0},
	} {
		if got := Standing(c.d, c.n); got != c.want {
			t.Errorf("case %d (%+v, n %d): Standing = %v, want %v", i, c.d, c.n, got, c.want)
		}
	}
	if ds[3].RetryAfter <= 0 {
		t.Fatalf("the fourth request was not denied with a wait: %+v", ds[3])
	}

	// A composite denies by its tighter member; the other is not full
	// (it counted three), so its figures would move: not kept.
	all := algorithm.All(algorithm.FixedWindow(3, time.Second), algorithm.FixedWindow(100, time.Minute))
	cd := decisions(t, all, 1, 1, 1, 1)[3]
	if cd.Allowed || len(cd.Members()) != 2 {
		t.Fatalf("composite's fourth: %+v", cd)
	}
	if got := Standing(cd, 1); got != 0 {
		t.Errorf("composite with a member part-spent: Standing = %v, want 0", got)
	}
	// Both members deny at Remaining 0 = n-1: the denial stands until the
	// first member's wait ends.
	one := algorithm.All(algorithm.FixedWindow(1, time.Second), algorithm.TokenBucket(1, time.Second, 1))
	od := decisions(t, one, 1, 1)[1]
	if got, want := Standing(od, 1), min(od.Members()[0].RetryAfter, od.Members()[1].RetryAfter); got != want || got <= 0 {
		t.Errorf("composite with both members denying at Remaining 0: Standing = %v, want %v", got, want)
	}
}

func TestLearnAnswerForget(t *testing.T) {
	s := algorithm.FixedWindow(1, time.Second)
	denied := decisions(t, s, 1, 1)[1]
	c := New(4, keyed.Clock{Exact: true})

	_, _, ok, epoch := c.Answer("k", s, 1, t0)
	if ok {
		t.Fatal("an empty cache answered")
	}
	c.Learn("k", s, 1, t0, epoch, denied, 0)
	later := t0.Add(100 * time.Millisecond)
	d, age, ok, _ := c.Answer("k", s, 1, later)
	if !ok || d != denied || age != 100*time.Millisecond {
		t.Fatalf("Answer = %+v, %v, %v; want the denial, 100ms old", d, age, ok)
	}
	// Another cost, or another rule of the same shape, is not answered.
	if _, _, ok, _ := c.Answer("k", s, 2, later); ok {
		t.Error("answered another cost")
	}
	if _, _, ok, _ := c.Answer("k", algorithm.FixedWindow(2, time.Second), 1, later); ok {
		t.Error("answered another rule")
	}
	// The same rule built anew is the same rule.
	if _, _, ok, _ := c.Answer("k", algorithm.FixedWindow(1, time.Second), 1, later); !ok {
		t.Error("did not answer the same rule built anew")
	}
	// Past the denial's wait the entry is gone.
	if _, _, ok, _ := c.Answer("k", s, 1, t0.Add(denied.RetryAfter)); ok {
		t.Error("answered at the end of the wait")
	}
	if c.Len() != 0 {
		t.Errorf("an expired entry stayed: Len %d", c.Len())
	}

	// A forget between a look-up and its learn: the learn is dropped.
	_, _, _, epoch = c.Answer("k", s, 1, t0)
	c.Forget("k")
	c.Learn("k", s, 1, t0, epoch, denied, 0)
	if _, _, ok, _ := c.Answer("k", s, 1, later); ok {
		t.Error("remembered a denial learnt from before a Forget")
	}
	// An admission forgets the key's denial.
	_, _, _, epoch = c.Answer("k", s, 1, t0)
	c.Learn("k", s, 1, t0, epoch, denied, 0)
	c.Learn("k", s, 1, t0, epoch, algorithm.Decision{Allowed: true, Limit: 1}, 0)
	if _, _, ok, _ := c.Answer("k", s, 1, later); ok {
		t.Error("an admission did not forget the denial")
	}
}

func TestPenaltyBoxOnlyBansRemembered(t *testing.T) {
	p := algorithm.Penalize(algorithm.FixedWindow(1, time.Second), algorithm.Penalty{After: 2, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour})
	ds := decisions(t, p, 1, 1, 1, 1)
	c := New(4, keyed.Clock{Exact: true})
	// The second request is a strike: it must reach the store.
	c.Learn("k", p, 1, t0, 0, ds[1], ds[1].Ban())
	if _, _, ok, _ := c.Answer("k", p, 1, t0); ok {
		t.Errorf("a strike (%+v) was remembered", ds[1])
	}
	// A ban is remembered until it ends.
	var ban algorithm.Decision
	for _, d := range ds {
		if d.Ban() > 0 {
			ban = d
			break
		}
	}
	if ban.Ban() <= 0 {
		t.Fatalf("no ban in %+v", ds)
	}
	c.Learn("k", p, 1, t0, 0, ban, ban.Ban())
	until := min(ban.Ban(), MaxTrust)
	if _, _, ok, _ := c.Answer("k", p, 1, t0.Add(until-time.Microsecond)); !ok {
		t.Errorf("a ban was not answered before %v", until)
	}
	if _, _, ok, _ := c.Answer("k", p, 1, t0.Add(until)); ok {
		t.Errorf("a ban was answered at %v (its end, or the trust's)", until)
	}
}

// TestTrustIsCapped: however long a denial's wait, it is answered from
// memory for at most MaxTrust, so a store that forgot the key (FLUSHALL,
// a restart) is asked again within it.
func TestTrustIsCapped(t *testing.T) {
	s := algorithm.FixedWindow(1, time.Hour)
	denied := decisions(t, s, 1, 1)[1]
	if denied.RetryAfter <= MaxTrust {
		t.Fatalf("the denial's wait %v is not longer than MaxTrust", denied.RetryAfter)
	}
	c := New(4, keyed.Clock{Exact: true})
	c.Learn("k", s, 1, t0, 0, denied, 0)
	if _, _, ok, _ := c.Answer("k", s, 1, t0.Add(MaxTrust-time.Microsecond)); !ok {
		t.Error("not answered within MaxTrust")
	}
	if _, _, ok, _ := c.Answer("k", s, 1, t0.Add(MaxTrust)); ok {
		t.Error("answered at MaxTrust, though the wait is an hour")
	}
}

func TestEvictionKeepsTheBound(t *testing.T) {
	s := algorithm.FixedWindow(1, time.Hour)
	denied := decisions(t, s, 1, 1)[1]
	c := New(3, keyed.Clock{Exact: true})
	for i, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		c.Learn(k, s, 1, t0.Add(time.Duration(i)*time.Millisecond), 0, denied, 0)
		if c.Len() > 3 {
			t.Fatalf("after %s: %d entries, more than 3", k, c.Len())
		}
	}
}
