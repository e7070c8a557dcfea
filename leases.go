package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// WithLeases trades exactness for round trips, with a stated bound: the
// limiter takes up to size units of a key's capacity from the store in one
// round trip (a lease), and admits that key's requests from the lease in
// process, with no round trip, until it is spent or maxAge has passed;
// then its next round trip for the key hands back what the lease did not
// spend and takes another, in one script call. Default: off (every
// decision is a round trip).
//
// The fair share: a lease takes min(size, max(n, ⌊available/2⌋)) units for
// a request of cost n — never more than half of what the key has left
// unless n alone needs more — so that a key with little left, or a limit
// below size, is still shared by the whole fleet down to its last unit,
// which goes to whoever asks for it. An instance holds at most one lease
// per key: while its round trip for a key is in flight, other requests for
// that key in the same process wait for it (bounded by its timeout and
// their contexts) and then spend from the new lease. A lease round trip
// runs to its end (at most the limiter's timeout) even if the request that
// sent it gives up: that caller is denied, as any caller gone is, and its
// cost is charged, but the lease is kept for the key's next requests rather
// than lost with its units.
//
// The bound, for K instances (docs/guarantees.md, proven over K = 1..16 by
// TestPropertyLeaseBound): each instance holds at most size−1 unspent units
// of a key (a lease is taken by a request that spends at least 1), so with
// H = K·(size−1)
//   - over-admission: a token bucket admits at most burst + rate·d/per + H
//     in any interval d; a fixed window at most limit + H in any aligned
//     window; a sliding log at most limit + H in any interval of length
//     window; a sliding-window counter admits a request only where its own
//     rule, applied to what was admitted and relaxed by H, admits it
//     (⌈prev·(W−e)/W⌉ + cur <= limit + H, e into a window of W), so at most
//     limit + H in any aligned window;
//   - under-admission: at any moment the store is short of what the admitted
//     requests alone would have charged by at most H units (the units
//     held in leases). A unit a lease did not spend is given back at the
//     instance's next round trip for the key, at Close, or by the sweep
//     within 9/8·maxAge of the lease's taking (plus a round trip) if the
//     key goes quiet on this instance, where the strategy can take it back
//     exactly (a token bucket: always, never above its burst; a fixed
//     window: within the window the lease was taken in; a sliding log: the
//     lease's own units, while they are in the window; a sliding-window
//     counter: to the count of the window the lease was taken in, while it
//     weighs); in any case it is back when the bucket refills or the window
//     (the counter: the next window) ends. So a key busy
//     elsewhere in the fleet is never starved by a quiet instance;
//   - round trips: an instance makes a round trip for a key only when its
//     lease cannot serve the request (none, spent below its cost, or
//     maxAge old), and each lease takes the whole fair share, so per key
//     and instance the round trips are at most ⌈admitted/size⌉ plus the
//     leases that ended early (aged out, cut by the fair share, or too
//     small for a request) plus the denials; a hot key with at least
//     2·size units left takes one round trip per size units admitted.
//
// The sweep: while this limiter holds leases, a timer (one per limiter,
// none while it holds none) hands back the units of leases maxAge old and
// forgets them, so the limiter holds leases only of keys it saw within
// about maxAge: memory is bounded by the keys it sees per maxAge. Ages are
// on the limiter's clock (WithClock's, or the monotonic clock); the timer
// runs on the process's clock.
//
// Result with leases: Allowed and RetryAfter are this instance's decision;
// Remaining is, at a round trip, the store's Remaining plus what this
// instance's lease still holds, and between round trips what the lease
// holds — never more than the fleet can still admit at that moment. A
// lease never outlives maxAge on this instance's clock (WithClock, or the
// monotonic clock).
//
// While the store is down, an instance spends the lease it holds, then the
// failure policy (and fallback) decides; a lease hand-back that fails is
// lost (the units return as the key refills), and so are the units left in
// a lease when a request it cannot cover fails to take the next one. A key's tier change
// (WithStrategyFor) ends its lease without a hand-back, since the units
// were counted in the old tier's terms. The Observer sees a decision served
// from a lease with DecidedBy DecidedByLease; Peek answers from the lease
// when it holds the cost, and otherwise peeks at the store. Reset drops
// this instance's lease of the key (a lease whose round trip is in flight
// during Reset is kept when it lands; Close likewise leaves it to the
// sweep).
//
// Strategies: algorithm.TokenBucket, FixedWindow, SlidingWindowLog and
// SlidingWindowCounter lease (algorithm.Leaser), and so do composites
// (algorithm.All) of leasing members — a lease hands back to every member
// and takes the fair share of the tightest member's units from all of
// them, so each member meets its own bound above — and penalty boxes
// (WithPenalty) around a leasing strategy, where a lease round trip the
// strategy denies counts toward a ban as a denied decision does, and a ban
// denies at the next round trip (requests served from a lease held before
// it are admissions). A composite's Limits, at a round trip, are its
// members' store figures, without the lease; from a lease, Limits is empty.
// New refuses WithLeases, with ErrInvalidConfig, for a strategy or store
// that cannot lease (a strategy that is not an algorithm.Leaser, or a
// composite with such a member). size must be at least 1 and maxAge at
// least algorithm.MinWindow.
func WithLeases(size int64, maxAge time.Duration) Option {
	return option(func(c *config) {
		if size < 1 || size > algorithm.MaxInt {
			c.errs = append(c.errs, fmt.Errorf("lease size %d, want 1 to 2^53", size))
		}
		if maxAge < algorithm.MinWindow {
			c.errs = append(c.errs, fmt.Errorf("lease max age %v, want at least %v", maxAge, algorithm.MinWindow))
		}
		c.leaseSize, c.leaseMaxAge = size, maxAge
	})
}

// checkLeasable returns why s over st cannot lease, or nil.
func checkLeasable(s algorithm.Strategy, st store.Store) error {
	if _, ok := st.(store.Leaser); !ok {
		return fmt.Errorf("%w: WithLeases: store %T cannot lend capacity (store.Leaser)", ErrInvalidConfig, st)
	}
	if !canLease(s) {
		why := s.Name()
		if u, ok := s.(interface{ Unwrap() algorithm.Strategy }); ok {
			s = u.Unwrap() // a penalty box leases when its strategy does
		}
		if c, ok := s.(algorithm.Composite); ok {
			for i, m := range c.Members() {
				if !canLease(m) {
					why = fmt.Sprintf("%s (its member %d, %s, cannot)", why, i, m.Name())
					break
				}
			}
		}
		return fmt.Errorf("%w: WithLeases: strategy %s cannot lease (algorithm.Leaser): use it without leases, or the token bucket, fixed window, sliding log, sliding-window counter, or a composite of them", ErrInvalidConfig, why)
	}
	return nil
}

// canLease reports whether s lends capacity: an algorithm.Leaser whose
// script has a lease mode.
func canLease(s algorithm.Strategy) bool {
	_, ok := s.(algorithm.Leaser)
	sc := s.Script()
	return ok && sc != nil && sc.Leases
}

// leases are the leases a limiter holds, one at most per key. Safe for
// concurrent use.
type leases struct {
	size       int64
	maxAge     time.Duration
	exactClock bool // elapsed time in whole µs of a WithClock clock
	seed       maphash.Seed
	shards     [denialShards]leaseShard

	// The sweep: a timer, armed while leases are held, that hands back
	// the units of leases past maxAge (see sweepLeases).
	sweep   func() // the limiter's sweepLeases at its clock's now
	sweepMu sync.Mutex
	timer   *time.Timer // guarded by sweepMu; non-nil while a sweep is due
	manual  bool        // guarded by sweepMu; tests sweep by hand, no timer
}

type leaseShard struct {
	// mu guards m: spend holds it for reading (many spends of one key run
	// at once, each taking its units from left atomically); whatever
	// replaces or removes a lease, or reads left to hand it back, holds it
	// for writing, so no spend runs then.
	mu sync.RWMutex
	m  map[string]*lease // guarded by mu
}

// lease is a key's lease in this instance.
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
}

func newLeases(size int64, maxAge time.Duration, exactClock bool) *leases {
	ls := &leases{size: size, maxAge: maxAge, exactClock: exactClock, seed: maphash.MakeSeed()}
	for i := range ls.shards {
		ls.shards[i].m = make(map[string]*lease)
	}
	return ls
}

func (ls *leases) shard(key string) *leaseShard {
	return &ls.shards[maphash.String(ls.seed, key)%denialShards]
}

// elapsed is the age at now of a lease taken at at; a zero now is the
// monotonic clock's now.
func (ls *leases) elapsed(at, now time.Time) time.Duration {
	if ls.exactClock {
		return time.Duration(now.UnixMicro()-at.UnixMicro()) * time.Microsecond
	}
	if now.IsZero() {
		return time.Since(at) // one monotonic reading, not time.Now's two
	}
	return now.Sub(at)
}

// spend admits a request of cost n for key under s at now (zero: the
// monotonic clock's now) from the key's lease, if it holds n units and has
// not aged out; with dry it only says what it would answer (Peek).
func (ls *leases) spend(key string, s algorithm.Strategy, n int64, now time.Time, dry bool) (Result, bool) {
	sh := ls.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	e := sh.m[key]
	el, ok := ls.serves(e, s, n, now)
	if !ok {
		return Result{}, false
	}
	for {
		had := e.left.Load()
		if had < n {
			return Result{}, false
		}
		if dry || e.left.CompareAndSwap(had, had-n) {
			return Result{Allowed: true, Limit: e.limit, Remaining: had - n, ResetAfter: max(0, e.reset-el)}, true
		}
	}
}

// serves reports whether lease e (nil: none) can serve a request of cost
// n under s at now (zero: the monotonic clock's now): it is not in flight,
// holds n units, is s's rule, and is younger than maxAge; and e's age.
// spend and take make this one test, so that a request take sends back to
// spend is served.
func (ls *leases) serves(e *lease, s algorithm.Strategy, n int64, now time.Time) (time.Duration, bool) {
	if e == nil || e.pending || e.left.Load() < n || !(e.same && e.strategy == s) && !sameRule(e.strategy, s) {
		return 0, false
	}
	el := ls.elapsed(e.at, now)
	return el, el >= 0 && el < ls.maxAge
}

// leftOf is e's unspent units, 0 for no lease or one in flight.
func leftOf(e *lease) int64 {
	if e == nil || e.pending {
		return 0
	}
	return e.left.Load()
}

// inFlight returns a channel closed when the key's lease round trip now in
// flight is over, or nil when there is none.
func (ls *leases) inFlight(key string) <-chan struct{} {
	sh := ls.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if e := sh.m[key]; e != nil && e.pending {
		return e.ready
	}
	return nil
}

// take decides req (sent at sent) through the store by a lease: it hands
// back the key's previous lease, if any, and takes a new one. Should
// another round trip for the key have begun since the caller looked
// (inFlight), it decides req exactly.
func (ls *leases) take(ctx context.Context, st store.Store, req store.Request, sent time.Time) (algorithm.Decision, error) {
	sh := ls.shard(req.Key)
	sh.mu.Lock()
	e := sh.m[req.Key]
	if e != nil && e.pending {
		// Another request began a round trip since this one looked: wait
		// for it, as if it had been in flight when this one looked.
		sh.mu.Unlock()
		return algorithm.Decision{}, errLookAgain
	}
	if _, ok := ls.serves(e, req.Strategy, req.N, req.Now); ok {
		// Another request's round trip installed a lease since this one
		// looked, and it can serve this one: spend from it instead (spend
		// makes the same test, so it cannot fail on it).
		sh.mu.Unlock()
		return algorithm.Decision{}, errLookAgain
	}
	terms := algorithm.LeaseTerms{Want: max(req.N, ls.size)}
	if left := leftOf(e); left > 0 && sameRule(e.strategy, req.Strategy) {
		terms.Back, terms.BackAt = left, e.storeAt // no spend runs: sh.mu is held
	}
	flight := &lease{pending: true, ready: make(chan struct{})}
	sh.m[req.Key] = flight
	sh.mu.Unlock()

	var g algorithm.Grant
	err := errLeasePanicked // until Lease returns
	defer func() {
		// Deferred, so that requests waiting on the flight are released
		// even if Lease panics.
		sh.mu.Lock()
		defer sh.mu.Unlock()
		defer close(flight.ready)
		if err != nil || g.Units <= req.N {
			delete(sh.m, req.Key) // nothing held (a failed hand-back is lost)
			return
		}
		e := &lease{strategy: req.Strategy, same: reflect.ValueOf(req.Strategy).Comparable(),
			at: sent, storeAt: g.At, limit: g.Decision.Limit, reset: g.Decision.ResetAfter}
		e.left.Store(g.Units - req.N)
		sh.m[req.Key] = e
		ls.arm(ls.maxAge)
	}()
	// The round trip runs to its end (the limiter's timeout) even if the
	// caller gives up: the units it takes are charged in the store either
	// way, and the lease keeps them for the key's next requests rather than
	// losing them.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), req.Timeout)
	defer cancel()
	g, err = st.(store.Leaser).Lease(lctx, req, terms)
	if err != nil {
		return algorithm.Decision{}, err
	}
	d := g.Decision
	if g.Units > 0 {
		d.Remaining = min(d.Limit, d.Remaining+g.Units-req.N)
	}
	return d, nil
}

// errLookAgain: since the caller looked, another request's round trip for
// the key began, or installed a lease that can serve the request; the
// caller looks again (waits for the round trip, or spends from the lease).
var errLookAgain = errors.New("fleetlimit: the key's lease changed; look again")

// errLeasePanicked is take's error while Lease has not returned: seen only
// if it panics.
var errLeasePanicked = errors.New("fleetlimit: lease round trip panicked")

// forget drops key's lease without a hand-back (Reset).
func (ls *leases) forget(key string) {
	sh := ls.shard(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil && !e.pending {
		delete(sh.m, key)
	}
	sh.mu.Unlock()
}

// arm schedules a sweep in d, unless one is due or sweeps are by hand.
func (ls *leases) arm(d time.Duration) {
	ls.sweepMu.Lock()
	defer ls.sweepMu.Unlock()
	if ls.timer == nil && !ls.manual {
		ls.timer = time.AfterFunc(d, ls.sweep)
	}
}

// ended removes from the map and returns the leases for which done is true
// (none in flight), with their keys; and how soon the first lease still
// held will age out, or -1 when none is held.
func (ls *leases) ended(now time.Time, done func(e *lease, age time.Duration) bool) (keys []string, held []*lease, next time.Duration) {
	next = -1
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.pending {
				continue
			}
			age := ls.elapsed(e.at, now)
			if done(e, age) {
				delete(sh.m, k)
				if e.left.Load() > 0 {
					keys, held = append(keys, k), append(held, e)
				}
			} else if left := ls.maxAge - age; next < 0 || left < next {
				next = left
			}
		}
		sh.mu.Unlock()
	}
	return keys, held, next
}

// sweepLeases hands back the unspent units of every lease of l that is at
// least maxAge old at now (l's clock), and forgets those leases: a key that
// goes quiet on this instance does not keep its units from the rest of the
// fleet, and the map holds only leases younger than maxAge. While leases
// remain it schedules the next sweep for when the first of them ages out,
// and at least maxAge/8 later, so a lease is handed back at most
// 9/8·maxAge after it was taken, plus the hand-back's round trip and the
// time the previous sweep's hand-backs took (each bounded by the timeout).
func (l *Limiter) sweepLeases(now time.Time) {
	ls := l.leases
	ls.sweepMu.Lock()
	ls.timer = nil // a lease taken from here on arms a timer of its own
	ls.sweepMu.Unlock()
	keys, held, next := ls.ended(now, func(_ *lease, age time.Duration) bool { return age >= ls.maxAge || age < 0 })
	_ = l.handBack(keys, held) // a failed hand-back is lost: its units return as the key refills
	if next >= 0 {
		ls.arm(max(next, ls.maxAge/8))
	}
}

// handBack gives the unspent units of held (the leases of keys) back to
// the store, at most handBackConcurrency round trips at a time, each
// bounded by the limiter's timeout, and returns the errors of those that
// failed.
func (l *Limiter) handBack(keys []string, held []*lease) error {
	errs := make([]error, len(held))
	sem := make(chan struct{}, handBackConcurrency)
	var wg sync.WaitGroup
	for j, e := range held {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			req := store.Request{Strategy: e.strategy, Prefix: l.cfg.prefix, Key: keys[j], Timeout: l.cfg.timeout}
			if l.cfg.clock != nil {
				req.Now = l.cfg.clock()
			}
			left := e.left.Load()
			terms := algorithm.LeaseTerms{Back: left, BackAt: e.storeAt}
			if _, err := l.store.(store.Leaser).Lease(context.Background(), req, terms); err != nil {
				errs[j] = fmt.Errorf("fleetlimit: hand back %d units of %q: %w", left, keys[j], err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// handBackConcurrency is how many hand-backs Close and the sweep keep in
// flight at once: enough for the Redis store to pipeline them.
const handBackConcurrency = 16

// Close hands back every unspent lease this limiter holds, one round trip
// per key (at most 16 at a time), each bounded by the limiter's timeout,
// and returns the errors of those that failed (their units return as the
// keys refill). Without WithLeases it does nothing. The limiter stays
// usable: a later decision takes a new lease.
func (l *Limiter) Close() error {
	ls := l.leases
	if ls == nil {
		return nil
	}
	ls.sweepMu.Lock()
	if ls.timer != nil {
		ls.timer.Stop()
		ls.timer = nil
	}
	ls.sweepMu.Unlock()
	keys, held, _ := ls.ended(time.Time{}, func(*lease, time.Duration) bool { return true })
	return l.handBack(keys, held)
}
