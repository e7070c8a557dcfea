package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

var (
	// ErrStoreUnavailable is wrapped by the error of every decision the store
	// could not make (refused, timed out, closed, or failed): the Result that
	// comes with it was decided by the FailurePolicy.
	ErrStoreUnavailable = errors.New("fleetlimit: store unavailable")
	// ErrInvalidKey is returned for an empty key or one longer than
	// store.MaxKeyLen bytes; nothing is recorded.
	ErrInvalidKey = errors.New("fleetlimit: invalid key")
	// ErrInvalidCost is returned for a cost n < 1 or above algorithm.MaxInt;
	// nothing is recorded.
	ErrInvalidCost = errors.New("fleetlimit: invalid cost")
	// ErrInvalidConfig is wrapped by every error New returns for a bad
	// strategy, store or option.
	ErrInvalidConfig = errors.New("fleetlimit: invalid configuration")
	// ErrClockOutOfRange is returned when the WithClock clock reads a time
	// before the Unix epoch or too far ahead for exact arithmetic (after
	// MaxTime); nothing is recorded.
	ErrClockOutOfRange = errors.New("fleetlimit: clock out of range")
)

// maxTimeMicros is MaxTime in microseconds since the Unix epoch.
const maxTimeMicros = algorithm.MaxInt - 2*int64(algorithm.MaxWindow/time.Microsecond)

// MaxTime returns the latest clock reading a Limiter accepts (in the year
// 2255): beyond it, times plus windows would leave the 2^53 microseconds
// that Lua holds exactly.
func MaxTime() time.Time { return time.UnixMicro(maxTimeMicros) }

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Shadow reports a shadow admission: the limiter is in shadow mode
	// (WithShadow) and admitted a request that it denied. Allowed is then
	// true and every other field is the denial's (RetryAfter > 0, the
	// denial's Remaining); nothing was recorded for it, as for any denial.
	// Adapters let such a request through as admitted.
	Shadow bool
	// Limit is the strategy's capacity: limit, or burst for a token bucket.
	// A sliding log of 100 per minute reports 100.
	Limit int64
	// Remaining is the cost that can still pass right after this decision,
	// never negative. After 3 of 100 are admitted in a window it is 97; a
	// token bucket reports whole tokens, rounded down.
	Remaining int64
	// RetryAfter is 0 when Allowed (but for a shadow admission) and > 0
	// when denied: how long until the
	// same request would pass with no other traffic. When n can never pass
	// (n > Limit) it is ResetAfter, or the strategy's window if the key is
	// already full; retrying will not help.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back at full capacity with no
	// further traffic (0: it already is). For a sliding log admitted just now
	// it is the window.
	ResetAfter time.Duration

	limits *[]LimitResult // see Limits; a pointer keeps Result comparable
}

// Limits returns each member's figures, in order, when the limiter's
// strategy is a composite (algorithm.All), and nil otherwise. The Result's
// own Allowed, Limit, Remaining, RetryAfter and ResetAfter are the
// composite's (see algorithm.All for how they combine the members'). The
// slice must not be modified. A composite's Results compare equal (==) only
// to their copies.
func (r Result) Limits() []LimitResult {
	if r.limits == nil {
		return nil
	}
	return *r.limits
}

// LimitResult is one member's figures in a composite decision.
type LimitResult struct {
	// Name is the member strategy's name, e.g. "token_bucket".
	Name string
	// Limit and Window are the member's (algorithm.Strategy Limit, Window).
	Limit  int64
	Window time.Duration
	// Remaining, RetryAfter and ResetAfter are as in Result, for this
	// member alone. A member that would have admitted a denied request
	// shows its figures uncharged, with RetryAfter 0.
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// resultOf is the Result of s's decision d.
func resultOf(s algorithm.Strategy, d algorithm.Decision) Result {
	if u, ok := s.(interface{ Unwrap() algorithm.Strategy }); ok {
		s = u.Unwrap() // a penalty box: its members are its strategy's
	}
	r := Result{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}
	ds := d.Members()
	if len(ds) == 0 {
		return r
	}
	c, ok := s.(algorithm.Composite)
	if !ok || len(c.Members()) != len(ds) {
		return r
	}
	limits := make([]LimitResult, len(ds))
	for i, m := range c.Members() {
		limits[i] = LimitResult{Name: m.Name(), Limit: m.Limit(), Window: m.Window(), Remaining: ds[i].Remaining, RetryAfter: ds[i].RetryAfter, ResetAfter: ds[i].ResetAfter}
	}
	r.limits = &limits
	return r
}

// FailurePolicy decides a request when the store cannot. The zero value is
// the default, FailLocal.
type FailurePolicy int

const (
	// FailLocal decides the request in this process: the limiter's strategy
	// at limit / instances, applied in an in-process store (see
	// WithFallback; by default instances is 1, in a store.Memory that every
	// default limiter of the process shares). With K instances a window
	// inside an outage thus admits at most K times the limit, and one that
	// spans its start or end at most K+1 times (the fallbacks start empty
	// beside what the store admitted; TestFallbackBoundAcrossTheOutage),
	// never an unbounded flood, and a client who stays under the limit is
	// not refused. The Result is the
	// local decision's, with its real Remaining. This is the default.
	//
	// The shared default store sweeps by the latest time its callers pass
	// (see store.Memory): limiters on virtual clocks (WithClock) that run
	// behind one another are judged at the latest. Tests of outages on a
	// virtual clock should give their own store, e.g.
	// WithFallback(store.NewMemory(store.WithMemoryClock(clock)), 1).
	FailLocal FailurePolicy = iota
	// FailOpen admits the request, without any bound: a store outage costs
	// protection, not availability. The Result has Allowed true, Limit set,
	// Remaining 0, RetryAfter and ResetAfter 0.
	FailOpen
	// FailClosed denies the request: a store outage costs availability, not
	// protection. The Result has Allowed false, Limit set, Remaining 0, and
	// RetryAfter = ResetAfter = FailClosedRetryAfter.
	FailClosed
)

// FailClosedRetryAfter is the RetryAfter of a request denied by FailClosed.
const FailClosedRetryAfter = time.Second

func (p FailurePolicy) String() string {
	switch p {
	case FailLocal:
		return "fail-local"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// DefaultTimeout bounds one decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// MinTimeout is the shortest timeout WithTimeout accepts. A decision that
// must open a connection first includes a TCP dial and the client's
// handshake (HELLO, AUTH) before its script: on a busy host that alone can
// take milliseconds, and a timeout below it silently turns limiting off
// (measured on a loaded 2-core host: 1ms admitted everything with not one
// decision reaching Redis, 2ms let 7x the limit through, 5ms 3x).
const MinTimeout = 10 * time.Millisecond

// DefaultKeyPrefix is prepended to every Redis key unless WithKeyPrefix says
// otherwise.
const DefaultKeyPrefix = "ratelimit:"

// Limiter applies one strategy through one store. It holds no per-key state
// itself, so any number of Limiters (in any number of processes) over one
// shared store enforce one limit together.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	strategy algorithm.Strategy
	decider  algorithm.Strategy // strategy, in its penalty box (WithPenalty) if any
	store    store.Store
	fallback *fallback    // nil without WithFallback
	denials  *denialCache // nil without WithDenialCache
	leases   *leases      // nil without WithLeases
	peeking  bool         // a view of a limiter for Peek: leases only look
	cfg      config
	waits    *waitQueues // WaitN's queues
}

// New returns a Limiter applying s through st. It returns an error wrapping
// ErrInvalidConfig (and algorithm.ErrInvalidStrategy for a bad strategy) for
// a nil or invalid strategy, a nil store, or an invalid option; and when a
// limiter of this process, still reachable, over the same store and key
// prefix, has the same name (WithName, or the strategy's name) or the same
// algorithm but another strategy's parameters: the two would silently share
// keys under different rules. Limiters with the same strategy, name and
// prefix are one limit, as a fleet's instances are.
func New(s algorithm.Strategy, st store.Store, opts ...Option) (*Limiter, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil strategy", ErrInvalidConfig)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if isNil(st) {
		return nil, fmt.Errorf("%w: nil %T store", ErrInvalidConfig, st)
	}
	cfg := defaults(s)
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(s); err != nil {
		return nil, err
	}
	decider := s
	if p := cfg.penalty; p != nil {
		if decider = algorithm.Penalize(s, *p); decider.Validate() != nil {
			return nil, fmt.Errorf("%w: WithPenalty: %w", ErrInvalidConfig, decider.Validate())
		}
	}
	fb, err := newFallback(decider, &cfg)
	if err != nil {
		return nil, err
	}
	if cfg.breaker == nil && !cfg.noBreaker {
		cfg.breaker = newDefaultBreaker()
	}
	l := &Limiter{strategy: s, decider: decider, store: st, fallback: fb, cfg: cfg, waits: &waitQueues{}}
	if cfg.denialKeys > 0 {
		l.denials = newDenialCache(cfg.denialKeys, cfg.clock != nil)
	}
	if cfg.leaseSize > 0 {
		if err := checkLeasable(decider, st); err != nil {
			return nil, err
		}
		l.leases = newLeases(cfg.leaseSize, cfg.leaseMaxAge, cfg.clock != nil)
		l.leases.sweep = func() {
			var now time.Time // the monotonic clock's
			if l.cfg.clock != nil {
				now = l.cfg.clock()
			}
			l.sweepLeases(now)
		}
	}
	if err := claimKeys(l); err != nil {
		return nil, err
	}
	return l, nil
}

// Strategy returns the limiter's strategy.
func (l *Limiter) Strategy() algorithm.Strategy { return l.strategy }

// Name returns the limiter's name (WithName; default the strategy's name).
func (l *Limiter) Name() string { return l.cfg.name }

// KeyPrefix returns the prefix of the limiter's keys (WithKeyPrefix, WithName).
func (l *Limiter) KeyPrefix() string { return l.cfg.prefix }

// Policy returns the limiter's failure policy.
func (l *Limiter) Policy() FailurePolicy { return l.cfg.policy }

// Shadow reports whether the limiter is in shadow mode (WithShadow):
// adapters then leave out rate-limit headers unless told to send them.
func (l *Limiter) Shadow() bool { return l.cfg.shadow }

// Breaker returns the limiter's circuit breaker (WithBreaker; by default one
// of its own), or nil after WithoutBreaker.
func (l *Limiter) Breaker() *Breaker { return l.cfg.breaker }

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether a request of cost n by key may proceed now, and
// records it if so.
//
// An empty or over-long key, n < 1, or a clock reading out of range is an
// error (ErrInvalidKey, ErrInvalidCost, ErrClockOutOfRange) with a denied
// Result that has only Limit set, and nothing is recorded. n above the limit is a plain
// denial, not an error, and leaves the key as it was.
//
// The decision takes at most the limiter's timeout. When the store cannot
// decide, the fallback does (WithFallback), or else the FailurePolicy: the
// Result follows it and the error wraps ErrStoreUnavailable and the cause.
// While the circuit breaker is open (see Breaker) the store is not called
// and the error also wraps ErrCircuitOpen. A deadline that the limiter's
// timeout sets and that passes during the call is the store not answering
// in time: ErrStoreUnavailable and context.DeadlineExceeded, counted by the
// breaker.
//
// A caller that is gone is never admitted, whatever the policy: if ctx is
// done (cancelled, or its own deadline passed) before, during or at the end
// of the call, the Result is denied (Allowed false, Limit set, everything
// else zero) and the error wraps ctx's error and not ErrStoreUnavailable —
// the caller gave up, the store is not blamed and the breaker counts
// nothing. Admitting instead would let any client past the limit by
// cancelling its own request (an HTTP client that half-closes its
// connection cancels the request's context). When the store had already
// admitted the request, its cost stays charged.
//
// The Observer (WithObserver), if any, is told about every decision before
// AllowN returns.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	if l.cfg.observer != nil {
		return l.observed(ctx, key, n)
	}
	res, o, err := l.decide(ctx, key, n)
	if l.cfg.shadow {
		res = shadowed(res, o)
	}
	return res, err
}

// shadowed is the Result of a shadow limiter's decision res (see
// WithShadow): a denial becomes a shadow admission, unless the caller is
// gone or the input was invalid (no decision was made).
func shadowed(res Result, o outcome) Result {
	if !res.Allowed && !o.invalid() && o.by() != DecidedByCaller {
		res.Allowed, res.Shadow = true, true
	}
	return res
}

// observed makes a decision and tells the observer about it.
func (l *Limiter) observed(ctx context.Context, key string, n int64) (Result, error) {
	start := time.Now()
	res, o, err := l.decide(ctx, key, n)
	out := res
	if l.cfg.shadow {
		out = shadowed(res, o)
	}
	if !o.invalid() {
		route, _ := ctx.Value(routeKey{}).(string)
		l.cfg.observer.Observe(Event{
			Name:        l.cfg.name,
			Route:       route,
			Algorithm:   l.strategy.Name(),
			Key:         key,
			N:           n,
			Allowed:     res.Allowed,
			Shadow:      out.Shadow,
			Remaining:   res.Remaining,
			Latency:     time.Since(start),
			Err:         err,
			Policy:      l.cfg.policy,
			DecidedBy:   o.by(),
			CircuitOpen: o.circuitOpen(),
			Breaker:     l.cfg.breaker,
		})
	}
	return out, err
}

// outcome says how a decision was made, for the observer: a Decider in the
// low bits and two flags. It is one byte so that decide's results fit in
// registers (a wider outcome measurably slowed the happy path).
type outcome uint8

const (
	outcomeCircuitOpen outcome = 1 << 6 // the breaker kept the store out of it
	outcomeInvalid     outcome = 1 << 7 // bad input: no decision was made
)

func decidedBy(by Decider, circuitOpen bool) outcome {
	o := outcome(by)
	if circuitOpen {
		o |= outcomeCircuitOpen
	}
	return o
}

func (o outcome) by() Decider       { return Decider(o &^ (outcomeCircuitOpen | outcomeInvalid)) }
func (o outcome) circuitOpen() bool { return o&outcomeCircuitOpen != 0 }
func (o outcome) invalid() bool     { return o&outcomeInvalid != 0 }

// decide makes one decision: through the breaker to the store, or degraded.
func (l *Limiter) decide(ctx context.Context, key string, n int64) (Result, outcome, error) {
	req, err := l.request(key, n)
	if err != nil {
		return Result{Limit: l.strategy.Limit()}, outcomeInvalid, err
	}
	if err := ctx.Err(); err != nil {
		return l.callerGone(key, err)
	}
	if l.cfg.strategyFor != nil {
		if req.Strategy, err = l.deciderFor(ctx, key); err != nil {
			return Result{Limit: l.strategy.Limit()}, outcomeInvalid, err
		}
	}
lease:
	for ls := l.leases; ls != nil; {
		// req.Now is zero without WithClock: spend reads the monotonic
		// clock, once.
		if res, ok := ls.spend(key, req.Strategy, n, req.Now, l.peeking); ok {
			return res, outcome(DecidedByLease), nil
		}
		ready := ls.inFlight(key)
		if ready == nil || l.peeking {
			break
		}
		select { // for the key's lease round trip, then spend from it
		case <-ready:
			if err := ctx.Err(); err != nil { // both were ready: the caller is gone
				return l.callerGone(key, err)
			}
		case <-ctx.Done():
			return l.callerGone(key, ctx.Err())
		}
	}
	sent := req.Now // with a denial cache or leases: when the request is sent
	if sent.IsZero() && (l.denials != nil || l.leases != nil) {
		sent = time.Now()
	}
	var epoch uint64
	if dc := l.denials; dc != nil {
		var res Result
		var ok bool
		if res, ok, epoch = dc.answer(key, req.Strategy, n, sent); ok {
			return res, outcome(DecidedByCache), nil
		}
	}
	// The breaker's closed path is written out here rather than called: the
	// key's circuit, then two atomic loads and no clock (see Breaker).
	var c *circuit
	var p probe
	if b := l.cfg.breaker; b != nil {
		c = b.circuitFor(l.store, key)
		if c.open.Load() {
			var ok bool
			if p, ok = c.admitOpen(l.cfg.timeout); !ok {
				return l.degraded(ctx, req, errCircuitOpen, true)
			}
		}
	}
	var d algorithm.Decision
	switch {
	case p != 0:
		d, err = l.probe(ctx, req, c, p) // which tells c how it went
	case l.leases != nil && !l.peeking:
		if d, err = l.leases.take(ctx, l.store, req, sent); err == errLookAgain {
			goto lease // the key's lease changed since the loop looked at it
		}
	default:
		d, err = l.store.Decide(ctx, req)
	}
	if err != nil {
		if cerr := doneErr(ctx); cerr != nil {
			// The caller gave up, or its own deadline (not the limiter's)
			// ended the wait: that says nothing about the store, and a
			// client must not be able to open the breaker for everyone by
			// sending short deadlines.
			return l.callerGone(key, cerr)
		}
		if p == 0 {
			c.failed(err)
		}
		return l.degraded(ctx, req, fmt.Errorf("%w: %w", ErrStoreUnavailable, err), false)
	}
	if p == 0 && c != nil && c.run.Load() {
		c.answered() // the store answered during a run of failures
	}
	res := resultOf(req.Strategy, d)
	if dc := l.denials; dc != nil {
		ban := d.Ban()
		if l.peeking {
			ban = 0 // a peek's ban may be one it would start: none is remembered
		}
		dc.learn(key, req.Strategy, n, sent, epoch, res, ban)
	}
	if err := ctx.Err(); err != nil {
		return l.callerGone(key, err)
	}
	return res, outcome(DecidedByStore), nil
}

// callerGone is the decision for a caller whose context is done: denied,
// whatever the policy, with err (ctx's error) wrapped.
func (l *Limiter) callerGone(key string, err error) (Result, outcome, error) {
	return Result{Limit: l.strategy.Limit()}, outcome(DecidedByCaller), fmt.Errorf("fleetlimit: decision for %q: caller gone: %w", key, err)
}

// doneErr is ctx.Err(), or context.DeadlineExceeded once ctx's own deadline
// has passed: Err lags the deadline until the context's timer has run.
func doneErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// request validates a call and builds the store request.
func (l *Limiter) request(key string, n int64) (store.Request, error) {
	if err := checkKey(key); err != nil {
		return store.Request{}, err
	}
	if n < 1 || n > algorithm.MaxInt {
		return store.Request{}, fmt.Errorf("%w: %d, want 1 to 2^53", ErrInvalidCost, n)
	}
	req := store.Request{
		Strategy: l.decider,
		Prefix:   l.cfg.prefix,
		Key:      key,
		N:        n,
		Timeout:  l.cfg.timeout,
	}
	if l.cfg.clock != nil {
		now := l.cfg.clock()
		if us := now.UnixMicro(); us < 0 || us > maxTimeMicros {
			return store.Request{}, fmt.Errorf("%w: %v is outside 1970-01-01 to %v", ErrClockOutOfRange, now, MaxTime())
		}
		req.Now = now
	}
	return req, nil
}

// checkKey returns ErrInvalidKey, wrapped, for an empty or over-long key.
func checkKey(key string) error {
	if key == "" || len(key) > store.MaxKeyLen {
		return fmt.Errorf("%w: length %d, want 1 to %d bytes", ErrInvalidKey, len(key), store.MaxKeyLen)
	}
	return nil
}

// degraded decides req, which the store did not, with the fallback or else
// the policy; err (wrapping ErrStoreUnavailable) is returned either way.
func (l *Limiter) degraded(ctx context.Context, req store.Request, err error, circuitOpen bool) (Result, outcome, error) {
	if fb := l.fallback; fb != nil {
		req.Strategy = fb.strategyFor(req.Strategy, l.cfg.strategyFor != nil)
		d, ferr := fb.store.Decide(ctx, req)
		if ferr == nil {
			return resultOf(req.Strategy, d), decidedBy(DecidedByFallback, circuitOpen), err
		}
		err = fmt.Errorf("%w (and the fallback failed: %w)", err, ferr)
	}
	return l.byPolicy(), decidedBy(DecidedByPolicy, circuitOpen), err
}

// byPolicy returns the policy's Result for a decision neither the store nor
// the fallback made: FailOpen admits; FailClosed, and FailLocal whose local
// store failed too (it was closed), deny.
func (l *Limiter) byPolicy() Result {
	r := Result{Limit: l.strategy.Limit()}
	if l.cfg.policy == FailOpen {
		r.Allowed = true
	} else {
		r.RetryAfter, r.ResetAfter = FailClosedRetryAfter, FailClosedRetryAfter
	}
	return r
}

// config holds every option; defaults live in defaults.
type config struct {
	name      string
	named     bool // WithName was given
	prefix    string
	prefixSet bool // WithKeyPrefix was given
	clock     func() time.Time
	policy    FailurePolicy
	timeout   time.Duration
	shadow    bool

	breaker           *Breaker // nil: a breaker of its own, unless noBreaker
	noBreaker         bool
	observer          Observer
	fallbackStore     store.Store
	fallbackInstances int64
	strategyFor       func(context.Context, string) (algorithm.Strategy, error)
	denialKeys        int           // WithDenialCache; 0: none
	leaseSize         int64         // WithLeases; 0: none
	leaseMaxAge       time.Duration // WithLeases
	penalty           *algorithm.Penalty

	errs []error
}

func defaults(s algorithm.Strategy) config {
	return config{
		name:    s.Name(),
		prefix:  DefaultKeyPrefix,
		policy:  FailLocal,
		timeout: DefaultTimeout,
	}
}

func (c *config) validate(s algorithm.Strategy) error {
	switch {
	case c.prefixSet:
	case c.named:
		// Named limiters keep separate state by default (see WithName).
		c.prefix = DefaultKeyPrefix + c.name + ":"
	default:
		c.prefix = DefaultKeyPrefix + parameterNamespace(s) + ":"
	}
	if strings.ContainsAny(c.prefix, "{}") {
		c.errs = append(c.errs, fmt.Errorf("key prefix %q contains a brace, which would move every key into one Redis Cluster slot", c.prefix))
	}
	if len(c.prefix) > store.MaxKeyLen {
		c.errs = append(c.errs, fmt.Errorf("key prefix is %d bytes, more than %d", len(c.prefix), store.MaxKeyLen))
	}
	if len(c.errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(c.errs...))
	}
	return nil
}

// parameterNamespace names the state of an unnamed limiter after its
// strategy's parameters, so that two unnamed limiters share state exactly
// when they apply the same rule: the script's arguments joined by "." when
// they are short and plain (e.g. "100.60000000" for a sliding log of 100 per
// minute), else their FNV-1a hash. The algorithm's tag follows the user key
// in every Redis key, so it is not repeated here.
func parameterNamespace(s algorithm.Strategy) string {
	var b strings.Builder
	plain := true
	for i, a := range s.ScriptArgs() {
		if i > 0 {
			b.WriteByte('.')
		}
		v := fmt.Sprint(a)
		plain = plain && v != "" && strings.Trim(v, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_") == ""
		b.WriteString(v)
	}
	if plain && b.Len() > 0 && b.Len() <= 64 {
		return b.String()
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(b.String()))
	return fmt.Sprintf("h%016x", h.Sum64())
}

// Option configures New.
type Option interface{ apply(*config) }

type option func(*config)

func (f option) apply(c *config) { f(c) }

// WithClock makes the limiter read time from now instead of the store's
// clock. Default: the store's clock — the Redis server's TIME, read inside
// the script, so app servers' clock skew cannot bend a limit; for
// store.Memory its own (see store.WithMemoryClock). Use it for tests and simulations (virtual time), or to save
// Redis the TIME call; note that Redis still expires keys on its own clock.
func WithClock(now func() time.Time) Option {
	return option(func(c *config) {
		if now == nil {
			c.errs = append(c.errs, errors.New("nil clock"))
		}
		c.clock = now
	})
}

// WithKeyPrefix sets the string prepended verbatim to every Redis key (and
// the namespace in store.Memory). Default: DefaultKeyPrefix ("ratelimit:"),
// followed by the name and ":" when WithName is given, or else by the
// strategy's parameters (e.g. "ratelimit:100.60000000:" for a sliding log of
// 100 per minute), so that unnamed limiters with different limits never
// share state by accident. Limiters with the
// same prefix and algorithm share the state of a key: that is how the
// instances of a fleet share a limit, so give them the same prefix (or
// name), with the same parameters; give endpoints with separate limits
// separate prefixes (or names). It must not contain braces (see
// store.RedisKey).
func WithKeyPrefix(prefix string) Option {
	return option(func(c *config) { c.prefix, c.prefixSet = prefix, true })
}

// WithFailurePolicy sets what a decision is when the store cannot answer.
// Default: FailLocal.
func WithFailurePolicy(p FailurePolicy) Option {
	return option(func(c *config) {
		if p != FailLocal && p != FailOpen && p != FailClosed {
			c.errs = append(c.errs, fmt.Errorf("unknown failure policy %d", int(p)))
		}
		c.policy = p
	})
}

// WithTimeout bounds one decision, the store's round trip included. Default:
// DefaultTimeout (100ms): far above a healthy Redis round trip (well under a
// millisecond on a LAN), far below what a user notices. It must be at least
// MinTimeout (10ms), which leaves room for a cold connection.
func WithTimeout(d time.Duration) Option {
	return option(func(c *config) {
		if d < MinTimeout {
			c.errs = append(c.errs, fmt.Errorf("timeout %v is below MinTimeout (%v): a decision that must dial Redis first would time out and degrade", d, MinTimeout))
		}
		c.timeout = d
	})
}

// WithName names the limiter in reports, observers and the RateLimit-Policy
// header. Default: the strategy's name (unnamed limiters keep their state
// under their parameters instead; see WithKeyPrefix). Unless WithKeyPrefix
// is given, the
// name also becomes part of the key prefix (DefaultKeyPrefix + name + ":"),
// so that limiters named for different endpoints keep separate state for
// the same user key, and limiters of the same name, in every instance of a
// fleet, share it. The name then must not contain braces.
func WithName(name string) Option {
	return option(func(c *config) {
		if name == "" {
			c.errs = append(c.errs, errors.New("empty name"))
		}
		c.name, c.named = name, true
	})
}

// WithBreaker makes the limiter use b as its circuit breaker. Default: a
// breaker of its own, NewBreaker(BreakerConfig{}). Pass one Breaker to every
// limiter over the same store so that they open, probe and close together
// (see Breaker). b must not be nil; use WithoutBreaker to have none.
func WithBreaker(b *Breaker) Option {
	return option(func(c *config) {
		if b == nil {
			c.errs = append(c.errs, errors.New("nil breaker (use WithoutBreaker to have none)"))
		}
		c.breaker, c.noBreaker = b, false
	})
}

// WithoutBreaker removes the circuit breaker: every decision calls the store,
// and a dead store costs a full timeout per decision. For tests of the store
// path itself, and for stores that cannot fail.
func WithoutBreaker() Option {
	return option(func(c *config) { c.breaker, c.noBreaker = nil, true })
}

// WithObserver has o told about every decision (see Observer). Default: none.
func WithObserver(o Observer) Option {
	return option(func(c *config) {
		if o == nil {
			c.errs = append(c.errs, errors.New("nil observer"))
		}
		c.observer = o
	})
}

// WithShadow puts the limiter in shadow mode, to roll a new limit out
// safely: it decides and records exactly as it would otherwise (the store
// holds the same state, the breaker and the failure policy apply), and the
// Observer sees every decision as made, denials included ("would deny":
// Event.Allowed false, Event.Shadow true), but a denial is returned as a
// shadow admission: Allowed true and Shadow true (see Result.Shadow). This
// covers denials by the failure policy too. A caller whose context is done
// is still denied: that is not the limit's decision. Default: off.
func WithShadow() Option {
	return option(func(c *config) { c.shadow = true })
}
