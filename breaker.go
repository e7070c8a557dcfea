package fleetlimit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// ErrCircuitOpen is wrapped, together with ErrStoreUnavailable, by the error
// of every decision that the circuit breaker kept away from the store: the
// store had failed repeatedly and was not called.
var ErrCircuitOpen = errors.New("fleetlimit: circuit open")

// errCircuitOpen is the error of a decision the breaker short-circuited. It
// is built once so that the open path allocates nothing.
var errCircuitOpen = fmt.Errorf("%w: %w", ErrStoreUnavailable, ErrCircuitOpen)

// Breaker defaults (see BreakerConfig).
const (
	DefaultBreakerThreshold = 5
	DefaultCoolDown         = 100 * time.Millisecond
	DefaultMaxCoolDown      = 5 * time.Second
	DefaultBreakerJitter    = 0.2
)

// BreakerConfig configures NewBreaker. The zero value is the default breaker.
type BreakerConfig struct {
	// Threshold is how many consecutive availability failures open the
	// breaker. Default (0): DefaultBreakerThreshold, 5: one unlucky timeout
	// does not cut a healthy Redis off, and a dead one costs five timeouts
	// per breaker before it costs nothing.
	Threshold int
	// CoolDown is how long the first opening keeps the store uncalled.
	// Each failed probe doubles it, up to MaxCoolDown; a successful probe
	// resets it. Default (0): DefaultCoolDown, 100ms: a restarted Redis is
	// back in use within a fraction of a second.
	CoolDown time.Duration
	// MaxCoolDown caps the growing cool-down. Default (0): DefaultMaxCoolDown,
	// 5s: a long outage costs one probe per 5s per breaker.
	MaxCoolDown time.Duration
	// Jitter shortens each cool-down by a random fraction in [0, Jitter), so
	// that the instances of a fleet, which all saw Redis fail at the same
	// moment, do not all probe it at the same moment. Cool-downs are never
	// lengthened: a test that advances the clock by the nominal cool-down
	// always finds it over. Default (0): DefaultBreakerJitter, 0.2. It must
	// be below 1.
	Jitter float64
	// Clock reads the time for cool-downs. Default: time.Now. Tests pass a
	// fake clock to open and close the breaker without sleeping.
	Clock func() time.Time
}

// BreakerState is the state of a Breaker.
type BreakerState int

const (
	// BreakerClosed: every decision goes to the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the store has failed repeatedly and is not called until
	// the cool-down ends.
	BreakerOpen
	// BreakerHalfOpen: the cool-down is over; one decision at a time is let
	// through to the store as a probe.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// Breaker is a circuit breaker between limiters and their store: after
// Threshold consecutive availability failures (timeouts, refused or broken
// connections, a closed store or client, and Redis replies meaning the server
// cannot serve: LOADING, OOM, READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN,
// NOREPLICAS, BUSY, MISCONF, authentication and client-limit errors) it
// opens: decisions skip the store, return at once with the failure policy's
// (or the fallback's) Result and an error wrapping ErrStoreUnavailable and
// ErrCircuitOpen. So a dead Redis costs microseconds per request instead of a
// timeout each. After the cool-down it lets one probe through at a time; a
// probe that succeeds closes it and resets the cool-down, one that fails opens
// it again for twice as long, up to MaxCoolDown.
//
// Not counted, because they say nothing about the store's health: errors of
// one key (store.ErrWrongType, store.ErrBadReply, a Lua error), invalid input,
// and the caller's own cancelled or expired context, including a deadline of
// the caller's that passes during the call. A store that answers at
// all, even with a per-key error, resets the count.
//
// Each Limiter has its own Breaker unless given one with WithBreaker. Share
// one Breaker between the limiters of one store (one Redis): an outage hits
// them all at once, so one breaker opens for all after Threshold failures in
// total rather than Threshold per limiter, and one probe at a time tests the
// store instead of one per limiter. Keep separate breakers for separate
// stores. The default is per Limiter because a Limiter cannot know which
// other limiters share its store.
//
// The closed path costs two atomic loads per decision and allocates nothing.
// A Breaker is safe for concurrent use.
type Breaker struct {
	threshold int64
	base, cap time.Duration
	jitter    float64
	clock     func() time.Time

	open  atomic.Bool  // false: closed, admit without locking
	fails atomic.Int64 // consecutive availability failures while closed
	until atomic.Int64 // end of the current cool-down, Unix ns: reject without locking

	mu       sync.Mutex
	cool     time.Duration // the current nominal cool-down
	probe    probe         // the outstanding probe, 0 when none
	probeAt  time.Time     // when it was let through
	lastProb probe         // the last probe number handed out
}

// probe numbers a decision that the breaker let through while open; 0 is a
// decision made while closed.
type probe uint64

// NewBreaker returns a closed breaker. It returns an error wrapping
// ErrInvalidConfig for a negative Threshold or cool-down, a MaxCoolDown below
// CoolDown, or a Jitter outside [0, 1).
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	var errs []error
	if cfg.Threshold < 0 {
		errs = append(errs, fmt.Errorf("breaker threshold %d, want >= 1 (0 for the default)", cfg.Threshold))
	}
	if cfg.CoolDown < 0 || cfg.MaxCoolDown < 0 {
		errs = append(errs, fmt.Errorf("breaker cool-down %v to %v, want > 0 (0 for the defaults)", cfg.CoolDown, cfg.MaxCoolDown))
	}
	if cfg.Jitter < 0 || cfg.Jitter >= 1 {
		errs = append(errs, fmt.Errorf("breaker jitter %v, want [0, 1)", cfg.Jitter))
	}
	b := &Breaker{
		threshold: DefaultBreakerThreshold,
		base:      DefaultCoolDown,
		cap:       DefaultMaxCoolDown,
		jitter:    DefaultBreakerJitter,
		clock:     time.Now,
	}
	if cfg.Threshold > 0 {
		b.threshold = int64(cfg.Threshold)
	}
	if cfg.CoolDown > 0 {
		b.base = cfg.CoolDown
	}
	if cfg.MaxCoolDown > 0 {
		b.cap = cfg.MaxCoolDown
	}
	if b.cap < b.base {
		errs = append(errs, fmt.Errorf("breaker max cool-down %v is below the cool-down %v", b.cap, b.base))
	}
	if cfg.Jitter > 0 {
		b.jitter = cfg.Jitter
	}
	if cfg.Clock != nil {
		b.clock = cfg.Clock
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	b.cool = b.base
	return b, nil
}

// newDefaultBreaker is NewBreaker(BreakerConfig{}), which cannot fail.
func newDefaultBreaker() *Breaker {
	b, _ := NewBreaker(BreakerConfig{})
	return b
}

// State reports the breaker's state now.
func (b *Breaker) State() BreakerState {
	if !b.open.Load() {
		return BreakerClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return BreakerClosed
	}
	if b.clock().UnixNano() < b.until.Load() {
		return BreakerOpen
	}
	return BreakerHalfOpen
}

// admitOpen reports whether a decision may call the store while the breaker
// is open or half-open, and if so the probe number the decision must report
// back with.
//
// Limiter.AllowN inlines the closed path (b.open false: admit, probe 0) and
// calls admitOpen only when the breaker is open.
func (b *Breaker) admitOpen() (probe, bool) {
	now := b.clock()
	if now.UnixNano() < b.until.Load() {
		return 0, false // cooling down: no lock taken
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return 0, true
	}
	if now.UnixNano() < b.until.Load() {
		return 0, false // opened again meanwhile
	}
	// Half-open: one probe at a time. A probe that never reports back (a
	// store that ignores its timeout) is replaced after the longest
	// cool-down, so the breaker cannot stay stuck.
	if b.probe != 0 && now.Sub(b.probeAt) < b.cap {
		return 0, false
	}
	b.lastProb++
	b.probe, b.probeAt = b.lastProb, now
	return b.probe, true
}

// success records that the store answered the decision admitted as p.
func (b *Breaker) success(p probe) {
	if b == nil {
		return
	}
	if p == 0 {
		// Closed (or a call from before the breaker opened: only probes
		// close it). Write only when needed, to keep the line shared.
		if b.fails.Load() != 0 && !b.open.Load() {
			b.fails.Store(0)
		}
		return
	}
	b.probeSucceeded(p)
}

// probeSucceeded closes the breaker if p is its outstanding probe.
func (b *Breaker) probeSucceeded(p probe) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.endProbe(p) {
		b.cool = b.base
		b.fails.Store(0)
		b.open.Store(false)
	}
}

// failure records an availability failure of the decision admitted as p.
func (b *Breaker) failure(p probe) {
	if b == nil {
		return
	}
	if p == 0 {
		if b.open.Load() || b.fails.Add(1) < b.threshold {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.open.Load() {
			b.cool = b.base
			b.trip()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.endProbe(p) {
		b.cool = min(2*b.cool, b.cap)
		b.trip()
	}
}

// abandon records that the decision admitted as p ended without telling
// anything about the store (the caller gave up): the next decision probes.
func (b *Breaker) abandon(p probe) {
	if b == nil || p == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endProbe(p)
}

// endProbe reports whether p is the outstanding probe and, if so, clears it
// so that the next decision after a cool-down may probe. A stale probe (one
// replaced after its lease) reports false: only the latest probe decides.
// It requires that b.mu is held.
func (b *Breaker) endProbe(p probe) bool {
	if b.probe != p {
		return false
	}
	b.probe = 0
	return true
}

// trip opens the breaker for the current cool-down, shortened by jitter.
// It requires that b.mu is held.
func (b *Breaker) trip() {
	d := b.cool - time.Duration(b.jitter*rand.Float64()*float64(b.cool))
	b.until.Store(b.clock().Add(d).UnixNano())
	b.open.Store(true)
}

// availabilityFailure reports whether a store error says the store is
// unavailable (counted by the breaker) rather than that one key or request
// is bad (store.ErrRejected, an invalid strategy). Errors that wrap neither
// class — of custom stores, or of the network — count: a breaker that opens
// on a new kind of outage is safer than one that does not.
func availabilityFailure(err error) bool {
	return !errors.Is(err, store.ErrRejected) &&
		!errors.Is(err, algorithm.ErrInvalidStrategy) && !errors.Is(err, algorithm.ErrStateType)
}
