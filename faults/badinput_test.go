package faults_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// Limits above 2^53 (a Lua number is a double), windows below a
// millisecond, windows long enough to overflow the arithmetic, and token
// buckets whose units would pass 2^53 are refused by New, for every
// algorithm, before any store sees them.
func TestBadConfigRefused(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	for _, e := range algorithm.Registry() {
		for name, s := range map[string]algorithm.Strategy{
			"limit 2^53+1":           e.New(algorithm.MaxInt+1, time.Minute),
			"limit MaxInt64":         e.New(math.MaxInt64, time.Minute),
			"window 999µs":           e.New(1, 999*time.Microsecond),
			"window 1ns":             e.New(1, time.Nanosecond),
			"window MaxWindow+1ms":   e.New(1, algorithm.MaxWindow+time.Millisecond),
			"window MaxInt64 (292y)": e.New(1, math.MaxInt64),
		} {
			l, err := fleetlimit.New(s, mem)
			require.Nil(t, l)
			require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, "%s %s", e.Name, name)
			require.ErrorIs(t, err, algorithm.ErrInvalidStrategy, "%s %s", e.Name, name)
		}
	}
	// 1000 tokens of one per year is 3.15e16 units: past 2^53.
	_, err := fleetlimit.New(algorithm.TokenBucket(1, 365*24*time.Hour, 1000), mem)
	require.ErrorIs(t, err, algorithm.ErrInvalidStrategy)
	require.Contains(t, err.Error(), "2^53")
}

// A key of exactly store.MaxKeyLen bytes (braces too, which the Redis key
// escapes to three times the length) is an ordinary key on every store; one
// byte more is ErrInvalidKey and records nothing.
func TestKeyLengthLimit(t *testing.T) {
	for name, st := range allStores(t) {
		l := newLimiter(t, algorithm.SlidingWindowLog(1, time.Minute), st)
		for _, k := range []string{strings.Repeat("k", store.MaxKeyLen), strings.Repeat("{", store.MaxKeyLen)} {
			require.Equal(t, 1, count(t, l, k, 3), "%s: a %d-byte key is limited", name, len(k))
			_, err := l.Allow(bg, k+"x")
			require.ErrorIs(t, err, fleetlimit.ErrInvalidKey, name)
		}
	}
}

// step is one decision at an offset from t0 with its expected Result.
type step struct {
	at   time.Duration
	n    int64
	want fleetlimit.Result
	why  string
}

// runSteps applies steps to one key on every store, each step through a
// limiter whose clock reads t0+at, and checks every Result.
func runSteps(t *testing.T, s algorithm.Strategy, steps []step) {
	t.Helper()
	for name, st := range allStores(t) {
		p := redistest.Prefix()
		for i, sp := range steps {
			l := newLimiter(t, s, st, fleetlimit.WithKeyPrefix(p), fleetlimit.WithClock(fixedClock(t0.Add(sp.at))))
			res, err := l.AllowN(bg, "u", sp.n)
			require.NoError(t, err, "%s step %d", name, i)
			require.Equal(t, sp.want, res, "%s step %d: %s", name, i, sp.why)
		}
	}
}

func admit(limit, remaining int64, reset time.Duration) fleetlimit.Result {
	return fleetlimit.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func deny(limit, remaining int64, retry, reset time.Duration) fleetlimit.Result {
	return fleetlimit.Result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// At a limit of exactly 2^53 the counters stay exact in Lua: 2^53+1 is not
// a double, so "count + n <= limit" rounded it down and admitted one more
// (with Remaining -1). A sliding log refuses such a limit (it would hold a
// member per unit). t0 is 30s into its minute.
func TestLimitAt2Pow53(t *testing.T) {
	const max = algorithm.MaxInt
	runSteps(t, algorithm.FixedWindow(max, time.Minute), []step{
		{0, max, admit(max, 0, 30*time.Second), "all of 2^53 at once"},
		{0, 1, deny(max, 0, 30*time.Second, 30*time.Second), "not one more"},
	})
	// A sliding log keeps one member per unit, so its limit stops far below
	// 2^53 (algorithm.MaxLogLimit), with a clear error; at that cap the
	// exact comparison still holds.
	require.ErrorIs(t, algorithm.SlidingWindowLog(max, time.Minute).Validate(), algorithm.ErrInvalidStrategy)
	const logMax = algorithm.MaxLogLimit
	runSteps(t, algorithm.SlidingWindowLog(logMax, time.Minute), []step{
		{0, 1, admit(logMax, logMax-1, time.Minute), "one unit"},
		{0, logMax, deny(logMax, logMax-1, time.Minute, time.Minute), "the whole limit is above MaxLogCost: it never passes, wait until the key is full again"},
		{0, 1, admit(logMax, logMax-2, time.Minute), "and one more unit"},
	})
}

// Token buckets at the extremes are exact on every store: one token per year
// comes back a year later, not a microsecond sooner; at 10^9 tokens per
// second each microsecond refills exactly 1000, and at 10^9 per 3 seconds
// three microseconds refill exactly 1000 (333.33... each: floats would
// drift). Integer units below 2^53 throughout.
func TestTokenBucketExtremesOnStores(t *testing.T) {
	const µs = time.Microsecond
	year := 365 * 24 * time.Hour
	runSteps(t, algorithm.TokenBucket(1, year, 1), []step{
		{0, 1, admit(1, 0, year), "the only token"},
		{year - µs, 1, deny(1, 0, µs, µs), "1µs short of a year"},
		{year, 1, admit(1, 0, year), "exactly a year later"},
	})
	const burst = 1_000_000_000_000_000 // 10^15: a fill of 10^6 s at 10^9/s
	fill := burst / 1000 * µs
	runSteps(t, algorithm.TokenBucket(1_000_000_000, time.Second, burst), []step{
		{0, burst, admit(burst, 0, fill), "the whole burst"},
		{µs, 1000, admit(burst, 0, fill), "1000 tokens in a microsecond"},
		{µs, 1, deny(burst, 0, µs, fill), "not one more this microsecond"},
		{time.Second + µs, 1_000_000_000, admit(burst, 0, fill), "10^9 in the next second, exactly"},
		{time.Second + µs, 1, deny(burst, 0, µs, fill), "and not one more"},
	})
	runSteps(t, algorithm.TokenBucket(1_000_000_000, 3*time.Second, burst), []step{
		{0, burst, admit(burst, 0, 3*fill), "the whole burst"},
		{µs, 334, deny(burst, 333, µs, 3*fill-µs), "333.33 tokens after 1µs: 334 do not fit, yet"},
		{µs, 333, admit(burst, 0, 3*fill), "333 do"},
		{2 * µs, 333, admit(burst, 0, 3*fill), "0.33 + 333.33: 333 more"},
		{3 * µs, 334, admit(burst, 0, 3*fill), "0.67 + 333.33 = 334 exactly: 1000 in 3µs"},
		{3 * µs, 1, deny(burst, 0, µs, 3*fill), "nothing left over; a token (3 units) refills in 1µs"},
	})
}
