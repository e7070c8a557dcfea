package fleetlimit

import (
	"fmt"
	"slices"
	"time"
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
// the cached denial says. Reset in this process forgets the key first.
//
// Trust. A denial is answered from memory for at most one second after the
// store's answer, however long its wait: then the store is asked again. So
// a store that lost the key's state — a FLUSHALL, a restart without
// persistence, an operator's DEL, a Reset or refund in another process —
// admits the key again within a second and a round trip
// (TestDenialCacheNoticesAStoreThatForgot), and a client hammering past its
// limit costs each instance one round trip per second per key.
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
// Memory: at most maxKeys entries (key, strategy, cost, the store's
// decision), in shards guarded by their own locks (internal/denial); a full shard drops an expired entry,
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
