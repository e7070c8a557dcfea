// Package denial remembers a limiter's recent store denials
// (fleetlimit.WithDenialCache) so that a repeat is answered in process,
// exactly as the store would answer it, with no round trip.
//
// The model: a denial records nothing, and other traffic only spends the
// key's capacity, so a request the store denied with RetryAfter r cannot
// pass before r has passed. A denial is remembered only while its figures
// cannot move but by ageing (Standing says how long), and answered only
// for the same key, cost and rule (rule.Same). The root package's
// TestPropertyDenialCacheExact proves the answers equal the store's.
package denial

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/keyed"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// evictionSample is how many entries a full shard looks at to choose one
// to drop.
const evictionSample = 8

// MaxTrust is the longest a remembered denial is answered from memory,
// however long its wait: a store that lost the key's state meanwhile (a
// FLUSHALL, a restart without persistence, an operator's DEL) would admit
// the request, and the cache cannot see that. So the cache asks the store
// again at least this often per key and cost: a hammering client costs
// one round trip per MaxTrust per instance, and a store that forgot is
// noticed within MaxTrust (and that round trip).
const MaxTrust = time.Second

// Cache holds at most its maxKeys denials, in shards guarded by their own
// locks; a full shard drops an expired entry, or else the one that expires
// soonest among a few it samples. It has no goroutine: entries past their
// time are dropped when next looked up or sampled. It is safe for
// concurrent use.
type Cache struct {
	shards   keyed.Shards[shard]
	perShard int
	clock    keyed.Clock
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry // guarded by mu
	// epoch counts the forgets (Reset) in this shard: a denial learned
	// from a store call that began before a forget is not remembered.
	epoch atomic.Uint64
}

// entry is a remembered store denial.
type entry struct {
	strategy algorithm.Strategy
	n        int64
	at       time.Time     // when the request was sent (or its WithClock time)
	horizon  time.Duration // answers stand while the age is below it
	d        algorithm.Decision
}

// New returns an empty cache of at most maxKeys (at least 1) denials,
// aged on clock.
func New(maxKeys int, clock keyed.Clock) *Cache {
	c := &Cache{shards: keyed.NewShards[shard](min(keyed.MaxShards, maxKeys)), clock: clock}
	c.perShard = max(1, maxKeys/c.shards.Len())
	c.shards.Each(func(sh *shard) { sh.m = make(map[string]*entry) })
	return c
}

// Answer returns the remembered denial of key's request of cost n under s
// at now, if one stands, and its age (every wait in it is that much
// shorter now); and in any case the shard's epoch, for Learn.
func (c *Cache) Answer(key string, s algorithm.Strategy, n int64, now time.Time) (d algorithm.Decision, age time.Duration, ok bool, epoch uint64) {
	sh := c.shards.Of(key)
	epoch = sh.epoch.Load()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil {
		return d, 0, false, epoch
	}
	age = c.clock.Since(e.at, now)
	if age >= e.horizon {
		delete(sh.m, key)
		return d, 0, false, epoch
	}
	if e.n != n || age < 0 || !rule.Same(e.strategy, s) {
		return d, 0, false, epoch
	}
	return e.d, age, true, epoch
}

// Learn takes the store's decision d on key's request of cost n under s,
// sent at at when the shard's epoch was epoch: a denial that stands
// (Standing) is remembered, for at most MaxTrust; any other decision
// forgets the key's entry.
//
// ban is the decision's Decision.Ban (0 for a peek, whose ban is one it
// would start). A strategy that counts denials (algorithm.DenialCounter,
// the penalty box) has only its bans remembered, until the ban ends: a
// strike must reach the store to be counted, and while a ban holds the
// key's answers only age (nothing is counted or charged, Remaining is 0,
// the waits are at least the ban's remaining time). A ban of a composite
// is not remembered: its members' figures do not merely age; nor a ban of
// a cost that can never pass, whose wait is the inner strategy's window,
// which does not age either.
func (c *Cache) Learn(key string, s algorithm.Strategy, n int64, at time.Time, epoch uint64, d algorithm.Decision, ban time.Duration) {
	horizon := Standing(d, n)
	if dc, ok := s.(algorithm.DenialCounter); ok && dc.CountsDenials() {
		horizon = 0
		if ban > 0 && d.Members() == nil && !d.Allowed && n <= d.Limit {
			horizon = min(ban, d.RetryAfter)
		}
	}
	horizon = min(horizon, MaxTrust)
	sh := c.shards.Of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if horizon <= 0 {
		delete(sh.m, key)
		return
	}
	if sh.epoch.Load() != epoch {
		return // a Reset ran during the store call: d may predate it
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.perShard {
		sh.evict(c.clock, at)
	}
	sh.m[key] = &entry{strategy: s, n: n, at: at, horizon: horizon, d: d}
}

// Standing is how long denial d of cost n stays exactly as it is with no
// traffic but denials, or 0 when it is not to be remembered: d must deny
// with a wait, n must be within the limit (a never-passable cost's wait
// is not known to age), and its Remaining must be n−1 (a Remaining below
// n only grows with time, and n−1 is the most it can be while n is
// denied); for a composite, every member that denies must have Remaining
// n−1 and n within its limit, every member that admits must be full, and
// the denial stands until the first denying member's wait ends.
func Standing(d algorithm.Decision, n int64) time.Duration {
	if d.Allowed || d.RetryAfter <= 0 || n > d.Limit {
		return 0
	}
	ms := d.Members()
	if ms == nil {
		if d.Remaining != n-1 {
			return 0
		}
		return d.RetryAfter
	}
	horizon := d.RetryAfter
	for _, m := range ms {
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
func (sh *shard) evict(clock keyed.Clock, now time.Time) {
	var victim string
	var soonest time.Duration
	seen := 0
	for k, e := range sh.m {
		left := e.horizon - clock.Since(e.at, now)
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

// Forget drops key's entry; a denial learned from a store call that began
// before Forget is not remembered.
func (c *Cache) Forget(key string) {
	sh := c.shards.Of(key)
	sh.mu.Lock()
	sh.epoch.Add(1)
	delete(sh.m, key)
	sh.mu.Unlock()
}

// Len is how many denials the cache holds (some perhaps past their time).
func (c *Cache) Len() int {
	return c.shards.Sum(func(sh *shard) int {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return len(sh.m)
	})
}
