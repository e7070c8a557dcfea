// Package lease keeps the leases of one limiter (fleetlimit.WithLeases):
// for each key at most one lease, a block of the key's capacity taken from
// the store in one round trip and spent in process, with no round trip,
// until it is spent or MaxAge old; and the keys whose last round trip was
// an exact decision (First), so that only keys with repeat traffic lease.
// It knows nothing of stores: the round trip that takes a lease is a
// function the caller gives Take.
//
// The bounds a Table keeps (each instance holds at most size−1 unspent
// units of a key; a round trip only when the lease cannot serve) are
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
	"github.com/fleetlimit/fleetlimit/internal/keyed"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// Table is a limiter's leases, at most one per key. It is safe for
// concurrent use.
type Table struct {
	size      int64
	maxAge    time.Duration
	clock     keyed.Clock
	installed func() // called after a lease is installed (the sweep's timer)
	shards    keyed.Shards[shard]
	// leaseFirst: First never answers exact (LeaseFirst), for tests of the
	// lease mechanics that count units from a key's first request.
	leaseFirst bool
}

type shard struct {
	// mu guards m and seen: Spend holds it for reading (many spends of one
	// key run at once, each taking its units from left atomically);
	// whatever replaces or removes a lease, or reads left to hand it back,
	// or touches seen, holds it for writing, so no spend runs then.
	mu   sync.RWMutex
	m    map[string]*lease    // guarded by mu
	seen map[string]time.Time // keys decided exactly (First), and when; guarded by mu
}

// lease is a key's lease.
type lease struct {
	strategy algorithm.Strategy
	same     bool         // strategy's value is comparable: == finds it fast, never panics
	left     atomic.Int64 // units not yet spent
	at       time.Time    // when its round trip was sent (or its WithClock time)
	storeAt  int64        // algorithm.Grant.At, to name it at the hand-back
	limit    int64
	reset    time.Duration // the grant's ResetAfter
	pending  bool          // a round trip for the key is in flight: no lease yet
	ready    chan struct{} // when pending: closed once the round trip is over
	until    time.Time     // when pending: the round trip's deadline
}

// New returns an empty table of leases of up to size units that live
// maxAge on clock; installed, if not nil, is called (without any lock of
// the table's) each time a lease is installed.
func New(size int64, maxAge time.Duration, clock keyed.Clock, installed func()) *Table {
	t := &Table{size: size, maxAge: maxAge, clock: clock, installed: installed, shards: keyed.NewShards[shard](keyed.MaxShards)}
	t.shards.Each(func(sh *shard) { sh.m, sh.seen = make(map[string]*lease), make(map[string]time.Time) })
	return t
}

// Spend admits a request of cost n for key under s at now (zero: the
// monotonic clock's now) from the key's lease, if it holds n units, is s's
// rule and is younger than maxAge; with dry it only says what it would
// answer (Peek). The Decision has Allowed, Limit, Remaining (what the
// lease still holds) and ResetAfter (the grant's, less the lease's age).
func (t *Table) Spend(key string, s algorithm.Strategy, n int64, now time.Time, dry bool) (algorithm.Decision, bool) {
	sh := t.shards.Of(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	e := sh.m[key]
	age, ok := t.serves(e, s, n, now)
	if !ok {
		return algorithm.Decision{}, false
	}
	for {
		had := e.left.Load()
		if had < n {
			return algorithm.Decision{}, false
		}
		if dry || e.left.CompareAndSwap(had, had-n) {
			return algorithm.Decision{Allowed: true, Limit: e.limit, Remaining: had - n, ResetAfter: max(0, e.reset-age)}, true
		}
	}
}

// Call is one decision's part in the table, across Serve and Take: its
// deadline, on the process's clock (the caller sets it: now + its
// timeout), which bounds its waits and its round trip; and whether it has
// waited for a round trip yet.
type Call struct {
	Deadline time.Time
	waited   bool
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
// ctx is done (also if both happened: the caller is gone either way), or
// ErrDeadline once c's deadline has passed.
//
// The first round trip a call waits for was sent by a call that arrived
// before it, or by the one that won the race to send the round trip this
// call was about to send: its deadline is at most the in-process time
// the call took to meet it past the call's own, and it ends by then, so
// the call waits for it with no timer — as it does for any round trip
// whose deadline is no later than its own. Only a wait behind a later
// round trip allocates a timer.
func (c *Call) wait(ctx context.Context, flight *lease) error {
	first := !c.waited
	c.waited = true
	if first || !flight.until.After(c.Deadline) {
		select {
		case <-flight.ready:
		case <-ctx.Done():
		}
		return ctx.Err()
	}
	left := time.Until(c.Deadline)
	if left <= 0 {
		return ErrDeadline
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-flight.ready:
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		if err := ctx.Err(); err != nil {
			return err
		}
		return ErrDeadline
	}
}

// serves reports whether lease e (nil: none) can serve a request of cost
// n under s at now (zero: the monotonic clock's now): it is not in flight,
// holds n units, is s's rule, and is younger than maxAge; and e's age.
// Spend and Take make this one test, so that a request Take sends back to
// Spend is served.
func (t *Table) serves(e *lease, s algorithm.Strategy, n int64, now time.Time) (time.Duration, bool) {
	if e == nil || e.pending || e.left.Load() < n || !(e.same && e.strategy == s) && !rule.Same(e.strategy, s) {
		return 0, false
	}
	age := t.clock.Since(e.at, now)
	return age, age >= 0 && age < t.maxAge
}

// inFlight returns the key's lease round trip now in flight (pending), or
// nil when there is none.
func (t *Table) inFlight(key string) *lease {
	sh := t.shards.Of(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if e := sh.m[key]; e != nil && e.pending {
		return e
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
// lease: it hands back the key's previous lease, if any, and takes a new
// one of up to size units, in one round trip (trip, given ctx without its
// cancellation: the round trip runs to its end, bounded by c's deadline, even
// if the caller gives up, and the lease keeps what it took). now is the
// request's time (zero: the monotonic clock's now), sent the time its
// lease is dated from, and c the call (its deadline).
//
// Should another round trip for the key be in flight, Take waits for it
// (ctx and c's deadline bound the wait, as Serve's) and then spends from the
// lease it installed; served then reports a decision made from a lease,
// not by the store. A deadline already passed when the round trip would
// be sent returns ErrDeadline, and nothing is sent. The Decision's
// Remaining, after a round trip, counts what the new lease holds.
func (t *Table) Take(ctx context.Context, key string, s algorithm.Strategy, n int64, now, sent time.Time, c *Call, trip Trip) (d algorithm.Decision, served bool, err error) {
	sh := t.shards.Of(key)
	for {
		sh.mu.Lock()
		e := sh.m[key]
		if e == nil || !e.pending {
			if _, ok := t.serves(e, s, n, now); !ok {
				break // sh.mu stays held
			}
		}
		sh.mu.Unlock()
		if e.pending {
			if err := c.wait(ctx, e); err != nil {
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
	e := sh.m[key]
	terms := algorithm.LeaseTerms{Want: max(n, t.size)}
	if left := leftOf(e); left > 0 && rule.Same(e.strategy, s) {
		terms.Back, terms.BackAt = left, e.storeAt // no spend runs: sh.mu is held
	}
	flight := &lease{pending: true, ready: make(chan struct{}), until: c.Deadline}
	sh.m[key] = flight
	sh.mu.Unlock()

	var g algorithm.Grant
	err = errPanicked // until trip returns
	defer t.land(sh, key, flight, s, n, sent, &g, &err)
	tctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), c.Deadline)
	defer cancel()
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

// land ends flight, the key's round trip: it installs the lease of grant
// *g (less the request's n) unless the trip failed (*err) or took no more
// than n, and releases the requests waiting on the flight. Deferred by
// Take, so that they are released even if the trip panics.
func (t *Table) land(sh *shard, key string, flight *lease, s algorithm.Strategy, n int64, sent time.Time, g *algorithm.Grant, err *error) {
	sh.mu.Lock()
	defer close(flight.ready)
	if *err != nil || g.Units <= n {
		delete(sh.m, key) // nothing held (a failed hand-back is lost)
		sh.mu.Unlock()
		return
	}
	e := &lease{strategy: s, same: reflect.ValueOf(s).Comparable(),
		at: sent, storeAt: g.At, limit: g.Decision.Limit, reset: g.Decision.ResetAfter}
	e.left.Store(g.Units - n)
	sh.m[key] = e
	sh.mu.Unlock()
	if t.installed != nil {
		t.installed()
	}
}

// errPanicked is Take's error while the trip has not returned: seen only
// if it panics.
var errPanicked = errors.New("fleetlimit: lease round trip panicked")

// leftOf is e's unspent units, 0 for no lease or one in flight.
func leftOf(e *lease) int64 {
	if e == nil || e.pending {
		return 0
	}
	return e.left.Load()
}

// Forget drops key's lease without a hand-back (Reset). A round trip in
// flight is left to land.
func (t *Table) Forget(key string) {
	sh := t.shards.Of(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil && !e.pending {
		delete(sh.m, key)
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
// lease) — none in flight — and returns those that hold units, and
// forgets the keys First saw that long ago; and how soon the first lease
// or key still held will age out, or -1 when none is. A lease or key with
// a negative age (a clock that went back) ends too.
func (t *Table) End(now time.Time, all bool) (held []Held, next time.Duration) {
	next = -1
	t.shards.Each(func(sh *shard) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for k, e := range sh.m {
			if e.pending {
				continue
			}
			age := t.clock.Since(e.at, now)
			if all || age >= t.maxAge || age < 0 {
				delete(sh.m, k)
				if left := e.left.Load(); left > 0 {
					held = append(held, Held{Key: k, Strategy: e.strategy, Left: left, At: e.storeAt})
				}
			} else if rest := t.maxAge - age; next < 0 || rest < next {
				next = rest
			}
		}
		for k, at := range sh.seen {
			age := t.clock.Since(at, now)
			if all || age >= t.maxAge || age < 0 {
				delete(sh.seen, k)
			} else if rest := t.maxAge - age; next < 0 || rest < next {
				next = rest
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
