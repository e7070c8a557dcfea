// Package lease keeps the leases of one limiter (fleetlimit.WithLeases):
// for each key at most one lease (two with lease-ahead: Ahead), a block of
// the key's capacity taken from the store in one round trip and spent in
// process, with no round trip, until it is spent or MaxAge old; and the keys whose last round trip was
// an exact decision (First), so that only keys with repeat traffic lease.
// It knows nothing of stores: the round trip that takes a lease is a
// function the caller gives Take.
//
// The bounds a Table keeps (each instance holds at most size−1 unspent
// units of a key, size + ⌊size/2⌋ with lease-ahead; a round trip only when
// the leases cannot serve) are
// stated with WithLeases and proven by the root package's
// TestPropertyLeaseBound.
package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/internal/keyed"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// Table is a limiter's leases, at most two per key: the one being spent
// and, with lease-ahead (Ahead), the next, taken by a background round
// trip before the first is spent. It is safe for concurrent use.
type Table struct {
	size      int64
	maxAge    time.Duration
	clock     keyed.Clock
	installed func() // called after a lease is installed (the sweep's timer)
	shards    keyed.Shards[shard]
	// leaseFirst: First never answers exact (LeaseFirst), for tests of the
	// lease mechanics that count units from a key's first request.
	leaseFirst bool
	// ahead, when not nil, is the round trip that takes a key's next lease
	// ahead (see Ahead); handBack gives back units no lease holds any more
	// (a lease dropped beside the one a round trip hands back, or one
	// landing for a key forgotten meanwhile).
	ahead    AheadTrip
	handBack func([]Held)
	timeout  time.Duration // an ahead trip's deadline, from its start
	floor    int64         // the smallest lease asked for (Adapt); size: sizes fixed
	trips    tripCount
	waited   atomic.Int64 // decisions that waited on a round trip (Waited)
}

type shard struct {
	// mu guards m and seen, and each entry's cur and next: Spend holds it
	// for reading (many spends of one key run at once, each taking its
	// units from a lease's left atomically); whatever replaces or removes
	// a lease, or reads left to hand it back, or touches seen, holds it
	// for writing, so no spend runs then (but for the ahead trip's retiring
	// of cur, an atomic Swap that spends see as the lease spent).
	mu   sync.RWMutex
	m    map[string]*entry    // guarded by mu
	seen map[string]time.Time // keys decided exactly (First), and when; guarded by mu
}

// entry is a key's leases: cur is spent first, then next. next is set only
// while cur is, and is younger than cur. flight is the key's round trip in
// flight, if any: at most one per key, a request's own (Take) or the one
// taking the next lease ahead.
type entry struct {
	cur, next *lease // guarded by sh.mu
	flight    atomic.Pointer[flight]
}

// flight is a round trip of a key in flight.
type flight struct {
	ready  chan struct{} // closed once the round trip is over
	until  time.Time     // the round trip's deadline
	waited atomic.Bool   // a request waited for it (Serve, Take)
}

// lease is one lease of a key.
type lease struct {
	strategy algorithm.Strategy
	same     bool         // strategy's value is comparable: == finds it fast, never panics
	left     atomic.Int64 // units not yet spent
	ahead    atomic.Bool  // a round trip to take the next lease ahead was started for it
	late     bool         // taken ahead, by a round trip a request had to wait for
	want     int64        // the units its round trip asked for, beside the request's cost (nextWant)
	at       time.Time    // when its round trip was sent (or its WithClock time)
	storeAt  int64        // algorithm.Grant.At, to name it at the hand-back
	limit    int64
	reset    time.Duration // the grant's ResetAfter
}

// New returns an empty table of leases of up to size units that live
// maxAge on clock; installed, if not nil, is called (without any lock of
// the table's) each time a lease is installed.
func New(size int64, maxAge time.Duration, clock keyed.Clock, installed func()) *Table {
	t := &Table{size: size, floor: size, maxAge: maxAge, clock: clock, installed: installed, shards: keyed.NewShards[shard](keyed.MaxShards)}
	t.shards.Each(func(sh *shard) { sh.m, sh.seen = make(map[string]*entry), make(map[string]time.Time) })
	t.trips.done = sync.NewCond(&t.trips.mu)
	return t
}

// AheadTrip is the round trip that takes the next lease of key under s
// ahead, on terms, dated now (zero: the store's clock), ending by until.
// It may refuse to send it (the breaker), returning an error wrapping
// ErrNotSent: nothing was sent, nothing changed.
type AheadTrip func(key string, s algorithm.Strategy, now, until time.Time, terms algorithm.LeaseTerms) (algorithm.Grant, error)

// ErrNotSent is wrapped by an AheadTrip's error when it sent nothing.
var ErrNotSent = errors.New("lease: round trip not sent")

// Ahead turns lease-ahead on: when a spend leaves the last lease of a key
// with at most Threshold units (⌊size/2⌋), one background round trip
// (trip) takes the key's next lease of up to size units, handing back in
// the same round trip what the older lease still holds if the spend was
// served by the newer one — so a key holds at most two leases, the older
// holding at most Threshold units while the newer is there. A lease
// starts at most one such round trip. handBack gives back the units of
// leases dropped beside a round trip's own hand-back. Call it before the
// table is used.
// Each ahead trip ends by timeout after it starts.
func (t *Table) Ahead(trip AheadTrip, handBack func([]Held), timeout time.Duration) {
	t.ahead, t.handBack, t.timeout = trip, handBack, timeout
}

// Adapt makes lease sizes follow the key's traffic on this instance,
// between floor and size (see nextWant). Call it before the table is
// used; floor is 2 to size (a lease of 1 unit holds nothing once its
// request is served: none would follow it to grow from).
func (t *Table) Adapt(floor int64) { t.floor = floor }

// nextWant is the size of the next lease of a key whose newest lease is
// l (nil: none, a key's first lease or its first after a quiet maxAge),
// judged at now: with sizes fixed (floor = size), size. Adapting, a key's
// first lease asks for floor; then a lease spent down to half of what it
// asked for within maxAge/8 of its taking asks the next for twice as many
// (the instance spends faster than the leases' life needs), and so does a
// lease taken ahead by a round trip that a request had to wait for (the
// instance spent the lease before it in less than a round trip); one that
// still holds more than half asks for half (the instance's traffic does
// not need it), and any other for as many; always between floor and size.
func (t *Table) nextWant(l *lease, now time.Time) int64 {
	if t.floor >= t.size {
		return t.size
	}
	if l == nil {
		return t.floor
	}
	if l.late {
		return min(t.size, 2*l.want) // it landed after the lease before it was spent
	}
	age := t.clock.Since(l.at, now)
	switch left := l.left.Load(); {
	case left <= l.want/2 && age >= 0 && age < t.maxAge/8:
		return min(t.size, 2*l.want)
	case left > l.want/2:
		return max(t.floor, l.want/2)
	}
	return l.want
}

// Spend admits a request of cost n for key under s at now (zero: the
// monotonic clock's now) from the key's leases, the older first, if one
// holds n units, is s's rule and is younger than maxAge; with dry it only
// says what it would answer (Peek). The Decision has Allowed, Limit,
// Remaining (what the lease spent from, and the next if it was the older,
// still hold) and ResetAfter (the grant's, less the lease's age). With
// lease-ahead, a spend that leaves the last lease low starts the round
// trip that takes the next (see Ahead).
func (t *Table) Spend(key string, s algorithm.Strategy, n int64, now time.Time, dry bool) (algorithm.Decision, bool) {
	sh := t.shards.Of(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	e := sh.m[key]
	if e == nil {
		return algorithm.Decision{}, false
	}
	if d, ok := t.spendFrom(e, e.cur, e.next, key, s, n, now, dry); ok {
		return d, true
	}
	if e.next == nil {
		return algorithm.Decision{}, false
	}
	return t.spendFrom(e, e.next, nil, key, s, n, now, dry)
}

// spendFrom is Spend from lease l of entry e, with next the lease after it
// (nil when l is the last). It requires that sh.mu is held for reading.
func (t *Table) spendFrom(e *entry, l, next *lease, key string, s algorithm.Strategy, n int64, now time.Time, dry bool) (algorithm.Decision, bool) {
	age, ok := t.serves(l, s, n, now)
	if !ok {
		return algorithm.Decision{}, false
	}
	for {
		had := l.left.Load()
		if had < n {
			return algorithm.Decision{}, false
		}
		if dry || l.left.CompareAndSwap(had, had-n) {
			rem := had - n
			if next != nil {
				rem += next.left.Load()
			} else if !dry && rem <= l.want/2 && t.ahead != nil {
				t.goAhead(e, l, key, s, now)
			}
			return algorithm.Decision{Allowed: true, Limit: l.limit, Remaining: rem, ResetAfter: max(0, l.reset-age)}, true
		}
	}
}

// goAhead starts the round trip that takes the next lease of e ahead,
// for l, its last lease, which a spend has just left low — unless a round
// trip of the key is in flight, l has started one already, or s may not
// lease ahead (aheadable). When l is e's newer lease, the older is
// retired: its units go back in the same round trip. It requires that
// sh.mu is held for reading.
func (t *Table) goAhead(e *entry, l *lease, key string, s algorithm.Strategy, now time.Time) {
	if e.flight.Load() != nil || l.ahead.Load() || !aheadable(s) {
		return
	}
	if !l.ahead.CompareAndSwap(false, true) {
		return
	}
	f := &flight{ready: make(chan struct{}), until: time.Now().Add(t.timeout)}
	if !e.flight.CompareAndSwap(nil, f) {
		return
	}
	var retired *lease
	var back int64
	if l == e.next {
		retired = e.cur
		if back = retired.left.Swap(0); !rule.Same(retired.strategy, s) {
			back = 0 // counted in another rule's terms: dropped, as at a tier change
		}
	}
	sent := now
	if sent.IsZero() {
		sent = time.Now()
	}
	want := t.nextWant(l, now)
	t.trips.add()
	go t.runAhead(t.shards.Of(key), e, f, key, s, now, sent, retired, back, want)
}

// aheadable reports whether a lease of s may be taken ahead: unless s's
// state changes on a denial (algorithm.DenialCounter, as a penalty box's
// strikes) and its script has no ahead mode (Script.LeasesAhead) to leave
// it unchanged for a lease no caller waits on. Penalize's has one.
func aheadable(s algorithm.Strategy) bool {
	if dc, ok := s.(algorithm.DenialCounter); !ok || !dc.CountsDenials() {
		return true
	}
	sc := s.Script()
	return sc != nil && sc.LeasesAhead
}

// runAhead is the round trip goAhead started, and its landing.
func (t *Table) runAhead(sh *shard, e *entry, f *flight, key string, s algorithm.Strategy, now, sent time.Time, retired *lease, back, want int64) {
	defer t.trips.finish()
	terms := algorithm.LeaseTerms{Want: want, Ahead: true}
	if back > 0 {
		terms.Back, terms.BackAt = back, retired.storeAt
	}
	g, err := t.ahead(key, s, now, f.until, terms)
	if errors.Is(err, ErrNotSent) && retired != nil {
		retired.left.Add(back) // nothing was sent: the older lease still holds its units
		retired = nil
	}
	var nl *lease
	if err == nil && g.Units > 0 {
		nl = newLease(s, g, g.Units, want, sent)
		nl.late = f.waited.Load()
	}
	sh.mu.Lock()
	if retired != nil && e.cur == retired {
		e.cur, e.next = e.next, nil
	}
	orphan := t.install(sh, key, e, nl, g.At)
	e.flight.Store(nil)
	sh.mu.Unlock()
	close(f.ready)
	t.landed(nl, orphan)
}

// install puts nl (nil: none) in e after the lease it holds, if e is
// still key's entry; else returns it, to hand back. An entry left with no
// lease is removed. It requires that sh.mu is held.
func (t *Table) install(sh *shard, key string, e *entry, nl *lease, at int64) []Held {
	if sh.m[key] != e {
		if nl == nil {
			return nil
		}
		return []Held{{Key: key, Strategy: nl.strategy, Left: nl.left.Load(), At: at}}
	}
	switch {
	case nl == nil:
	case e.cur == nil:
		e.cur = nl
	default:
		e.next = nl
	}
	if e.cur == nil {
		delete(sh.m, key)
	}
	return nil
}

// landed tells the sweep of a lease installed (nl, unless it was
// returned as an orphan) and hands orphans back.
func (t *Table) landed(nl *lease, orphans []Held) {
	if len(orphans) > 0 {
		if t.handBack != nil {
			t.handBack(orphans)
		}
		return
	}
	if nl != nil && t.installed != nil {
		t.installed()
	}
}

// newLease is a lease of left units of grant g under s, asked for want,
// dated sent.
func newLease(s algorithm.Strategy, g algorithm.Grant, left, want int64, sent time.Time) *lease {
	l := &lease{strategy: s, same: reflect.ValueOf(s).Comparable(), want: want,
		at: sent, storeAt: g.At, limit: g.Decision.Limit, reset: g.Decision.ResetAfter}
	l.left.Store(left)
	return l
}

// tripCount counts the table's background round trips in flight (the
// ahead trips, and hand-backs of dropped leases), for Settle.
type tripCount struct {
	mu   sync.Mutex
	n    int        // guarded by mu
	done *sync.Cond // on mu: n fell to 0
}

func (c *tripCount) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }

func (c *tripCount) finish() {
	c.mu.Lock()
	if c.n--; c.n == 0 {
		c.done.Broadcast()
	}
	c.mu.Unlock()
}

// Settle returns once no background round trip of the table is in flight
// (each is bounded by the limiter's timeout): Close calls it before it
// hands back every lease, so that a lease taken ahead is handed back too.
func (t *Table) Settle() {
	t.trips.mu.Lock()
	for t.trips.n > 0 {
		t.trips.done.Wait()
	}
	t.trips.mu.Unlock()
}

// Waited is how many decisions waited on a round trip of the table's (a
// lease's, their own or another's) or were decided exactly (CountWait):
// every decision but those a lease served at once.
func (t *Table) Waited() int64 { return t.waited.Load() }

// CountWait counts c as a decision that waited on a round trip, once.
func (t *Table) CountWait(c *Call) {
	if !c.counted {
		c.counted = true
		t.waited.Add(1)
	}
}

// Call is one decision's part in the table, across Serve and Take: its
// deadline, on the process's clock (the caller sets it: now + its
// timeout), which bounds its waits and its round trip; whether it has
// waited for a round trip yet, and been counted as waiting (Waited).
type Call struct {
	Deadline time.Time
	waited   bool
	counted  bool
}

// Serve is Spend, except that while a round trip for the key is in flight
// it waits for it (and for any that follows) and then spends from the
// lease it installed. It returns ctx's error if ctx is done first, or
// once a round trip it waited for is over; and ErrDeadline once c's
// deadline has passed, however many round trips it waited for.
func (t *Table) Serve(ctx context.Context, key string, s algorithm.Strategy, n int64, now time.Time, c *Call) (algorithm.Decision, bool, error) {
	for {
		if d, ok := t.Spend(key, s, n, now, false); ok {
			return d, true, nil
		}
		flight := t.inFlight(key)
		if flight == nil {
			return algorithm.Decision{}, false, nil
		}
		t.CountWait(c)
		flight.waited.Store(true)
		if err := c.wait(ctx, flight); err != nil {
			return algorithm.Decision{}, false, err
		}
	}
}

// ErrDeadline is the error of a wait or a round trip that the call's
// deadline (Serve's and Take's) cut off, while the caller's own context
// was not done: the store did not answer in time.
var ErrDeadline = fmt.Errorf("lease: the call's deadline passed: %w", context.DeadlineExceeded)

// wait returns when flight's round trip is over, with ctx's error when
// ctx is done or its own deadline has passed (ctxdone.Err: even while
// ctx.Err lags the deadline; also if both happened: the caller is gone
// either way), or ErrDeadline once c's deadline has passed.
//
// The first round trip a call waits for was sent by a call that arrived
// before it, or by the one that won the race to send the round trip this
// call was about to send, or ahead by a spend before it: its deadline is
// at most the in-process time the call took to meet it past the call's
// own, and it ends by then, so the call waits for it with no timer — as
// it does for any round trip whose deadline is no later than its own.
// Only a wait behind a later round trip allocates a timer.
func (c *Call) wait(ctx context.Context, flight *flight) error {
	first := !c.waited
	c.waited = true
	if first || !flight.until.After(c.Deadline) {
		select {
		case <-flight.ready:
		case <-ctx.Done():
		}
		return ctxdone.Err(ctx)
	}
	left := time.Until(c.Deadline)
	if left <= 0 {
		return ErrDeadline
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-flight.ready:
		return ctxdone.Err(ctx)
	case <-ctx.Done():
		return ctxdone.Err(ctx)
	case <-timer.C:
		if err := ctxdone.Err(ctx); err != nil {
			return err
		}
		return ErrDeadline
	}
}

// serves reports whether lease l (nil: none) can serve a request of cost
// n under s at now (zero: the monotonic clock's now): it holds n units,
// is s's rule, and is younger than maxAge; and l's age. Spend and Take
// make this one test, so that a request Take sends back to Spend is
// served.
func (t *Table) serves(l *lease, s algorithm.Strategy, n int64, now time.Time) (time.Duration, bool) {
	if l == nil || l.left.Load() < n || !(l.same && l.strategy == s) && !rule.Same(l.strategy, s) {
		return 0, false
	}
	age := t.clock.Since(l.at, now)
	return age, age >= 0 && age < t.maxAge
}

// canServe reports whether one of e's leases (e nil: none) can serve.
func (t *Table) canServe(e *entry, s algorithm.Strategy, n int64, now time.Time) bool {
	if e == nil {
		return false
	}
	_, a := t.serves(e.cur, s, n, now)
	_, b := t.serves(e.next, s, n, now)
	return a || b
}

// inFlight returns the key's round trip now in flight, or nil when there
// is none.
func (t *Table) inFlight(key string) *flight {
	sh := t.shards.Of(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if e := sh.m[key]; e != nil {
		return e.flight.Load()
	}
	return nil
}

// First reports whether the round trip for key at now (zero: the monotonic
// clock's now) should be an exact decision rather than a lease: when the
// table holds no lease of the key (spent or not, nor one in flight) and
// decided none of its round trips exactly in the last maxAge. It then
// remembers the key as seen at now, until the key's next round trip
// (which takes a lease: the key shows repeat traffic) or until End finds
// it maxAge old. So a key seen once costs one plain decision and holds no
// units, and the table leases only keys seen at least twice within
// maxAge.
func (t *Table) First(key string, now time.Time) bool {
	if t.leaseFirst {
		return false
	}
	sh := t.shards.Of(key)
	sh.mu.Lock()
	if sh.m[key] != nil {
		sh.mu.Unlock()
		return false
	}
	if at, ok := sh.seen[key]; ok {
		if age := t.clock.Since(at, now); age >= 0 && age < t.maxAge {
			delete(sh.seen, key)
			sh.mu.Unlock()
			return false
		}
	}
	if now.IsZero() {
		now = time.Now()
	}
	sh.seen[key] = now
	sh.mu.Unlock()
	if t.installed != nil {
		t.installed() // End must age it out
	}
	return true
}

// Trip is the round trip that takes a lease on terms: the store's Lease
// for the request being decided.
type Trip func(ctx context.Context, terms algorithm.LeaseTerms) (algorithm.Grant, error)

// Take decides a request of cost n for key under s through the store by a
// lease: it hands back the key's older lease, if any, and takes a new
// one of up to size units, in one round trip (trip, given ctx without its
// cancellation: the round trip runs to its end, bounded by c's deadline, even
// if the caller gives up, and the lease keeps what it took). The newer
// lease, taken ahead, is kept beside the new one if it is live (it may
// serve smaller requests), else handed back first, by a round trip of its
// own (Want 0). now is the request's
// time (zero: the monotonic clock's now), sent the time its lease is
// dated from, and c the call (its deadline).
//
// Should another round trip for the key be in flight, Take waits for it
// (ctx and c's deadline bound the wait, as Serve's) and then spends from the
// lease it installed; served then reports a decision made from a lease,
// not by the store. A deadline already passed when the round trip would
// be sent returns ErrDeadline, and nothing is sent. The Decision's
// Remaining, after a round trip, counts what the new lease holds.
func (t *Table) Take(ctx context.Context, key string, s algorithm.Strategy, n int64, now, sent time.Time, c *Call, trip Trip) (d algorithm.Decision, served bool, err error) {
	sh := t.shards.Of(key)
	var e *entry
	for {
		sh.mu.Lock()
		e = sh.m[key]
		var f *flight
		if e != nil {
			f = e.flight.Load()
		}
		if f == nil && !t.canServe(e, s, n, now) {
			break // sh.mu stays held
		}
		sh.mu.Unlock()
		if f != nil {
			t.CountWait(c)
			f.waited.Store(true)
			if err := c.wait(ctx, f); err != nil {
				return algorithm.Decision{}, false, err
			}
		}
		if d, ok := t.Spend(key, s, n, now, false); ok {
			return d, true, nil
		}
	}
	if time.Until(c.Deadline) <= 0 {
		sh.mu.Unlock()
		return algorithm.Decision{}, false, ErrDeadline
	}
	t.CountWait(c)
	if e == nil {
		e = &entry{}
		sh.m[key] = e
	}
	newest := e.next
	if newest == nil {
		newest = e.cur
	}
	want := t.nextWant(newest, now)
	terms := algorithm.LeaseTerms{Want: max(n, want)}
	if l := e.cur; l != nil && l.left.Load() > 0 && rule.Same(l.strategy, s) {
		terms.Back, terms.BackAt = l.left.Load(), l.storeAt // no spend runs: sh.mu is held
	}
	var drop algorithm.LeaseTerms // the newer lease, when it is not live: handed back first
	k := e.next
	e.cur, e.next = nil, nil
	if k != nil {
		if _, live := t.serves(k, s, 1, now); live {
			e.cur = k
		} else if left := k.left.Load(); left > 0 && rule.Same(k.strategy, s) {
			drop = algorithm.LeaseTerms{Back: left, BackAt: k.storeAt}
		}
	}
	flight := &flight{ready: make(chan struct{}), until: c.Deadline}
	e.flight.Store(flight)
	sh.mu.Unlock()

	var g algorithm.Grant
	err = errPanicked // until trip returns
	defer t.land(sh, key, e, flight, s, n, want, sent, &g, &err)
	tctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.Deadline)
	defer cancel()
	if drop.Back > 0 {
		// A round trip of its own, before the request's, so that the
		// request's Result counts it: rare (a lease taken ahead that aged
		// out unspent); a failed hand-back is lost.
		_, _ = trip(tctx, drop)
	}
	g, err = trip(tctx, terms)
	if err != nil {
		return algorithm.Decision{}, false, err
	}
	d = g.Decision
	if g.Units > 0 {
		d.Remaining = min(d.Limit, d.Remaining+g.Units-n)
	}
	return d, false, nil
}

// land ends flight, e's round trip: it installs the lease of grant *g
// (less the request's n) unless the trip failed (*err) or took no more
// than n, and releases the requests waiting on the flight. Deferred by
// Take, so that they are released even if the trip panics.
func (t *Table) land(sh *shard, key string, e *entry, flight *flight, s algorithm.Strategy, n, want int64, sent time.Time, g *algorithm.Grant, err *error) {
	var nl *lease
	if *err == nil && g.Units > n {
		nl = newLease(s, *g, g.Units-n, want, sent)
	}
	sh.mu.Lock()
	orphan := t.install(sh, key, e, nl, g.At)
	e.flight.Store(nil)
	sh.mu.Unlock()
	close(flight.ready)
	t.landed(nl, orphan)
}

// errPanicked is Take's error while the trip has not returned: seen only
// if it panics.
var errPanicked = errors.New("fleetlimit: lease round trip panicked")

// Forget drops key's leases without a hand-back (Reset). A round trip in
// flight is left to land.
func (t *Table) Forget(key string) {
	sh := t.shards.Of(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil {
		if e.flight.Load() == nil {
			delete(sh.m, key)
		} else {
			e.cur, e.next = nil, nil
		}
	}
	sh.mu.Unlock()
}

// Held is an ended lease's unspent units, to hand back.
type Held struct {
	Key      string
	Strategy algorithm.Strategy
	Left     int64 // units not spent, > 0
	At       int64 // the lease's algorithm.Grant.At (LeaseTerms.BackAt)
}

// End removes the leases that are maxAge old at now (or, with all, every
// lease) — none of a key with a round trip in flight — and returns those
// that hold units, and forgets the keys First saw that long ago; and how
// soon the first lease or key still held will age out, or -1 when none
// is. A lease or key with a negative age (a clock that went back) ends
// too.
func (t *Table) End(now time.Time, all bool) (held []Held, next time.Duration) {
	next = -1
	due := func(rest time.Duration) {
		if next < 0 || rest < next {
			next = rest
		}
	}
	t.shards.Each(func(sh *shard) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for k, e := range sh.m {
			if e.flight.Load() != nil {
				continue
			}
			var keep []*lease
			for _, l := range []*lease{e.cur, e.next} {
				if l == nil {
					continue
				}
				age := t.clock.Since(l.at, now)
				if !all && age >= 0 && age < t.maxAge {
					keep = append(keep, l)
					due(t.maxAge - age)
				} else if left := l.left.Load(); left > 0 {
					held = append(held, Held{Key: k, Strategy: l.strategy, Left: left, At: l.storeAt})
				}
			}
			switch len(keep) {
			case 0:
				delete(sh.m, k)
			case 1:
				e.cur, e.next = keep[0], nil
			}
		}
		for k, at := range sh.seen {
			age := t.clock.Since(at, now)
			if all || age >= t.maxAge || age < 0 {
				delete(sh.seen, k)
			} else {
				due(t.maxAge - age)
			}
		}
	})
	return held, next
}

// Len is how many keys have a lease (spent or not) or a round trip in
// flight.
func (t *Table) Len() int {
	return t.shards.Sum(func(sh *shard) int {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		return len(sh.m)
	})
}

// LeaseFirst makes First answer false for every key, so that a key's
// first round trip takes a lease. Call it before the table is used.
func (t *Table) LeaseFirst() { t.leaseFirst = true }

// Seen is how many keys First remembers as decided exactly.
func (t *Table) Seen() int {
	return t.shards.Sum(func(sh *shard) int {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		return len(sh.seen)
	})
}

// MaxAge is the longest a lease lives.
func (t *Table) MaxAge() time.Duration { return t.maxAge }

// Lefts is what each lease of key holds, the older first (none: nil),
// for tests that follow a table's leases from outside.
func (t *Table) Lefts(key string) []int64 {
	sh := t.shards.Of(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	var lefts []int64
	if e := sh.m[key]; e != nil {
		for _, l := range []*lease{e.cur, e.next} {
			if l != nil {
				lefts = append(lefts, l.left.Load())
			}
		}
	}
	return lefts
}
