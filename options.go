package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
	"github.com/fleetlimit/fleetlimit/store"
)

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
	tiers             func(context.Context, string) (algorithm.Strategy, error) // WithStrategyFor; nil: none
	denialKeys        int                                                       // WithDenialCache; 0: none
	leaseSize         int64                                                     // WithLeases; 0: none
	leaseMaxAge       time.Duration                                             // WithLeases
	leaseAhead        bool                                                      // WithLeaseAhead
	leaseFloor        int64                                                     // WithLeaseFloor; 0: sizes fixed
	penalty           *algorithm.Penalty
	overrides         time.Duration // WithOverrides' refresh; 0: none
	maxDebt           int64         // WithMaxDebt; -1: the limit (reserve.go)
	registryTTL       time.Duration // WithRegistry; 0: none
	strictRegistry    bool          // WithStrictRegistry

	errs []error
}

func defaults(s algorithm.Strategy) config {
	return config{
		name:    s.Name(),
		prefix:  DefaultKeyPrefix,
		policy:  FailLocal,
		timeout: DefaultTimeout,
		maxDebt: -1,
	}
}

func (c *config) validate(s algorithm.Strategy) error {
	if algorithm.IsUnlimited(s) {
		c.errs = append(c.errs, errors.New("algorithm.Unlimited exempts a key (SetOverride); it is no limiter's rule"))
	}
	switch {
	case c.prefixSet:
	case c.named:
		// Named limiters keep separate state by default (see WithName).
		c.prefix = DefaultKeyPrefix + c.name + ":"
	default:
		c.prefix = DefaultKeyPrefix + rule.Namespace(s) + ":"
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

// storeCan returns st as T, the optional store interface that option
// needs, or an ErrInvalidConfig that says what st lacks (why).
func storeCan[T any](st store.Store, option, why string) (T, error) {
	c, ok := st.(T)
	if !ok {
		return c, fmt.Errorf("%w: %s: the %T store %s (%v)", ErrInvalidConfig, option, st, why, reflect.TypeFor[T]())
	}
	return c, nil
}

// period is an option's duration d, or def when d is 0; one outside lo to
// hi is the option's error (what names it).
func (c *config) period(what string, d, def, lo, hi time.Duration) time.Duration {
	if d == 0 {
		d = def
	}
	if d < lo || d > hi {
		c.errs = append(c.errs, fmt.Errorf("%s %v is not between %v and %v", what, d, lo, hi))
	}
	return d
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
//
// Instances whose clocks disagree decide one key on different times: a
// sliding log judges the one behind at the newest admission's time, so it
// can be starved of a shared key, and a token bucket charges it for the
// difference. So a limiter with WithClock and an observer that wants the
// reports (a SkewObserver, such as SlogObserver) compares its clock with
// the store's (Redis TIME) at most every 10 s, in the background, and
// reports a skew above 250 ms once per change
// (TestClockSkewReported, TestClockSkewAgainstRedisTIME).
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
		if isNil(o) {
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
