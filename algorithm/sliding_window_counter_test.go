package algorithm_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

const us = time.Microsecond

func TestSlidingWindowCounterSteps(t *testing.T) {
	// 10 per 10s; proptest.Epoch is a window edge. x below is how much of the previous
	// window [t-W, t) still covers, and the previous count weighs prev*x/W.
	run(t, algorithm.SlidingWindowCounter(10, 10*s), []step{
		{0, 4, ok(10, 6, 20*s), "window 0: estimate 0 + 4; a count weighs until the end of the next window, so the key is full again at 20s"},
		{5 * s, 6, ok(10, 0, 15*s), "cur = 10 fills window 0; full again 2W - 5s later"},
		{10*s - us, 1, no(10, 0, 1*s+us, 10*s+us), "cur + 1 > 10 cannot fit in window 0; in window 1 the 10 weigh 10*x/W and 1 more fits once x <= 9s, at 11s"},
		{10 * s, 1, no(10, 0, 1*s, 10*s), "window edge: cur becomes prev at full weight (x = W), so the estimate is still 10; full again when x reaches 0, at 20s"},
		{11*s - us, 1, no(10, 0, us, 9*s+us), "1µs before: 10*9.000001/10 = 9.000001, rounded up to 10: nothing fits"},
		{11 * s, 1, ok(10, 0, 19*s), "exactly RetryAfter later: 9 + 1 = 10"},
		{15 * s, 3, ok(10, 1, 15*s), "partial decay: half of window 0's 10 still counts: 5 + 1 + 3 = 9"},
		{15*s + 500*ms, 2, no(10, 1, 500*ms, 14*s+500*ms), "the estimate is 4.5 + 4 = 8.5: Remaining is floor(1.5) = 1, and 2 more would be 10.5 (rounding 4.5 down would admit them); they fit once prev weighs 4, at 16s"},
		{16 * s, 11, no(10, 2, 14*s, 14*s), "n > limit can never pass: a plain denial, RetryAfter = ResetAfter, nothing counted"},
		{16 * s, 2, ok(10, 0, 14*s), "4 + 4 + 2 = 10: the retry above was exact, and the denial counted nothing"},
		{19 * s, 4, no(10, 3, 1*s, 11*s), "window 0's 10 weigh 1 and window 1 holds 6: 3 left; 4 fit at the edge, where window 0 stops counting and window 1's 6 become prev at full weight: 6 + 4 = 10"},
		{20 * s, 4, ok(10, 0, 20*s), "at the edge exactly"},
		{25 * s, 7, no(10, 3, 7500*ms, 15*s), "window 1's 6 weigh 3 and window 2 holds 4: 3 left; 7 > limit - cur = 6 cannot fit in window 2 at all: in window 3 its 4 weigh 4*x/W, and 3 + 7 = 10 once x = 7.5s, at 32.5s"},
		{32500*ms - us, 7, no(10, 6, us, 7500*ms+us), "1µs before: 4*7.500001/10 = 3.0000004 rounds up to 4; cur is 0 and prev > 0, so full again at the end of window 3"},
		{32500 * ms, 7, ok(10, 0, 17500*ms), "3 + 7 = 10"},
		{60 * s, 11, no(10, 10, 10*s, 0), "two windows after the last count the key is full again: a never-passable request is told a whole window"},
	})
}

func TestSlidingWindowCounterClockBehind(t *testing.T) {
	run(t, algorithm.SlidingWindowCounter(3, 10*s), []step{
		{25 * s, 2, ok(3, 1, 15*s), "window 2 is [20s, 30s)"},
		{12 * s, 1, ok(3, 0, 20*s), "a clock behind, in window 1, is judged at 20s, the start of the newest window, and counted there: ResetAfter is from 20s"},
		{12 * s, 1, no(3, 0, 13333334*us, 20*s), "window 1 would be empty, but it is judged in window 2, which is full: 1 fits in window 3 once its 3 weigh 2, 13.333334s after 20s"},
		{33333333 * us, 1, no(3, 0, us, 6666667*us), "3*6.666667/10 = 2.0000001 rounds up to 3"},
		{33333334 * us, 1, ok(3, 0, 16666666*us), "3*6.666666/10 = 1.9999998, + 1 <= 3"},
	})
}

// swcBound is the most a sliding-window counter admits in any interval of
// length W, W in µs (see SlidingWindowCounter's doc).
func swcBound(limit, w int64) int64 {
	return 2*limit - (2*limit+w-1)/w
}

// The bound is reached: limit at the last microsecond of a window, then
// limit - ⌈2*limit/W⌉ at W-2µs into the next; one unit more is refused.
// MaxInt per MaxWindow checks the exact arithmetic at its extreme.
func TestSlidingWindowCounterBoundIsTight(t *testing.T) {
	for _, c := range []struct {
		limit  int64
		window time.Duration
	}{
		{1, time.Millisecond}, {10, time.Minute}, {100, time.Second}, {999, time.Millisecond},
		{2000, time.Millisecond}, {4001, 1500 * us}, {1_000_000_000, time.Second},
		{algorithm.MaxInt, algorithm.MaxWindow}, {algorithm.MaxInt, time.Millisecond},
	} {
		s := algorithm.SlidingWindowCounter(c.limit, c.window)
		require.NoError(t, s.Validate())
		w := c.window.Microseconds()
		base := time.UnixMicro((proptest.Epoch.UnixMicro()/w + 1) * w)
		st := s.NewState()
		first, err := s.Decide(st, base.Add(c.window-us), c.limit)
		require.NoError(t, err)
		require.True(t, first.Allowed, "%d per %v: the whole limit at the window's last µs", c.limit, c.window)
		second := c.limit - (2*c.limit+w-1)/w
		at := base.Add(2*c.window - 2*us)
		more, err := s.Decide(st, at, second+1)
		require.NoError(t, err)
		require.False(t, more.Allowed, "%d per %v: one unit above the bound", c.limit, c.window)
		require.Equal(t, second, more.Remaining, "%d per %v", c.limit, c.window)
		if second > 0 {
			got, err := s.Decide(st, at, second)
			require.NoError(t, err)
			require.True(t, got.Allowed, "%d per %v: %d at W-2µs into the next window", c.limit, c.window, second)
			require.Zero(t, got.Remaining)
		}
		// W-1 µs apart: both in one interval of length W.
		require.Equal(t, swcBound(c.limit, w), c.limit+second, "%d per %v", c.limit, c.window)
		t.Logf("%d per %v: %d admitted within %v (2*limit = %d)", c.limit, c.window, c.limit+second, c.window-us, 2*c.limit)
	}
}

func TestSlidingWindowCounterValidate(t *testing.T) {
	for name, s := range map[string]algorithm.Strategy{
		"limit 0":         algorithm.SlidingWindowCounter(0, time.Minute),
		"limit -1":        algorithm.SlidingWindowCounter(-1, time.Minute),
		"limit 2^53+1":    algorithm.SlidingWindowCounter(algorithm.MaxInt+1, time.Minute),
		"window 0":        algorithm.SlidingWindowCounter(1, 0),
		"window negative": algorithm.SlidingWindowCounter(1, -time.Second),
		"window 999µs":    algorithm.SlidingWindowCounter(1, 999*us),
		"window 11 years": algorithm.SlidingWindowCounter(1, 11*365*24*time.Hour),
		"window 1.5µs":    algorithm.SlidingWindowCounter(1, time.Millisecond+1500),
	} {
		require.ErrorIs(t, s.Validate(), algorithm.ErrInvalidStrategy, name)
		_, err := s.Decide(s.NewState(), proptest.Epoch, 1)
		require.ErrorIs(t, err, algorithm.ErrInvalidStrategy, "%s: Decide reports the configuration error", name)
	}
	// No cap on limit*window: the arithmetic is exact at both extremes.
	require.NoError(t, algorithm.SlidingWindowCounter(algorithm.MaxInt, algorithm.MaxWindow).Validate())
	require.NoError(t, algorithm.SlidingWindowCounter(1, time.Millisecond).Validate())

	s := algorithm.SlidingWindowCounter(1, time.Second)
	_, err := s.Decide(algorithm.FixedWindow(1, time.Second).NewState(), proptest.Epoch, 1)
	require.ErrorIs(t, err, algorithm.ErrStateType)
	require.Equal(t, "sliding_window_counter", s.Name())
	require.Equal(t, "swc", s.Script().Tag)
}

// Remaining is never negative when a larger limit filled the key, and a
// window index from a much shorter window (a misconfigured shared key) is an
// error, not an overflow; the Lua twin says WRONGTYPE (see
// TestSlidingWindowCounterBadStoredValue).
func TestSlidingWindowCounterSharedState(t *testing.T) {
	big, small := algorithm.SlidingWindowCounter(5, time.Minute), algorithm.SlidingWindowCounter(2, time.Minute)
	st := big.NewState()
	_, err := big.Decide(st, proptest.Epoch, 5)
	require.NoError(t, err)
	for _, at := range []time.Duration{0, time.Minute + 30*s} {
		d, err := small.Decide(st, proptest.Epoch.Add(at), 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Zero(t, d.Remaining)
		require.Positive(t, d.RetryAfter)
	}
	short := algorithm.SlidingWindowCounter(5, time.Millisecond)
	st = short.NewState()
	_, err = short.Decide(st, proptest.Epoch, 1)
	require.NoError(t, err)
	_, err = algorithm.SlidingWindowCounter(5, algorithm.MaxWindow).Decide(st, proptest.Epoch, 1)
	require.ErrorIs(t, err, algorithm.ErrStateType)
}

func TestSlidingWindowCounterScaled(t *testing.T) {
	s := algorithm.SlidingWindowCounter(100, time.Minute)
	sc, isScaler := s.(algorithm.Scaler)
	require.True(t, isScaler)
	require.Same(t, s, sc.Scaled(1))
	got := sc.Scaled(3)
	require.Equal(t, "sliding_window_counter", got.Name())
	require.Equal(t, int64(33), got.Limit())
	require.Equal(t, time.Minute, got.Window())
	require.Equal(t, int64(1), sc.Scaled(1000).Limit())
}

// FullAt is the end of the window after the last count's, where the estimate
// reaches 0; the memory store's sweeper keeps the key until then, not a
// microsecond less.
func TestSlidingWindowCounterFullAt(t *testing.T) {
	strat := algorithm.SlidingWindowCounter(3, 10*s)
	st := strat.NewState()
	require.Zero(t, st.FullAt())
	_, err := strat.Decide(st, proptest.Epoch.Add(25*s), 1)
	require.NoError(t, err)
	require.Equal(t, proptest.Epoch.Add(40*s).UnixMicro(), st.FullAt(), "window [20s, 30s) counted: full at 40s")
	_, err = strat.Decide(st, proptest.Epoch.Add(31*s), 1)
	require.NoError(t, err)
	require.Equal(t, proptest.Epoch.Add(50*s).UnixMicro(), st.FullAt(), "window [30s, 40s) counted: full at 50s")

	clock := fakeclock.New(proptest.Epoch.Add(31 * s))
	m := store.NewMemory(store.WithMemoryClock(clock.Now), store.WithSweepInterval(24*time.Hour))
	defer m.Close()
	d, err := m.Decide(context.Background(), store.Request{Strategy: strat, Prefix: "p:", Key: "u", N: 1})
	require.NoError(t, err)
	require.Equal(t, 19*s, d.ResetAfter)
	clock.Set(proptest.Epoch.Add(50*s - us))
	m.Sweep()
	require.Equal(t, 1, m.Len(), "1µs before the estimate reaches 0 the key is still needed")
	clock.Set(proptest.Epoch.Add(50 * s))
	m.Sweep()
	require.Zero(t, m.Len(), "dropped once full")
}

// swcModel is the sliding-window counter written from its definition,
// independently of the implementation: counts per aligned window, and
// admission by the cross-multiplied comparison prev*(W-e) + (cur+n)*W <=
// limit*W in math/big. RetryAfter is searched for, not computed.
type swcModel struct {
	limit, w int64
	counts   map[int64]int64 // aligned window index -> units admitted
	newest   int64           // the newest window counted, -1 before any
}

func newSWCModel(limit, w int64) *swcModel {
	return &swcModel{limit: limit, w: w, counts: map[int64]int64{}, newest: -1}
}

// judge returns the window and offset a request at t is judged at.
func (m *swcModel) judge(t int64) (idx, e int64) {
	idx = t / m.w
	if m.newest > idx {
		return m.newest, 0
	}
	return idx, t - idx*m.w
}

// slack is limit*W - prev*(W-e) - (cur+n)*W at window idx, offset e: the
// request fits iff it is >= 0 (and n <= limit).
func (m *swcModel) slack(idx, e, n int64) *big.Int {
	b := func(v int64) *big.Int { return big.NewInt(v) }
	r := new(big.Int).Mul(b(m.limit), b(m.w))
	r.Sub(r, new(big.Int).Mul(b(m.counts[idx-1]), b(m.w-e)))
	return r.Sub(r, new(big.Int).Mul(new(big.Int).Add(b(m.counts[idx]), b(n)), b(m.w)))
}

// fitsAt reports whether n fits at time at (>= the judged time), no traffic.
func (m *swcModel) fitsAt(at, n int64) bool {
	return n <= m.limit && m.slack(at/m.w, at%m.w, n).Sign() >= 0
}

func (m *swcModel) decide(t, n int64) algorithm.Decision {
	idx, e := m.judge(t)
	d := algorithm.Decision{Limit: m.limit}
	floorW := func(v *big.Int) int64 {
		if v.Sign() < 0 {
			return 0
		}
		return new(big.Int).Quo(v, big.NewInt(m.w)).Int64()
	}
	if n <= m.limit && m.slack(idx, e, n).Sign() >= 0 {
		d.Allowed = true
		d.Remaining = floorW(m.slack(idx, e, n))
		d.ResetAfter = time.Duration(2*m.w-e) * us
		m.counts[idx] += n
		m.newest = max(m.newest, idx)
		return d
	}
	d.Remaining = floorW(m.slack(idx, e, 0))
	var reset int64
	if m.counts[idx] > 0 {
		reset = 2*m.w - e
	} else if m.counts[idx-1] > 0 {
		reset = m.w - e
	}
	d.ResetAfter = time.Duration(reset) * us
	if n > m.limit {
		d.RetryAfter = d.ResetAfter
		if reset == 0 {
			d.RetryAfter = time.Duration(m.w) * us
		}
		return d
	}
	// The estimate never grows without traffic: binary search for the first
	// microsecond at which n fits; it does by 2W-e, when the estimate is 0.
	at := idx*m.w + e
	lo, hi := int64(0), 2*m.w-e // n does not fit at at+lo, fits at at+hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.fitsAt(at+mid, n) {
			hi = mid
		} else {
			lo = mid
		}
	}
	d.RetryAfter = time.Duration(hi) * us
	return d
}

// windowTotals returns the units admitted per aligned window.
func (m *swcModel) windowTotals() map[int64]int64 { return m.counts }

// swcEvent is one request of a generated timeline, at µs since the epoch.
type swcEvent struct {
	at, n int64
	key   int
}

// swcCase is a generated strategy and timeline.
type swcCase struct {
	limit  int64
	window time.Duration
	events []swcEvent
}

func (c swcCase) String() string {
	w := c.window.Microseconds()
	base := c.events[0].at / w * w
	out := fmt.Sprintf("SlidingWindowCounter(%d, %v), from %d µs:", c.limit, c.window, base)
	for _, ev := range c.events {
		out += fmt.Sprintf(" [k%d +%dµs n=%d]", ev.key, ev.at-base, ev.n)
	}
	return out
}

// swcSeed returns the run's seed: FLEETLIMIT_PROP_SEED (the root property
// tests' replay variable) or the time.
func swcSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FLEETLIMIT_PROP_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		seed = uint64(n)
	}
	t.Logf("seed %d (replay with FLEETLIMIT_PROP_SEED=%d)", seed, seed)
	return seed
}

// logUniform returns an integer in [1, hi], uniform in its number of bits.
func logUniform(r *rand.Rand, hi int64) int64 {
	bits := 1 + r.IntN(64)
	v := int64(1)
	if bits < 63 {
		v = 1 + r.Int64N(min(hi, int64(1)<<bits))
	} else {
		v = 1 + r.Int64N(hi)
	}
	return v
}

// genSWCCase generates a strategy and a timeline of up to 40 requests over
// keys [0, keys), most of them within a few microseconds of window edges.
// minWindow bounds the window from below (a real server's keys must not
// expire in real time while the virtual timeline runs).
func genSWCCase(r *rand.Rand, minWindow time.Duration, keys int) swcCase {
	var c swcCase
	switch k := r.IntN(10); {
	case k < 3: // small limits, windows of a few ms to a minute
		c.limit = 1 + r.Int64N(10)
		c.window = []time.Duration{time.Millisecond, 1500 * us, time.Second, time.Minute}[r.IntN(4)]
	case k < 5: // a limit comparable to the window in µs: ⌈2*limit/W⌉ > 1
		w := 1000 + r.Int64N(2000)
		c.window = time.Duration(w) * us
		c.limit = 1 + r.Int64N(3*w)
	case k < 7: // any limit and window: products past 2^53
		c.limit = logUniform(r, algorithm.MaxInt)
		c.window = time.Duration(1000+r.Int64N(int64(algorithm.MaxWindow/us)-999)) * us
	default: // extremes
		c.limit = []int64{1, 2, algorithm.MaxInt, algorithm.MaxInt - 1, 1 << 40}[r.IntN(5)]
		c.window = []time.Duration{time.Millisecond, time.Hour, 24 * time.Hour, algorithm.MaxWindow, algorithm.MaxWindow - us}[r.IntN(5)]
	}
	if c.window < minWindow {
		c.window = minWindow + time.Duration(r.Int64N(int64(time.Hour/us)))*us
	}
	w := c.window.Microseconds()
	base := (proptest.Epoch.UnixMicro()/w + 1) * w
	for range 1 + r.IntN(40) {
		at := base + int64(r.IntN(4))*w
		switch k := r.IntN(10); {
		case k < 5:
			at += []int64{0, 1, 2, w - 1, w - 2, w - 3}[r.IntN(6)]
		default:
			at += r.Int64N(w)
		}
		ev := swcEvent{at: at, key: r.IntN(keys)}
		switch k := r.IntN(10); {
		case k < 3:
			ev.n = 1
		case k < 6:
			ev.n = logUniform(r, c.limit)
		case k < 8:
			ev.n = max(1, c.limit-r.Int64N(3))
		case k < 9:
			ev.n = max(1, c.limit/(2+r.Int64N(4)))
		default:
			ev.n = min(c.limit+1, algorithm.MaxInt)
		}
		for range 1 + r.IntN(3) {
			c.events = append(c.events, ev)
		}
	}
	slices.SortStableFunc(c.events, func(a, b swcEvent) int { return int(a.at - b.at) })
	return c
}

// maxInWindow returns the most units admitted in any half-open interval of
// length w (µs) among admissions sorted by time.
func maxInWindow(adm []swcEvent, w int64) int64 {
	var most, sum int64
	j := 0
	for i := range adm {
		for j < len(adm) && adm[j].at < adm[i].at+w {
			sum += adm[j].n
			j++
		}
		most = max(most, sum)
		sum -= adm[i].n
	}
	return most
}

// The Go rule on random timelines: every decision equals the model's
// (Allowed, Remaining, RetryAfter, ResetAfter); each aligned window admits at
// most limit, as FixedWindow(limit, window) would; every interval of length
// W admits at most 2*limit - ⌈2*limit/W⌉; and from FullAt on the state
// decides as a fresh one. One timeline in three is unsorted (skewed clocks).
func TestPropertySlidingWindowCounter(t *testing.T) {
	r := rand.New(rand.NewPCG(swcSeed(t), 1))
	reached := 0
	for i := range 1500 {
		c := genSWCCase(r, 0, 1)
		if i%3 == 0 {
			r.Shuffle(len(c.events), func(a, b int) { c.events[a], c.events[b] = c.events[b], c.events[a] })
		}
		s := algorithm.SlidingWindowCounter(c.limit, c.window)
		require.NoError(t, s.Validate())
		w := c.window.Microseconds()
		st, m := s.NewState(), newSWCModel(c.limit, w)
		var adm []swcEvent
		for j, ev := range c.events {
			got, err := s.Decide(st, time.UnixMicro(ev.at), ev.n)
			require.NoError(t, err)
			want := m.decide(ev.at, ev.n)
			require.Equal(t, want, got, "request %d of %v", j, c)
			if got.Allowed {
				adm = append(adm, ev)
			}
		}
		for idx, total := range m.windowTotals() {
			require.LessOrEqual(t, total, c.limit, "aligned window %d admitted %d > limit: %v", idx, total, c)
		}
		if i%3 != 0 { // sorted: judged times are the requests' own
			most := maxInWindow(adm, w)
			require.LessOrEqual(t, most, swcBound(c.limit, w), "an interval of length W admitted %d: %v", most, c)
			if most == swcBound(c.limit, w) && most > c.limit {
				reached++
			}
		}
		// From FullAt on, the state decides as a fresh one.
		if full := st.FullAt(); full > 0 {
			before, err := s.Decide(st, time.UnixMicro(full-1), c.limit)
			require.NoError(t, err)
			require.False(t, before.Allowed, "the whole limit passed 1µs before FullAt: %v", c)
			at := time.UnixMicro(full + r.Int64N(w))
			n := logUniform(r, c.limit)
			fresh, err := s.Decide(s.NewState(), at, n)
			require.NoError(t, err)
			old, err := s.Decide(st, at, n)
			require.NoError(t, err)
			require.Equal(t, fresh, old, "at or after FullAt: %v", c)
		}
	}
	t.Logf("random timelines reached the bound %d times", reached)
}

// Probing, on many random states: the same request 1µs before RetryAfter is
// denied and exactly at RetryAfter admitted; a request of the whole limit
// 1µs before ResetAfter is denied and at ResetAfter admitted with Remaining
// 0; Remaining+1 is denied and Remaining admitted right now.
func TestSlidingWindowCounterProbes(t *testing.T) {
	r := rand.New(rand.NewPCG(swcSeed(t), 2))
	for range 1500 {
		c := genSWCCase(r, 0, 1)
		s := algorithm.SlidingWindowCounter(c.limit, c.window)
		k := r.IntN(len(c.events)) // probe after request k
		replay := func() algorithm.State {
			st := s.NewState()
			for _, ev := range c.events[:k] {
				_, err := s.Decide(st, time.UnixMicro(ev.at), ev.n)
				require.NoError(t, err)
			}
			return st
		}
		ev := c.events[k]
		st := replay()
		d, err := s.Decide(st, time.UnixMicro(ev.at), ev.n)
		require.NoError(t, err)
		desc := fmt.Sprintf("request %d (n=%d) got %+v; %v", k, ev.n, d, c)
		at := func(d time.Duration) time.Time { return time.UnixMicro(ev.at).Add(d) }
		decide := func(st algorithm.State, when time.Time, n int64) algorithm.Decision {
			got, err := s.Decide(st, when, n)
			require.NoError(t, err)
			return got
		}
		if !d.Allowed && ev.n <= c.limit {
			require.False(t, decide(st, at(d.RetryAfter-us), ev.n).Allowed, "1µs before RetryAfter: %s", desc)
			if d.RetryAfter > 2*us {
				require.False(t, decide(st, at(us+time.Duration(r.Int64N(int64(d.RetryAfter/us)-2))*us), ev.n).Allowed, "before RetryAfter: %s", desc)
			}
			require.True(t, decide(st, at(d.RetryAfter), ev.n).Allowed, "at RetryAfter: %s", desc)
			st = replay()
			decide(st, time.UnixMicro(ev.at), ev.n)
		}
		if d.Remaining < algorithm.MaxInt {
			require.False(t, decide(st, at(0), d.Remaining+1).Allowed, "Remaining+1: %s", desc)
		}
		if d.ResetAfter > 0 {
			require.False(t, decide(st, at(d.ResetAfter-us), c.limit).Allowed, "the whole limit 1µs before ResetAfter: %s", desc)
		}
		full := decide(st, at(d.ResetAfter), c.limit)
		require.True(t, full.Allowed && full.Remaining == 0, "the whole limit at ResetAfter got %+v: %s", full, desc)
		if d.Remaining > 0 {
			st = replay()
			decide(st, time.UnixMicro(ev.at), ev.n)
			got := decide(st, at(0), d.Remaining)
			require.True(t, got.Allowed && got.Remaining == 0, "Remaining got %+v: %s", got, desc)
		}
	}
}

// twinBackend is a Redis server the Lua twin runs on.
type twinBackend struct {
	name      string
	client    *redis.Client
	mini      bool
	minWindow time.Duration // real servers expire keys in real time
	cases     int
}

func twinBackends(t *testing.T) []twinBackend {
	_, mc := redistest.Mini(t)
	bs := []twinBackend{{name: "miniredis", client: mc, mini: true, cases: 60}}
	if redistest.HaveReal(t) {
		bs = append(bs, twinBackend{name: "redis", client: redistest.Real(t), minWindow: time.Minute, cases: 200})
	}
	if redistest.HaveValkey(t) {
		bs = append(bs, twinBackend{name: "valkey", client: redistest.Valkey(t), minWindow: time.Minute, cases: 100})
	}
	return bs
}

var swcValue = regexp.MustCompile(`^[0-9]+:[0-9]+:[0-9]+$`)

// The Lua twin run by store.Redis, on miniredis and on the real
// redis-server and valkey-server, returns the Go rule's decision on random timelines over two
// keys, sorted or not, including limits and windows whose products pass
// 2^53; each admission leaves "<index>:<prev>:<cur>" with a TTL of
// ResetAfter rounded up to a millisecond.
func TestSlidingWindowCounterTwins(t *testing.T) {
	seed := swcSeed(t)
	for _, b := range twinBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 3))
			rs := stores.Redis(t, b.client)
			ctx := context.Background()
			for i := range b.cases {
				c := genSWCCase(r, b.minWindow, 2)
				if i%3 == 0 {
					r.Shuffle(len(c.events), func(a, b int) { c.events[a], c.events[b] = c.events[b], c.events[a] })
				}
				s := algorithm.SlidingWindowCounter(c.limit, c.window)
				prefix := redistest.Prefix()
				states := []algorithm.State{s.NewState(), s.NewState()}
				for j, ev := range c.events {
					now := time.UnixMicro(ev.at)
					want, err := s.Decide(states[ev.key], now, ev.n)
					require.NoError(t, err)
					key := "k" + strconv.Itoa(ev.key)
					got, err := rs.Decide(ctx, store.Request{Strategy: s, Prefix: prefix, Key: key, N: ev.n, Now: now})
					require.NoError(t, err, "request %d of %v", j, c)
					require.Equal(t, want, got, "request %d of %v: Go rule, then Lua", j, c)
					if got.Allowed {
						rk := store.RedisKey(prefix, key, s.Script().Tag)
						v, err := b.client.Get(ctx, rk).Result()
						require.NoError(t, err)
						require.Regexp(t, swcValue, v)
						ttl, err := b.client.PTTL(ctx, rk).Result()
						require.NoError(t, err)
						ceilMs := (got.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond)
						if b.mini {
							require.Equal(t, ceilMs, ttl, "request %d of %v", j, c)
						} else {
							require.LessOrEqual(t, ttl, ceilMs)
							require.Greater(t, ttl, ceilMs-10*time.Second, "request %d of %v", j, c)
						}
					}
				}
			}
		})
	}
}

// Values the script did not write are refused with WRONGTYPE, never
// overwritten or computed with; the largest values it can write are
// accepted.
func TestSlidingWindowCounterBadStoredValue(t *testing.T) {
	m, c := redistest.Mini(t)
	rs := stores.Redis(t, c)
	ctx := context.Background()
	s := algorithm.SlidingWindowCounter(3, time.Minute)
	huge := algorithm.SlidingWindowCounter(3, algorithm.MaxWindow)
	decide := func(s algorithm.Strategy, value string) (algorithm.Decision, error) {
		p := redistest.Prefix()
		require.NoError(t, m.Set(store.RedisKey(p, "u", s.Script().Tag), value))
		return rs.Decide(ctx, store.Request{Strategy: s, Prefix: p, Key: "u", N: 1, Now: proptest.Epoch})
	}
	for _, v := range []string{
		"", "x", "1:2", "1:2:3:4", "-1:2:3", "1:-2:3", "1:2:x", " 1:2:3", "1:2:3 ", "1.0:2:3", "0x1:2:3", "1:2:",
		"1:9007199254740993:0", "1:0:9007199254740993", "1:1e3:0", "1:inf:0",
		"01:2:3", "1:00:3", "1:2:" + fmt.Sprintf("%060d", 3), // leading zeros: the script writes none
	} {
		_, err := decide(s, v)
		require.ErrorIs(t, err, store.ErrWrongType, "%q", v)
	}
	// A window index whose window starts beyond 2^53 µs: 29 windows of ten
	// years do, 28 do not.
	_, err := decide(huge, "29:0:1")
	require.ErrorIs(t, err, store.ErrWrongType)
	d, err := decide(huge, "28:0:3")
	require.NoError(t, err, "the last window starting within 2^53 µs")
	w := algorithm.MaxWindow
	require.Equal(t, no(3, 0, 4*w/3, 2*w), d, "judged at that window's start, full: 1 fits once the 3 weigh 2, 4/3 windows later")

	// The largest counts: 2^53 admitted now, or in the previous window.
	idx := strconv.FormatInt(proptest.Epoch.UnixMicro()/time.Minute.Microseconds(), 10)
	full := algorithm.SlidingWindowCounter(algorithm.MaxInt, time.Minute)
	d, err = decide(full, idx+":0:9007199254740992")
	require.NoError(t, err)
	require.Equal(t, no(algorithm.MaxInt, 0, time.Minute+us, 2*time.Minute), d, "(2^53-1)*W/2^53 rounds down to W-1µs")
	d, err = decide(full, idx+":9007199254740992:0")
	require.NoError(t, err)
	require.Equal(t, no(algorithm.MaxInt, 0, 1*us, time.Minute), d)

	// Other Redis types.
	p := redistest.Prefix()
	_, err = c.RPush(ctx, store.RedisKey(p, "u", "swc"), "a").Result()
	require.NoError(t, err)
	_, err = rs.Decide(ctx, store.Request{Strategy: s, Prefix: p, Key: "u", N: 1, Now: proptest.Epoch})
	require.ErrorIs(t, err, store.ErrWrongType)
}
