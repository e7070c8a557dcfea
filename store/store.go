package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// The interfaces each store implements, one row each: Memory and Redis
// implement every optional one (a caller finds out by a type assertion)
// but Sharded, which only Redis does.
var (
	_, _ Store     = (*Memory)(nil), (*Redis)(nil)
	_, _ Resetter  = (*Memory)(nil), (*Redis)(nil)
	_, _ Peeker    = (*Memory)(nil), (*Redis)(nil)
	_, _ Refunder  = (*Memory)(nil), (*Redis)(nil)
	_, _ Leaser    = (*Memory)(nil), (*Redis)(nil)
	_, _ Granter   = (*Memory)(nil), (*Redis)(nil)
	_, _ Charger   = (*Memory)(nil), (*Redis)(nil)
	_, _ Holder    = (*Memory)(nil), (*Redis)(nil)
	_, _ Clocked   = (*Memory)(nil), (*Redis)(nil)
	_, _ Overrider = (*Memory)(nil), (*Redis)(nil)
	_, _ Registrar = (*Memory)(nil), (*Redis)(nil)
	_    Sharded   = (*Redis)(nil)
)

// Store executes strategies atomically. Implementations are safe for
// concurrent use.
type Store interface {
	// Decide applies req.Strategy to the state of req.Key for a request of
	// cost req.N, atomically, and returns the decision. A store failure is an
	// error; the caller (fleetlimit.Limiter) decides what it means. It
	// returns once req.Timeout (when set) has passed, or ctx is done, with
	// an error: the Limiter passes its timeout there and nowhere else, so
	// a store that waits past it holds its callers as long as it waits, and
	// no failure policy decides meanwhile. Memory never waits; Redis
	// honours both.
	Decide(ctx context.Context, req Request) (algorithm.Decision, error)
	// Close releases the store's resources. The first call returns nil (or
	// the error of releasing them); later calls return ErrClosed, as does
	// Decide after Close.
	Close() error
}

// Resetter is implemented by stores that can put a key back at full
// capacity: Memory and Redis. fleetlimit.Limiter.Reset needs it.
type Resetter interface {
	// Reset removes the state of req.Key under req.Prefix for req.Strategy's
	// algorithm (its Script.Tag), atomically: a decision made after Reset
	// returns sees a fresh key, and one made concurrently sees the state
	// either before or after it, never part of it. The key's state for other
	// algorithms, prefixes and keys is untouched. req.N and req.Now are
	// ignored. Resetting a key that holds nothing succeeds. Errors are
	// classed as Decide's are.
	Reset(ctx context.Context, req Request) error
}

// Peeker is implemented by stores that can tell what a decision would be
// without making it: Memory and Redis. fleetlimit.Limiter.Peek needs it.
type Peeker interface {
	// Peek returns exactly what Decide(ctx, req) would return at this
	// moment, and changes nothing: the key's state (and in Redis its value
	// and TTL) is as before. It is atomic as Decide is. A strategy that
	// cannot be peeked (its State is not an algorithm.Cloner, or its
	// Script does not set Peeks) gets an error wrapping ErrRejected and
	// errors.ErrUnsupported. Errors are otherwise classed as Decide's are.
	Peek(ctx context.Context, req Request) (algorithm.Decision, error)
}

// Refunder is implemented by stores that can give units back to a key:
// Memory and Redis. fleetlimit.Limiter.Refund needs it.
type Refunder interface {
	// Refund gives req.N units back to req.Key's state at req.Now (the
	// store's clock when zero) by req.Strategy's refund rule
	// (algorithm.Refunder), atomically as Decide is, and returns the key's
	// standing after it. A key the store does not hold is at full capacity
	// and stays absent. A strategy that cannot be refunded (it is not an
	// algorithm.Refunder, or its Script does not set Refunds) gets an error
	// wrapping ErrRejected and errors.ErrUnsupported. Errors are otherwise
	// classed as Decide's are.
	Refund(ctx context.Context, req Request) (algorithm.Decision, error)
}

// Leaser is implemented by stores that can lend a key's capacity:
// Memory and Redis. fleetlimit.WithLeases needs it.
type Leaser interface {
	// Lease applies req.Strategy's lease rule (algorithm.Leaser) to
	// req.Key's state for a request of cost req.N on terms, atomically as
	// Decide is: it gives terms.Back units of an earlier lease back, then
	// takes up to terms.Want. A strategy that cannot lease (not an
	// algorithm.Leaser, or its Script does not set Leases) gets an error
	// wrapping ErrRejected and errors.ErrUnsupported. Errors are otherwise
	// classed as Decide's are.
	Lease(ctx context.Context, req Request, terms algorithm.LeaseTerms) (algorithm.Grant, error)
}

// Granter is implemented by stores that can grant part of a request:
// Memory and Redis. fleetlimit.Limiter.AllowAtMost needs it.
type Granter interface {
	// AtMost applies req.Strategy's partial grant (algorithm.Granter) to
	// req.Key's state at req.Now (the store's clock when zero), atomically
	// as Decide is: it admits the most of req.N that fits now, possibly
	// nothing, and returns the decision with Decision.Granted set. A
	// strategy that cannot grant part of a request (not an
	// algorithm.Granter, or its Script does not set AtMost) gets an error
	// wrapping ErrRejected and errors.ErrUnsupported. Errors are otherwise
	// classed as Decide's are.
	AtMost(ctx context.Context, req Request) (algorithm.Decision, error)
}

// Charger is implemented by stores that can charge a key past its limit:
// Memory and Redis. fleetlimit.Reservation.Settle needs it for a cost above
// its estimate.
type Charger interface {
	// Charge records req.N units on req.Key's state at req.Now (the
	// store's clock when zero) by req.Strategy's charge rule
	// (algorithm.Charger), whatever the limit, up to maxDebt units past it
	// (negative: the strategy's own Limit), atomically as Decide is, and
	// returns the key's standing after it, with the units the cap cut off
	// (Decision.Cut). A strategy that cannot be charged (not an
	// algorithm.Charger, or its Script does not set Charges) gets an error
	// wrapping ErrRejected and errors.ErrUnsupported. Errors are otherwise
	// classed as Decide's are.
	Charge(ctx context.Context, req Request, maxDebt int64) (algorithm.Decision, error)
}

// Holder is implemented by stores that hold permits: Memory and Redis.
// fleetlimit.Limiter.Acquire and its Permit need it.
type Holder interface {
	// Hold applies req.Permit to req.Key's state at req.Now (the store's
	// clock when zero) by req.Strategy's rule (algorithm.Holder),
	// atomically as Decide is, and returns its decision. A strategy that
	// cannot hold permits (not an algorithm.Holder, or its Script does not
	// set Holds) or a request without a valid Permit gets an error
	// wrapping ErrRejected (and errors.ErrUnsupported for the strategy).
	// Errors are otherwise classed as Decide's are.
	Hold(ctx context.Context, req Request) (algorithm.Decision, error)
}

// Request is one decision to make. Callers (fleetlimit.Limiter) validate it:
// a non-empty Key of at most MaxKeyLen bytes, 1 <= N <= algorithm.MaxInt, a
// valid Strategy, and a Prefix without braces.
type Request struct {
	// Strategy is the rule to apply.
	Strategy algorithm.Strategy
	// Prefix is prepended verbatim to the Redis key (fleetlimit.WithKeyPrefix);
	// for Memory it is part of the namespace.
	Prefix string
	// Key identifies the client being limited, e.g. a user id.
	Key string
	// N is the cost of the request.
	N int64
	// Now is the decision time; the zero Time means the store's own clock
	// (the Redis server's TIME; the Memory store's clock).
	Now time.Time
	// Timeout bounds a decision that does I/O (see Store.Decide); 0 means
	// only ctx bounds it.
	Timeout time.Duration
	// Permit is the operation on one permit that Holder.Hold applies
	// (take, give back or extend it, by its identity); nil for every
	// other call, which ignores it. Callers validate it
	// (algorithm.PermitOp.Validate). The Redis store passes its identity
	// and kind to the script after the strategy's parameters (see package
	// scripts).
	Permit *algorithm.PermitOp
}

// MaxKeyLen is the longest Request.Key accepted, in bytes.
const MaxKeyLen = 1024

// A store's errors fall in two classes, so that a caller can tell an outage
// (worth a circuit breaker) from a problem of one key or request: errors
// that wrap ErrRejected mean the store answered and refused this request;
// every other error, including those that wrap ErrUnavailable, means the
// store could not answer. Store implementations wrap one or the other.
var (
	// ErrUnavailable is wrapped by errors that mean the store cannot serve
	// anyone right now: refused or broken connections, timeouts, Redis
	// replies such as LOADING, OOM, READONLY, CLUSTERDOWN or BUSY, and a
	// server that does not run the commands the store sends
	// (ErrCommandRefused).
	ErrUnavailable = errors.New("store: unavailable")
	// ErrRejected is wrapped by errors that mean the store answered but
	// refused this one request: a key holding something else, a malformed
	// reply, a script error.
	ErrRejected = errors.New("store: request rejected")
	// ErrClosed is returned by a store after Close, and by the Redis store
	// whose go-redis client was closed. It wraps ErrUnavailable. It is a
	// programming error (a store or client used after its Close), not an
	// outage: callers can tell it apart with errors.Is.
	ErrClosed = fmt.Errorf("%w: closed", ErrUnavailable)
	// ErrCommandRefused reports that the server does not run a command the
	// store needs: EVALSHA or EVAL renamed away or not offered (a proxy, a
	// managed service without scripting), or a command a script calls. The
	// server answers, but can decide no one's request: it wraps
	// ErrUnavailable, so a circuit breaker opens on it. Redis.Ping reports
	// it with the command's name.
	ErrCommandRefused = fmt.Errorf("%w: the server refuses a command the store needs", ErrUnavailable)
	// ErrClockOutOfRange reports that the store's own clock
	// (WithMemoryClock) reads a time before the Unix epoch or after
	// algorithm.MaxTimeMicros, which no decision can be made at: a mistake
	// of the program, not an outage, and one that lasts until the clock is
	// set right. It wraps ErrRejected; fleetlimit.Limiter denies such a
	// decision under every failure policy, with an error wrapping
	// fleetlimit.ErrClockOutOfRange, and its circuit breaker does not count
	// it.
	ErrClockOutOfRange = fmt.Errorf("%w: the store's clock is out of range", ErrRejected)
	// ErrWrongType reports that the Redis key a strategy uses holds a value
	// of another type (or format), written by something else. It wraps
	// ErrRejected.
	ErrWrongType = fmt.Errorf("%w: key holds a value of another type", ErrRejected)
	// ErrBadReply reports a script reply that is not the four integers of the
	// calling convention. It wraps ErrRejected.
	ErrBadReply = fmt.Errorf("%w: malformed script reply", ErrRejected)
)

// RedisKey returns the Redis key that holds key's state for the algorithm
// tagged tag: prefix + "{" + key + "}:" + tag.
//
// The user's key is a hash tag, so every key of one decision lands in one
// Redis Cluster slot. Braces and '%' inside key are percent-encoded (the
// mapping is one-to-one), so that a key such as "}{" can neither end the tag
// early nor leave it empty, which would hash the whole name.
func RedisKey(prefix, key, tag string) string {
	key = hashTag(key)
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + len(tag) + 3)
	b.WriteString(prefix)
	b.WriteByte('{')
	b.WriteString(key)
	b.WriteString("}:")
	b.WriteString(tag)
	return b.String()
}

var braceEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
