package fleetlimit

import (
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// WithDenialCache has the limiter remember up to maxKeys recent denials and
// answer a repeat locally, with no round trip: after the store denies key a
// request of cost n with RetryAfter r, the same key asking the same cost n
// of the same strategy (the same algorithm and parameters: a key whose tier
// changes under WithStrategyFor asks the store again) within r is denied
// from memory, with the store's figures less the time elapsed (RetryAfter
// r - elapsed, ResetAfter likewise, Remaining unchanged). The Observer sees
// such a decision with DecidedBy DecidedByCache. Default: off.
//
// Exactness. A denial records nothing, and other traffic only spends the
// key's capacity, so a request the store denied with RetryAfter r cannot
// pass before r has passed: the cached denial is the store's own answer.
// On a timeline of one instance the cached Results are identical, field by
// field, to what the store would have answered
// (TestPropertyDenialCacheExact). To keep them so, a denial is remembered
// only while its figures cannot move: its Remaining must be n-1 (a Remaining
// below n only grows with time, and n-1 is the most it can be while n is
// denied) and n within the limit (a never-passable cost is not cached); for
// a composite (algorithm.All), every member that denies must have Remaining
// n-1, every member that admits must be full, and the denial is remembered
// until the first denying member's wait ends. Any other decision on the key
// through this limiter forgets the key's entry. A larger cost is not
// answered: it is denied too, but its wait is not known. Costs of 1 (the
// client hammering past its limit) are always remembered.
//
// Across a fleet, what the cache answers is still never an admission the
// store would make, but its RetryAfter and Remaining are this instance's
// view: another instance's admissions can make the true wait longer (as for
// any RetryAfter), and Reset in another process, or a strategy that gives
// units back (refunds, lease hand-backs), can make the key pass sooner than
// the cached denial says, by at most r. Reset in this process forgets the
// key first.
//
// Time. With WithClock, elapsed time is read from that clock, in whole
// microseconds as the store reads it, and the answers are exact. With the
// store's clock (the Redis server's TIME), the instance cannot read that
// clock: it measures elapsed time on its own monotonic clock from the moment
// it sent the request, which is at or before the moment the store decided.
// The cache therefore stops answering, and reports a RetryAfter, at most one
// round trip earlier than exact (the next request then asks the store) —
// never later, but for the rate difference of the two clocks over r (a
// monotonic clock's drift, parts per million). An offset between the two
// clocks does not matter.
//
// With a penalty box (WithPenalty, or an algorithm.Penalize strategy: an
// algorithm.DenialCounter), a denial that is a strike is never remembered
// — it must reach the store to be counted — and a ban (Decision.Ban) is
// remembered until the ban ends, not beyond: a client hammering through
// its ban is answered from memory, exactly (TestDenialCacheBan).
//
// Denials by the failure policy or the fallback are not remembered; a
// remembered denial is answered during a store outage too, as it is the
// store's. Peek answers from the cache as AllowN does. In shadow mode a
// cached denial becomes a shadow admission, as any denial does.
//
// Memory: at most maxKeys entries (key, strategy, cost, the Result), in
// shards guarded by their own locks; a full shard drops an expired entry,
// or else the one that expires soonest, among a few it samples. There is no
// goroutine: entries past their time are dropped when next looked up or
// sampled. maxKeys must be at least 1.
func WithDenialCache(maxKeys int) Option {
	return option(func(c *config) {
		if maxKeys < 1 {
			c.errs = append(c.errs, fmt.Errorf("denial cache of %d keys, want at least 1", maxKeys))
		}
		c.denialKeys = maxKeys
	})
}

// denialShards is the most shards a denial cache has: enough to keep
// goroutines hammering different keys off each other's locks on a few
// cores.
const denialShards = 16

// evictionSample is how many entries a full shard looks at to choose one
// to drop.
const evictionSample = 8

// denialCache remembers recent denials (see WithDenialCache). It is safe
// for concurrent use.
type denialCache struct {
	seed     maphash.Seed
	shards   []denialShard
	perShard int
	// exactClock: elapsed time is measured in whole microseconds of a
	// WithClock clock; otherwise on the monotonic clock, rounded up.
	exactClock bool
}

type denialShard struct {
	mu sync.Mutex
	m  map[string]*denial // guarded by mu
	// epoch counts the forgets (Reset) in this shard: a denial learned
	// from a store call that began before a forget is not remembered.
	epoch atomic.Uint64
}

// denial is a remembered store denial.
type denial struct {
	strategy algorithm.Strategy
	n        int64
	at       time.Time     // when the request was sent (or its WithClock time)
	horizon  time.Duration // answers stand while elapsed < horizon
	res      Result
}

func newDenialCache(maxKeys int, exactClock bool) *denialCache {
	n := min(denialShards, maxKeys)
	c := &denialCache{seed: maphash.MakeSeed(), shards: make([]denialShard, n), perShard: maxKeys / n, exactClock: exactClock}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*denial)
	}
	return c
}

func (c *denialCache) shard(key string) *denialShard {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// elapsed is the time from at to now as the cache counts it.
func (c *denialCache) elapsed(at, now time.Time) time.Duration {
	if c.exactClock {
		return time.Duration(now.UnixMicro()-at.UnixMicro()) * time.Microsecond
	}
	d := now.Sub(at)
	if r := d % time.Microsecond; r > 0 {
		d += time.Microsecond - r // round up: stop answering early, never late
	}
	return d
}

// answer returns the remembered denial of key's request of cost n under s
// at now, if there is one that stands; and otherwise the shard's epoch, for
// learn.
func (c *denialCache) answer(key string, s algorithm.Strategy, n int64, now time.Time) (Result, bool, uint64) {
	sh := c.shard(key)
	epoch := sh.epoch.Load()
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		sh.mu.Unlock()
		return Result{}, false, epoch
	}
	el := c.elapsed(e.at, now)
	if el >= e.horizon {
		delete(sh.m, key)
		sh.mu.Unlock()
		return Result{}, false, epoch
	}
	if e.n != n || el < 0 || !sameRule(e.strategy, s) {
		sh.mu.Unlock()
		return Result{}, false, epoch
	}
	res := e.res
	sh.mu.Unlock()
	return aged(res, el), true, epoch
}

// aged is a remembered denial el later: every wait shorter by el. Only
// waits that are positive move (a member that admits is full and stays so).
func aged(res Result, el time.Duration) Result {
	res.RetryAfter -= el
	res.ResetAfter -= el
	if res.limits == nil {
		return res
	}
	ls := slices.Clone(*res.limits)
	for i := range ls {
		if ls[i].RetryAfter > 0 {
			ls[i].RetryAfter -= el
		}
		if ls[i].ResetAfter > 0 {
			ls[i].ResetAfter -= el
		}
	}
	res.limits = &ls
	return res
}

// learn takes the store's decision res on key's request of cost n under s,
// sent at at when the shard's epoch was epoch: a denial whose figures stand
// still is remembered; any other decision forgets the key's entry.
//
// ban is the decision's Decision.Ban. A strategy that counts denials
// (algorithm.DenialCounter, the penalty box) has only its bans remembered,
// until the ban ends: a strike must reach the store to be counted, and
// while a ban holds the key's answers only age (nothing is counted or
// charged, Remaining is 0, the waits are at least the ban's remaining
// time). A ban of a composite is not remembered: its members' figures do
// not merely age.
func (c *denialCache) learn(key string, s algorithm.Strategy, n int64, at time.Time, epoch uint64, res Result, ban time.Duration) {
	horizon := standing(res, n)
	if dc, ok := s.(algorithm.DenialCounter); ok && dc.CountsDenials() {
		horizon = 0
		if ban > 0 && res.limits == nil && !res.Allowed {
			horizon = min(ban, res.RetryAfter)
		}
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if horizon <= 0 {
		delete(sh.m, key)
		return
	}
	if sh.epoch.Load() != epoch {
		return // a Reset ran during the store call: res may predate it
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.perShard {
		sh.evict(c, at)
	}
	sh.m[key] = &denial{strategy: s, n: n, at: at, horizon: horizon, res: res}
}

// standing is how long denial res of cost n stays exactly as it is with no
// traffic but denials, or 0 when it is not remembered (see
// WithDenialCache).
func standing(res Result, n int64) time.Duration {
	if res.Allowed || res.RetryAfter <= 0 || n > res.Limit {
		return 0
	}
	ls := res.Limits()
	if ls == nil {
		if res.Remaining != n-1 {
			return 0
		}
		return res.RetryAfter
	}
	horizon := res.RetryAfter
	for _, m := range ls {
		switch {
		case m.RetryAfter > 0 && m.Remaining == n-1 && n <= m.Limit:
			horizon = min(horizon, m.RetryAfter)
		case m.RetryAfter == 0 && m.ResetAfter == 0:
			// Full: stays full.
		default:
			return 0
		}
	}
	return horizon
}

// evict drops one entry of a full shard: an expired one, or else the one
// that expires soonest among evictionSample (map order is random). It
// requires that sh.mu is held.
func (sh *denialShard) evict(c *denialCache, now time.Time) {
	var victim string
	var soonest time.Duration
	seen := 0
	for k, e := range sh.m {
		left := e.horizon - c.elapsed(e.at, now)
		if left <= 0 {
			delete(sh.m, k)
			return
		}
		if seen == 0 || left < soonest {
			victim, soonest = k, left
		}
		if seen++; seen == evictionSample {
			break
		}
	}
	delete(sh.m, victim)
}

// forget drops key's entry; a denial learned from a store call that began
// before forget is not remembered.
func (c *denialCache) forget(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	sh.epoch.Add(1)
	delete(sh.m, key)
	sh.mu.Unlock()
}

// sameRule reports whether a and b decide alike: the same value, or the
// same algorithm (script) with the same parameters. A strategy without a
// script is only ever itself (the same pointer).
func sameRule(a, b algorithm.Strategy) bool {
	if va, vb := reflect.ValueOf(a), reflect.ValueOf(b); va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer &&
		va.Type() == vb.Type() && va.Pointer() == vb.Pointer() {
		return true
	}
	sa, sb := a.Script(), b.Script()
	if sa == nil || sb == nil {
		return false
	}
	return sa.SHA1 == sb.SHA1 && slices.Equal(sa.Keys, sb.Keys) && a.Limit() == b.Limit() &&
		a.Window() == b.Window() && reflect.DeepEqual(a.ScriptArgs(), b.ScriptArgs())
}
