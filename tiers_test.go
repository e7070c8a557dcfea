package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// tierBackends are the stores the tier properties run on: memory,
// miniredis and, under ./test.sh, the real servers and clusters of Redis and
// Valkey (proptest.RealNames).
func tierBackends(t *testing.T) []proptest.Backend {
	names := []string{"memory", "miniredis"}
	names = append(names, proptest.RealNames(t)...)
	return proptest.Backends(t, names...)
}

// TestPropertyTierSwitchBound: for every registered algorithm, on every
// store, a key whose tier (WithStrategyFor) switches at random between the
// generated strategy (the largest tier) and one or two smaller limits of
// the same algorithm and window admits, in any interval, no more than the
// largest tier admits alone: a sliding log at most its limit in any window;
// a token bucket at most burst + rate·d/per in any interval d; a fixed
// window at most its limit in each aligned window; a sliding-window counter
// at most its limit in each aligned window and 2·limit − ⌈2·limit/W⌉ in
// any window-long interval. Switching tiers never grants a fresh
// allowance.
func TestPropertyTierSwitchBound(t *testing.T) {
	proptest.CheckEntries(t, tierBackends(t), func(b proptest.Backend, s proptest.Scenario) (string, error) {
		largest := s.Strat.S
		limit, w := largest.Limit(), largest.Window()
		seed := fnv.New64a()
		fmt.Fprint(seed, s.String())
		r := rand.New(rand.NewSource(int64(seed.Sum64())))
		e := proptest.RegistryEntry(t, s.Strat.Name)
		tiers := []algorithm.Strategy{largest}
		for range 1 + r.Intn(2) {
			tiers = append(tiers, e.New(1+r.Int63n(limit), w))
		}
		var tier algorithm.Strategy
		clock := &fakeclock.Clock{}
		l, err := fleetlimit.New(largest, b.Store, fleetlimit.WithClock(clock.Now),
			fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithFailurePolicy(fleetlimit.FailClosed),
			fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return tier, nil }))
		if err != nil {
			return "", err
		}
		var outs []proptest.Outcome
		for _, ev := range s.Events() {
			tier = tiers[r.Intn(len(tiers))]
			clock.Set(ev.At)
			res, err := l.AllowN(bg, ev.Key, ev.N)
			if err != nil {
				return "", err
			}
			if res.Limit != tier.Limit() {
				return fmt.Sprintf("at +%v the key's tier has limit %d, the Result says %d", ev.At.Sub(s.Base), tier.Limit(), res.Limit), nil
			}
			outs = append(outs, proptest.Outcome{Event: ev, Res: res})
		}
		return tierBound(s.Strat, outs), nil
	})
}

// tierBound checks outs against the largest tier's bound (see
// TestPropertyTierSwitchBound).
func tierBound(sc proptest.StratCase, outs []proptest.Outcome) string {
	limit, w := sc.S.Limit(), sc.S.Window().Microseconds()
	switch sc.Name {
	case "sliding_window_log":
		if most, from, _ := proptest.MaxAdmittedIn(outs, sc.S.Window()); most > limit {
			return fmt.Sprintf("admitted %d > limit %d within a window from %s", most, limit, from.Format(time.RFC3339Nano))
		}
	case "token_bucket":
		if msg := proptest.TokenBucketBound(outs, sc.Rate, sc.Per, sc.Burst); msg != "" {
			return "above the largest tier's bound: " + msg
		}
	case "fixed_window", "sliding_window_counter":
		type win struct {
			key string
			idx int64
		}
		count := map[win]int64{}
		for _, o := range outs {
			if o.Res.Allowed {
				k := win{o.Key, o.At.UnixMicro() / w}
				if count[k] += o.N; count[k] > limit {
					return fmt.Sprintf("aligned window %d of key %q admitted %d > limit %d", k.idx, o.Key, count[k], limit)
				}
			}
		}
		if sc.Name == "sliding_window_counter" {
			bound := 2*limit - (2*limit+w-1)/w
			if most, from, _ := proptest.MaxAdmittedIn(outs, sc.S.Window()); most > bound {
				return fmt.Sprintf("admitted %d > %d within a window from %s", most, bound, from.Format(time.RFC3339Nano))
			}
		}
	default:
		return fmt.Sprintf("no tier bound written for %q", sc.Name)
	}
	return ""
}

// A key's tier in practice: pro users get ten times the free limit, the
// switch keeps what was spent (a user who spent 8 of the free 10 has 92 of
// the pro 100 left, not 100), and switching back leaves the free tier
// spent.
func TestStrategyForTiers(t *testing.T) {
	for name, st := range stores.All(t) {
		free, pro := algorithm.SlidingWindowLog(10, time.Minute), algorithm.SlidingWindowLog(100, time.Minute)
		plans := map[string]algorithm.Strategy{"paid": pro}
		l, err := fleetlimit.New(free, st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithClock(fixedClock(proptest.Epoch)),
			fleetlimit.WithStrategyFor(func(_ context.Context, key string) (algorithm.Strategy, error) { return plans[key], nil }))
		require.NoError(t, err, name)
		res, err := l.AllowN(bg, "alice", 8)
		require.NoError(t, err, name)
		require.Equal(t, int64(2), res.Remaining, name)
		plans["alice"] = pro
		res, err = l.Allow(bg, "alice")
		require.NoError(t, err, name)
		require.Equal(t, [2]int64{100, 91}, [2]int64{res.Limit, res.Remaining}, "%s: the upgrade keeps what was spent", name)
		delete(plans, "alice")
		res, err = l.Allow(bg, "alice")
		require.NoError(t, err, name)
		require.Equal(t, [3]any{true, int64(10), int64(0)}, [3]any{res.Allowed, res.Limit, res.Remaining}, "%s: back on the free tier, 9 of its 10 are spent", name)
		res, err = l.Allow(bg, "alice")
		require.NoError(t, err, name)
		require.False(t, res.Allowed, "%s: no fresh allowance from switching", name)
	}
}

// Errors from WithStrategyFor's function and strategies it must not return
// are clear errors, with nothing recorded.
func TestStrategyForErrors(t *testing.T) {
	st := stores.Memory(t)
	own := algorithm.TokenBucket(10, time.Second, 10)
	errPlans := errors.New("plans database down")
	var answer algorithm.Strategy
	var fail error
	l, err := fleetlimit.New(own, st, fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return answer, fail }))
	require.NoError(t, err)
	var nilTB interface{ algorithm.Strategy }
	for _, c := range []struct {
		name   string
		answer algorithm.Strategy
		fail   error
		want   error
		says   string
	}{
		{"f fails", nil, errPlans, errPlans, "plans database down"},
		{"invalid", algorithm.TokenBucket(0, time.Second, 10), nil, fleetlimit.ErrInvalidConfig, "rate"},
		{"other algorithm", algorithm.SlidingWindowLog(10, time.Second), nil, fleetlimit.ErrInvalidConfig, "not the limiter's algorithm"},
		{"other window", algorithm.TokenBucket(10, time.Second, 20), nil, fleetlimit.ErrInvalidConfig, "not the limiter's algorithm"},
	} {
		answer, fail = c.answer, c.fail
		res, err := l.AllowN(bg, "u", 3)
		require.ErrorIs(t, err, c.want, c.name)
		require.ErrorContains(t, err, c.says, c.name)
		require.Equal(t, fleetlimit.Result{Limit: 10}, res, c.name)
	}
	answer, fail = nilTB, nil
	res, err := l.AllowN(bg, "u", 3)
	require.NoError(t, err)
	require.Equal(t, int64(7), res.Remaining, "nil is the limiter's own strategy, and the failed calls charged nothing")
	answer = algorithm.TokenBucket(20, time.Second, 20)
	res, err = l.Allow(bg, "u")
	require.NoError(t, err, "20 per second with a burst of 20 also fills in a second")
	require.Equal(t, [2]int64{20, 13}, [2]int64{res.Limit, res.Remaining},
		"the 3 spent carry over as debt in time: 0.3s, which is 6 of the faster bucket's tokens, then 1 more")
	_, err = fleetlimit.New(own, st, fleetlimit.WithStrategyFor(nil))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
}

// During an outage the fallback applies the key's tier at its share.
func TestStrategyForFallback(t *testing.T) {
	mr, c := redistest.Mini(t)
	pro := algorithm.FixedWindow(8, time.Hour)
	l, err := fleetlimit.New(algorithm.FixedWindow(2, time.Hour), stores.Redis(t, c),
		fleetlimit.WithFallback(stores.Memory(t), 2), fleetlimit.WithClock(fixedClock(proptest.Epoch)),
		fleetlimit.WithTimeout(time.Second),
		fleetlimit.WithBreaker(newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, Clock: fixedClock(proptest.Epoch)})),
		fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return pro, nil }))
	require.NoError(t, err)
	mr.Close()
	admitted := 0
	for range 10 {
		res, err := l.Allow(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
		require.Equal(t, int64(4), res.Limit, "the pro tier's 8 over 2 instances")
		if res.Allowed {
			admitted++
		}
	}
	require.Equal(t, 4, admitted)
}

// A token bucket keeps its debt in time across tiers, rounded against the
// key: 1 of 7 tokens per second leaves the bucket full again 142857⅐µs
// later (written as 142858µs less 6/7µs, in units of the 7-per-second
// bucket); one microsecond before that a bucket of 1 per second, whose
// token needs the bucket entirely full, must still deny. Counting the
// remainder 6/7µs in the other bucket's units would admit it.
func TestStrategyForTokenBucketRemainder(t *testing.T) {
	for name, st := range stores.All(t) {
		seven, one := algorithm.TokenBucket(7, time.Second, 7), algorithm.TokenBucket(1, time.Second, 1)
		tier := seven
		now := proptest.Epoch
		l, err := fleetlimit.New(seven, st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithClock(func() time.Time { return now }),
			fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return tier, nil }))
		require.NoError(t, err, name)
		res, err := l.Allow(bg, "u")
		require.NoError(t, err, name)
		require.Equal(t, 142858*time.Microsecond, res.ResetAfter, name)
		tier, now = one, now.Add(142857*time.Microsecond)
		res, err = l.Allow(bg, "u")
		require.NoError(t, err, name)
		require.False(t, res.Allowed, "%s: 1/7µs of debt is left", name)
		require.Equal(t, time.Microsecond, res.RetryAfter, name)
	}
}

// docs/choosing.md's tiers: composites of a token bucket and a day's
// sliding-window counter, the pro tier ten times the free one.
func readmeTiers() (free, pro algorithm.Strategy) {
	return algorithm.All(algorithm.TokenBucket(10, time.Second, 10), algorithm.SlidingWindowCounter(1000, 24*time.Hour)),
		algorithm.All(algorithm.TokenBucket(100, time.Second, 100), algorithm.SlidingWindowCounter(10_000, 24*time.Hour))
}

// TestCompositeTierSteps: a composite key's state carries over between its
// tiers, member by member. A pro user who spent the bucket's 100 has spent
// the free bucket too (a token bucket's debt is time: one second); half a
// second later the free bucket has 5, and spending them is a debt the pro
// bucket sees; the day's counter keeps its count across the switch.
func TestCompositeTierSteps(t *testing.T) {
	free, pro := readmeTiers()
	for name, st := range stores.All(t) {
		clock := fakeclock.New(proptest.EdgeAfter(proptest.Epoch, 24*time.Hour))
		t0 := clock.Now()
		plan := pro
		l, err := fleetlimit.New(free, st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithClock(clock.Now),
			fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return plan, nil }))
		require.NoError(t, err, name)
		allow := func(n int64) fleetlimit.Result {
			t.Helper()
			res, err := l.AllowN(bg, "u", n)
			require.NoError(t, err, name)
			return res
		}
		require.True(t, allow(100).Allowed, "%s: pro's burst", name)
		plan = free
		require.False(t, allow(1).Allowed, "%s: the free bucket is spent too", name)
		clock.Set(t0.Add(500 * time.Millisecond))
		res := allow(5)
		require.True(t, res.Allowed, "%s: half a second refills half the free bucket", name)
		require.Equal(t, []int64{0, 1000 - 105}, []int64{res.Limits()[0].Remaining, res.Limits()[1].Remaining},
			"%s: the day's counter kept pro's 100", name)
		require.False(t, allow(1).Allowed, "%s", name)
		plan = pro
		require.False(t, allow(1).Allowed, "%s: the free admissions are pro's debt too", name)
		clock.Set(t0.Add(time.Second))
		res = allow(50)
		require.True(t, res.Allowed, "%s: 100 + 5·10 spent, 1 s refilled: 50 left", name)
		require.Equal(t, []int64{0, 10_000 - 155}, []int64{res.Limits()[0].Remaining, res.Limits()[1].Remaining}, name)
		require.False(t, allow(1).Allowed, "%s", name)
	}
}

// TestCompositeTierSwitchBound: docs/choosing.md's free and pro composites, a
// key switching between them at random on every request, offered bursts
// for 300 s around a day's edge (far more than either tier admits). In
// any interval it admits no more than the pro tier alone (on memory; 30 s on
// miniredis, whose Lua interpreter is slow): its bucket's 100 +
// 100·d/s in any interval d, its counter's 10,000 in each aligned day and
// 2·10,000 − 1 in any day-long interval. And the switching is not idle:
// a day admits more than the free tier's 1,000, so pro's requests counted
// as pro's, and free requests were denied where pro ones would pass.
func TestCompositeTierSwitchBound(t *testing.T) {
	free, pro := readmeTiers()
	day := 24 * time.Hour
	edge := proptest.EdgeAfter(proptest.Epoch.Add(time.Hour), day)
	_, mini := redistest.Mini(t)
	for name, st := range map[string]store.Store{"memory": stores.Memory(t), "miniredis": stores.Redis(t, mini)} {
		span := 150 * time.Second // each side of the edge; miniredis's Lua is slow
		if name == "miniredis" {
			span = 15 * time.Second
		}
		r := rand.New(rand.NewSource(24))
		clock := fakeclock.New(edge.Add(-span))
		var plan algorithm.Strategy
		l, err := fleetlimit.New(free, st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
			fleetlimit.WithClock(clock.Now), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed),
			fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return plan, nil }))
		require.NoError(t, err, name)
		var outs []proptest.Outcome
		freeDenied := 0
		for now := clock.Now(); now.Before(edge.Add(span)); now = now.Add(time.Duration(r.Int63n(int64(time.Second)))) {
			for range 1 + r.Intn(400) {
				now = now.Add(time.Duration(r.Int63n(int64(2 * time.Millisecond))))
				plan = free
				if r.Intn(2) == 0 {
					plan = pro
				}
				clock.Set(now)
				res, err := l.Allow(bg, "u")
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if plan == free && !res.Allowed {
					freeDenied++
				}
				outs = append(outs, proptest.Outcome{Event: proptest.Event{At: now, Key: "u", N: 1}, Res: res})
			}
		}
		// Pro's bucket: for admissions i ≤ j (each of cost 1), j−i+1 ≤
		// 100 + 100·(t_j − t_i)/s, that is A_j − A_i ≤ 99 s with
		// A_k = k·1s − 100·t_k: checked against the least A_i so far.
		var k, least int64
		first := true
		for _, o := range outs {
			if !o.Res.Allowed {
				continue
			}
			a := k*time.Second.Microseconds() - 100*o.At.UnixMicro()
			if first || a < least {
				least, first = a, false
			}
			if a-least > 99*time.Second.Microseconds() {
				t.Fatalf("%s: admission %d at %v is past pro's bucket bound", name, k, o.At)
			}
			k++
		}
		perDay := map[int64]int64{}
		for _, o := range outs {
			if o.Res.Allowed {
				perDay[o.At.UnixMicro()/day.Microseconds()]++
			}
		}
		require.Len(t, perDay, 2, "%s: the timeline spans a day's edge", name)
		var busiest int64
		for d, n := range perDay {
			require.LessOrEqual(t, n, int64(10_000), "%s: aligned day %d", name, d)
			busiest = max(busiest, n)
		}
		require.Greater(t, busiest, int64(1000), "%s: no day admitted more than the free tier's day", name)
		// Any day-long interval, by two pointers over the admissions.
		var adm []time.Time
		for _, o := range outs {
			if o.Res.Allowed {
				adm = append(adm, o.At)
			}
		}
		most := 0
		for i, j := 0, 0; j < len(adm); j++ {
			for !adm[i].Add(day).After(adm[j]) {
				i++
			}
			most = max(most, j-i+1)
		}
		require.LessOrEqual(t, most, 2*10_000-1, "%s: any day-long interval", name)
		require.Positive(t, freeDenied, "%s: the free tier never bound", name)
	}
}

// A key's tier in the limiter's penalty box (WithStrategyFor with
// WithPenalty): the tier's limit decides, its denials start the box's ban,
// the tier is boxed once (a decision on it allocates no more than one on
// the limiter's own strategy, 0 on the memory store), and tiers built anew
// at every call, past the most the limiter keeps boxed, still decide by
// their own limits.
func TestStrategyForInThePenaltyBox(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(time.Unix(1_800_000_000, 0))
	own := algorithm.FixedWindow(2, time.Second)
	pro := algorithm.FixedWindow(5, time.Second)
	fresh := 0
	tier := func(_ context.Context, key string) (algorithm.Strategy, error) {
		switch {
		case key == "pro":
			return pro, nil
		case strings.HasPrefix(key, "fresh"):
			fresh++
			return algorithm.FixedWindow(3, time.Second), nil
		}
		return nil, nil
	}
	l, err := fleetlimit.New(own, store.NewMemory(), fleetlimit.WithClock(clock.Now), fleetlimit.WithStrategyFor(tier),
		fleetlimit.WithPenalty(2, time.Minute, time.Minute, time.Hour))
	require.NoError(t, err)

	for i := range 5 {
		res, err := l.Allow(ctx, "pro")
		require.NoError(t, err)
		require.True(t, res.Allowed, "pro's %dth of 5", i+1)
		require.Equal(t, int64(5), res.Limit)
	}
	for range 2 {
		res, err := l.Allow(ctx, "pro")
		require.NoError(t, err)
		require.False(t, res.Allowed)
	}
	// Two denials within a minute: banned for a minute, past the window.
	clock.Advance(2 * time.Second)
	res, err := l.Allow(ctx, "pro")
	require.NoError(t, err)
	require.False(t, res.Allowed, "banned in a fresh window")
	require.Greater(t, res.RetryAfter, 50*time.Second)

	clock.Advance(time.Hour)
	var allocs struct{ own, pro float64 }
	allocs.own = testing.AllocsPerRun(200, func() { _, _ = l.Allow(ctx, "basic") })
	allocs.pro = testing.AllocsPerRun(200, func() { _, _ = l.Allow(ctx, "pro") })
	require.Zero(t, allocs.own)
	require.Equal(t, allocs.own, allocs.pro, "the pro tier is boxed once, not at each decision")

	for i := range 1100 {
		key := "fresh" + strconv.Itoa(i)
		for j := range 4 {
			res, err := l.Allow(ctx, key)
			require.NoError(t, err)
			require.Equal(t, j < 3, res.Allowed, "%s: %dth of a tier of 3", key, j+1)
			require.Equal(t, int64(3), res.Limit)
		}
	}
	require.Equal(t, 4400, fresh)
	n, most := fleetlimit.BoxedTiers(l)
	require.Equal(t, most, n, "the pro tier and fresh tiers up to the bound are kept, no more")
}
