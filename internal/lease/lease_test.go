package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/keyed"
)

var (
	t0 = time.Unix(1_700_000_000, 0)
	tb = algorithm.TokenBucket(100, time.Second, 100)
)

// later is a call's deadline that no test reaches.
func later() time.Time { return time.Now().Add(time.Hour) }

// grant is a Trip that grants units (all admitted, limit 100) at at and
// records the terms it was given.
func grant(units int64, at int64, got *[]algorithm.LeaseTerms) Trip {
	return func(_ context.Context, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
		*got = append(*got, terms)
		return algorithm.Grant{Units: units, At: at, Decision: algorithm.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Second}}, nil
	}
}

func TestTakeThenSpend(t *testing.T) {
	installed := 0
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, func() { installed++ })
	var terms []algorithm.LeaseTerms
	d, served, err := tab.Take(context.Background(), "k", tb, 2, t0, t0, &Call{Deadline: later()}, grant(10, 7, &terms))
	if err != nil || served || !d.Allowed {
		t.Fatalf("Take = %+v, %v, %v", d, served, err)
	}
	// The store's Remaining (50) plus what the lease still holds (10-2).
	if d.Remaining != 58 {
		t.Errorf("Remaining after the take = %d, want 58", d.Remaining)
	}
	if len(terms) != 1 || terms[0] != (algorithm.LeaseTerms{Want: 10}) || installed != 1 {
		t.Fatalf("terms %+v, installed %d", terms, installed)
	}
	// A dry spend changes nothing; a real one takes its units.
	if d, ok := tab.Spend("k", tb, 8, t0, true); !ok || d.Remaining != 0 {
		t.Fatalf("dry spend of 8 = %+v, %v", d, ok)
	}
	if d, ok := tab.Spend("k", tb, 3, t0.Add(time.Millisecond), false); !ok || d.Remaining != 5 || d.ResetAfter != time.Second-time.Millisecond {
		t.Fatalf("spend of 3 = %+v, %v; want Remaining 5, ResetAfter 999ms", d, ok)
	}
	// More than is left, another rule, or a lease maxAge old: not served.
	if _, ok := tab.Spend("k", tb, 6, t0, false); ok {
		t.Error("spent 6 of 5")
	}
	if _, ok := tab.Spend("k", algorithm.TokenBucket(200, time.Second, 200), 1, t0, false); ok {
		t.Error("served another rule")
	}
	if _, ok := tab.Spend("k", tb, 1, t0.Add(time.Minute), false); ok {
		t.Error("served a lease maxAge old")
	}
	// The next take hands back the 5 left, naming the lease by its At.
	if _, _, err := tab.Take(context.Background(), "k", tb, 6, t0, t0, &Call{Deadline: later()}, grant(10, 9, &terms)); err != nil {
		t.Fatal(err)
	}
	if want := (algorithm.LeaseTerms{Want: 10, Back: 5, BackAt: 7}); terms[1] != want {
		t.Errorf("second take's terms %+v, want %+v", terms[1], want)
	}
}

func TestServeWaitsForTheRoundTripInFlight(t *testing.T) {
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
	release := make(chan struct{})
	entered := make(chan struct{})
	var terms []algorithm.LeaseTerms
	slow := func(ctx context.Context, lt algorithm.LeaseTerms) (algorithm.Grant, error) {
		close(entered)
		<-release
		return grant(10, 1, &terms)(ctx, lt)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, _, err := tab.Take(context.Background(), "k", tb, 1, t0, t0, &Call{Deadline: later()}, slow); err != nil {
			t.Error(err)
		}
	})
	<-entered
	// A caller whose context ends while it waits is let go with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, served, err := tab.Serve(ctx, "k", tb, 1, t0, &Call{Deadline: later()}); served || !errors.Is(err, context.Canceled) {
		t.Errorf("Serve with a cancelled ctx = %v, %v", served, err)
	}
	// One that waits is served from the lease the round trip installs.
	done := make(chan algorithm.Decision)
	go func() {
		d, served, err := tab.Serve(context.Background(), "k", tb, 4, t0, &Call{Deadline: later()})
		if !served || err != nil {
			t.Errorf("Serve = %v, %v", served, err)
		}
		done <- d
	}()
	close(release)
	if d := <-done; d.Remaining != 5 {
		t.Errorf("Remaining from the new lease = %d, want 10-1-4 = 5", d.Remaining)
	}
	wg.Wait()
	if len(terms) != 1 {
		t.Errorf("%d round trips, want 1", len(terms))
	}
}

func TestAPanickingTripReleasesWaiters(t *testing.T) {
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
	func() {
		defer func() { _ = recover() }()
		_, _, _ = tab.Take(context.Background(), "k", tb, 1, t0, t0, &Call{Deadline: later()}, func(context.Context, algorithm.LeaseTerms) (algorithm.Grant, error) {
			panic("boom")
		})
	}()
	if tab.Len() != 0 {
		t.Fatalf("a panicked flight stayed: Len %d", tab.Len())
	}
	if _, served, err := tab.Serve(context.Background(), "k", tb, 1, t0, &Call{Deadline: later()}); served || err != nil {
		t.Errorf("Serve after the panic = %v, %v; want not served, no wait", served, err)
	}
}

func TestEndAndForget(t *testing.T) {
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
	var terms []algorithm.LeaseTerms
	for i, k := range []string{"a", "b", "c"} {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		if _, _, err := tab.Take(context.Background(), k, tb, 1, at, at, &Call{Deadline: later()}, grant(10, int64(i), &terms)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := tab.Spend("c", tb, 9, t0.Add(20*time.Second), false); !ok {
		t.Fatal("could not spend c's lease")
	}
	// At t0+1m, a is maxAge old; b and c are not, and b ages out first.
	held, next := tab.End(t0.Add(time.Minute), false)
	if len(held) != 1 || held[0].Key != "a" || held[0].Left != 9 || held[0].At != 0 {
		t.Errorf("held %+v, want a's 9 units", held)
	}
	if next != 10*time.Second {
		t.Errorf("next = %v, want 10s", next)
	}
	tab.Forget("b")
	// All: c is ended too, but holds nothing to hand back.
	if held, next := tab.End(t0, true); len(held) != 0 || next != -1 || tab.Len() != 0 {
		t.Errorf("End(all) = %+v, %v, Len %d", held, next, tab.Len())
	}
}

// One deadline per call: it bounds a wait behind a later round trip of
// the key (ErrDeadline, not the caller's error, while the round trip goes
// on), is the deadline of the call's own round trip, and a call whose
// deadline has passed sends nothing.
func TestTheCallsDeadlineBoundsItsWaitsAndItsRoundTrip(t *testing.T) {
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
	release, entered := make(chan struct{}), make(chan struct{})
	var terms []algorithm.LeaseTerms
	owner := later()
	var tripDeadline time.Time
	slow := func(ctx context.Context, lt algorithm.LeaseTerms) (algorithm.Grant, error) {
		tripDeadline, _ = ctx.Deadline()
		close(entered)
		<-release
		return grant(10, 1, &terms)(ctx, lt)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, _, err := tab.Take(context.Background(), "k", tb, 1, t0, t0, &Call{Deadline: owner}, slow); err != nil {
			t.Error(err)
		}
	})
	<-entered
	if !tripDeadline.Equal(owner) {
		t.Errorf("the round trip's deadline %v, want the call's %v", tripDeadline, owner)
	}
	// Behind the flight, in Serve and in Take, calls that have waited for
	// an earlier round trip (this one's deadline is past theirs): let go
	// at their deadline.
	for name, wait := range map[string]func(time.Time) error{
		"Serve": func(dl time.Time) error {
			_, _, err := tab.Serve(context.Background(), "k", tb, 1, t0, &Call{Deadline: dl, waited: true})
			return err
		},
		"Take": func(dl time.Time) error {
			_, _, err := tab.Take(context.Background(), "k", tb, 1, t0, t0, &Call{Deadline: dl, waited: true}, slow)
			return err
		},
	} {
		if err := wait(time.Now().Add(10 * time.Millisecond)); !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s behind a flight past its deadline: %v, want ErrDeadline", name, err)
		}
	}
	close(release)
	wg.Wait()
	// A deadline already passed: nothing sent, even with no lease to wait for.
	sent := false
	_, _, err := tab.Take(context.Background(), "other", tb, 1, t0, t0, &Call{Deadline: time.Now().Add(-time.Millisecond)},
		func(context.Context, algorithm.LeaseTerms) (algorithm.Grant, error) {
			sent = true
			return algorithm.Grant{}, nil
		})
	if !errors.Is(err, ErrDeadline) || sent {
		t.Errorf("Take past its deadline: %v, sent %v; want ErrDeadline, nothing sent", err, sent)
	}
	if len(terms) != 1 || tab.Len() != 1 {
		t.Errorf("%d round trips, %d leases; want the one flight's", len(terms), tab.Len())
	}
}

// First: a key's first round trip is exact, and remembered; its next
// within maxAge leases (and is forgotten as seen); one maxAge old, or
// forgotten by End, is a first again; a key with a lease is never a first.
func TestFirstLeasesOnlyRepeatTraffic(t *testing.T) {
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
	steps := []struct {
		key  string
		at   time.Duration
		want bool
		why  string
	}{
		{"a", 0, true, "a's first"},
		{"a", time.Second, false, "a again within maxAge: lease it"},
		{"a", 2 * time.Second, true, "no lease was installed, nothing seen since the lease round trip"},
		{"a", 2*time.Second + time.Minute, true, "seen maxAge ago: a first again"},
		{"b", 0, true, "b's first"},
	}
	for _, s := range steps {
		if got := tab.First(s.key, t0.Add(s.at)); got != s.want {
			t.Errorf("First(%s, +%v) = %v, want %v: %s", s.key, s.at, got, s.want, s.why)
		}
	}
	if tab.Seen() != 2 {
		t.Errorf("Seen = %d, want a and b", tab.Seen())
	}
	if _, next := tab.End(t0.Add(2*time.Minute), false); tab.Seen() != 1 || next != 2*time.Second {
		t.Errorf("End at +2m: Seen %d, next %v; want b forgotten, a (seen at +1m2s) left, due in 2s", tab.Seen(), next)
	}
	var terms []algorithm.LeaseTerms
	if _, _, err := tab.Take(context.Background(), "c", tb, 1, t0, t0, &Call{Deadline: later()}, grant(10, 1, &terms)); err != nil {
		t.Fatal(err)
	}
	if tab.First("c", t0) {
		t.Error("First of a key with a lease")
	}
}

// aheadTrips is an AheadTrip that grants units and records the terms it
// was given, or fails with err.
type aheadTrips struct {
	mu    sync.Mutex
	terms []algorithm.LeaseTerms
	units int64
	err   error
}

func (a *aheadTrips) trip(_ string, _ algorithm.Strategy, _, _ time.Time, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.terms = append(a.terms, terms)
	if a.err != nil {
		return algorithm.Grant{}, a.err
	}
	return algorithm.Grant{Units: a.units, At: int64(len(a.terms)), Decision: algorithm.Decision{Allowed: true, Limit: 100}}, nil
}

func (a *aheadTrips) got() []algorithm.LeaseTerms {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.terms)
}

// Lease-ahead step by step: a spend that leaves the last lease at or below
// ⌊size/2⌋ takes the next in the background, once per lease; a spend from
// the newer lease retires the older, whose units go back in the next
// lease's round trip; an instance never holds more than two leases.
func TestAheadTakesTheNextLease(t *testing.T) {
	tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
	a := &aheadTrips{units: 10}
	tab.Ahead(a.trip, nil, time.Minute)
	var terms []algorithm.LeaseTerms
	c := &Call{Deadline: later()}
	if _, _, err := tab.Take(context.Background(), "k", tb, 1, t0, t0, c, grant(10, 7, &terms)); err != nil {
		t.Fatal(err)
	}
	if tab.Waited() != 1 {
		t.Fatalf("Waited = %d after a round trip, want 1", tab.Waited())
	}
	// 9 left: spends down to 6 start nothing; the one leaving 5 does.
	for range 3 {
		tab.Spend("k", tb, 1, t0, false)
	}
	tab.Settle()
	if got := a.got(); len(got) != 0 {
		t.Fatalf("a round trip ahead at 6 left: %+v", got)
	}
	if d, ok := tab.Spend("k", tb, 1, t0, false); !ok || d.Remaining != 5 {
		t.Fatalf("spend = %+v, %v", d, ok)
	}
	tab.Settle()
	if got := a.got(); !slices.Equal(got, []algorithm.LeaseTerms{{Want: 10, Ahead: true}}) || !slices.Equal(tab.Lefts("k"), []int64{5, 10}) {
		t.Fatalf("terms %+v, leases %v; want one round trip for 10, leases [5 10]", got, tab.Lefts("k"))
	}
	// Remaining counts both leases; spending the older starts nothing.
	if d, ok := tab.Spend("k", tb, 3, t0, false); !ok || d.Remaining != 12 {
		t.Fatalf("spend of 3 = %+v, %v; want Remaining 2+10", d, ok)
	}
	// A cost of 3 skips the older (2 left) for the newer: 7 left, above
	// the threshold; the next 3 leave 4 and retire the older's 2.
	for range 2 {
		if _, ok := tab.Spend("k", tb, 3, t0, false); !ok {
			t.Fatal("a spend of 3 from the newer lease failed")
		}
	}
	tab.Settle()
	if got := a.got(); len(got) != 2 || got[1] != (algorithm.LeaseTerms{Want: 10, Back: 2, BackAt: 7, Ahead: true}) {
		t.Fatalf("terms %+v; want the second to hand back the older's 2", got)
	}
	if !slices.Equal(tab.Lefts("k"), []int64{4, 10}) {
		t.Fatalf("leases %v; want [4 10]: the older retired, the newer and the next", tab.Lefts("k"))
	}
	if tab.Waited() != 1 {
		t.Errorf("Waited = %d, want 1: every spend was served at once", tab.Waited())
	}
}

// A strategy whose state a denial changes leases ahead only when its
// script has the ahead mode, which leaves that state as it was for a
// lease no caller waits on: a penalty box does (and its round trip is
// marked Ahead); a strategy counting denials without the mode does not.
func TestAheadOnlyWhereADenialChangesNothing(t *testing.T) {
	penalty := algorithm.Penalize(tb, algorithm.Penalty{After: 1, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour})
	for _, c := range []struct {
		name string
		s    algorithm.Strategy
		want []algorithm.LeaseTerms
	}{
		{"penalty box", penalty, []algorithm.LeaseTerms{{Want: 10, Ahead: true}}},
		{"a denial counter without the ahead mode", strikes{tb}, nil},
	} {
		tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
		a := &aheadTrips{units: 10}
		tab.Ahead(a.trip, nil, time.Minute)
		var terms []algorithm.LeaseTerms
		if _, _, err := tab.Take(context.Background(), "k", c.s, 1, t0, t0, &Call{Deadline: later()}, grant(10, 7, &terms)); err != nil {
			t.Fatal(err)
		}
		for range 4 { // 9 left: the spend leaving 5 would go ahead
			if _, ok := tab.Spend("k", c.s, 1, t0, false); !ok {
				t.Fatalf("%s: a spend from the lease failed", c.name)
			}
		}
		tab.Settle()
		if got := a.got(); !slices.Equal(got, c.want) {
			t.Errorf("%s: round trips ahead %+v, want %+v", c.name, got, c.want)
		}
	}
}

// strikes is a strategy that counts denials (algorithm.DenialCounter)
// with a script that has no ahead mode.
type strikes struct{ algorithm.Strategy }

func (strikes) CountsDenials() bool { return true }

// A round trip ahead that the breaker refuses (nothing sent) leaves the
// older lease its units; one that fails loses them (a failed hand-back is
// lost) and installs nothing; either way each lease starts one at most.
func TestAheadTripFailures(t *testing.T) {
	for _, c := range []struct {
		err  error
		want []int64
	}{
		// Not sent: the older keeps its 1, which the last spend takes.
		{fmt.Errorf("breaker open: %w", ErrNotSent), []int64{0, 4}},
		// Failed: the older's 1 is gone with the hand-back; the newer
		// serves the last spend and starts no second round trip.
		{errors.New("store down"), []int64{3}},
	} {
		tab := New(10, time.Minute, keyed.Clock{Exact: true}, nil)
		a := &aheadTrips{units: 10}
		tab.Ahead(a.trip, nil, time.Minute)
		var terms []algorithm.LeaseTerms
		if _, _, err := tab.Take(context.Background(), "k", tb, 1, t0, t0, &Call{Deadline: later()}, grant(10, 7, &terms)); err != nil {
			t.Fatal(err)
		}
		tab.Spend("k", tb, 4, t0, false) // 5 left: the next, ahead
		tab.Settle()
		a.err = c.err
		tab.Spend("k", tb, 4, t0, false) // 1 left in the older
		tab.Spend("k", tb, 6, t0, false) // from the newer: 4 left, retiring the older's 1
		tab.Settle()
		tab.Spend("k", tb, 1, t0, false) // the newer has started its one round trip
		tab.Settle()
		if got := a.got(); len(got) != 2 || got[1] != (algorithm.LeaseTerms{Want: 10, Back: 1, BackAt: 7, Ahead: true}) {
			t.Errorf("%v: terms %+v", c.err, got)
		}
		if got := tab.Lefts("k"); !slices.Equal(got, c.want) {
			t.Errorf("%v: leases %v, want %v", c.err, got, c.want)
		}
	}
}

// Adaptive sizes and a round trip ahead that lands late: a request that
// had to wait for the lease taken ahead makes the next ahead ask for twice
// as many units, however old the lease; without the wait, as many.
func TestAheadLateDoublesTheNext(t *testing.T) {
	for _, late := range []bool{false, true} {
		tab := New(64, time.Minute, keyed.Clock{Exact: true}, nil)
		tab.Adapt(2)
		entered, release := make(chan struct{}, 4), make(chan struct{})
		var mu sync.Mutex
		var wants []int64
		tab.Ahead(func(_ string, _ algorithm.Strategy, _, _ time.Time, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
			mu.Lock()
			wants = append(wants, terms.Want)
			mu.Unlock()
			entered <- struct{}{}
			<-release
			return algorithm.Grant{Units: terms.Want, At: 1, Decision: algorithm.Decision{Allowed: true, Limit: 100}}, nil
		}, nil, time.Minute)
		var terms []algorithm.LeaseTerms
		// A lease asked for 2 (the floor) grants 8, 7 left: spends at a
		// minute's age leave 1 and start the next ahead, asking for 2 (old:
		// no growth by age).
		if _, _, err := tab.Take(context.Background(), "k", tb, 1, t0, t0, &Call{Deadline: later()}, grant(8, 7, &terms)); err != nil {
			t.Fatal(err)
		}
		old := t0.Add(59 * time.Second)
		for range 6 {
			tab.Spend("k", tb, 1, old, false)
		}
		<-entered
		if late {
			tab.Spend("k", tb, 1, old, false) // the last unit
			waited := make(chan error)
			go func() {
				_, _, err := tab.Serve(context.Background(), "k", tb, 1, old.Add(30*time.Second), &Call{Deadline: later()})
				waited <- err
			}()
			for tab.inFlight("k") == nil || !tab.inFlight("k").waited.Load() {
				time.Sleep(time.Millisecond)
			}
			close(release)
			if err := <-waited; err != nil {
				t.Fatal(err)
			}
		} else {
			close(release)
		}
		tab.Settle()
		if !late {
			// Half a minute on (the older lease aged out), spend the landed
			// lease of 2 down to 1: the next ahead, by age asking for 2.
			tab.Spend("k", tb, 1, old.Add(30*time.Second), false)
		} // else the Serve's spend left it at 1 and started the next
		<-entered
		tab.Settle()
		mu.Lock()
		got := slices.Clone(wants)
		mu.Unlock()
		if want := map[bool]int64{false: 2, true: 4}[late]; len(got) != 2 || got[0] != 2 || got[1] != want {
			t.Errorf("late %v: ahead trips asked for %v, want [2 %d]", late, got, want)
		}
	}
}
