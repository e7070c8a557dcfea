package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// skewed returns limiters over st sharing the key prefix p, each reading its
// own clock (WithClock) at base+offset.
func skewed(t *testing.T, s algorithm.Strategy, st store.Store, p string, base time.Time, offsets ...time.Duration) []*fleetlimit.Limiter {
	var ls []*fleetlimit.Limiter
	for _, off := range offsets {
		ls = append(ls, newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(base.Add(off)))))
	}
	return ls
}

// Token bucket, client clocks (WithClock) skewed by δ = 30s, 10 tokens per
// minute: a clock behind sees no refill (elapsed time is clamped at zero); a
// clock ahead takes exactly δ*rate/per = 5 tokens, once, and they are
// borrowed from the future: a minute later the on-time clock finds 5 where
// it would have found 10. The documented bound burst + rate*(d+δ)/per holds.
func TestClockSkewTokenBucket(t *testing.T) {
	const delta = 30 * time.Second
	for name, st := range allStores(t) {
		s := algorithm.TokenBucket(10, time.Minute, 10)
		p := redistest.Prefix()
		ls := skewed(t, s, st, p, t0, 0, -delta, delta)
		onTime, behind, ahead := ls[0], ls[1], ls[2]
		require.Equal(t, 10, count(t, onTime, "u", 20), "%s: the burst", name)
		require.Zero(t, count(t, behind, "u", 20), "%s: a clock 30s behind sees no refill", name)
		require.Equal(t, 5, count(t, ahead, "u", 20), "%s: a clock 30s ahead takes δ*rate/per = 5", name)
		require.Zero(t, count(t, ahead, "u", 20), "%s: once", name)
		require.Zero(t, count(t, onTime, "u", 20), "%s", name)
		require.Zero(t, count(t, behind, "u", 20), "%s", name)

		later := skewed(t, s, st, p, t0.Add(time.Minute), 0)[0]
		require.Equal(t, 5, count(t, later, "u", 20), "%s: a minute on, the 5 taken early are missing", name)
	}
}

// Sliding log, clocks skewed by δ = 10s, 10 per minute: a clock behind the
// newest admission is judged at it (no early eviction), and the documented
// bound is exact: the window can look 2δ shorter, never more. The behind
// clock admits 10 at true time τ; the ahead clock admits nothing at true
// τ+60s-2δ-1ms and 10 at τ+60s-2δ.
func TestClockSkewSlidingLog(t *testing.T) {
	const delta = 10 * time.Second
	w := time.Minute
	for name, st := range allStores(t) {
		s := algorithm.SlidingWindowLog(10, w)
		p := redistest.Prefix()
		at := func(trueTime time.Time, skew time.Duration) *fleetlimit.Limiter {
			return newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(trueTime.Add(skew))))
		}
		require.Equal(t, 10, count(t, at(t0, -delta), "u", 20), name)
		require.Zero(t, count(t, at(t0, delta), "u", 20), "%s: the ahead clock, at the same true time", name)
		require.Zero(t, count(t, at(t0.Add(w-2*delta-time.Millisecond), delta), "u", 20), "%s: 1ms short of W-2δ", name)
		require.Equal(t, 10, count(t, at(t0.Add(w-2*delta), delta), "u", 20), "%s: at W-2δ the window has passed on the ahead clock", name)
		require.Zero(t, count(t, at(t0.Add(w), -delta), "u", 20), "%s: the behind clock is judged at the newest admission", name)
	}
}

// Fixed window, two clocks straddling a window edge (one 1s before it, one
// 1s after) and taking turns: if each could reopen the window the other had
// left, the pair would admit without limit. Time never runs backwards for a
// key: the behind clock joins the newer window. Limit 2: one in the old
// window, two in the new, then nothing.
func TestClockSkewFixedWindow(t *testing.T) {
	edge := proptest.Epoch.Add(31 * time.Minute)
	for name, st := range allStores(t) {
		s := algorithm.FixedWindow(2, time.Minute)
		ls := skewed(t, s, st, redistest.Prefix(), edge, -time.Second, time.Second)
		var got []bool
		for i := range 20 {
			res, err := ls[i%2].Allow(bg, "u")
			require.NoError(t, err)
			got = append(got, res.Allowed)
			if !res.Allowed {
				require.Positive(t, res.RetryAfter, name)
			}
		}
		want := make([]bool, 20)
		want[0], want[1], want[2] = true, true, true
		require.Equal(t, want, got, "%s: at most 2*limit around an edge, whatever the skew", name)
	}
}

// With the default clock (the Redis server's TIME), app clocks play no part:
// three instances whose clocks would be on time, 30s behind and 30s ahead
// admit exactly the burst between them, where the same three with WithClock
// admit 5 more. On miniredis the server clock is set by the test (to a year
// far from the app's), so refill is exact: 6s later, one more token. On the
// real server, at 10 per hour, refill during the test is nil.
func TestServerTimeIgnoresAppClocks(t *testing.T) {
	m, mini := redistest.Mini(t)
	serverNow := time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)
	m.SetTime(serverNow)
	const delta = 30 * time.Second
	offsets := []time.Duration{0, -delta, delta}

	st := redisStore(t, mini)
	s := algorithm.TokenBucket(10, time.Minute, 10)
	withClocks := skewed(t, s, st, redistest.Prefix(), serverNow, offsets...)
	total := 0
	for _, l := range withClocks {
		total += count(t, l, "u", 20)
	}
	require.Equal(t, 15, total, "client clocks: the ahead clock takes δ*rate/per extra")

	p := redistest.Prefix()
	total = 0
	for range offsets {
		l := newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p)) // no clock: the server's
		total += count(t, l, "u", 20)
	}
	require.Equal(t, 10, total, "server time: exactly the burst")
	m.SetTime(serverNow.Add(6 * time.Second))
	require.Equal(t, 1, count(t, newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p)), "u", 20), "6s of server time refills exactly one token")

	real := redisStore(t, redistest.Real(t))
	hourly := algorithm.TokenBucket(10, time.Hour, 10)
	p = redistest.Prefix()
	total = 0
	for range offsets {
		total += count(t, newLimiter(t, hourly, real, fleetlimit.WithKeyPrefix(p)), "u", 20)
	}
	require.Equal(t, 10, total, "real server time: exactly the burst")
}
