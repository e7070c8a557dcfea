package fleetlimit_test

// The guarantees of a concurrency limit (docs/guarantees.md), over
// generated interleavings of K = 1..16 instances sharing one store, each
// acquiring, releasing, renewing and crashing (forgetting its permits
// without releasing them), with the clock stepping on. A ledger keeps what
// the instances were told: every permit granted, its expiry (a ttl after
// its last granted acquire or renew), and whether it was released.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

type permitStepKind uint8

const (
	stepAcquire permitStepKind = iota
	stepRelease
	stepRenew
	stepCrash
	stepClock
)

func (k permitStepKind) String() string {
	return [...]string{"acquire", "release", "renew", "crash", "clock"}[k]
}

// permitStep is one step: instance Inst acquires on Key, releases or
// renews its Pick-th permit (mod how many it holds), crashes; or the clock
// moves by Dt.
type permitStep struct {
	Kind permitStepKind
	Inst int
	Key  string
	Pick int
	Dt   time.Duration
}

type permitCase struct {
	K     int
	Limit int64
	TTL   time.Duration
	// Rate > 0: the strategy is All(TokenBucket(Rate, TTL, Burst),
	// Concurrency(Limit, TTL)), a rate limit beside the concurrency limit.
	Rate, Burst int64
	Steps       []permitStep
}

// strategy is the case's strategy.
func (c permitCase) strategy() algorithm.Strategy {
	cc := algorithm.Concurrency(c.Limit, c.TTL)
	if c.Rate == 0 {
		return cc
	}
	return algorithm.All(algorithm.TokenBucket(c.Rate, c.TTL, c.Burst), cc)
}

func (c permitCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "K=%d, %s:", c.K, c.strategy().Name())
	if c.Rate > 0 {
		fmt.Fprintf(&b, " rate %d per %v, burst %d, limit %d", c.Rate, c.TTL, c.Burst, c.Limit)
	}
	for i, s := range c.Steps {
		if s.Kind == stepClock {
			fmt.Fprintf(&b, "\n  %d clock +%v", i, s.Dt)
		} else {
			fmt.Fprintf(&b, "\n  %d instance %d %s %s (pick %d)", i, s.Inst, s.Kind, s.Key, s.Pick)
		}
	}
	return b.String()
}

// permitGen generates K = 1..16 instances and 20 to 80 steps over two
// keys; a clock step lands, one time in three, exactly on or a grain before
// a permit's possible expiry (a multiple of the grain), so expiry edges are
// hit. On the real servers the ttl is minutes and steps whole seconds
// (keys expire there in real time).
//
// With rated, the case has a token bucket of 1 to 6 per ttl beside it
// (on the real servers a token then takes at least 10s).
func permitGen(real, rated bool) gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		r := p.Rng
		c := permitCase{K: 1 + r.Intn(16), Limit: 1 + r.Int63n(6)}
		if rated {
			c.Rate, c.Burst = 1+r.Int63n(6), 1+r.Int63n(6)
		}
		grain := time.Microsecond
		c.TTL = time.Duration(1+r.Int63n(5000)) * time.Millisecond
		if real {
			grain, c.TTL = time.Second, time.Duration(60+r.Intn(120))*time.Second
		}
		for range 20 + r.Intn(61) {
			s := permitStep{Inst: r.Intn(c.K), Key: fmt.Sprintf("k%d", r.Intn(2)), Pick: r.Intn(8)}
			switch x := r.Intn(20); {
			case x < 8:
				s.Kind = stepAcquire
			case x < 11:
				s.Kind = stepRelease
			case x < 14:
				s.Kind = stepRenew
			case x < 15:
				s.Kind = stepCrash
			default:
				s.Kind = stepClock
				switch r.Intn(3) {
				case 0:
					s.Dt = c.TTL - grain*time.Duration(r.Intn(2))
				default:
					s.Dt = time.Duration(r.Int63n(int64(c.TTL/grain)/2+1)) * grain
				}
			}
			c.Steps = append(c.Steps, s)
		}
		return gopter.NewGenResult(c, gopter.NoShrinker)
	}
}

// ledgerPermit is a permit an instance was granted.
type ledgerPermit struct {
	p        fleetlimit.Permit
	key      string
	exp      time.Time // a ttl after its last granted acquire or renew
	released bool
}

// ledger is what the instances were told.
type ledger struct {
	permits []*ledgerPermit
	holding [][]*ledgerPermit // per instance, the permits it still knows of
}

// live returns the expiries of key's permits held at now, ascending.
func (l *ledger) live(key string, now time.Time) []time.Time {
	var exps []time.Time
	for _, p := range l.permits {
		if p.key == key && !p.released && p.exp.After(now) {
			exps = append(exps, p.exp)
		}
	}
	slices.SortFunc(exps, time.Time.Compare)
	return exps
}

// permitBackend is a store the guarantees run on, and how its instances
// read time: storeClock means the limiters have no clock of their own and
// the store's (a Memory on the virtual clock) decides.
type permitBackend struct {
	proptest.Backend
	storeClock bool
	clock      *fakeclock.Clock // the store's, when storeClock
}

func permitBackends(t *testing.T) []permitBackend {
	names := []string{"memory", "miniredis"}
	if redistest.HaveReal(t) {
		names = append(names, "redis")
	}
	if redistest.HaveCluster(t) {
		names = append(names, "cluster")
	}
	var bs []permitBackend
	for _, b := range proptest.Backends(t, names...) {
		bs = append(bs, permitBackend{Backend: b})
	}
	c := fakeclock.New(proptest.Epoch)
	mem := store.NewMemory(store.WithMemoryClock(c.Now), store.WithSweepInterval(24*time.Hour))
	t.Cleanup(func() { _ = mem.Close() })
	return append(bs, permitBackend{Backend: proptest.Backend{Name: "memory, store's clock", Store: mem}, storeClock: true, clock: c})
}

// permitCases is how many cases each guarantee runs per backend: K
// limiters per case, each step a round trip.
func permitCases(b permitBackend) int {
	switch {
	case b.Name == "cluster":
		return 30
	case b.Client != nil:
		return 60
	}
	return 200
}

// guarantee names one of a concurrency limit's guarantees.
type guarantee int

const (
	boundHolds      guarantee = 1 // permits held and unexpired <= limit
	expiresExactly  guarantee = 2 // a slot frees exactly ttl after the last acquire or renew
	touchesOwnOnly  guarantee = 3 // Release and Renew touch only their own permit
	rateBoundHolds  guarantee = 4 // composed with All, the rate member's bound holds
	allGuaranteesOf           = 0
)

// checkPermits runs c on b and returns the first breach of guarantee g.
func checkPermits(b permitBackend, c permitCase, g guarantee) (string, error) {
	ctx := context.Background()
	clock := b.clock
	if clock == nil {
		clock = fakeclock.New(proptest.Epoch)
	} else {
		clock.Set(clock.Now().Add(time.Hour)) // past every earlier case's permits
	}
	start := clock.Now()
	prefix := redistest.Prefix()
	lims := make([]*fleetlimit.Limiter, c.K)
	for i := range lims {
		opts := []fleetlimit.Option{fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithFailurePolicy(fleetlimit.FailClosed)}
		if !b.storeClock {
			opts = append(opts, fleetlimit.WithClock(clock.Now))
		}
		lim, err := fleetlimit.New(c.strategy(), b.Store, opts...)
		if err != nil {
			return "", err
		}
		lims[i] = lim
	}
	led := &ledger{holding: make([][]*ledgerPermit, c.K)}
	admitted := map[string][]time.Time{} // each key's admitted acquires, in order
	exact := c.Rate == 0                 // the ledger knows every denial: no rate member
	for i, s := range c.Steps {
		now := clock.Now()
		where := fmt.Sprintf("step %d (+%v) instance %d %s %s", i, now.Sub(start), s.Inst, s.Kind, s.Key)
		switch s.Kind {
		case stepClock:
			clock.Set(now.Add(s.Dt))
		case stepCrash:
			led.holding[s.Inst] = nil
		case stepAcquire:
			exps := led.live(s.Key, now)
			p, res, err := lims[s.Inst].Acquire(ctx, s.Key)
			if err != nil {
				return "", fmt.Errorf("%s: %w", where, err)
			}
			free := int64(len(exps)) < c.Limit
			if exact && (g == expiresExactly || g == allGuaranteesOf) {
				switch {
				case res.Allowed != free:
					return fmt.Sprintf("guarantee 2: %s: allowed %v with %d of %d slots held by the ledger (expiries %v)", where, res.Allowed, len(exps), c.Limit, exps), nil
				case !res.Allowed && res.RetryAfter != exps[0].Sub(now):
					return fmt.Sprintf("guarantee 2: %s: denied, retry after %v, want %v (the earliest expiry)", where, res.RetryAfter, exps[0].Sub(now)), nil
				}
			}
			if res.Allowed {
				admitted[s.Key] = append(admitted[s.Key], now)
				lp := &ledgerPermit{p: p, key: s.Key, exp: now.Add(c.TTL)}
				led.permits = append(led.permits, lp)
				led.holding[s.Inst] = append(led.holding[s.Inst], lp)
			}
		case stepRelease, stepRenew:
			held := led.holding[s.Inst]
			if len(held) == 0 {
				continue
			}
			lp := held[s.Pick%len(held)]
			if s.Kind == stepRelease {
				if err := lp.p.Release(ctx); err != nil {
					return "", fmt.Errorf("%s: %w", where, err)
				}
				lp.released = true
				led.holding[s.Inst] = slices.DeleteFunc(held, func(x *ledgerPermit) bool { return x == lp })
			} else {
				alive := !lp.released && lp.exp.After(now)
				err := lp.p.Renew(ctx)
				if err != nil && !errors.Is(err, fleetlimit.ErrPermitExpired) {
					return "", fmt.Errorf("%s: %w", where, err)
				}
				if (g == expiresExactly || g == allGuaranteesOf) && (err == nil) != alive {
					// (A renew goes to the concurrency member only, so
					// this holds beside a rate member too.)
					return fmt.Sprintf("guarantee 2: %s: Renew = %v of a permit the ledger has expiring at +%v", where, err, lp.exp.Sub(start)), nil
				}
				if err == nil {
					lp.exp, lp.released = now.Add(c.TTL), false
				}
			}
			if exact && (g == touchesOwnOnly || g == allGuaranteesOf) {
				for _, key := range []string{"k0", "k1"} {
					if msg, err := sameAsLedger(ctx, lims[s.Inst], led, key, now, c.Limit); msg != "" || err != nil {
						return "guarantee 3: " + where + ": " + msg, err
					}
				}
			}
		}
		if g == boundHolds || g == allGuaranteesOf {
			now := clock.Now()
			for _, key := range []string{"k0", "k1"} {
				if held := len(led.live(key, now)); int64(held) > c.Limit {
					return fmt.Sprintf("guarantee 1: after %s: %d permits of %s held and unexpired, limit %d", where, held, key, c.Limit), nil
				}
			}
		}
	}
	if c.Rate > 0 && (g == rateBoundHolds || g == allGuaranteesOf) {
		for key, ts := range admitted {
			if msg := tokenBucketBound(ts, c.Rate, c.TTL, c.Burst); msg != "" {
				return "guarantee 4: " + key + ": " + msg, nil
			}
		}
	}
	return "", nil
}

// tokenBucketBound reports an interval [ts[i], ts[j]] that admitted more
// than burst + rate·d/per acquires (each of cost 1), in exact integer
// arithmetic in microseconds; "" when none did.
func tokenBucketBound(ts []time.Time, rate int64, per time.Duration, burst int64) string {
	p := per.Microseconds()
	for i := range ts {
		for j := i; j < len(ts); j++ {
			count, d := int64(j-i+1), ts[j].Sub(ts[i]).Microseconds()
			if count*p > burst*p+rate*d {
				return fmt.Sprintf("%d admitted in [+0, +%v], above burst %d + %d per %v", count, ts[j].Sub(ts[i]), burst, rate, per)
			}
		}
	}
	return ""
}

// sameAsLedger reports how the store's view of key at now, by a Peek of
// every cost 1..limit (whether it passes and when, which names every live
// permit's expiry), differs from the ledger's; "" when it does not.
func sameAsLedger(ctx context.Context, lim *fleetlimit.Limiter, led *ledger, key string, now time.Time, limit int64) (string, error) {
	exps := led.live(key, now)
	held := int64(len(exps))
	for n := int64(1); n <= limit; n++ {
		res, err := lim.Peek(ctx, key, n)
		if err != nil {
			return "", err
		}
		want := held+n <= limit
		var retry time.Duration
		if !want {
			retry = exps[held+n-limit-1].Sub(now)
		}
		if res.Allowed != want || res.RetryAfter != retry || res.Remaining != max(0, limit-held) {
			return fmt.Sprintf("the store's view of %s (a peek of %d: %+v) is not the ledger's: %d held, expiries %v", key, n, res, held, exps), nil
		}
	}
	return "", nil
}

// runPermitProperty checks guarantee g on every backend, with a rate
// member beside the concurrency limit when rated.
func runPermitProperty(t *testing.T, g guarantee, rated bool) {
	for _, b := range permitBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			proptest.Check(t, permitCases(b), prop.ForAll(func(c permitCase) (string, error) {
				return checkPermits(b, c, g)
			}, permitGen(b.Real, rated)))
		})
	}
}

// TestPropertyPermitBound, guarantee 1: at every instant the permits the
// instances hold, unreleased and unexpired (a ttl after their last granted
// acquire or renew), are at most the limit per key, fleet-wide.
func TestPropertyPermitBound(t *testing.T) { runPermitProperty(t, boundHolds, false) }

// TestPropertyPermitExpiry, guarantee 2: a slot frees exactly a ttl after
// its permit's last acquire or renew, by the decision clock (the store's,
// on "memory, store's clock"): an acquire is admitted exactly when the
// ledger has a slot free at that instant, a denial's RetryAfter is the
// earliest held permit's expiry, and a renew succeeds exactly while the
// permit is held.
func TestPropertyPermitExpiry(t *testing.T) { runPermitProperty(t, expiresExactly, false) }

// TestPropertyPermitOwnOnly, guarantee 3: after each Release and Renew the
// store holds exactly the ledger's permits of both keys, with the ledger's
// expiries: the call changed its own permit and no other.
func TestPropertyPermitOwnOnly(t *testing.T) { runPermitProperty(t, touchesOwnOnly, false) }

// TestPropertyPermitWithRate, guarantee 4: with a token bucket beside the
// concurrency limit in one composite (algorithm.All), the admitted
// acquires keep the bucket's bound — at most burst + rate·d/per in every
// interval of length d — however many permits are released (a release
// gives back the slot only), and guarantees 1 and 2's renewals still hold.
func TestPropertyPermitWithRate(t *testing.T) { runPermitProperty(t, allGuaranteesOf, true) }
