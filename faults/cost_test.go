package faults_test

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// slowestScript returns the longest run of EVALSHA or EVAL in c's SLOWLOG
// (every command is logged: see TestSlidingLogCostCap), and clears it.
func slowestScript(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	entries, err := c.SlowLogGet(bg, -1).Result()
	require.NoError(t, err)
	var worst time.Duration
	for _, e := range entries {
		if len(e.Args) > 0 && (e.Args[0] == "evalsha" || e.Args[0] == "EVALSHA" || e.Args[0] == "eval" || e.Args[0] == "EVAL") {
			worst = max(worst, e.Duration)
		}
	}
	require.NoError(t, c.Do(bg, "SLOWLOG", "RESET").Err())
	return worst
}

// One request cannot make a sliding log's script write more than
// algorithm.MaxLogCost members, whatever its limit or its cost, on a real
// redis-server at the largest limit (algorithm.MaxLogLimit): a request of
// the largest accepted cost is admitted and writes that many; one of a
// larger cost (MaxLogCost+1, or a million, all of the limit) is denied as
// never passable and writes nothing — the key's member count and memory
// are unchanged; a lease of a million-unit size takes at most MaxLogCost.
// SLOWLOG (which logs every command here) gives each script's time inside
// Redis; it is logged, not asserted, for docs/reliability.md.
func TestSlidingLogCostCap(t *testing.T) {
	srv := redistest.StartServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1024")
	c := srv.Client()
	p := redistest.Prefix()
	log := algorithm.SlidingWindowLog(algorithm.MaxLogLimit, time.Hour)
	l := newLimiter(t, log, redisStore(t, c), fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)))
	key := store.RedisKey(p, "u", log.Script().Tag)
	members := func() int64 {
		n, err := c.ZCard(bg, key).Result()
		require.NoError(t, err)
		return n
	}
	bytes := func() int64 {
		n, err := c.MemoryUsage(bg, key).Result()
		require.NoError(t, err)
		return n
	}

	slowestScript(t, c)
	res, err := l.AllowN(bg, "u", algorithm.MaxLogCost)
	require.NoError(t, err)
	require.True(t, res.Allowed, "the largest accepted cost")
	admitTime := slowestScript(t, c)
	require.Equal(t, int64(algorithm.MaxLogCost), members())
	size := bytes()

	for _, n := range []int64{algorithm.MaxLogCost + 1, 100_000, algorithm.MaxLogLimit} {
		res, err := l.AllowN(bg, "u", n)
		require.NoError(t, err)
		require.False(t, res.Allowed, "cost %d is above the cap", n)
		require.Equal(t, time.Hour, res.RetryAfter, "cost %d never passes: the wait is until the key is full again", n)
		require.Equal(t, int64(algorithm.MaxLogLimit-algorithm.MaxLogCost), res.Remaining)
		require.Equal(t, int64(algorithm.MaxLogCost), members(), "cost %d wrote nothing", n)
		require.Equal(t, size, bytes(), "cost %d: the key did not grow", n)
		t.Logf("cost %d: denied in %v inside Redis", n, slowestScript(t, c))
	}
	// Peeks are judged as decisions are.
	res, err = l.Peek(bg, "u", algorithm.MaxLogCost+1)
	require.NoError(t, err)
	require.False(t, res.Allowed, "a peek above the cap")

	// A lease as large as the limit takes at most MaxLogCost units. A
	// key's first round trip is an exact decision (one unit); its next
	// takes the lease.
	leased := newLimiter(t, log, redisStore(t, c), fleetlimit.WithKeyPrefix(p),
		fleetlimit.WithLeases(algorithm.MaxLogLimit, time.Minute), fleetlimit.WithClock(fixedClock(t0)))
	res, err = leased.AllowN(bg, "u", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, int64(algorithm.MaxLogCost+1), members(), "the first round trip was exact")
	slowestScript(t, c)
	res, err = leased.AllowN(bg, "u", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	leaseTime := slowestScript(t, c)
	require.Equal(t, int64(2*algorithm.MaxLogCost+1), members(), "the lease took MaxLogCost units")

	t.Logf("largest accepted cost %d: %v inside Redis (%d members, %d bytes); a lease of MaxLogCost units: %v; limit %d",
		algorithm.MaxLogCost, admitTime, algorithm.MaxLogCost, size, leaseTime, algorithm.MaxLogLimit)

	// The limit does not make one decision slower either. Filled to
	// MaxLogLimit at one instant, and one unit a second later, the key's
	// first units leave the window together while it lives on: each
	// decision after that evicts at most MaxLogCost of them (the rest are
	// skipped by every lookup, and go with later decisions). A refund of
	// every unit is one UNLINK.
	for members() < algorithm.MaxLogLimit {
		res, err := l.AllowN(bg, "u", min(algorithm.MaxLogCost, algorithm.MaxLogLimit-members()))
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	slowestScript(t, c)
	refunded := newLimiter(t, log, redisStore(t, c), fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)))
	freed := infoField(t, c, "memory", "lazyfreed_objects")
	_, err = refunded.Refund(bg, "u", algorithm.MaxLogLimit)
	require.NoError(t, err)
	require.Zero(t, members(), "the refund gave back every unit")
	// The background thread counts the set once it has freed it.
	require.Eventually(t, func() bool { return infoField(t, c, "memory", "lazyfreed_objects") != freed },
		10*time.Second, 10*time.Millisecond, "the set was freed off the main thread")
	refundTime := slowestScript(t, c)
	for members() < algorithm.MaxLogLimit-1 {
		_, err := l.AllowN(bg, "u", min(algorithm.MaxLogCost, algorithm.MaxLogLimit-1-members()))
		require.NoError(t, err)
	}
	at := func(d time.Duration) *fleetlimit.Limiter {
		return newLimiter(t, log, redisStore(t, c), fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0.Add(d))))
	}
	res, err = at(time.Second).Allow(bg, "u")
	require.NoError(t, err)
	require.True(t, res.Allowed)
	slowestScript(t, c)
	var worst time.Duration
	var times []time.Duration
	// Decision i finds the unit of t0+1s and its i-1 predecessors' live.
	for i := int64(1); members() > i; i++ {
		before := members()
		res, err := at(time.Hour+time.Duration(i)*time.Millisecond).Allow(bg, "u")
		require.NoError(t, err)
		require.True(t, res.Allowed, "decision %d after the mass expiry", i)
		require.Equal(t, algorithm.MaxLogLimit-1-i, res.Remaining, "decision %d: the expired units count for nothing", i)
		require.GreaterOrEqual(t, members(), before+1-algorithm.MaxLogCost, "decision %d removed at most MaxLogCost members", i)
		d := slowestScript(t, c)
		times = append(times, d)
		worst = max(worst, d)
		require.LessOrEqual(t, i, int64(algorithm.MaxLogLimit/algorithm.MaxLogCost+1), "the expired units are all gone after limit/MaxLogCost decisions")
	}
	slices.Sort(times)
	t.Logf("at the limit (%d members): %d decisions while they expire, median %v, slowest %v inside Redis; a refund of them all %v",
		algorithm.MaxLogLimit, len(times), times[len(times)/2], worst, refundTime)
}

// The cap is the same rule in both twins: on every store (the Go rule in
// memory, the Lua script on miniredis, redis-server and the cluster), a
// sliding log of limit 25,000 denies a cost of MaxLogCost+1 as never
// passable, on an empty key and on a partly full one, and admits costs of
// MaxLogCost while they fit; a lease of a 25,000-unit size takes
// MaxLogCost units, no more, and denies a request above the cap. t0 is 30s into its minute; the window is an
// hour.
func TestSlidingLogCostCapOnEveryStore(t *testing.T) {
	const limit, cap = 25_000, algorithm.MaxLogCost
	log := algorithm.SlidingWindowLog(limit, time.Hour)
	runSteps(t, log, []step{
		{0, cap + 1, deny(limit, limit, time.Hour, 0), "above the cap on an empty key: a whole window"},
		{0, cap, admit(limit, limit-cap, time.Hour), "the cap fits"},
		{time.Second, cap, admit(limit, limit-2*cap, time.Hour), "and again"},
		{2 * time.Second, cap, deny(limit, limit-2*cap, time.Hour-2*time.Second, time.Hour-time.Second), "does not fit: wait for the first cap units to leave"},
		{2 * time.Second, cap + 1, deny(limit, limit-2*cap, time.Hour-time.Second, time.Hour-time.Second), "above the cap: never passes, wait until the key is full again"},
	})
	for name, st := range allStores(t) {
		p := redistest.Prefix()
		leased := newLimiter(t, log, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)),
			fleetlimit.WithLeases(limit, time.Minute))
		res, err := leased.AllowN(bg, "u", cap+1)
		require.NoError(t, err, name)
		require.False(t, res.Allowed, "%s: a leased request above the cap", name)
		res, err = leased.Allow(bg, "u")
		require.NoError(t, err, name)
		require.True(t, res.Allowed, name)
		plain := newLimiter(t, log, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)))
		res, err = plain.Peek(bg, "u", 1)
		require.NoError(t, err, name)
		require.Equal(t, int64(limit-cap-1), res.Remaining, "%s: the lease took MaxLogCost units", name)
	}
}
