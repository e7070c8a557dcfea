package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/store"
)

// ErrCircuitOpen is wrapped, together with ErrStoreUnavailable, by the error
// of every decision that the circuit breaker kept away from the store: the
// store had been failing and was not called.
var ErrCircuitOpen = errors.New("fleetlimit: circuit open")

// errCircuitOpen is the error of a decision the breaker short-circuited. It
// is built once so that the open path allocates nothing.
var errCircuitOpen = fmt.Errorf("%w: %w", ErrStoreUnavailable, ErrCircuitOpen)

// errProbeRunning is the error of the decision that started a probe which
// outlives the limiter's timeout: the caller is answered without the store,
// the probe waits on.
var errProbeRunning = fmt.Errorf("breaker probe still waiting for the store: %w", context.DeadlineExceeded)

// The breaker's defaults: what a zero field of BreakerConfig means (see
// DefaultBreakerConfig).
const (
	defaultMinFailures  = 5
	defaultFailureRatio = 0.5
	defaultMinOutage    = 500 * time.Millisecond
	defaultForgetAfter  = 10 * time.Second
	defaultProbeTimeout = time.Second
	defaultCoolDown     = 100 * time.Millisecond
	defaultMaxCoolDown  = time.Second
	defaultJitter       = 0.2
)

// DefaultBreakerConfig returns the default breaker's configuration with
// every field spelled out: what each zero field of BreakerConfig means
// (Clock time.Now; Logger nil, for slog.Default()). NewBreaker of it
// builds the same breaker as NewBreaker(BreakerConfig{}).
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{
		MinFailures:  defaultMinFailures,
		FailureRatio: defaultFailureRatio,
		MinOutage:    defaultMinOutage,
		ForgetAfter:  defaultForgetAfter,
		ProbeTimeout: defaultProbeTimeout,
		CoolDown:     defaultCoolDown,
		MaxCoolDown:  defaultMaxCoolDown,
		Jitter:       defaultJitter,
		Clock:        time.Now,
	}
}

// BreakerConfig configures NewBreaker. The zero value is the default breaker.
//
// A circuit opens when a run of availability failures is evidence of an
// outage (see Breaker): at least MinFailures failures, at least FailureRatio
// of the run's round trips, spanning at least MinOutage.
type BreakerConfig struct {
	// MinFailures is the fewest failures that can open a circuit. Default
	// (0): 5.
	MinFailures int
	// FailureRatio is the share of a run's round trips (failures and
	// answers) that must be failures, in (0, 1]. An answer that brings the
	// share below it ends the run: the store is serving. Default (0):
	// 0.5: a store that answers most decisions in time
	// keeps deciding them, and one that fails most is cut off.
	FailureRatio float64
	// MinOutage is how long a run must last, from its first failure to its
	// latest, before it can open a circuit. Many callers waiting on one
	// stall fail together: their failures span the stall less the timeout,
	// so a stall shorter than the limiter's timeout plus MinOutage never
	// opens the circuit, however many callers it holds. Default (0):
	// 500ms: with the 100ms default timeout, a dead store
	// is cut off within about 600ms (each decision meanwhile waits at most
	// the timeout and is decided by the policy, as an open circuit would
	// decide it), and a stall of up to 600ms — a fork, a slow fsync, a
	// starved CPU — is ridden out with the store still counting. A negative
	// value means none: MinFailures failures at one instant open it (for
	// tests on a fixed clock).
	MinOutage time.Duration
	// ForgetAfter ends a run that has had no failure for this long: a
	// failure after a longer quiet starts a new run. Default (0):
	// 10s: a service making a decision every few seconds
	// still gathers evidence of a dead store; failures of unrelated
	// incidents are not added up.
	ForgetAfter time.Duration
	// ProbeTimeout bounds a probe: the decision that tests the store once a
	// cool-down is over, which gets the longer of this and the limiter's
	// timeout. A store too slow for the limiter's timeout but alive (a cold
	// connection pool, a script cache to reload, a busy host) answers a probe
	// and closes the circuit. The caller whose decision probes still waits
	// at most the limiter's timeout: a longer probe carries on by itself.
	// Default (0): 1s.
	ProbeTimeout time.Duration
	// CoolDown is how long a circuit stays open before its first probe.
	// Each failed probe doubles it, up to MaxCoolDown; closing resets it.
	// Default (0): 100ms.
	CoolDown time.Duration
	// MaxCoolDown caps the growing cool-down. Default (0):
	// 1s: a store that comes back is used again within
	// about a second, at the cost of one probe per second per shard while
	// it is down.
	MaxCoolDown time.Duration
	// Jitter shortens each cool-down by a random fraction in [0, Jitter), so
	// that the instances of a fleet, which all saw Redis fail at the same
	// moment, do not all probe it at the same moment. Cool-downs are never
	// lengthened: a test that advances the clock by the nominal cool-down
	// always finds it over. Default (0): 0.2. It must
	// be below 1.
	Jitter float64
	// Clock reads the time for runs and cool-downs. Default: time.Now.
	// Tests pass a fake clock to open and close circuits without sleeping.
	Clock func() time.Time
	// Logger is told, once per change, when a circuit opens (at Error, with
	// the cause) and when it closes again (at Info, with the outage's
	// length): an open circuit means limits are not enforced by the store.
	// Failed probes are not logged. Default (nil): slog.Default() as it is
	// when the change happens. Silence it with
	// slog.New(slog.DiscardHandler).
	Logger *slog.Logger
}

// BreakerState is the state of a Breaker. Its values rise with how much of
// the store's traffic the breaker keeps out, 0 closed, 1 half-open, 2 open:
// the value the observers' breaker gauges report.
type BreakerState int

const (
	// BreakerClosed: every decision goes to the store.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: the cool-down is over; one decision at a time is let
	// through to the store as a probe.
	BreakerHalfOpen
	// BreakerOpen: the store has been failing and is not called until the
	// cool-down ends.
	BreakerOpen
)

func (s BreakerState) String() string { return enumName("BreakerState", int(s), breakerStateNames[:]) }

var breakerStateNames = [...]string{BreakerClosed: "closed", BreakerHalfOpen: "half-open", BreakerOpen: "open"}

// Breaker is a circuit breaker between limiters and their store, with one
// circuit per shard: per Redis Cluster master (see store.Sharded), or one
// for the whole store.
//
// A circuit counts availability failures (timeouts, refused or broken
// connections, a server that refuses the scripts' commands, and Redis
// replies meaning the server cannot serve: LOADING, OOM, READONLY,
// MASTERDOWN, CLUSTERDOWN, TRYAGAIN, NOREPLICAS, BUSY, MISCONF,
// authentication and client-limit errors) in runs. A closed store or
// client is not an outage and is not counted (see ErrStoreUnavailable).
// A run starts with a failure; every later failure and every answer of the
// store is added to it; it ends when answers bring the failures below
// FailureRatio of its round trips, or after ForgetAfter without a failure.
// The circuit opens when a run has at least MinFailures failures, at least
// FailureRatio of its round trips, and its failures span at least MinOutage.
// So it measures the store over time, not the crowd: a stall that many
// callers wait on together fails them all at about the same instant, and the
// answers after it end the run; a dead store fails every decision for as
// long as it is dead.
//
// Open, decisions skip the store and return at once with the failure
// policy's (or the fallback's) Result and an error wrapping
// ErrStoreUnavailable and ErrCircuitOpen: a dead Redis costs microseconds per
// request instead of a timeout each. After the cool-down one decision at a
// time probes the store, with ProbeTimeout; a probe the store answers closes
// the circuit and resets the cool-down, one that fails opens it again for
// twice as long, up to MaxCoolDown. Each opening and closing is logged once
// (see BreakerConfig.Logger).
//
// Not counted, because they say nothing about the store's health: errors of
// one key (store.ErrWrongType, store.ErrBadReply, a Lua error), which count
// as answers; invalid input; and the caller's own cancelled or expired
// context, including a deadline of the caller's that passes during the call.
//
// Each Limiter has its own Breaker unless given one with WithBreaker. Share
// one Breaker between the limiters of one store (one Redis, or one Cluster):
// an outage hits them all at once, so one breaker gathers the evidence of
// all and probes once for all. Keep separate breakers for separate stores.
// The default is per Limiter because a Limiter cannot know which other
// limiters share its store.
//
// Outside a run of failures, a decision costs the breaker the lookup of its
// circuit (for a store.Sharded store, its Shard and a map read) and two
// atomic loads, and allocates nothing. A Breaker is safe
// for concurrent use.
type Breaker struct {
	minFailures  int64
	ratio        float64
	minOutage    time.Duration
	forget       time.Duration
	probeTimeout time.Duration
	base, cap    time.Duration
	jitter       float64
	clock        func() time.Time
	logger       *slog.Logger // nil: slog.Default()

	one    circuit                             // for a store without shards, and keys of no known shard
	mu     sync.Mutex                          // serializes adding to shards
	shards atomic.Pointer[map[string]*circuit] // by shard; replaced, never changed
}

// NewBreaker returns a closed breaker. It returns an error wrapping
// ErrInvalidConfig for a negative MinFailures, ForgetAfter, ProbeTimeout or
// cool-down, a FailureRatio outside [0, 1], a MaxCoolDown below CoolDown, or
// a Jitter outside [0, 1).
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	errs := cfg.check()
	b := &Breaker{
		minFailures:  int64(positiveOr(cfg.MinFailures, defaultMinFailures)),
		ratio:        positiveOr(cfg.FailureRatio, defaultFailureRatio),
		minOutage:    defaultMinOutage,
		forget:       positiveOr(cfg.ForgetAfter, defaultForgetAfter),
		probeTimeout: positiveOr(cfg.ProbeTimeout, defaultProbeTimeout),
		base:         positiveOr(cfg.CoolDown, defaultCoolDown),
		cap:          positiveOr(cfg.MaxCoolDown, defaultMaxCoolDown),
		jitter:       positiveOr(cfg.Jitter, defaultJitter),
		clock:        time.Now,
		logger:       cfg.Logger,
	}
	if cfg.MinOutage != 0 {
		b.minOutage = max(cfg.MinOutage, 0) // negative: none
	}
	if b.cap < b.base {
		errs = append(errs, fmt.Errorf("breaker max cool-down %v is below the cool-down %v", b.cap, b.base))
	}
	if cfg.Clock != nil {
		b.clock = cfg.Clock
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	b.one = circuit{b: b, cool: b.base}
	return b, nil
}

// check returns what is wrong with cfg's fields, each on its own.
func (cfg BreakerConfig) check() []error {
	var errs []error
	if cfg.MinFailures < 0 {
		errs = append(errs, fmt.Errorf("breaker min failures %d, want >= 1 (0 for the default)", cfg.MinFailures))
	}
	if cfg.FailureRatio < 0 || cfg.FailureRatio > 1 {
		errs = append(errs, fmt.Errorf("breaker failure ratio %v, want (0, 1] (0 for the default)", cfg.FailureRatio))
	}
	if cfg.ForgetAfter < 0 || cfg.ProbeTimeout < 0 {
		errs = append(errs, fmt.Errorf("breaker forget-after %v, probe timeout %v, want > 0 (0 for the defaults)", cfg.ForgetAfter, cfg.ProbeTimeout))
	}
	if cfg.CoolDown < 0 || cfg.MaxCoolDown < 0 {
		errs = append(errs, fmt.Errorf("breaker cool-down %v to %v, want > 0 (0 for the defaults)", cfg.CoolDown, cfg.MaxCoolDown))
	}
	if cfg.Jitter < 0 || cfg.Jitter >= 1 {
		errs = append(errs, fmt.Errorf("breaker jitter %v, want [0, 1)", cfg.Jitter))
	}
	return errs
}

// positiveOr is v when it is positive, else def: a BreakerConfig field's
// value or its default.
func positiveOr[T int | float64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// newDefaultBreaker is NewBreaker(BreakerConfig{}), which cannot fail.
func newDefaultBreaker() *Breaker {
	b, _ := NewBreaker(BreakerConfig{})
	return b
}

// State reports the state of the breaker's most open circuit now: open if
// any shard's is, else half-open if any is, else closed. For a store
// without shards that is its one circuit.
func (b *Breaker) State() BreakerState {
	worst := b.one.state()
	if m := b.shards.Load(); m != nil {
		for _, c := range *m {
			if s := c.state(); openness(s) > openness(worst) {
				worst = s
			}
		}
	}
	return worst
}

// openness orders states from closed to open.
func openness(s BreakerState) int {
	switch s {
	case BreakerOpen:
		return 2
	case BreakerHalfOpen:
		return 1
	}
	return 0
}

// admit returns the circuit of key's shard in sh, and whether a decision
// may call the store: while the circuit is closed always (two atomic loads
// and no clock), and while it is open only as probe p (see admitOpen). A
// nil Breaker (WithoutBreaker) admits every decision, with no circuit.
func (b *Breaker) admit(sh store.Sharded, key string, timeout time.Duration) (c *circuit, p probe, ok bool) {
	if b == nil {
		return nil, 0, true
	}
	if c = &b.one; sh != nil { // circuitFor's first case, without its call
		c = b.circuitFor(sh, key)
	}
	if !c.open.Load() {
		return c, 0, true
	}
	p, ok = c.admitOpen(timeout)
	return c, p, ok
}

// circuitFor returns the circuit of key's shard in sh, the store's
// sharding (Limiter.shards): the breaker's one circuit when sh is nil (the
// store is not a store.Sharded) or names no shard.
func (b *Breaker) circuitFor(sh store.Sharded, key string) *circuit {
	if sh == nil {
		return &b.one
	}
	shard := sh.Shard(key)
	if shard == "" {
		return &b.one
	}
	if m := b.shards.Load(); m != nil {
		if c := (*m)[shard]; c != nil {
			return c
		}
	}
	return b.addShard(shard)
}

// addShard returns the circuit of shard, adding a closed one if there is
// none. Shards are never removed: they are the store's servers, few and
// long-lived.
func (b *Breaker) addShard(shard string) *circuit {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]*circuit{}
	if old := b.shards.Load(); old != nil {
		if c := (*old)[shard]; c != nil {
			return c
		}
		m = maps.Clone(*old)
	}
	c := &circuit{b: b, shard: shard, cool: b.base}
	m[shard] = c
	b.shards.Store(&m)
	return c
}

// log returns the breaker's logger.
func (b *Breaker) log() *slog.Logger {
	if b.logger != nil {
		return b.logger
	}
	return slog.Default()
}

// circuit is the breaker of one shard.
//
// The closed path reads open and run without locking; all other fields but
// b and shard are guarded by mu.
type circuit struct {
	b     *Breaker
	shard string // "" for the breaker's one circuit

	open  atomic.Bool  // false: closed, decisions call the store
	run   atomic.Bool  // a run of failures is under way: answers are counted
	until atomic.Int64 // end of the current cool-down, Unix ns: reject without locking

	mu sync.Mutex

	// The current run, while closed.
	first, last time.Time // its first and latest failure
	fails       int64
	answers     int64
	cause       error // its latest failure

	// The current outage, while open.
	openedAt     time.Time
	probesFailed int
	cool         time.Duration // the current nominal cool-down
	probe        probe         // the outstanding probe, 0 when none
	probeAt      time.Time     // when it was let through
	probeLife    time.Duration // how long before the probe is presumed lost
	lastProb     probe         // the last probe number handed out
}

// probe numbers a decision that a circuit let through while open; 0 is a
// decision made while closed.
type probe uint64

// state reports the circuit's state now.
func (c *circuit) state() BreakerState {
	if !c.open.Load() {
		return BreakerClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open.Load() {
		return BreakerClosed
	}
	if c.b.clock().UnixNano() < c.until.Load() {
		return BreakerOpen
	}
	return BreakerHalfOpen
}

// failed records that a decision of the closed path (probe 0) failed with
// err. An availability failure joins the run, and may open the circuit; any
// other error is an answer of the store. c may be nil (no breaker).
func (c *circuit) failed(err error) {
	if c == nil {
		return
	}
	if !availabilityFailure(err) {
		c.answered()
		return
	}
	if c.open.Load() {
		return // a decision from before it opened: the run is over
	}
	c.mu.Lock()
	if c.open.Load() {
		c.mu.Unlock()
		return
	}
	now := c.b.clock()
	if !c.run.Load() || now.Sub(c.last) > c.b.forget {
		c.first, c.fails, c.answers = now, 0, 0
		c.run.Store(true)
	}
	c.fails++
	c.last, c.cause = now, err
	if c.fails < c.b.minFailures || !c.failing() || now.Sub(c.first) < c.b.minOutage {
		c.mu.Unlock()
		return
	}
	fails, answers, span := c.fails, c.answers, now.Sub(c.first)
	c.endRun()
	c.openedAt, c.probesFailed, c.cool = now, 0, c.b.base
	c.trip(now)
	c.mu.Unlock()
	attrs := append(c.logAttrs(),
		slog.String("cause", err.Error()),
		slog.Int64("failures", fails),
		slog.Int64("answers", answers),
		slog.Duration("over", span))
	c.b.log().LogAttrs(context.Background(), slog.LevelError,
		"fleetlimit: circuit breaker opened: store unavailable, decisions skip it until a probe succeeds", attrs...)
}

// answered records that the store answered a decision of the closed path:
// during a run of failures enough answers end the run; outside one it
// costs one atomic load. c may be nil (no breaker).
func (c *circuit) answered() {
	if c != nil && c.run.Load() {
		c.countAnswer()
	}
}

// countAnswer counts an answer of the store in the run under way.
func (c *circuit) countAnswer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.run.Load() || c.open.Load() {
		return
	}
	c.answers++
	if !c.failing() {
		c.endRun()
	}
}

// failing reports whether the run's failures are at least FailureRatio of
// its round trips. It requires that c.mu is held.
func (c *circuit) failing() bool {
	return float64(c.fails) >= c.b.ratio*float64(c.fails+c.answers)
}

// endRun forgets the current run. It requires that c.mu is held.
func (c *circuit) endRun() {
	c.run.Store(false)
	c.fails, c.answers, c.cause = 0, 0, nil
}

// admitOpen reports whether a decision may call the store while the circuit
// is open or half-open, and if so the probe number it must report back with
// (0 if the circuit closed meanwhile: an ordinary decision). timeout is the
// limiter's; a probe runs at most the longer of it and ProbeTimeout, and one
// that has not reported back after twice that (a store that ignores
// deadlines) is presumed lost and replaced, so that the circuit cannot stay
// stuck.
//
// Breaker.admit takes the closed path (open false: call the store) and
// calls admitOpen only when the circuit is open.
func (c *circuit) admitOpen(timeout time.Duration) (probe, bool) {
	now := c.b.clock()
	if now.UnixNano() < c.until.Load() {
		return 0, false // cooling down: no lock taken
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open.Load() {
		return 0, true
	}
	if now.UnixNano() < c.until.Load() {
		return 0, false // opened again meanwhile
	}
	if c.probe != 0 && now.Sub(c.probeAt) < c.probeLife {
		return 0, false // half-open: one probe at a time
	}
	c.lastProb++
	c.probe, c.probeAt, c.probeLife = c.lastProb, now, 2*max(timeout, c.b.probeTimeout)
	return c.probe, true
}

// probed records the outcome of probe p: an answer of the store (err nil,
// or not an availability failure) closes the circuit, a failure opens it
// again for twice as long.
func (c *circuit) probed(p probe, err error) {
	c.mu.Lock()
	if c.probe != p {
		c.mu.Unlock()
		return // replaced once presumed lost: only the latest probe decides
	}
	c.probe = 0
	now := c.b.clock()
	if err != nil && availabilityFailure(err) {
		c.probesFailed++
		c.cool = min(2*c.cool, c.b.cap)
		c.trip(now)
		c.mu.Unlock()
		return
	}
	outage, probes := now.Sub(c.openedAt), c.probesFailed
	c.endRun()
	c.cool = c.b.base
	c.open.Store(false)
	c.mu.Unlock()
	attrs := append(c.logAttrs(), slog.Duration("outage", outage), slog.Int("failed_probes", probes))
	c.b.log().LogAttrs(context.Background(), slog.LevelInfo,
		"fleetlimit: circuit breaker closed: store answering again", attrs...)
}

// abandon records that probe p ended without telling anything about the
// store (its caller gave up): the next decision probes.
func (c *circuit) abandon(p probe) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.probe == p {
		c.probe = 0
	}
}

// trip opens the circuit for the current cool-down, shortened by jitter.
// It requires that c.mu is held.
func (c *circuit) trip(now time.Time) {
	d := c.cool - time.Duration(c.b.jitter*rand.Float64()*float64(c.cool))
	c.until.Store(now.Add(d).UnixNano())
	c.open.Store(true)
}

// logAttrs are the attributes every record of c starts with.
func (c *circuit) logAttrs() []slog.Attr {
	if c.shard == "" {
		return make([]slog.Attr, 0, 5)
	}
	return append(make([]slog.Attr, 0, 5), slog.String("shard", c.shard))
}

// probe makes req, in st, the decision that probes circuit c (as probe p), with the
// longer of the breaker's ProbeTimeout and the limiter's timeout, and records
// its outcome. When that is longer than the limiter's timeout, the probe
// runs on a goroutine of its own, without ctx's cancellation (its outcome is
// the store's health, not this caller's), and the caller waits for it at
// most req.Timeout (the limiter's timeout, or what a call that waited on a
// lease round trip has left of it), as for any decision: errProbeRunning
// then.
func (l *Limiter) probe(ctx context.Context, st store.Store, req store.Request, c *circuit, p probe) (algorithm.Decision, error) {
	timeout := max(c.b.probeTimeout, l.cfg.timeout)
	if timeout == l.cfg.timeout {
		d, err := st.Decide(ctx, req)
		if err != nil && ctxdone.Err(ctx) != nil {
			c.abandon(p)
		} else {
			c.probed(p, err)
		}
		return d, err
	}
	type answer struct {
		d   algorithm.Decision
		err error
	}
	done := make(chan answer, 1)
	preq := req
	preq.Timeout = timeout
	go func() {
		d, err := st.Decide(context.WithoutCancel(ctx), preq)
		c.probed(p, err)
		done <- answer{d, err}
	}()
	wait := time.NewTimer(req.Timeout) // the limiter's timeout, or what a lease wait left of it
	defer wait.Stop()
	select {
	case a := <-done:
		return a.d, a.err
	case <-wait.C:
		return algorithm.Decision{}, errProbeRunning
	case <-ctx.Done():
		return algorithm.Decision{}, ctx.Err()
	}
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
