package faults_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// capMemory sets maxmemory to what c's server uses now plus headroom (which
// may be negative).
func capMemory(t *testing.T, c *redis.Client, headroom int64) {
	t.Helper()
	used, err := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64)
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(bg, "maxmemory", strconv.FormatInt(used+headroom, 10)).Err())
}

var junk = strings.Repeat("j", 8<<10)

// With maxmemory and noeviction, a full Redis refuses writes with OOM. For
// every algorithm, an admission (which must write) is then refused before
// the script writes anything: the policy decides and the error wraps
// ErrStoreUnavailable and says OOM. A key exhausted before Redis filled up
// is still denied exactly, with no error (a denial writes nothing, or only
// removes expired units). Nothing grows: not the number of keys, not a
// sliding log's members, not the memory the limiter's keys use. Lifting
// the cap restores every decision. On redis-server and on valkey-server.
func TestMaxmemoryNoEviction(t *testing.T) {
	eachServer(t, testMaxmemoryNoEviction)
}

func testMaxmemoryNoEviction(t *testing.T, bin string) {
	srv := redistest.StartServerOf(t, bin, "--maxmemory-policy", "noeviction")
	admin := srv.Client()
	st := redisStore(t, srv.Client())
	p := redistest.Prefix()
	limiter := func(e algorithm.Entry, opts ...fleetlimit.Option) *fleetlimit.Limiter {
		opts = append([]fleetlimit.Option{fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0))}, opts...)
		return newLimiter(t, e.New(5, time.Minute), st, opts...)
	}
	for _, e := range algorithm.Registry() {
		require.Equal(t, 5, count(t, limiter(e), "spent", 6), e.Name)
	}
	for i := range 32 {
		require.NoError(t, admin.Set(bg, fmt.Sprint("junk:", i), junk, 0).Err())
	}
	capMemory(t, admin, -128<<10) // the data alone is over the cap
	err := admin.Set(bg, "one-more", "x", 0).Err()
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "OOM"), "%v", err)

	before := footprintOf(t, admin, p+"*")
	require.Equal(t, int64(len(algorithm.Registry())), before.keys)
	require.Equal(t, int64(5), before.members, "the sliding log's 5 units")

	for _, e := range algorithm.Registry() {
		for _, policy := range policies {
			msg := e.Name + " " + policy.String()
			l := limiter(e, fleetlimit.WithFailurePolicy(policy), fleetlimit.WithoutBreaker())
			for range 3 {
				o := call(l, bg, "u")
				requireDegraded(t, o, l, healthyTimeout, msg)
				require.Contains(t, o.err.Error(), "OOM", msg)
			}
			res, err := l.Allow(bg, "spent")
			require.NoError(t, err, "%s: a denial needs no memory", msg)
			require.False(t, res.Allowed, msg)
			require.Zero(t, res.Remaining, msg)
		}
	}
	require.Equal(t, before, footprintOf(t, admin, p+"*"), "nothing written while out of memory")

	require.NoError(t, admin.ConfigSet(bg, "maxmemory", "0").Err())
	for _, e := range algorithm.Registry() {
		require.Equal(t, 5, count(t, limiter(e), "u", 6), "%s: room again", e.Name)
	}
}

// With an evicting maxmemory policy, Redis may drop a limiter's key to make
// room, and the key starts afresh: the over-admission is at most one limit
// per evicted key, and none for a key that survived. 50 exhausted keys per
// algorithm (limit 5), then junk until eviction has taken some of them,
// then each key is probed with limit+1 requests. Under volatile-ttl only
// keys with a TTL (every limiter key has one) are candidates.
func TestMaxmemoryEviction(t *testing.T) {
	const limit, keysPer = 5, 50
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.StartServer(t, "--maxmemory-policy", policy)
			admin := srv.Client()
			st := redisStore(t, srv.Client())
			type limited struct {
				l        *fleetlimit.Limiter
				user     string
				redisKey string
			}
			var all []limited
			var redisKeys []string
			for _, e := range algorithm.Registry() {
				p := redistest.Prefix()
				s := e.New(limit, time.Hour)
				l := newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)))
				for i := range keysPer {
					user := fmt.Sprint("user", i)
					require.Equal(t, limit, count(t, l, user, limit+1), "%s %s", e.Name, user)
					k := store.RedisKey(p, user, s.Script().Tag)
					all = append(all, limited{l, user, k})
					redisKeys = append(redisKeys, k)
				}
			}

			capMemory(t, admin, 256<<10)
			for i := 0; i < 4000; i++ {
				err := admin.Set(bg, fmt.Sprint("junk:", i), junk, 0).Err()
				if err != nil {
					require.True(t, strings.HasPrefix(err.Error(), "OOM"), "%v", err)
					break // volatile-ttl with nothing volatile left
				}
				if i%20 == 0 && admin.Exists(bg, redisKeys...).Val() <= int64(len(redisKeys)-keysPer/2) {
					break
				}
			}
			require.NoError(t, admin.ConfigSet(bg, "maxmemory", "0").Err()) // no more eviction while probing

			evicted, extra := 0, 0
			for _, k := range all {
				survived := admin.Exists(bg, k.redisKey).Val() == 1
				n := count(t, k.l, k.user, limit+1)
				if survived {
					require.Zero(t, n, "%s %s survived: still exhausted", k.l.Name(), k.user)
				} else {
					evicted++
					require.Equal(t, limit, n, "%s %s was evicted: it starts afresh, one limit", k.l.Name(), k.user)
				}
				extra += n
			}
			require.GreaterOrEqual(t, evicted, keysPer/2, "eviction reached the limiter's keys")
			require.Equal(t, limit*evicted, extra, "over-admission is one limit per evicted key")
			t.Logf("%s: %d of %d limiter keys evicted, %d extra admissions", policy, evicted, len(all), extra)
		})
	}
}

// usedMemory is INFO memory's used_memory, in bytes.
func usedMemory(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	v, err := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64)
	require.NoError(t, err)
	return v
}

// footprint is what the limiter's keys hold in Redis.
type footprint struct {
	keys    int64 // keys matching the pattern
	members int64 // sorted-set members in them (the sliding logs' units)
	bytes   int64 // MEMORY USAGE summed
}

// footprintOf measures the keys matching pattern.
func footprintOf(t testing.TB, c *redis.Client, pattern string) footprint {
	t.Helper()
	var f footprint
	iter := c.Scan(bg, 0, pattern, 1000).Iterator()
	for iter.Next(bg) {
		k := iter.Val()
		f.keys++
		if strings.HasSuffix(k, ":sl") {
			f.members += c.ZCard(bg, k).Val()
		}
		f.bytes += c.MemoryUsage(bg, k).Val()
	}
	require.NoError(t, iter.Err())
	return f
}

// A sliding log admitting into a Redis with 512 KB of room under
// noeviction: it fills the room, then Redis refuses every admission with
// OOM before the script writes anything — no member is added and
// used_memory stays at the cap (one decision's worth over at most) however
// long the traffic goes on. Each call admits 50 units (50 members), ten
// calls per key of limit 1000; the clock is pinned, so nothing ages out. No
// breaker, so that every call reaches Redis. (Before the sliding log's
// script wrote its ZADD first, 10,000 such calls all succeeded and took
// used_memory to 42 times the cap.)
func TestMaxmemorySlidingLogStopsAtTheCap(t *testing.T) {
	const cost, attempts = 50, 400
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	admin := srv.Client()
	p := redistest.Prefix()
	l := newLimiter(t, algorithm.SlidingWindowLog(1000, time.Hour), redisStore(t, srv.Client()),
		fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)), fleetlimit.WithoutBreaker(),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	capMemory(t, admin, 512<<10)
	maxmemory, err := strconv.ParseInt(admin.ConfigGet(bg, "maxmemory").Val()["maxmemory"], 10, 64)
	require.NoError(t, err)

	// Fill the room.
	user := func(i int) string { return fmt.Sprint("user", i/10) }
	calls := 0
	var first error
	for ; calls < 10_000; calls++ {
		res, err := l.AllowN(bg, user(calls), cost)
		if err != nil {
			first = err
			break
		}
		require.True(t, res.Allowed, "call %d", calls)
	}
	used := usedMemory(t, admin)
	filled := footprintOf(t, admin, p+"*")
	// The scan itself moves used_memory by tens of KB: compare later
	// readings with one taken after it.
	base := usedMemory(t, admin)
	t.Logf("room filled after %d calls: %d keys, %d members; used_memory %d = %.0f%% of maxmemory %d",
		calls, filled.keys, filled.members, used, 100*float64(used)/float64(maxmemory), maxmemory)
	require.Error(t, first, "10,000 admissions of %d and Redis never refused one: used_memory %d = %.0f%% of maxmemory",
		cost, used, 100*float64(used)/float64(maxmemory))
	require.ErrorIs(t, first, fleetlimit.ErrStoreUnavailable)
	require.Contains(t, first.Error(), "OOM")

	// Keep going: nothing more is written.
	peak := base
	for i := range attempts {
		res, err := l.AllowN(bg, user(calls+i), cost)
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "attempt %d", i)
		require.Contains(t, err.Error(), "OOM", "attempt %d", i)
		require.False(t, res.Allowed, "FailClosed decides")
		if i%50 == 0 {
			peak = max(peak, usedMemory(t, admin))
		}
	}
	peak = max(peak, usedMemory(t, admin))
	after := footprintOf(t, admin, p+"*")
	t.Logf("after %d more attempts: %d keys, %d members; peak used_memory %d = %.0f%% of maxmemory",
		attempts, after.keys, after.members, peak, 100*float64(peak)/float64(maxmemory))
	require.Equal(t, filled, after, "no key, member or byte added while out of memory")
	// Redis checks memory before a script runs, so the last admission it
	// let start may take it past the cap: here by one listpack-to-skiplist
	// conversion of a key (about 17 KB).
	require.LessOrEqual(t, used, maxmemory+64<<10, "at most one decision past the cap")
	require.LessOrEqual(t, peak, base+16<<10, "used_memory does not grow while out of memory")
}

// TestMaxmemoryTradeoff measures what happens to limits when Redis is full,
// under noeviction and under allkeys-lru, for docs/reliability.md. Per
// algorithm, limit 10 per hour on a pinned clock: 100 users who have spent
// 5 ("half") and 100 who have spent all 10 ("spent"). Then the cap is set
// 256 KB above what Redis holds and app data (8 KB strings) is written: under
// noeviction until Redis refuses it, under allkeys-lru 512 KB of it (twice
// the room). While Redis is full, every user sends 10 more requests,
// fail-open and without a breaker, so that every decision reaches Redis.
// Exact would be 5 more admissions per half user and none per spent user.
//
// noeviction: no limiter key is lost and every spent user is still denied,
// without error; every request of a half user is an admission Redis refuses
// (OOM), so the policy decides all 10 (fail-open: 5 extra per user, and
// more with every further request; fail-closed would deny them all).
// The limiter's keys do not grow. allkeys-lru: no error ever, used_memory
// stays at the cap, and each limiter key Redis evicted starts afresh: a
// full limit of extra admissions for a spent user, 5 for a half user
// ("midway" counts keys evicted between their own requests).
func TestMaxmemoryTradeoff(t *testing.T) {
	const limit, users = tradeoffLimit, tradeoffUsers
	for _, mp := range []string{"noeviction", "allkeys-lru"} {
		t.Run(mp, func(t *testing.T) {
			srv := redistest.StartServer(t, "--maxmemory-policy", mp)
			admin := srv.Client()
			st := redisStore(t, srv.Client())
			type user struct {
				l     *fleetlimit.Limiter
				name  string
				key   string
				spent int
			}
			var all []user
			for _, e := range algorithm.Registry() {
				p := redistest.Prefix()
				s := e.New(limit, time.Hour)
				l := newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0)), fleetlimit.WithoutBreaker())
				for i := range 2 * users {
					u := user{l: l, name: fmt.Sprint("user", i), spent: limit / 2}
					if i >= users {
						u.spent = limit
					}
					u.key = store.RedisKey(p, u.name, s.Script().Tag)
					require.Equal(t, u.spent, count(t, l, u.name, u.spent), "%s %s", e.Name, u.name)
					all = append(all, u)
				}
			}

			capMemory(t, admin, 256<<10)
			maxmemory, err := strconv.ParseInt(admin.ConfigGet(bg, "maxmemory").Val()["maxmemory"], 10, 64)
			require.NoError(t, err)
			refused := false
			for i := 0; i < 64; i++ { // 512 KB
				if err := admin.Set(bg, fmt.Sprint("junk:", i), junk, 0).Err(); err != nil {
					require.True(t, strings.HasPrefix(err.Error(), "OOM"), "%v", err)
					refused = true
					break
				}
			}
			require.Equal(t, mp == "noeviction", refused, "only noeviction refuses app data")
			// Measured after the scan: the admin's own traffic moves
			// used_memory by tens of KB.
			held := footprintOf(t, admin, "test:*")
			full := usedMemory(t, admin)
			clientsFull := infoField(t, admin, "memory", "mem_clients_normal")

			type tally struct{ users, evicted, midway, admitted, denied, errs, extra int }
			by := map[string]*tally{}
			peak := full
			for i, u := range all {
				group := u.l.Name() + " " + map[bool]string{true: "spent", false: "half"}[u.spent == limit]
				tl := by[group]
				if tl == nil {
					tl = &tally{}
					by[group] = tl
				}
				tl.users++
				evicted := admin.Exists(bg, u.key).Val() == 0
				if evicted {
					tl.evicted++
				}
				admitted := 0
				for range limit {
					res, err := u.l.Allow(bg, u.name)
					if err != nil {
						require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
						require.Contains(t, err.Error(), "OOM")
						tl.errs++
					}
					if res.Allowed {
						admitted++
					} else {
						tl.denied++
					}
				}
				tl.admitted += admitted
				tl.extra += admitted - (limit - u.spent)
				switch {
				case mp == "noeviction":
				case evicted:
					require.Equal(t, limit, admitted, "%s: evicted, so a fresh limit", group)
				case admitted != limit-u.spent:
					// Evicted between its own requests: Redis's LRU clock
					// has a resolution of one second, so a key just used
					// can look as idle as the others.
					require.Greater(t, admitted, limit-u.spent, group)
					tl.midway++
				}
				if i%50 == 0 {
					peak = max(peak, usedMemory(t, admin))
				}
			}
			peak = max(peak, usedMemory(t, admin))
			t.Logf("%s: maxmemory %d; used_memory when full %d (%.0f%%), peak while deciding %d (%.0f%%); evicted_keys %s; client buffers %s B when full, %s B after",
				mp, maxmemory, full, 100*float64(full)/float64(maxmemory), peak, 100*float64(peak)/float64(maxmemory),
				infoField(t, admin, "stats", "evicted_keys"), clientsFull, infoField(t, admin, "memory", "mem_clients_normal"))
			t.Logf("%-30s %6s %8s %7s %9s %7s %7s %6s", "algorithm, users", "users", "evicted", "midway", "admitted", "denied", "errors", "extra")
			for _, e := range algorithm.Registry() {
				for _, g := range []string{"half", "spent"} {
					tl := by[e.Name+" "+g]
					t.Logf("%-30s %6d %8d %7d %9d %7d %7d %6d", e.Name+", "+g, tl.users, tl.evicted, tl.midway, tl.admitted, tl.denied, tl.errs, tl.extra)
					switch mp {
					case "noeviction":
						require.Zero(t, tl.evicted, "%s %s: noeviction loses no key", e.Name, g)
						if g == "spent" {
							require.Zero(t, tl.errs+tl.admitted, "%s: spent users are denied exactly, without error", e.Name)
						} else {
							require.Equal(t, users*limit, tl.errs, "%s: every admission is refused with OOM and decided by the policy", e.Name)
						}
					default:
						require.Zero(t, tl.errs, "%s %s: an evicting Redis never refuses", e.Name, g)
					}
				}
			}
			if mp == "noeviction" {
				require.Equal(t, held, footprintOf(t, admin, "test:*"), "the limiter's keys do not grow while full")
			}
		})
	}
}

// TestMaxmemoryTradeoff's limit per hour and users per group and
// algorithm.
const tradeoffLimit, tradeoffUsers = 10, 100

// TestMaxmemorySectionDescribesItsTest: docs/reliability.md's "When Redis
// is full" describes TestMaxmemoryTradeoff as it is today: as many
// algorithms as algorithm.Registry holds, its limit and users, the
// noeviction rows the test asserts (computed here from its constants),
// and the count of limiter keys out of all it writes. Its allkeys-lru
// ranges vary from run to run and are not checked.
func TestMaxmemorySectionDescribesItsTest(t *testing.T) {
	doc, err := os.ReadFile("../docs/reliability.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "## When Redis is full")
	require.True(t, ok, "docs/reliability.md: no section \"When Redis is full\"")
	section, _, _ = strings.Cut(section, "\n## ")
	flat := strings.Join(strings.Fields(section), " ")
	algos := len(algorithm.Registry())
	word := map[int]string{2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}[algos]
	half, spent := tradeoffUsers*tradeoffLimit, tradeoffUsers*tradeoffLimit
	for _, want := range []string{
		fmt.Sprintf("Per algorithm (the %s of `algorithm.Registry`), limit %d per hour: %d users who had spent %d (\"half\") and %d who had spent all %d (\"spent\")",
			word, tradeoffLimit, tradeoffUsers, tradeoffLimit/2, tradeoffUsers, tradeoffLimit),
		fmt.Sprintf("| `noeviction`, half | 0 of %d | %s / 0 / %s (`OOM`, decided by the policy) | %s (fail-open) |",
			tradeoffUsers, thousands(half), thousands(half), thousands(half/2)),
		fmt.Sprintf("| `noeviction`, spent | 0 of %d | 0 / %s / 0 | 0 |", tradeoffUsers, thousands(spent)),
		fmt.Sprintf("The %s algorithms were identical under `noeviction`", word),
		fmt.Sprintf(" of %d limiter keys evicted in all", 2*tradeoffUsers*algos),
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("docs/reliability.md's \"When Redis is full\" does not say %q", want)
		}
	}
}
