package fleetlimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/internal/denial"
	"github.com/fleetlimit/fleetlimit/internal/keyed"
	"github.com/fleetlimit/fleetlimit/internal/lease"
	"github.com/fleetlimit/fleetlimit/store"
)

var (
	// ErrStoreUnavailable is wrapped by the error of every decision the store
	// could not make (refused, timed out, or failed): the Result that comes
	// with it was decided by the FailurePolicy. A store (or go-redis client)
	// used after Close is not an outage but a mistake: its decisions are
	// denied with an error wrapping store.ErrClosed, and no policy decides.
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
	// ErrClockOutOfRange is returned when the WithClock clock, or the
	// store's own (store.ErrClockOutOfRange), reads a time before the Unix
	// epoch or too far ahead for exact arithmetic (after MaxTime); nothing
	// is recorded, and no failure policy decides.
	ErrClockOutOfRange = errors.New("fleetlimit: clock out of range")
)

// MaxTime returns the latest clock reading a Limiter accepts (in the year
// 2235, TestMaxTimeYear): beyond it, times plus windows would leave the
// 2^53 microseconds that Lua holds exactly.
func MaxTime() time.Time { return time.UnixMicro(algorithm.MaxTimeMicros) }

// Limiter applies one strategy through one store. It holds no per-key state
// itself but for the in-process caches it is given (WithLeases,
// WithDenialCache), so any number of Limiters (in any number of processes)
// over one shared store enforce one limit together.
//
// Every decision — AllowN, Peek, Refund, and each attempt of WaitN — goes
// through one pipeline, decide, in the mode of its entry point (see mode).
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	strategy algorithm.Strategy // the limiter's own (Strategy)
	rule     algorithm.Strategy // strategy as applied to keys: in its penalty box (WithPenalty) if any
	store    store.Store
	shards   store.Sharded  // store as a store.Sharded, for the breaker; nil when it is not
	fallback *fallback      // nil unless the policy is FailLocal
	denials  *denial.Cache  // nil without WithDenialCache
	leases   *lease.Table   // nil without WithLeases
	sweep    *sweeper       // the leases' sweep; nil without WithLeases
	skew     *skewWatch     // nil without WithClock, or over a store without a clock
	ov       *overrideTable // nil without WithOverrides
	reg      *registration  // nil without WithRegistry
	boxes    penaltyBoxes   // the tiers in the penalty box (WithPenalty and WithStrategyFor)
	// The pipeline's modes, one per entry point.
	allow, peek, refund mode
	holds               holdModes    // Acquire's, Release's and Renew's (permit.go)
	reserves            reserveModes // Reserve's and its Settle's (reserve.go)
	atMost              mode         // AllowAtMost's (atmost.go)
	cfg                 config
	waits               *waitQueues // WaitN's queues
}

// mode is what an entry point asks of each stage of the pipeline: which
// store operation decides, and which in-process state it may use. Modes
// are built once, by New.
type mode struct {
	// op is the store's operation for this mode, as a Store: the store
	// itself (AllowN), or a view of its Peek or Refund (viewStore). nil:
	// the store cannot (Peek and Refund then refuse with
	// errors.ErrUnsupported).
	op store.Store
	// mem is op when it is a *store.Memory (AllowN's, over one), which the
	// remote stage calls by pointer (store.Memory.DecideTo); nil otherwise.
	mem *store.Memory
	// fallback decides while the store cannot (FailLocal); nil: the
	// policy does.
	fallback *fallback
	// leases are spent from and taken (AllowN); looks are only looked at
	// (Peek: answered from a lease that holds the cost, nothing spent);
	// spends are spent from when they hold the whole cost, and never taken
	// (AllowAtMost).
	leases, looks, spends *lease.Table
	// denials answers repeats of remembered denials and learns new ones;
	// bans says whether a penalty box's bans are learnt (not for a peek,
	// whose ban is one it would start).
	denials *denial.Cache
	bans    bool
	// local: the mode has leases, looks, spends or denials, so the local
	// stage runs.
	local bool
	// grants: a partial grant (AllowAtMost), whose cost start checks
	// against the key's rule (checkGrant).
	grants bool
}

// New returns a Limiter applying s through st. It returns an error wrapping
// ErrInvalidConfig (and algorithm.ErrInvalidStrategy for a bad strategy) for
// a nil or invalid strategy, a nil store, or an invalid option; and when a
// limiter of this process, still reachable, over the same store and key
// prefix, has the same name (WithName, or the strategy's name) or the same
// algorithm but another strategy's parameters: the two would silently share
// keys under different rules. Limiters with the same strategy, name and
// prefix are one limit, as a fleet's instances are.
// With WithStrictRegistry it also fails (ErrRuleConflict) when a live
// instance of the fleet runs the name and prefix under another rule.
func New(s algorithm.Strategy, st store.Store, opts ...Option) (*Limiter, error) {
	cfg, err := configure(s, st, opts)
	if err != nil {
		return nil, err
	}
	ruled := s
	if p := cfg.penalty; p != nil {
		if ruled = algorithm.Penalize(s, *p); ruled.Validate() != nil {
			return nil, fmt.Errorf("%w: WithPenalty: %w", ErrInvalidConfig, ruled.Validate())
		}
	}
	fb, err := newFallback(ruled, &cfg)
	if err != nil {
		return nil, err
	}
	l := &Limiter{strategy: s, rule: ruled, store: st, fallback: fb, cfg: cfg, waits: &waitQueues{}}
	l.shards, _ = st.(store.Sharded)
	clock := keyed.Clock{Exact: cfg.clock != nil}
	if cfg.denialKeys > 0 {
		l.denials = denial.New(cfg.denialKeys, clock)
	}
	if err := l.buildLeases(clock); err != nil {
		return nil, err
	}
	l.buildModes()
	l.buildReserveModes()
	l.buildAtMostMode()
	if err := l.buildHoldModes(); err != nil {
		return nil, err
	}
	l.skew = newSkewWatch(l)
	if l.ov, err = newOverrideTable(l); err != nil {
		return nil, err
	}
	if err := claimKeys(l); err != nil {
		return nil, err
	}
	if l.reg, err = register(l); err != nil {
		return nil, err
	}
	return l, nil
}

// configure checks s and st and applies opts over the defaults.
func configure(s algorithm.Strategy, st store.Store, opts []Option) (config, error) {
	if s == nil {
		return config{}, fmt.Errorf("%w: nil strategy", ErrInvalidConfig)
	}
	if err := s.Validate(); err != nil {
		return config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if st == nil {
		return config{}, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if isNil(st) {
		return config{}, fmt.Errorf("%w: nil %T store", ErrInvalidConfig, st)
	}
	cfg := defaults(s)
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(s); err != nil {
		return config{}, err
	}
	if cfg.breaker == nil && !cfg.noBreaker {
		cfg.breaker = newDefaultBreaker()
	}
	return cfg, nil
}

// buildModes builds the modes of AllowN, Peek and Refund (see mode).
func (l *Limiter) buildModes() {
	l.allow = mode{op: l.store, fallback: l.fallback, leases: l.leases, denials: l.denials, bans: true}
	if p, ok := l.store.(store.Peeker); ok {
		l.peek = mode{op: viewStore(p.Peek), looks: l.leases, denials: l.denials}
		if fb := l.fallback; fb != nil {
			if fp, ok := fb.store.(store.Peeker); ok {
				l.peek.fallback = &fallback{strategy: fb.strategy, store: viewStore(fp.Peek), instances: fb.instances}
			}
		}
	}
	if rf, ok := l.store.(store.Refunder); ok {
		l.refund = mode{op: viewStore(rf.Refund)}
	}
	for _, m := range []*mode{&l.allow, &l.peek, &l.refund} {
		m.local = m.leases != nil || m.looks != nil || m.denials != nil
		m.mem, _ = m.op.(*store.Memory)
	}
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
// The decision takes at most the limiter's timeout, which the store is
// given as Request.Timeout (a Store of your own must honour it, as Memory
// and Redis do: see store.Store.Decide). When the store cannot
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
	if l.cfg.shadow {
		res, o, err := l.decide(ctx, key, n, &l.allow)
		return shadowed(res, o), err
	}
	// decide's body, one call less on the path every request takes.
	c := call{m: &l.allow}
	_, err := l.stages(ctx, &c, key, n)
	return c.res, err
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

// call is one decision on its way through the pipeline: what the stages
// learn and pass on. It lives on decide's stack.
type call struct {
	m     *mode
	req   store.Request
	sent  time.Time          // when the request left for the store, for the in-process caches (zero without them)
	lease lease.Call         // with leases, once the lease cannot serve: the deadline (now + the limiter's timeout) of every wait and round trip of the call
	epoch uint64             // the denial cache's shard epoch at its look-up, for learn
	ci    *circuit           // the key's circuit; nil without a breaker
	probe probe              // this call's probe of an open circuit; 0: none
	d     algorithm.Decision // the store's decision, once remote has it
	o     outcome            // who decided, once remote knows
	res   Result             // the call's Result, once a stage has decided it (see stages)
	// rule, when set, is the rule the call is decided by in place of the
	// key's tier and override: a settle's, the reservation's rule
	// (Reservation.Settle). Looked at only with tiers or overrides on.
	rule algorithm.Strategy
}

// decide is the one path of every decision: AllowN, Peek and Refund (each
// in its mode m) and WaitN's attempts go through it, stage by stage, and
// the first stage that decides ends it:
//
//  1. start: validate the call, check the caller, apply the key's tier;
//     then its override (WithOverrides), which may decide it in process;
//  2. local: in process — the key's lease, then a remembered denial;
//  3. remote: the store, through the key's circuit — a probe, a lease
//     round trip, or the mode's operation — and the breaker told how the
//     store did; when it cannot decide, degraded: the fallback, else the
//     failure policy;
//  4. settle: the denial cache learns the store's answer, and a caller
//     gone meanwhile is denied.
//
// Its Result is denied with only Limit set for bad input (outcomeInvalid)
// and for a caller gone (DecidedByCaller).
func (l *Limiter) decide(ctx context.Context, key string, n int64, m *mode) (Result, outcome, error) {
	c := call{m: m}
	o, err := l.stages(ctx, &c, key, n)
	return c.res, o, err
}

// decideCall is decide for a call whose request may carry a permit
// operation (c.req.Permit, which start keeps): Acquire, Release, Renew.
func (l *Limiter) decideCall(ctx context.Context, c *call, key string, n int64) (Result, outcome, error) {
	o, err := l.stages(ctx, c, key, n)
	return c.res, o, err
}

// stages runs decide's stages for c, leaving its Result in c.res. The
// Result is left in place, not returned, because a Result is too large for
// registers: returned through each stage, it would be copied at each, and
// those copies cost more than the stages themselves when every feature is
// off (BenchmarkOverhead).
func (l *Limiter) stages(ctx context.Context, c *call, key string, n int64) (outcome, error) {
	m := c.m
	if o, err := l.start(ctx, c, key, n); err != nil {
		c.res = l.none()
		return o, err
	}
	if l.ov != nil {
		if o, ok, err := l.overrideStage(ctx, c); ok {
			return o, err
		}
	}
	if m.local {
		if res, o, ok, err := l.local(ctx, c); ok {
			c.res = res
			return o, err
		}
	}
	if err := l.remote(ctx, c); err != nil {
		res, o, err := l.failed(ctx, c, err)
		c.res = res
		return o, err
	}
	return l.settle(ctx, c)
}

// none is the Result of no decision: denied, with only Limit set.
func (l *Limiter) none() Result { return Result{Limit: l.strategy.Limit()} }

// start validates the call, checks that its caller is still there, and
// builds its store request under the key's rule (WithStrategyFor).
func (l *Limiter) start(ctx context.Context, c *call, key string, n int64) (outcome, error) {
	if err := l.fill(&c.req, key, n); err != nil {
		return outcomeInvalid, err
	}
	if err := ctxdone.Err(ctx); err != nil {
		return outcome(DecidedByCaller), callerGone(key, err)
	}
	if w := l.skew; w != nil {
		w.due(c.req.Now)
	}
	if l.cfg.tiers != nil {
		var err error
		if c.rule != nil {
			c.req.Strategy = c.rule
		} else if c.req.Strategy, err = l.ruleFor(ctx, key); err != nil {
			return outcomeInvalid, err
		}
	}
	if c.m.grants && l.ov == nil { // with overrides, once the key's override applies (overrideStage)
		if err := checkGrant(c.req); err != nil {
			return outcomeInvalid, err
		}
	}
	return 0, nil
}

// request validates a call and builds its store request under the
// limiter's own rule.
func (l *Limiter) request(key string, n int64) (store.Request, error) {
	var req store.Request
	err := l.fill(&req, key, n)
	return req, err
}

// fill validates a call and fills req, its store request under the
// limiter's own rule (which it leaves partly filled on an error). The
// errors are built out of line (badKey, badCost, clockNow), keeping the
// path of a valid call short.
func (l *Limiter) fill(req *store.Request, key string, n int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if n < 1 || n > algorithm.MaxInt {
		return badCost(n)
	}
	req.Strategy, req.Prefix, req.Key, req.N, req.Timeout = l.rule, l.cfg.prefix, key, n, l.cfg.timeout
	if l.cfg.clock != nil {
		return l.clockNow(req)
	}
	return nil
}

// clockNow sets req.Now to the limiter's clock (WithClock), or returns
// ErrClockOutOfRange, wrapped, for a reading outside 1970 to MaxTime.
func (l *Limiter) clockNow(req *store.Request) error {
	now := l.cfg.clock()
	if us := now.UnixMicro(); us < 0 || us > algorithm.MaxTimeMicros {
		return fmt.Errorf("%w: %v is outside 1970-01-01 to %v", ErrClockOutOfRange, now, MaxTime())
	}
	req.Now = now
	return nil
}

// checkKey returns ErrInvalidKey, wrapped, for an empty or over-long key.
func checkKey(key string) error {
	if key == "" || len(key) > store.MaxKeyLen {
		return badKey(key)
	}
	return nil
}

// badKey is ErrInvalidKey, wrapped, for key.
func badKey(key string) error {
	return fmt.Errorf("%w: length %d, want 1 to %d bytes", ErrInvalidKey, len(key), store.MaxKeyLen)
}

// badCost is ErrInvalidCost, wrapped, for n.
func badCost(n int64) error {
	return fmt.Errorf("%w: %d, want 1 to 2^53", ErrInvalidCost, n)
}

// local decides the call in process when it can (ok): from the key's
// lease — waiting out a lease round trip of the key in flight — or from a
// remembered denial; and otherwise dates the call for the caches.
func (l *Limiter) local(ctx context.Context, c *call) (res Result, o outcome, ok bool, err error) {
	req, m := &c.req, c.m
	if ls := m.leases; ls != nil {
		if res, o, ok, err := l.fromLease(ctx, c, ls); ok {
			return res, o, true, err
		}
	} else if ls := cmp.Or(m.looks, m.spends); ls != nil {
		if d, served := ls.Spend(req.Key, req.Strategy, req.N, req.Now, m.looks != nil); served {
			return resultOf(req.Strategy, d), outcome(DecidedByLease), true, nil
		}
	}
	c.sent = req.Now
	if c.sent.IsZero() && (m.denials != nil || m.leases != nil) {
		c.sent = time.Now()
	}
	if dc := m.denials; dc != nil {
		d, age, hit, epoch := dc.Answer(req.Key, req.Strategy, req.N, c.sent)
		if hit {
			return aged(resultOf(req.Strategy, d), age), outcome(DecidedByCache), true, nil
		}
		c.epoch = epoch
	}
	return Result{}, 0, false, nil
}

// fromLease decides the call from the key's lease ls when it can (ok),
// waiting out the key's lease round trips in flight until the call's
// deadline, which it sets (now + the limiter's timeout) once the lease
// cannot serve at once; a deadline that passes is the store's timeout,
// counted by the key's circuit and decided degraded. Otherwise it leaves
// req.Timeout what remains of the deadline, for the store's stages.
func (l *Limiter) fromLease(ctx context.Context, c *call, ls *lease.Table) (res Result, o outcome, ok bool, err error) {
	req := &c.req
	// req.Now is zero without WithClock: the lease reads the monotonic
	// clock, once.
	if d, served := ls.Spend(req.Key, req.Strategy, req.N, req.Now, false); served {
		return resultOf(req.Strategy, d), outcome(DecidedByLease), true, nil
	}
	c.lease.Deadline = time.Now().Add(l.cfg.timeout)
	d, served, err := ls.Serve(ctx, req.Key, req.Strategy, req.N, req.Now, &c.lease)
	if err == nil && !served {
		if req.Timeout = time.Until(c.lease.Deadline); req.Timeout <= 0 {
			err = lease.ErrDeadline
		}
	}
	switch {
	case errors.Is(err, lease.ErrDeadline):
		// A wait behind another call's round trip that outlived this
		// call's timeout is the store not answering in time, as a round
		// trip of its own that times out is.
		if b := l.cfg.breaker; b != nil {
			c.ci = b.circuitFor(l.shards, req.Key)
		}
		res, o, err := l.failed(ctx, c, err)
		return res, o, true, err
	case err != nil:
		return l.none(), outcome(DecidedByCaller), true, callerGone(req.Key, err)
	case served:
		return resultOf(req.Strategy, d), outcome(DecidedByLease), true, nil
	}
	return Result{}, 0, false, nil
}

// remote decides the call in the store (c.d), through the key's circuit:
// as a probe once an open circuit's cool-down is over, by a lease round
// trip (which may end up served by another request's lease:
// DecidedByLease), or by the mode's operation; a store that answered is
// counted by the circuit. An open circuit returns errCircuitOpen.
func (l *Limiter) remote(ctx context.Context, c *call) error {
	var ok bool
	if c.ci, c.probe, ok = l.cfg.breaker.admit(l.shards, c.req.Key, l.cfg.timeout); !ok {
		c.o = outcomeCircuitOpen
		return errCircuitOpen
	}
	if c.m.leases != nil {
		c.m.leases.CountWait(&c.lease)
	}
	var served bool
	var err error
	switch {
	case c.probe != 0:
		c.d, err = l.probe(ctx, c.m.op, c.req, c.ci, c.probe) // which tells the circuit how it went
		return err
	case c.m.leases != nil && c.m.leases.First(c.req.Key, c.sent):
		c.d, err = c.m.op.Decide(ctx, c.req) // a key's first: exact, no lease
	case c.m.leases != nil:
		c.d, served, err = c.m.leases.Take(ctx, c.req.Key, c.req.Strategy, c.req.N, c.req.Now, c.sent, &c.lease, l.leaseTrip(c.req))
	case c.m.mem != nil:
		err = c.m.mem.DecideTo(ctx, &c.req, &c.d)
	default:
		c.d, err = c.m.op.Decide(ctx, c.req)
	}
	if err == nil && !served {
		c.ci.answered()
	}
	if served {
		c.o = outcome(DecidedByLease)
	}
	return err
}

// failed decides a call the store did not decide (err): a caller gone
// meanwhile is denied and the store not blamed (a client must not be able
// to open the breaker for everyone by sending short deadlines); a closed
// store is denied with its error; otherwise the circuit counts the failure
// and the decision is degraded.
func (l *Limiter) failed(ctx context.Context, c *call, err error) (Result, outcome, error) {
	if c.o.circuitOpen() {
		return l.degraded(ctx, c, err, true)
	}
	if cerr := ctxdone.Err(ctx); cerr != nil {
		return l.none(), outcome(DecidedByCaller), callerGone(c.req.Key, cerr)
	}
	if merr := mistake(c.req.Key, err); merr != nil {
		return l.none(), outcomeInvalid, merr
	}
	if c.probe == 0 {
		c.ci.failed(err)
	}
	return l.degraded(ctx, c, fmt.Errorf("%w: %w", ErrStoreUnavailable, err), false)
}

// mistake is the error of a store failure err that is the program's
// mistake, not an outage, or nil: a store or client used after Close, or a
// store whose own clock is out of range. No policy may admit for it, nor a
// breaker count it.
func mistake(key string, err error) error {
	switch {
	case errors.Is(err, store.ErrClosed):
		return fmt.Errorf("fleetlimit: decision for %q: %w (used after Close: nothing was decided, not even by the failure policy)", key, err)
	case errors.Is(err, store.ErrClockOutOfRange):
		return fmt.Errorf("fleetlimit: decision for %q: %w: %w (nothing was decided, not even by the failure policy)", key, ErrClockOutOfRange, err)
	}
	return nil
}

// settle turns the store's decision into the call's Result: the denial
// cache learns it, and a caller gone meanwhile is denied (its cost, if
// admitted, stays charged).
func (l *Limiter) settle(ctx context.Context, c *call) (outcome, error) {
	if dc := c.m.denials; dc != nil && c.o == outcome(DecidedByStore) {
		var ban time.Duration
		if c.m.bans {
			ban = c.d.Ban()
		}
		dc.Learn(c.req.Key, c.req.Strategy, c.req.N, c.sent, c.epoch, c.d, ban)
	}
	if err := ctxdone.Err(ctx); err != nil {
		c.res = l.none()
		return outcome(DecidedByCaller), callerGone(c.req.Key, err)
	}
	c.res.set(c.req.Strategy, &c.d)
	return c.o, nil
}

// callerGone is the error of a decision whose caller's context is done:
// err, ctx's error, wrapped. The decision is denied, whatever the policy.
func callerGone(key string, err error) error {
	return fmt.Errorf("fleetlimit: decision for %q: caller gone: %w", key, err)
}
