package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
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
// their contexts) and then spend from the new lease.
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
//     instance's next round trip for the key, or at Close, where the strategy
//     can take it back exactly (a token bucket: always, never above its
//     burst; a fixed window: within the window the lease was taken in; a
//     sliding log: the lease's own units, while they are in the window; a
//     sliding-window counter: to the count of the window the lease was
//     taken in, while it weighs); in any case it is back when the bucket
//     refills or the window (the counter: the next window) ends.
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
// lost (the units return as the key refills). A key's tier change
// (WithStrategyFor) ends its lease without a hand-back, since the units
// were counted in the old tier's terms. The Observer sees a decision served
// from a lease with DecidedBy DecidedByLease; Peek answers from the lease
// when it holds the cost, and otherwise peeks at the store. Reset drops
// this instance's lease of the key.
//
// Strategies: algorithm.TokenBucket, FixedWindow, SlidingWindowLog and
// SlidingWindowCounter lease (algorithm.Leaser); New refuses WithLeases,
// with ErrInvalidConfig, for a strategy or store that cannot lease
// (composites, for now). size must be at least 1 and maxAge at least
// algorithm.MinWindow.
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
	_, ok := s.(algorithm.Leaser)
	if sc := s.Script(); !ok || sc == nil || !sc.Leases {
		return fmt.Errorf("%w: WithLeases: strategy %s cannot lease (algorithm.Leaser): use it without leases, or a token bucket, fixed window, sliding log or sliding-window counter", ErrInvalidConfig, s.Name())
	}
	return nil
}

// leases are the leases a limiter holds, one at most per key. Safe for
// concurrent use.
type leases struct {
	size       int64
	maxAge     time.Duration
	exactClock bool // elapsed time in whole µs of a WithClock clock
	seed       maphash.Seed
	shards     [denialShards]leaseShard
}

type leaseShard struct {
	mu sync.Mutex
	m  map[string]*lease // guarded by mu
}

// lease is a key's lease in this instance.
type lease struct {
	strategy algorithm.Strategy
	left     int64     // units not yet spent
	at       time.Time // when its round trip was sent (or its WithClock time)
	storeAt  int64     // algorithm.Grant.At, to name it at the hand-back
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

func (ls *leases) elapsed(at, now time.Time) time.Duration {
	if ls.exactClock {
		return time.Duration(now.UnixMicro()-at.UnixMicro()) * time.Microsecond
	}
	return now.Sub(at)
}

// spend admits a request of cost n for key under s at now from the key's
// lease, if it holds n units and has not aged out; with dry it only says
// what it would answer (Peek).
func (ls *leases) spend(key string, s algorithm.Strategy, n int64, now time.Time, dry bool) (Result, bool) {
	sh := ls.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil || e.pending || e.left < n || !sameRule(e.strategy, s) {
		return Result{}, false
	}
	el := ls.elapsed(e.at, now)
	if el < 0 || el >= ls.maxAge {
		return Result{}, false
	}
	left := e.left - n
	if !dry {
		e.left = left
	}
	return Result{Allowed: true, Limit: e.limit, Remaining: left, ResetAfter: max(0, e.reset-el)}, true
}

// inFlight returns a channel closed when the key's lease round trip now in
// flight is over, or nil when there is none.
func (ls *leases) inFlight(key string) <-chan struct{} {
	sh := ls.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
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
		// Another request began a round trip since this one looked: decide
		// this one exactly rather than hold two leases.
		sh.mu.Unlock()
		return st.Decide(ctx, req)
	}
	terms := algorithm.LeaseTerms{Want: max(req.N, ls.size)}
	if e != nil && e.left > 0 && sameRule(e.strategy, req.Strategy) {
		terms.Back, terms.BackAt = e.left, e.storeAt
	}
	flight := &lease{pending: true, ready: make(chan struct{})}
	sh.m[req.Key] = flight
	sh.mu.Unlock()

	g, err := st.(store.Leaser).Lease(ctx, req, terms)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	defer close(flight.ready)
	if err != nil || g.Units <= req.N {
		delete(sh.m, req.Key) // nothing held (a failed hand-back is lost)
	} else {
		sh.m[req.Key] = &lease{strategy: req.Strategy, left: g.Units - req.N, at: sent, storeAt: g.At,
			limit: g.Decision.Limit, reset: g.Decision.ResetAfter}
	}
	if err != nil {
		return algorithm.Decision{}, err
	}
	d := g.Decision
	if g.Units > 0 {
		d.Remaining = min(d.Limit, d.Remaining+g.Units-req.N)
	}
	return d, nil
}

// forget drops key's lease without a hand-back (Reset).
func (ls *leases) forget(key string) {
	sh := ls.shard(key)
	sh.mu.Lock()
	if e := sh.m[key]; e != nil && !e.pending {
		delete(sh.m, key)
	}
	sh.mu.Unlock()
}

// Close hands back every unspent lease this limiter holds, one round trip
// per key, each bounded by the limiter's timeout, and returns the errors of
// those that failed (their units return as the keys refill). Without
// WithLeases it does nothing. The limiter stays usable: a later decision
// takes a new lease.
func (l *Limiter) Close() error {
	ls := l.leases
	if ls == nil {
		return nil
	}
	var errs []error
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		var held []*lease
		var keys []string
		for k, e := range sh.m {
			if !e.pending && e.left > 0 {
				held, keys = append(held, e), append(keys, k)
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
		for j, e := range held {
			req := store.Request{Strategy: e.strategy, Prefix: l.cfg.prefix, Key: keys[j], Timeout: l.cfg.timeout}
			if l.cfg.clock != nil {
				req.Now = l.cfg.clock()
			}
			terms := algorithm.LeaseTerms{Back: e.left, BackAt: e.storeAt}
			if _, err := l.store.(store.Leaser).Lease(context.Background(), req, terms); err != nil {
				errs = append(errs, fmt.Errorf("fleetlimit: hand back %d units of %q: %w", e.left, keys[j], err))
			}
		}
	}
	return errors.Join(errs...)
}
