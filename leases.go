package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/keyed"
	"github.com/fleetlimit/fleetlimit/internal/lease"
	"github.com/fleetlimit/fleetlimit/internal/rule"
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
// Leases only where they pay: a key's round trip on this instance is an
// exact decision (the store decides it as without leases; nothing is
// leased or held) when the instance holds no lease of the key and decided
// none of its round trips exactly within maxAge — a key's first, and its
// first after a quiet maxAge; the key's next round trip within maxAge takes
// a lease. So a key seen once costs one script call, not a take and a
// hand-back, and the bounds below are unchanged (an exact decision holds
// no units).
//
// The fair share: a lease takes min(size, max(n, ⌊available/2⌋)) units for
// a request of cost n — never more than half of what the key has left
// unless n alone needs more — so that a key with little left, or a limit
// below size, is still shared by the whole fleet down to its last unit,
// which goes to whoever asks for it. An instance holds at most one lease
// per key (two with WithLeaseAhead, which states its bound): while its
// round trip for a key is in flight, other requests for
// that key in the same process wait for it and then spend from the new
// lease. A lease round trip runs to its end (at most its caller's
// deadline, below) even if the request that sent it gives up: that caller
// is denied, as any caller gone is, and its cost is charged, but the lease
// is kept for the key's next requests rather than lost with its units.
//
// One deadline per call: a request the lease cannot serve at once gets a
// deadline of now + the limiter's timeout (WithTimeout), which bounds
// together every wait behind the key's round trips in flight (however many
// follow one another) and its own round trip (the first round trip it
// waits for, sent by a request that arrived no later than it reached the
// wait, ends by that request's deadline). When it passes, the request
// is decided as any timeout is: degraded (fallback or policy), its error
// wrapping ErrStoreUnavailable and context.DeadlineExceeded, and counted by
// the breaker — a wait cut off behind another request's round trip is the
// store not answering in time, as it would have been for a round trip of
// the request's own — unless the caller's own context ended first (caller
// gone, not counted). So with leases, as without, a decision takes at most
// the limiter's timeout (faults/TestLeaseDecisionsKeepTheTimeoutThroughAStall).
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
//     small for a request) plus the denials plus the exact decisions
//     (above: one for a key's first round trip, and one after each quiet
//     maxAge or round trip that left no lease); a hot key with at least
//     2·size units left takes one round trip per size units admitted,
//     after its first, exact one.
//
// The sweep: while this limiter holds leases or remembers keys it decided
// exactly, a timer (one per limiter, none while it holds neither) hands
// back the units of leases maxAge old and forgets them and the keys
// decided exactly maxAge ago; it runs when the first of them ages out, and
// at least maxAge/8 after the last run. So memory is bounded by the keys
// seen within 9/8·maxAge (plus the time a sweep's hand-backs take): one
// remembered key (its string and a time) for each seen once, one lease for
// each seen twice — none both (TestLeaseFloodOfOneShotKeys). Ages are on
// the limiter's clock (WithClock's, or the monotonic clock); the timer
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
// strategy denies counts toward a ban as a denied decision does (but for
// one taken ahead: WithLeaseAhead), and a ban denies at the next round
// trip (requests served from a lease held before it are admissions). A composite's Limits, at a round trip, are its
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

// WithLeaseAhead makes WithLeases take a key's next lease before the one
// being spent runs out, so that while the key has capacity no request
// waits on the store: when a spend leaves the key's last lease with at
// most ⌊size/2⌋ units (the threshold; with WithLeaseFloor, half of what
// that lease asked for), one round trip in the background
// takes the next lease of up to size units, and, if the spend came from
// the newer of two leases, hands back what the older still holds in the
// same script call. So an instance holds at most two leases of a key, and
// at most size + ⌊size/2⌋ units of it (the older at most ⌊size/2⌋ once
// the newer is taken; without lease-ahead, size−1): the bounds of
// WithLeases hold with H = K·(size + ⌊size/2⌋) (docs/guarantees.md,
// TestPropertyLeaseBound). A lease starts at most one such round trip; a
// key has at most one round trip in flight, and a request its leases
// cannot serve waits for it (as for any other in flight), then spends
// from the lease it installed.
//
// The round trip taken ahead is bounded by the limiter's timeout, goes
// through the key's circuit (not sent while it is open; its outcome
// counted as a decision's is) and decides nothing: when it fails or the
// store denies it, the key's requests spend what the instance still
// holds, and then take their own round trips, decided by the failure
// policy as without lease-ahead. A failed one loses the older lease's
// units it was handing back (they return as the key refills). Close waits
// for the round trips in flight (each at most the timeout), then hands
// back every lease, the ones taken ahead too: no goroutine outlives it.
// Every strategy that leases leases ahead: composites, tiers, and
// penalty boxes (WithPenalty), where a lease taken ahead that the
// strategy denies is not counted toward a ban (it is no caller's request;
// the request that then finds the leases spent takes its own round trip,
// whose denial is counted: TestLeaseAheadDenialIsNoStrike).
// Default: off. New refuses it, with ErrInvalidConfig, without WithLeases.
func WithLeaseAhead() Option {
	return option(func(c *config) { c.leaseAhead = true })
}

// WithLeaseFloor makes the size of each lease WithLeases takes follow
// this instance's traffic on the key, between floor and WithLeases' size
// (the largest): a key's first lease asks for floor units; then a lease
// spent down to half of what it asked for within maxAge/8 of its taking
// asks the next for twice as many, and so does a lease taken ahead
// (WithLeaseAhead) by a round trip a request had to wait for — the
// instance spent the lease before it in less than a round trip, so a hot
// key's leases grow until one round trip's worth of its traffic fits in
// half a lease; one that still holds more than half
// when the next is taken (it aged out, or the requests were too large)
// asks for half, and any other for as many. So a quiet instance holds at
// most floor units of a key (and hands back what it did not spend), and a
// hot one doubles up to size in ⌈log2(size/floor)⌉ leases; near the key's
// limit the fair share (half of what is left) shrinks every lease, so the
// whole fleet can use the key's last units. Every lease still takes at
// most size units (or the request's cost), so every bound of WithLeases
// (and of WithLeaseAhead, whose threshold is then half of what each lease
// asked for) holds unchanged, with size the largest (TestPropertyLeaseBound
// runs half its plans with a random floor). Default: sizes fixed at size.
// New refuses, with ErrInvalidConfig, a floor below 2 (a lease of 1 holds
// nothing once its request is served, so nothing would tell its size to
// grow) or above size, or WithLeaseFloor without WithLeases.
func WithLeaseFloor(floor int64) Option {
	return option(func(c *config) { c.leaseFloor = floor })
}

// buildLeases builds l's lease table when WithLeases asks for one, and
// refuses WithLeaseAhead and WithLeaseFloor without it.
func (l *Limiter) buildLeases(clock keyed.Clock) error {
	cfg := &l.cfg
	if cfg.leaseSize == 0 {
		if cfg.leaseAhead || cfg.leaseFloor != 0 {
			return fmt.Errorf("%w: WithLeaseAhead and WithLeaseFloor need WithLeases", ErrInvalidConfig)
		}
		return nil
	}
	if err := checkLeasable(l.rule, l.store); err != nil {
		return err
	}
	l.sweep = &sweeper{l: l, afterFunc: time.AfterFunc}
	l.leases = lease.New(cfg.leaseSize, cfg.leaseMaxAge, clock, l.sweep.arm)
	return l.leaseOptions()
}

// leaseOptions applies WithLeaseAhead and WithLeaseFloor to l's leases.
func (l *Limiter) leaseOptions() error {
	cfg := &l.cfg
	if f := cfg.leaseFloor; f != 0 {
		if f < 2 || f > cfg.leaseSize {
			return fmt.Errorf("%w: WithLeaseFloor(%d), want 2 to the lease size %d (a lease of 1 holds nothing once its request is served, so nothing would tell its size to grow)", ErrInvalidConfig, f, cfg.leaseSize)
		}
		l.leases.Adapt(f)
	}
	if cfg.leaseAhead {
		l.leases.Ahead(l.aheadTrip, l.handBackQuietly, cfg.timeout)
	}
	return nil
}

// aheadTrip is the round trip that takes a key's next lease ahead
// (lease.AheadTrip): the store's Lease, for one unit and up to size,
// through the key's circuit — refused, nothing sent, while it is open —
// ending by until (its start + the limiter's timeout); the circuit counts
// its outcome as a decision's.
func (l *Limiter) aheadTrip(key string, s algorithm.Strategy, now, until time.Time, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	ci, p, ok := l.cfg.breaker.admit(l.shards, key, l.cfg.timeout)
	if p != 0 {
		ci.abandon(p) // a probe is a request's to make
	}
	timeout := time.Until(until)
	if !ok || p != 0 || timeout <= 0 {
		return algorithm.Grant{}, lease.ErrNotSent
	}
	req := store.Request{Strategy: s, Prefix: l.cfg.prefix, Key: key, N: 1, Now: now, Timeout: timeout}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	g, err := l.store.(store.Leaser).Lease(ctx, req, terms)
	switch {
	case err == nil:
		ci.answered()
	case !errors.Is(err, store.ErrClosed):
		ci.failed(err)
	}
	return g, err
}

// handBackQuietly hands held back (see handBack); a failed hand-back is
// lost: its units return as the key refills.
func (l *Limiter) handBackQuietly(held []lease.Held) { _ = l.handBack(held) }

// checkLeasable returns why s over st cannot lease, or nil.
func checkLeasable(s algorithm.Strategy, st store.Store) error {
	if _, err := storeCan[store.Leaser](st, "WithLeases", "cannot lend capacity"); err != nil {
		return err
	}
	if !canLease(s) {
		why := s.Name()
		// A penalty box leases when its strategy does.
		if c, ok := rule.Inner(s).(algorithm.Composite); ok {
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

// leaseTrip is the round trip that takes a lease for req: the store's
// Lease.
func (l *Limiter) leaseTrip(req store.Request) lease.Trip {
	return func(ctx context.Context, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
		return l.store.(store.Leaser).Lease(ctx, req, terms)
	}
}

// sweeper is a limiter's lease sweep: a timer, armed while the limiter
// holds leases, that hands back the units of leases past maxAge (see
// sweepLeases). afterFunc starts the timer (time.AfterFunc; a test's
// returns nil, and sweeps by hand). All fields but l are guarded by mu.
type sweeper struct {
	l         *Limiter
	afterFunc func(time.Duration, func()) *time.Timer
	mu        sync.Mutex
	timer     *time.Timer // non-nil while a sweep is due
}

// arm schedules a sweep in the leases' maxAge, unless one is due.
func (s *sweeper) arm() { s.armIn(s.l.leases.MaxAge()) }

// armIn schedules a sweep in d, unless one is due.
func (s *sweeper) armIn(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer == nil {
		s.timer = s.afterFunc(d, s.run)
	}
}

// run is the timer's sweep, at the limiter's clock's now.
func (s *sweeper) run() {
	var now time.Time // the monotonic clock's
	if s.l.cfg.clock != nil {
		now = s.l.cfg.clock()
	}
	s.l.sweepLeases(now)
}

// stop cancels a sweep that is due.
func (s *sweeper) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
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
	s := l.sweep
	s.mu.Lock()
	s.timer = nil // a lease taken from here on arms a timer of its own
	s.mu.Unlock()
	held, next := l.leases.End(now, false)
	_ = l.handBack(held) // a failed hand-back is lost: its units return as the key refills
	if next >= 0 {
		s.armIn(max(next, l.leases.MaxAge()/8))
	}
}

// handBack gives the unspent units of held back to the store, at most
// handBackConcurrency round trips at a time, each bounded by the
// limiter's timeout, and returns the errors of those that failed.
func (l *Limiter) handBack(held []lease.Held) error {
	errs := make([]error, len(held))
	sem := make(chan struct{}, handBackConcurrency)
	var wg sync.WaitGroup
	for j, h := range held {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			req := store.Request{Strategy: h.Strategy, Prefix: l.cfg.prefix, Key: h.Key, Timeout: l.cfg.timeout}
			if l.cfg.clock != nil {
				req.Now = l.cfg.clock()
			}
			terms := algorithm.LeaseTerms{Back: h.Left, BackAt: h.At}
			if _, err := l.store.(store.Leaser).Lease(context.Background(), req, terms); err != nil {
				errs[j] = fmt.Errorf("fleetlimit: hand back %d units of %q: %w", h.Left, h.Key, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// handBackConcurrency is how many hand-backs Close and the sweep keep in
// flight at once: enough for the Redis store to pipeline them.
const handBackConcurrency = 16

// Close waits for the round trips taking leases ahead (WithLeaseAhead),
// then hands back every unspent lease this limiter holds, one round trip
// per key (at most 16 at a time), each bounded by the limiter's timeout,
// and returns the errors of those that failed (their units return as the
// keys refill). Without WithLeases it does nothing. The limiter stays
// usable: a later decision takes a new lease. With WithRegistry, Close
// first stops the registry's refresh and removes the instance's entry (a
// failed removal leaves it to expire); later calls do nothing more.
func (l *Limiter) Close() error {
	l.reg.close()
	if l.leases == nil {
		return nil
	}
	l.sweep.stop()
	l.leases.Settle()
	held, _ := l.leases.End(time.Time{}, true)
	return l.handBack(held)
}
