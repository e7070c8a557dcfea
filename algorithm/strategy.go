package algorithm

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// MaxInt is the largest limit, burst, cost or derived quantity a strategy
// accepts: 2^53, the largest integer a Lua number (an IEEE double) holds
// exactly. Past it the Go rule and its Lua twin would round differently.
const MaxInt = 1 << 53

// MinWindow and MaxWindow bound a strategy's window or refill period.
// Expiry in Redis has millisecond granularity, so shorter windows are refused;
// ten years keeps every timestamp plus window far below 2^53 microseconds.
const (
	MinWindow = time.Millisecond
	MaxWindow = 10 * 365 * 24 * time.Hour
)

// MaxTimeMicros is the latest decision time the rules take, in microseconds
// since the Unix epoch (in the year 2235): a time plus two windows stays
// within MaxInt. Times before the epoch are refused too.
const MaxTimeMicros = MaxInt - 2*int64(MaxWindow/time.Microsecond)

// ErrInvalidStrategy is wrapped by every configuration error a strategy
// reports from Validate.
var ErrInvalidStrategy = errors.New("invalid strategy")

// ErrStateType is returned by Decide when handed state made by another
// strategy type (two strategies sharing a Script.Tag).
var ErrStateType = errors.New("state belongs to another strategy")

// Decision is the outcome of one rate-limit decision.
type Decision struct {
	// Allowed reports whether the request passed (and its cost was recorded).
	Allowed bool
	// Limit is the strategy's capacity: limit, or burst for a token bucket.
	Limit int64
	// Remaining is the cost that could still pass right after this decision,
	// in whole units, never negative.
	Remaining int64
	// RetryAfter is 0 when Allowed, and otherwise > 0: how long until this same
	// request would pass with no other traffic. When n can never pass (n above
	// Limit) it is ResetAfter, or the strategy's Window when the key is
	// already full.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back at full capacity with no
	// further traffic; 0 when it already is. Redis keys expire after it.
	ResetAfter time.Duration
	// Granted is the cost a partial grant admitted (Granter.AtMost): from 0
	// to the request's n, with Allowed exactly when it is above 0, and the
	// other figures those of a request of that cost (of 1, when 0). Every
	// other decision leaves it 0: an admission there is of the whole cost.
	Granted int64

	members *[]Decision   // see Members; a pointer keeps Decision comparable
	ban     time.Duration // see Ban
	cut     int64         // see Cut
}

// Ban is how much longer the key is banned when d is a penalty box's
// (Penalize) denial made by a ban, or by the denial that starts one; 0
// otherwise. While a ban holds, the key's decisions change only with time:
// a banned request is not counted and charges nothing.
func (d Decision) Ban() time.Duration { return d.ban }

// DenialCounter is implemented by strategies whose state a denial changes,
// such as Penalize, which counts denials toward a ban. A denial of theirs
// is not a read-only answer: unless it is a ban (Decision.Ban), a repeat of
// the request must reach the store to be counted, and cannot be answered
// from memory (fleetlimit.WithDenialCache).
type DenialCounter interface {
	CountsDenials() bool
}

// Members returns each member's decision, in order, when d is a
// Composite's (see All), and nil otherwise. The slice must not be
// modified. A Composite's decisions compare equal (==) only to their
// copies.
func (d Decision) Members() []Decision {
	if d.members == nil {
		return nil
	}
	return *d.members
}

// State is the per-key state that an in-process store keeps for a strategy.
// Stores treat it as opaque: they create it with Strategy.NewState, guard it
// with a lock, and pass it back to Strategy.Decide.
type State interface {
	// FullAt is the instant, in microseconds since the Unix epoch on the
	// decision clock, from which this state is equivalent to a fresh one: a
	// store may drop it from then on.
	FullAt() int64
}

// Cloner is implemented by States that can be copied: a store peeks at a
// decision (fleetlimit.Limiter.Peek) by applying Decide to a copy of the
// key's state and dropping the copy, so the decision rule is written once.
// Clone returns a State that Decide treats exactly as the original and that
// shares no mutable memory with it. The caller holds the original's lock.
// The built-in strategies' states implement it; a custom strategy's state
// opts in by implementing it.
type Cloner interface {
	Clone() State
}

// What each strategy implements beyond Strategy, one row per interface
// (a caller finds out by a type assertion; a custom strategy opts in to
// each by implementing it). Every built-in state is a Cloner.
var (
	_, _, _, _, _, _    Refunder = (*tokenBucket)(nil), (*fixedWindow)(nil), (*slidingWindowLog)(nil), (*slidingWindowCounter)(nil), (*all)(nil), (*penalized)(nil)
	_, _, _, _, _, _    Leaser   = (*tokenBucket)(nil), (*fixedWindow)(nil), (*slidingWindowLog)(nil), (*slidingWindowCounter)(nil), (*all)(nil), (*penalized)(nil)
	_, _, _, _, _, _    Granter  = (*tokenBucket)(nil), (*fixedWindow)(nil), (*slidingWindowLog)(nil), (*slidingWindowCounter)(nil), (*all)(nil), (*penalized)(nil)
	_, _, _, _, _, _    Charger  = (*tokenBucket)(nil), (*fixedWindow)(nil), (*slidingWindowLog)(nil), (*slidingWindowCounter)(nil), (*all)(nil), (*penalized)(nil)
	_, _, _, _, _, _, _ Scaler   = (*tokenBucket)(nil), (*fixedWindow)(nil), (*slidingWindowLog)(nil), (*slidingWindowCounter)(nil), (*concurrency)(nil), (*all)(nil), (*penalized)(nil)
	_, _                Holder   = (*concurrency)(nil), (*all)(nil)

	_, _                LeaseReplier  = (*all)(nil), (*penalized)(nil)
	_                   DenialCounter = (*penalized)(nil)
	_, _, _, _, _, _, _ Cloner        = (*tokenBucketState)(nil), (*fixedWindowState)(nil), (*slidingLogState)(nil), (*slidingCounterState)(nil), (*concurrencyState)(nil), (*allState)(nil), (*penaltyState)(nil)
)

// Strategy is a rate-limiting algorithm with its parameters: a decision rule
// in plain Go and its Lua twin for Redis.
//
// Implementations must be immutable after construction and therefore safe for
// concurrent use; per-key mutable data lives in State. Decide must not do I/O
// or read a clock.
type Strategy interface {
	// Name identifies the algorithm in reports, e.g. "token_bucket".
	Name() string
	// Limit is the capacity a client sees: the most cost that can pass at once.
	Limit() int64
	// Window is the period over which Limit applies: the window, or for a
	// token bucket the time to refill from empty.
	Window() time.Duration
	// Validate reports a configuration error wrapping ErrInvalidStrategy.
	Validate() error
	// NewState returns the state of a key that has seen no requests.
	NewState() State
	// Decide applies a request of cost n >= 1 at now to st, mutating st only
	// when the request is admitted. The caller holds st's lock.
	Decide(st State, now time.Time, n int64) (Decision, error)
	// Script is the Lua twin of Decide (see package scripts for the calling
	// convention).
	Script() *Script
	// ScriptArgs are the script's parameters after now and n (ARGV[3...]).
	// The returned slice must not be modified.
	ScriptArgs() []any
}

// Script is a Lua decision rule with what a store needs to run it.
type Script struct {
	// Tag is a short name for the algorithm. Stores keep each tag's state
	// apart: the Redis store appends ":" + Tag to every key, so that two
	// algorithms limiting the same user never read each other's state.
	Tag string
	// Source is the Lua program.
	Source string
	// Keys are the suffixes of the keys the script reads and writes, in
	// KEYS order, each used as Tag is (the Redis store passes
	// prefix + "{" + key + "}:" + suffix). nil means one key, Tag: every
	// single strategy. A Composite has one per member.
	Keys []string
	// SHA1 is the hex SHA-1 digest of Source, for EVALSHA.
	SHA1 string
	// Peeks reports that Source honours the calling convention's peek flag
	// (see package scripts): sent "peek" as its last argument, it decides
	// as usual and writes nothing. The built-in scripts do; a store refuses
	// to peek with a script that does not. Default (NewScript): false.
	Peeks bool
	// Refunds reports that Source honours the calling convention's refund
	// mode (see package scripts): sent "refund" as its last argument, it
	// gives back n units as the strategy's Refund does (see Refunder). The
	// built-in scripts do; a store refuses to refund with a script that
	// does not. Default (NewScript): false.
	Refunds bool
	// Leases reports that Source honours the calling convention's lease
	// mode (see package scripts and Leaser). The token bucket's, the fixed
	// window's, the sliding log's and the sliding-window counter's do.
	// Default (NewScript): false.
	Leases bool
	// LeasesAhead reports that Source honours the calling convention's
	// ahead mode (see package scripts and LeaseTerms.Ahead): sent back_at,
	// back, want and "ahead", it leases as in its lease mode, except that
	// a lease it denies changes no state a denial would (a penalty box
	// counts no strike). Only scripts whose state a denial changes need
	// it: Penalize's sets it when it leases. Default (NewScript): false.
	LeasesAhead bool
	// Holds reports that Source honours the calling convention's permit
	// modes (see package scripts and Holder): sent a permit's identity and
	// "acquire", "release" or "renew" as its last two arguments, it applies
	// that operation as the strategy's Hold does. Concurrency's does.
	// Default (NewScript): false.
	Holds bool
	// Charges reports that Source honours the calling convention's charge
	// mode (see package scripts and Charger): sent the debt cap and
	// "charge" as its last two arguments, it charges n units past the
	// limit as the strategy's Charge does. The built-in scripts do, and
	// All's and a penalty box's when their strategies' do. Default
	// (NewScript): false.
	Charges bool
	// AtMost reports that Source honours the calling convention's atmost
	// mode (see package scripts and Granter): sent "atmost" as its last
	// argument, it admits as much of n as fits now, as the strategy's
	// AtMost does. The token bucket's, the fixed window's, the sliding
	// log's and the sliding-window counter's do, and so do All's and
	// Penalize's around them. Default (NewScript): false.
	AtMost bool
}

// builtin returns s with Peeks and Refunds set, for the built-in scripts.
func builtin(s *Script) *Script {
	s.Peeks, s.Refunds = true, true
	return s
}

// leasable returns s with Leases set, for the built-in scripts that lease.
func leasable(s *Script) *Script {
	s.Leases = true
	return s
}

// NewScript returns a Script for source, computing its digest.
func NewScript(tag, source string) *Script {
	sum := sha1.Sum([]byte(source))
	return &Script{Tag: tag, Source: source, SHA1: hex.EncodeToString(sum[:])}
}

// micros converts a duration to whole microseconds.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// duration converts microseconds to a duration.
func duration(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// ceilDiv returns ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv returns ⌊a/b⌋ for b > 0, rounding toward -∞ as Lua's math.floor does.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// gcd returns the greatest common divisor of a, b > 0.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// limitWindow is the parameters of a strategy that admits at most limit
// over a span of time (a fixed or sliding window, or a permit's ttl), and
// the Strategy methods that read them alone.
type limitWindow struct {
	limit  int64
	window int64 // µs
	d      time.Duration
	args   []any // the script's: the limit, then the window in µs
}

func newLimitWindow(limit int64, window time.Duration) limitWindow {
	return limitWindow{limit: limit, window: micros(window), d: window,
		args: []any{strconv.FormatInt(limit, 10), strconv.FormatInt(micros(window), 10)}}
}

func (p *limitWindow) Limit() int64          { return p.limit }
func (p *limitWindow) Window() time.Duration { return p.d }
func (p *limitWindow) ScriptArgs() []any     { return p.args }

// check is Validate's verdict for algo on the limit (checkCount) and the
// window, which the errors name span (checkWindow).
func (p *limitWindow) check(algo, span string) error {
	if err := checkCount(algo, "limit", p.limit); err != nil {
		return err
	}
	return checkWindow(algo, span, p.d)
}

// checkCount validates a positive integer parameter.
func checkCount(algo, what string, v int64) error {
	if v < 1 || v > MaxInt {
		return fmt.Errorf("%s: %s must be between 1 and 2^53, got %d: %w", algo, what, v, ErrInvalidStrategy)
	}
	return nil
}

// checkWindow validates a window or period.
func checkWindow(algo, what string, d time.Duration) error {
	if d < MinWindow || d > MaxWindow {
		return fmt.Errorf("%s: %s must be between %v and %v, got %v: %w", algo, what, MinWindow, MaxWindow, d, ErrInvalidStrategy)
	}
	if d%time.Microsecond != 0 {
		return fmt.Errorf("%s: %s must be a whole number of microseconds, got %v: %w", algo, what, d, ErrInvalidStrategy)
	}
	return nil
}

// neverPassable is the RetryAfter of a request that exceeds the capacity: the
// time until the key is full again, or a whole window when it already is, so
// that RetryAfter > 0 exactly when a request is denied.
func neverPassable(reset, window int64) int64 {
	if reset > 0 {
		return reset
	}
	return window
}

// isNilPointer reports whether v holds a nil pointer.
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}
