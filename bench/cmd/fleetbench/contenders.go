package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// keyLen is the length of every Redis key a contender writes: each library
// adds its own prefix and suffix, and the user key is padded so that the
// totals are equal and MEMORY USAGE compares like with like.
const keyLen = 25

// profile selects the limits a contender runs with; see profileDoc.
type profile int

const (
	spread  profile = iota // 10,000 users, throughput
	hot                    // one user, or 10,000 drawn from a Zipf distribution: throughput
	mem                    // 10,000 users, one decision each, memory
	users                  // 1 to 100,000 users, throughput; keys must outlive the sweep
	permits                // 10,000 users, Acquire+Release pairs beside AllowN
)

// profileDoc says, for RESULTS.md, what limits each profile runs with.
var profileDoc = map[profile]string{
	spread:  "100 per 10 seconds per user: sliding log 100/10s, token bucket 100 per 10s burst 100, fixed window 100/10s; redis_rate and throttled 100 per 10s burst 100; ulule 100/10s. Interleaving gives each contender about a third of any 10 s, so even 100k decisions/s in its cells stays near 10 per user in a window: nothing is denied, and the windowed keys (sliding log, fixed windows) live from one round to the next, holding a few requests each. A token bucket's or GCRA's key expires as soon as the bucket is full again, so at these rates most of their decisions find no key, as they would in production.",
	hot:     "room for about a million per second per user: sliding log 100,000/100ms, token bucket 10^6/s burst 10^6, fixed window 10^7/1s; redis_rate and throttled 10^6/s burst 10^6; ulule 10^7/1s. " + leasedDoc,
	mem:     "100 per hour (fixed window: 100 per minute, started clear of a minute boundary), one decision per user, so every key lives through the measurement.",
	users:   "token bucket 100/hour burst 10^6 (redis_rate alike), fixed window 10^9/240h, ulule 10^9/1h: keys outlive the sweep and nothing is denied.",
	permits: "Acquire+Release: algorithm.Concurrency(1000, 10s) through Limiter.Acquire, then Permit.Release of the permit it returned, one pair per call (a pair holds its slot for one round trip, so at most 64 of a key's 1000 are ever held); AllowN: the token bucket of the 10,000-key tables (100 per 10 s, burst 100). Decisions/s counts pairs for Acquire+Release, decisions for the others; every per-decision figure is per pair.",
}

// leaseMaxAge is the maxAge of the leased contenders' leases.
const leaseMaxAge = time.Second

// leasedDoc says, for RESULTS.md, what limits the leased contenders run with.
var leasedDoc = fmt.Sprintf("The leased contenders (WithLeases(size, %v)) run with these limits in every scenario, the 10,000-key one included: a lease admits up to size decisions per round trip, so at 100 per 10 s they would run out and be denied; a token bucket's lease takes at most half of what the key has left, which at 10^6 is always the full size.", leaseMaxAge)

// decideFunc makes one decision for key: whether it was admitted, and the
// library's error.
type decideFunc func(ctx context.Context, key string) (allowed bool, err error)

// contender is one Redis-backed limiter under test, with its own client (and
// connection pool) so that round trips can be counted per contender.
type contender struct {
	name   string // as printed
	id     string // short, for flags and raw data
	anchor bool   // a library we compare against
	code   string // two characters in its user keys: contenders never share keys
	client *redis.Client
	rt     *roundTrips
	// userKey returns the user key for index i of key set letter, sized so
	// that fullKey(userKey) is keyLen bytes.
	userKey func(letter byte, i int) string
	// fullKey is the Redis key the library writes for a user key.
	fullKey func(user string) string
	// decider returns the decision function for a profile, or nil when the
	// contender does not take part in it.
	decider func(p profile) (decideFunc, error)
	// lease is the WithLeases size, or 0: a leased contender takes part in
	// the throughput scenarios only (its keys' memory is its exact twin's).
	lease int64
	// noMemory: the contender takes no part in the memory phase (a pair of
	// Acquire and Release leaves no key behind; Decide alone writes the
	// keys its Limiter.Allow twin does).
	noMemory bool
	// pid is a process of its own that makes the decisions (fleetlimitd),
	// whose CPU time is measured beside the benchmark's; 0 for none.
	pid     int
	closers []func() error
	// quiesce, if set, ends the contender's background work between its
	// cells (a leased limiter's leases are handed back now, not by its
	// sweep during another contender's cell, whose commands, Redis CPU and
	// allocations would then include them).
	quiesce func() error
}

// roundTrips counts the client's network round trips: each command sent on
// its own and each pipeline is one.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*roundTrips)(nil)

// newClient returns a go-redis client with its defaults (pool of 10 per
// GOMAXPROCS) and deadlines honoured, the same for every contender.
func newClient(addr string) (*redis.Client, *roundTrips) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	rt := &roundTrips{}
	c.AddHook(rt)
	return c, rt
}

// ownLimiter returns a Limiter of s over a store of its own on a go-redis
// client of its own (newClient, whose round trips rt counts), with the
// options every fleetlimit contender has (go-redis's read timeout, keys
// under DefaultKeyPrefix: see newContenders) and then opts; closeAll closes
// the store and the client.
func ownLimiter(addr string, s algorithm.Strategy, opts ...fleetlimit.Option) (lim *fleetlimit.Limiter, rt *roundTrips, closeAll func(), err error) {
	c, rt := newClient(addr)
	st, err := store.NewRedis(c)
	if err != nil {
		_ = c.Close()
		return nil, nil, nil, err
	}
	closeAll = func() { _ = st.Close(); _ = c.Close() }
	opts = append([]fleetlimit.Option{fleetlimit.WithTimeout(c.Options().ReadTimeout), fleetlimit.WithKeyPrefix(fleetlimit.DefaultKeyPrefix)}, opts...)
	if lim, err = fleetlimit.New(s, st, opts...); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return lim, rt, closeAll, nil
}

// paddedKey returns code + letter + i zero-padded so that the user key is
// width bytes.
func paddedKey(code string, letter byte, width, i int) string {
	digits := width - len(code) - 1
	return fmt.Sprintf("%s%c%0*d", code, letter, digits, i)
}

func newContenders(addr string) ([]*contender, error) {
	var cs []*contender
	fl := func(name, id, code string, lease int64, kind flKind, strategy func(profile) algorithm.Strategy, opts ...fleetlimit.Option) {
		c, rt := newClient(addr)
		// Every other contender is bounded only by go-redis's read timeout
		// (5 s by default); fleetlimit gets the same bound instead of its
		// 100 ms default, so that a machine stalled by other work does not
		// turn into fleetlimit errors alone. The work per decision is the same.
		//
		// WithKeyPrefix keeps every key under DefaultKeyPrefix alone (a
		// limiter's default prefix adds its name, or a digest of its
		// strategy's parameters), so that keys are keyLen bytes and found
		// under fullKey's names. Each profile's limiter has a store of its
		// own over the contender's client: New refuses two strategies of
		// one algorithm with different parameters under one prefix of one
		// store, and the profiles' key sets never overlap.
		opts = append([]fleetlimit.Option{fleetlimit.WithTimeout(c.Options().ReadTimeout),
			fleetlimit.WithKeyPrefix(fleetlimit.DefaultKeyPrefix)}, opts...)
		var stores []store.Store
		var limiters []*fleetlimit.Limiter
		var tag string // the algorithm's, whichever profile the contender runs
		for _, p := range []profile{spread, permits} {
			if s := strategy(p); s != nil {
				tag = s.Script().Tag
				break
			}
		}
		overhead := len(store.RedisKey(fleetlimit.DefaultKeyPrefix, "", tag))
		if lease > 0 {
			opts = append(opts, fleetlimit.WithLeases(lease, leaseMaxAge))
		}
		cs = append(cs, &contender{
			name: name, id: id, code: code, client: c, rt: rt, lease: lease, noMemory: kind != viaAllow,
			userKey: func(letter byte, i int) string { return paddedKey(code, letter, keyLen-overhead, i) },
			fullKey: func(user string) string { return store.RedisKey(fleetlimit.DefaultKeyPrefix, user, tag) },
			decider: func(p profile) (decideFunc, error) {
				s := strategy(p)
				if s == nil {
					return nil, nil
				}
				st, err := store.NewRedis(c)
				if err != nil {
					panic(err) // newClient enables ContextTimeoutEnabled
				}
				stores = append(stores, st)
				lim, err := fleetlimit.New(s, st, opts...)
				if err != nil {
					return nil, err
				}
				limiters = append(limiters, lim)
				return flDecider(kind, lim, st, s, c.Options().ReadTimeout), nil
			},
			closers: []func() error{func() error {
				for _, st := range stores {
					_ = st.Close()
				}
				return nil
			}, c.Close},
			quiesce: func() error {
				var errs []error
				for _, l := range limiters {
					errs = append(errs, l.Close()) // hands back every lease; the limiter stays usable
				}
				return errors.Join(errs...)
			},
		})
	}
	fl("fleetlimit sliding log", "fl-sl", "sl", 0, viaAllow, func(p profile) algorithm.Strategy {
		switch p {
		case spread:
			return algorithm.SlidingWindowLog(100, 10*time.Second)
		case hot:
			return algorithm.SlidingWindowLog(100_000, 100*time.Millisecond)
		case mem:
			return algorithm.SlidingWindowLog(100, time.Hour)
		}
		return nil // its cost depends on each user's rate, which the users sweep varies
	})
	tb := func(p profile) algorithm.Strategy {
		switch p {
		case spread, permits:
			return algorithm.TokenBucket(100, 10*time.Second, 100)
		case hot:
			return algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)
		case mem:
			return algorithm.TokenBucket(100, time.Hour, 100)
		}
		return algorithm.TokenBucket(100, time.Hour, 1_000_000)
	}
	fl("fleetlimit token bucket", "fl-tb", "tb", 0, viaAllow, tb)
	fl("fleetlimit token bucket, store.Redis.Decide alone", "fl-tb-store", "td", 0, viaDecide, func(p profile) algorithm.Strategy {
		if p == spread {
			return tb(p)
		}
		return nil // Limiter.Allow against the store's Decide alone: the 10,000-key tables
	})
	fl("fleetlimit token bucket, WithClock", "fl-tbc", "tc", 0, viaAllow, tb, fleetlimit.WithClock(time.Now))
	fl("fleetlimit fixed window", "fl-fw", "fw", 0, viaAllow, func(p profile) algorithm.Strategy {
		switch p {
		case spread:
			return algorithm.FixedWindow(100, 10*time.Second)
		case hot:
			return algorithm.FixedWindow(10_000_000, time.Second)
		case mem:
			return algorithm.FixedWindow(100, time.Minute)
		}
		return algorithm.FixedWindow(1_000_000_000, 240*time.Hour)
	})
	fl("fleetlimit sliding-window counter", "fl-swc", "sc", 0, viaAllow, func(p profile) algorithm.Strategy {
		switch p {
		case spread:
			return algorithm.SlidingWindowCounter(100, 10*time.Second)
		case mem:
			return algorithm.SlidingWindowCounter(100, time.Hour)
		}
		return nil // issue 23 judges it over 10,000 keys; the hot keys and the users sweep would only lengthen the run
	})
	fl("fleetlimit Acquire+Release (concurrency)", "fl-pair", "cc", 0, viaPair, func(p profile) algorithm.Strategy {
		if p == permits {
			return algorithm.Concurrency(1000, 10*time.Second)
		}
		return nil
	})
	// Leased contenders: the hot profile's limits wherever they take part
	// (leasedDoc says why).
	leased := func(s algorithm.Strategy) func(profile) algorithm.Strategy {
		return func(p profile) algorithm.Strategy {
			if p == spread || p == hot {
				return s
			}
			return nil
		}
	}
	for _, n := range leaseSizes {
		fl(fmt.Sprintf("fleetlimit token bucket, leases %d", n), fmt.Sprintf("fl-tb-l%d", n), fmt.Sprintf("t%d", n%10), n, viaAllow,
			leased(algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)))
	}
	fl("fleetlimit fixed window, leases 64", "fl-fw-l64", "f4", 64, viaAllow, leased(algorithm.FixedWindow(10_000_000, time.Second)))
	// Issue 29's contender: leases of 64 with the next taken ahead
	// (WithLeaseAhead), on the hot key only.
	fl("fleetlimit token bucket, leases 64 taken ahead", "fl-tb-l64a", "ta", 64, viaAllow, func(p profile) algorithm.Strategy {
		if p == hot {
			return algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)
		}
		return nil
	}, fleetlimit.WithLeaseAhead())

	{ // go-redis/redis_rate: GCRA in one EVALSHA; keys are "rate:" + key.
		c, rt := newClient(addr)
		lim := redis_rate.NewLimiter(c)
		const prefix = "rate:"
		cs = append(cs, &contender{
			name: "redis_rate (GCRA)", id: "redis_rate", anchor: true, code: "rr", client: c, rt: rt,
			userKey: func(letter byte, i int) string { return paddedKey("rr", letter, keyLen-len(prefix), i) },
			fullKey: func(user string) string { return prefix + user },
			decider: func(p profile) (decideFunc, error) {
				l := map[profile]redis_rate.Limit{
					spread: {Rate: 100, Burst: 100, Period: 10 * time.Second},
					hot:    {Rate: 1_000_000, Burst: 1_000_000, Period: time.Second},
					mem:    redis_rate.PerHour(100),
					users:  {Rate: 100, Burst: 1_000_000, Period: time.Hour},
				}[p]
				return func(ctx context.Context, key string) (bool, error) {
					res, err := lim.Allow(ctx, key, l)
					if err != nil {
						return false, err
					}
					return res.Allowed > 0, nil
				}, nil
			},
			closers: []func() error{c.Close},
		})
	}

	{ // ulule/limiter: fixed window (INCRBY + PEXPIRE/PTTL) in one EVALSHA.
		c, rt := newClient(addr)
		st, err := ulredis.NewStore(c)
		if err != nil {
			return nil, fmt.Errorf("ulule redis store: %w", err)
		}
		prefix := limiter.DefaultPrefix + ":"
		cs = append(cs, &contender{
			name: "ulule/limiter (fixed window)", id: "ulule", anchor: true, code: "ul", client: c, rt: rt,
			userKey: func(letter byte, i int) string { return paddedKey("ul", letter, keyLen-len(prefix), i) },
			fullKey: func(user string) string { return prefix + user },
			decider: func(p profile) (decideFunc, error) {
				r := map[profile]limiter.Rate{
					spread: {Period: 10 * time.Second, Limit: 100},
					hot:    {Period: time.Second, Limit: 10_000_000},
					mem:    {Period: time.Hour, Limit: 100},
					users:  {Period: time.Hour, Limit: 1_000_000_000},
				}[p]
				lim := limiter.New(st, r)
				return func(ctx context.Context, key string) (bool, error) {
					lc, err := lim.Get(ctx, key)
					return err == nil && !lc.Reached, err
				}, nil
			},
			closers: []func() error{c.Close},
		})
	}

	{ // throttled: GCRA computed in Go; GET+TIME pipelined, then a CAS script (EVAL).
		c, rt := newClient(addr)
		const prefix = "throttled:"
		st, err := goredisstore.NewCtx(c, prefix)
		if err != nil {
			return nil, fmt.Errorf("throttled go-redis store: %w", err)
		}
		cs = append(cs, &contender{
			name: "throttled (GCRA, client CAS)", id: "throttled", anchor: true, code: "th", client: c, rt: rt,
			userKey: func(letter byte, i int) string { return paddedKey("th", letter, keyLen-len(prefix), i) },
			fullKey: func(user string) string { return prefix + user },
			decider: func(p profile) (decideFunc, error) {
				q, ok := map[profile]throttled.RateQuota{
					spread: {MaxRate: throttled.PerDuration(100, 10*time.Second), MaxBurst: 100},
					hot:    {MaxRate: throttled.PerSec(1_000_000), MaxBurst: 1_000_000},
					mem:    {MaxRate: throttled.PerHour(100), MaxBurst: 100},
				}[p]
				if !ok {
					return nil, nil
				}
				lim, err := throttled.NewGCRARateLimiterCtx(st, q)
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context, key string) (bool, error) {
					limited, _, err := lim.RateLimitCtx(ctx, key, 1)
					return err == nil && !limited, err
				}, nil
			},
			closers: []func() error{c.Close},
		})
	}

	{ // The floor: one INCR, no limit at all.
		c, rt := newClient(addr)
		const prefix = "incr:"
		cs = append(cs, &contender{
			name: "go-redis INCR (floor, no limiter)", id: "incr", anchor: true, code: "in", client: c, rt: rt,
			userKey: func(letter byte, i int) string { return paddedKey("in", letter, keyLen-len(prefix), i) },
			fullKey: func(user string) string { return prefix + user },
			decider: func(profile) (decideFunc, error) {
				return func(ctx context.Context, key string) (bool, error) {
					return true, c.Incr(ctx, prefix+key).Err()
				}, nil
			},
			closers: []func() error{c.Close},
		})
	}
	return cs, nil
}

// flKind is how a fleetlimit contender makes its decision.
type flKind int

const (
	viaAllow  flKind = iota // Limiter.Allow
	viaDecide               // the store's Decide alone, no Limiter around it
	viaPair                 // Limiter.Acquire, then Permit.Release
)

// flDecider returns the decision function of a fleetlimit contender: lim's
// Allow, st's Decide with the request lim would send (its key prefix, the
// contender's timeout), or an Acquire and the Release of its permit.
func flDecider(kind flKind, lim *fleetlimit.Limiter, st store.Store, s algorithm.Strategy, timeout time.Duration) decideFunc {
	switch kind {
	case viaDecide:
		return func(ctx context.Context, key string) (bool, error) {
			d, err := st.Decide(ctx, store.Request{Strategy: s, Prefix: fleetlimit.DefaultKeyPrefix, Key: key, N: 1, Timeout: timeout})
			return d.Allowed, err
		}
	case viaPair:
		return func(ctx context.Context, key string) (bool, error) {
			p, res, err := lim.Acquire(ctx, key)
			if err != nil || !res.Allowed {
				return false, err
			}
			return true, p.Release(ctx)
		}
	}
	return func(ctx context.Context, key string) (bool, error) {
		res, err := lim.Allow(ctx, key)
		return res.Allowed, err
	}
}

// leaseSizes are the token bucket's leased contenders: 32 is issue 14's
// round-trip target, 64 its throughput target.
var leaseSizes = []int64{8, 32, 64}

func (c *contender) close() {
	for _, f := range c.closers {
		_ = f()
	}
}
