package algorithm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
)

// step is one request in a table: at proptest.Epoch+at (a minute edge, so
// fixed windows of a minute start there), cost n, and the expected decision.
type step struct {
	at     time.Duration
	n      int64
	want   algorithm.Decision
	reason string
}

func ok(limit, remaining int64, reset time.Duration) algorithm.Decision {
	return algorithm.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func no(limit, remaining int64, retry, reset time.Duration) algorithm.Decision {
	return algorithm.Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func run(t *testing.T, s algorithm.Strategy, steps []step) {
	t.Helper()
	require.NoError(t, s.Validate())
	st := s.NewState()
	for i, x := range steps {
		got, err := s.Decide(st, proptest.Epoch.Add(x.at), x.n)
		require.NoError(t, err)
		require.Equal(t, x.want, got, "step %d (at %v, n=%d): %s", i, x.at, x.n, x.reason)
	}
}

const (
	ms = time.Millisecond
	s  = time.Second
)

func TestSlidingWindowLogSteps(t *testing.T) {
	run(t, algorithm.SlidingWindowLog(3, 10*s), []step{
		{0, 1, ok(3, 2, 10*s), "first request; the key is full again 10s after it"},
		{1 * s, 2, ok(3, 0, 10*s), "2 more fill the window"},
		{2 * s, 1, no(3, 0, 8*s, 9*s), "full: the oldest unit (at 0) leaves at 10s; full again when the one at 1s leaves at 11s"},
		{9999 * ms, 1, no(3, 0, 1*ms, 1001*ms), "1ms before the first unit leaves"},
		{10 * s, 1, ok(3, 0, 10*s), "at exactly t+W the unit from 0 is evicted: [t, t+W) is half-open"},
		{10 * s, 3, no(3, 0, 10*s, 10*s), "3 units need the whole window empty: the units at 1s leave at 11s but the 3rd-oldest, at 10s, only at 20s"},
		{11 * s, 4, no(3, 2, 9*s, 9*s), "n > limit can never pass: a plain denial; RetryAfter = ResetAfter, nothing recorded"},
		{11 * s, 2, ok(3, 0, 10*s), "the denial above did not spoil the key: 2 units fit after the two at 1s left"},
		{30 * s, 4, no(3, 3, 10*s, 0), "everything expired: the key is full, so a never-passable request is told a whole window"},
	})
}

func TestSlidingWindowLogClockBehind(t *testing.T) {
	run(t, algorithm.SlidingWindowLog(2, 10*s), []step{
		{5 * s, 1, ok(2, 1, 10*s), "admitted at 5s"},
		{1 * s, 1, ok(2, 0, 10*s), "a clock behind is judged at 5s, the newest admission: nothing evicted early"},
		{14 * s, 1, no(2, 0, 1*s, 1*s), "both units were recorded at 5s and leave together at 15s"},
		{15 * s, 2, ok(2, 0, 10*s), "both left at 15s"},
	})
}

func TestTokenBucketSteps(t *testing.T) {
	// 1 token per second, capacity 3.
	run(t, algorithm.TokenBucket(1, s, 3), []step{
		{0, 1, ok(3, 2, 1*s), "a key starts full; one token taken is back in 1s"},
		{0, 2, ok(3, 0, 3*s), "the rest taken at once: full again in 3s"},
		{0, 1, no(3, 0, 1*s, 3*s), "empty: the next token arrives in 1s"},
		{1500 * ms, 1, ok(3, 0, 2500*ms), "1.5 tokens refilled, 1 taken, 0.5 left (Remaining rounds down)"},
		{1500 * ms, 1, no(3, 0, 500*ms, 2500*ms), "half a token left: the other half arrives in 0.5s"},
		{2 * s, 2, no(3, 1, 1*s, 2*s), "1 token at 2s; a cost of 2 waits for the second"},
		{2 * s, 4, no(3, 1, 2*s, 2*s), "n > burst can never pass: RetryAfter = ResetAfter and nothing is taken"},
		{10 * s, 3, ok(3, 0, 3*s), "idle long enough, the bucket is full (capped at burst), and the denial above took nothing"},
	})
}

func TestTokenBucketFractionalRate(t *testing.T) {
	// 3 tokens per second: one every 333333.33µs, which no whole number of
	// microseconds represents. The rule must still refill exactly 3 per second.
	run(t, algorithm.TokenBucket(3, s, 3), []step{
		{0, 3, ok(3, 0, 1*s), "empty at 0, full again at exactly 1s"},
		{333333 * time.Microsecond, 1, no(3, 0, 1*time.Microsecond, 666667*time.Microsecond), "0.999999 tokens: 1µs short"},
		{333334 * time.Microsecond, 1, ok(3, 0, 1*s), "1.000002 tokens, 1 taken: 0.000002 left, so ~1s (999999.33µs, rounded up) to full"},
		{1000 * ms, 2, ok(3, 0, 1*s), "at 1s exactly 2 more (3 refilled since 0, 1 taken): no rounding drift"},
	})
}

func TestFixedWindowSteps(t *testing.T) {
	// Epoch is a multiple of a minute, so windows are [Epoch, Epoch+1m), [Epoch+1m, ...).
	run(t, algorithm.FixedWindow(3, time.Minute), []step{
		{0, 1, ok(3, 2, 60*s), "the window ends in 60s"},
		{59 * s, 2, ok(3, 0, 1*s), "the rest of the window, just before its edge"},
		{59 * s, 1, no(3, 0, 1*s, 1*s), "full until the edge"},
		{60 * s, 3, ok(3, 0, 60*s), "a new window at the edge: 6 admitted within one second — the flaw"},
		{70 * s, 4, no(3, 0, 50*s, 50*s), "n > limit can never pass: RetryAfter = ResetAfter"},
		{200 * s, 4, no(3, 3, 60*s, 0), "an empty window: never-passable requests are told a whole window"},
	})
}

func TestValidate(t *testing.T) {
	invalid := map[string]algorithm.Strategy{
		"log limit 0":         algorithm.SlidingWindowLog(0, time.Minute),
		"log limit -1":        algorithm.SlidingWindowLog(-1, time.Minute),
		"log limit 2^53+1":    algorithm.SlidingWindowLog(algorithm.MaxInt+1, time.Minute),
		"log limit 10^6+1":    algorithm.SlidingWindowLog(algorithm.MaxLogLimit+1, time.Minute),
		"log window 0":        algorithm.SlidingWindowLog(1, 0),
		"log window negative": algorithm.SlidingWindowLog(1, -time.Second),
		"log window 999µs":    algorithm.SlidingWindowLog(1, 999*time.Microsecond),
		"log window 11 years": algorithm.SlidingWindowLog(1, 11*365*24*time.Hour),
		"log window 1.5µs":    algorithm.SlidingWindowLog(1, time.Millisecond+1500),
		"bucket rate 0":       algorithm.TokenBucket(0, time.Second, 1),
		"bucket burst 0":      algorithm.TokenBucket(1, time.Second, 0),
		"bucket per 0":        algorithm.TokenBucket(1, 0, 1),
		"bucket overflow":     algorithm.TokenBucket(1, 365*24*time.Hour, 1000), // 1000 * 3.15e13 > 2^53
		"window limit 0":      algorithm.FixedWindow(0, time.Minute),
		"window window 0":     algorithm.FixedWindow(1, 0),
	}
	for name, s := range invalid {
		err := s.Validate()
		require.Error(t, err, name)
		require.True(t, errors.Is(err, algorithm.ErrInvalidStrategy), name)
	}
	valid := map[string]algorithm.Strategy{
		"1 token per year":      algorithm.TokenBucket(1, 365*24*time.Hour, 1),
		"1e9 tokens per second": algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000),
		"log 1ms":               algorithm.SlidingWindowLog(1, time.Millisecond),
		"window 10 years":       algorithm.FixedWindow(algorithm.MaxInt, algorithm.MaxWindow),
	}
	for name, s := range valid {
		require.NoError(t, s.Validate(), name)
	}
}

// At the extremes the arithmetic stays exact: one token per year is refilled
// exactly a year later, not a microsecond sooner.
func TestTokenBucketExtremes(t *testing.T) {
	year := 365 * 24 * time.Hour
	run(t, algorithm.TokenBucket(1, year, 1), []step{
		{0, 1, ok(1, 0, year), "the only token"},
		{year - time.Microsecond, 1, no(1, 0, time.Microsecond, time.Microsecond), "1µs short of a year"},
		{year, 1, ok(1, 0, year), "exactly a year later"},
	})
	run(t, algorithm.TokenBucket(1_000_000_000, time.Second, 1_000_000_000), []step{
		{0, 1_000_000_000, ok(1e9, 0, s), "the whole burst"},
		{time.Microsecond, 1000, ok(1e9, 0, s), "1000 tokens per microsecond, exactly"},
		{time.Microsecond, 1, no(1e9, 0, time.Microsecond, s), "none left this microsecond"},
	})
}

func TestDecideRejectsForeignState(t *testing.T) {
	log := algorithm.SlidingWindowLog(1, time.Second)
	bucket := algorithm.TokenBucket(1, time.Second, 1)
	_, err := log.Decide(bucket.NewState(), proptest.Epoch, 1)
	require.ErrorIs(t, err, algorithm.ErrStateType)
}

func TestRegistry(t *testing.T) {
	names := map[string]bool{}
	for _, e := range algorithm.Registry() {
		s := e.New(10, time.Minute)
		require.NoError(t, s.Validate(), e.Name)
		require.Equal(t, e.Name, s.Name())
		require.Equal(t, int64(10), s.Limit(), e.Name)
		names[e.Name] = true
	}
	require.Equal(t, map[string]bool{"sliding_window_log": true, "token_bucket": true, "fixed_window": true, "sliding_window_counter": true}, names)
	reg := algorithm.Registry()
	reg[0] = algorithm.Entry{}
	require.Equal(t, "sliding_window_log", algorithm.Registry()[0].Name, "the registry cannot be changed through what it returns")
}

// Decide on an invalid strategy reports its configuration error; it never
// divides by zero (TokenBucket(0, ...) has a zero rate).
func TestDecideOnInvalidStrategy(t *testing.T) {
	for _, s := range []algorithm.Strategy{
		algorithm.TokenBucket(0, time.Second, 1),
		algorithm.FixedWindow(1, 0),
		algorithm.SlidingWindowLog(1, 0),
	} {
		_, err := s.Decide(s.NewState(), proptest.Epoch, 1)
		require.ErrorIs(t, err, algorithm.ErrInvalidStrategy, s.Name())
	}
}

// Remaining is never negative, even when a strategy with a smaller limit
// reads state that one with a larger limit filled (two limiters sharing a
// prefix and key).
func TestRemainingNeverNegativeOnSharedState(t *testing.T) {
	for _, pair := range [][2]algorithm.Strategy{
		{algorithm.SlidingWindowLog(5, time.Minute), algorithm.SlidingWindowLog(2, time.Minute)},
		{algorithm.FixedWindow(5, time.Minute), algorithm.FixedWindow(2, time.Minute)},
		{algorithm.TokenBucket(5, time.Minute, 5), algorithm.TokenBucket(2, time.Minute, 2)},
	} {
		big, small := pair[0], pair[1]
		st := big.NewState()
		_, err := big.Decide(st, proptest.Epoch, 5)
		require.NoError(t, err)
		d, err := small.Decide(st, proptest.Epoch, 1)
		require.NoError(t, err)
		require.False(t, d.Allowed, big.Name())
		require.Zero(t, d.Remaining, big.Name())
	}
}
