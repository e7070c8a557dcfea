package algorithm

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

var slidingWindowCounterScript = chargeable(leasable(builtin(NewScript("swc", scripts.SlidingWindowCounter()))))

// SlidingWindowCounter returns the sliding-window counter: the sliding-window
// log's rule applied to an estimate, in constant memory.
//
// Model: per key, the units admitted in the current aligned window (cur) and
// in the one before it (prev), windows aligned to multiples of window since
// the Unix epoch as in FixedWindow. At t, e µs into its window of W µs, the
// estimate of the units admitted in [t-W, t) is prev*(W-e)/W + cur: the
// previous window's count weighted by the share of that window the sliding
// interval still covers, as if its units had been spread evenly. A request of
// cost n is admitted iff estimate + n <= limit, and then adds n to cur;
// denied requests are not counted. With no traffic the estimate decays
// linearly to cur at the window's end, where cur becomes prev, and to 0 at
// the end of the next window: ResetAfter is up to 2*window, and a key stays
// stored (TTL, State.FullAt) that long.
//
// Arithmetic is exact, in integer units and microseconds: the rule is
// ⌈prev*(W-e)/W⌉ + cur + n <= limit, which is prev*(W-e) + (cur+n)*W <=
// limit*W because the rest is an integer. That product reaches 2^53 times
// MaxWindow (about 2^101), past int64 and past the 2^53 a Lua double holds,
// so both twins compute it exactly with a multiply-divide: 128-bit integers
// (math/bits) in Go; in Lua the double product while it is below 2^53 and
// otherwise long multiplication modulo the divisor, which keeps every
// intermediate below 2^53. That costs at most 54 rounds of a Lua loop, and
// only for products past 2^53 (1000 per day is far below); it keeps the full
// range of limits and windows the other strategies accept, where refusing
// limit*W >= 2^53 would cap a daily limit near 10^5 and a monthly one near
// 3500, the large, long limits this strategy exists for. RetryAfter (the
// first microsecond at which the same request passes alone) and ResetAfter
// are exact too, in closed form.
//
// Guarantee: every aligned window admits at most limit (cur + n <= limit), as
// FixedWindow(limit, window) does. An interval of length W, f µs into window
// i (0 < f < W), holds A <= P of window i's P units, and the B units admitted
// in window i+1 before f; the last of those, at most f-1 µs into its window,
// passed only if P*(W-f+1)/W + B <= limit. So A+B <= limit + P*(f-1)/W, and
// with P <= limit and f <= W-1 every interval of length W admits at most
//
//	2*limit - ⌈2*limit/W⌉ units (W in µs),
//
// which is 2*limit - 1 whenever 2*limit <= W. The bound is tight: limit
// units at the last microsecond of a window, after an empty one, then limit -
// ⌈2*limit/W⌉ units W-2 µs into the next window, all pass, 2*limit -
// ⌈2*limit/W⌉ within W-1 µs. The worst case is thus barely better than
// FixedWindow's 2*limit; it needs a window's whole count in its last moments.
// Where arrivals are spread evenly over the previous window the estimate
// approximates the sliding-window log's count, and a burst at the edge is
// refused.
//
// Memory per key is constant: in Redis one short string
// "<window index>:<prev>:<cur>".
//
// Time never runs backwards for a key: a request whose clock is behind the
// newest window the key has counted in is judged at that window's start (the
// estimate's highest point), so that a clock behind (fleetlimit.WithClock)
// cannot reopen an older window. The bounds above are in the time requests
// are judged at: with the default Redis server TIME, real time.
//
// The returned Strategy is safe for concurrent use. Invalid parameters are
// reported by Validate, never by a panic.
func SlidingWindowCounter(limit int64, window time.Duration) Strategy {
	s := &slidingWindowCounter{limitWindow: newLimitWindow(limit, window)}
	s.err = s.Validate()
	return s
}

type slidingWindowCounter struct {
	limitWindow
	err error // Validate's verdict, for Decide
}

func (s *slidingWindowCounter) Name() string    { return "sliding_window_counter" }
func (s *slidingWindowCounter) Script() *Script { return slidingWindowCounterScript }
func (s *slidingWindowCounter) NewState() State { return &slidingCounterState{} }

func (s *slidingWindowCounter) Validate() error {
	return s.check("sliding window counter", "window")
}

// slidingCounterState is the Go twin of the Redis value
// "<index>:<prev>:<cur>": cur units admitted in window index, prev in the
// window before it. full is the end of window index+1 (µs), where the
// estimate reaches 0; 0 before the first admission.
type slidingCounterState struct {
	index, prev, cur, full int64
}

func (st *slidingCounterState) FullAt() int64 { return st.full }

func (st *slidingCounterState) Clone() State { c := *st; return &c }

func (s *slidingWindowCounter) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, idx, e, prev, cur, err := s.view(state, now)
	if err != nil {
		return Decision{}, err
	}
	w := s.window
	x := w - e // µs of window idx-1 still inside [t-w, t), 1 to w
	weighted := s.weighted(prev, x)
	room := s.limit - cur // negative when a larger limit shares the key

	if n <= s.limit && room >= 0 && n <= room-weighted {
		st.index, st.prev, st.cur, st.full = idx, prev, cur+n, (idx+2)*w
		return Decision{Allowed: true, Limit: s.limit, Remaining: room - weighted - n, ResetAfter: duration(2*w - e)}, nil
	}
	d := Decision{Limit: s.limit}
	reset := resetAfter(w, e, prev, cur)
	d.Remaining = max(0, room-weighted)
	d.ResetAfter = duration(reset)
	switch {
	case n > s.limit:
		d.RetryAfter = duration(neverPassable(reset, w))
	case n <= room:
		// cur + n fits and prev > 0 weighs too much: wait until x is the
		// largest x' with prev*x' <= (room-n)*w (x' = 0 at the window's end).
		q, _ := mulDiv(room-n, w, prev)
		d.RetryAfter = duration(x - q)
	default:
		// Only in the next window, where cur is the previous count (cur > 0):
		// wait until its x'' is the largest with cur*x'' <= (limit-n)*w.
		q, _ := mulDiv(s.limit-n, w, cur)
		d.RetryAfter = duration(x + w - q)
	}
	return d, nil
}

// view returns state as this strategy's, the key's window index at now, e (µs into that window),
// and the counts that weigh there: cur admitted in it, prev in the one
// before. A clock behind the key's window is judged at that window's start:
// time never runs backwards for a key (see the Lua twin).
func (s *slidingWindowCounter) view(state State, now time.Time) (st *slidingCounterState, idx, e, prev, cur int64, err error) {
	st, ok := state.(*slidingCounterState)
	if !ok {
		return nil, 0, 0, 0, 0, ErrStateType
	}
	if s.err != nil {
		return nil, 0, 0, 0, 0, s.err
	}
	w := s.window
	t := now.UnixMicro()
	idx = floorDiv(t, w)
	if st.full != 0 {
		if st.index > MaxInt/w {
			// Counted by a strategy with a much shorter window sharing the
			// Script.Tag; the Lua twin says WRONGTYPE.
			return nil, 0, 0, 0, 0, fmt.Errorf("sliding window counter: window index %d at a window of %v starts beyond 2^53 µs: %w", st.index, s.d, ErrStateType)
		}
		if st.index > idx {
			idx, t = st.index, st.index*w
		}
		switch st.index {
		case idx:
			prev, cur = st.prev, st.cur
		case idx - 1:
			prev = st.cur
		}
	}
	return st, idx, t - idx*w, prev, cur, nil
}

// weighted is prev*x/window rounded up: what the previous window's count
// weighs x µs before the current window's end.
func (s *slidingWindowCounter) weighted(prev, x int64) int64 {
	q, rem := mulDiv(prev, x, s.window)
	if rem > 0 {
		q++
	}
	return q
}

// resetAfter is the time until a key with counts prev and cur, e µs into
// its window of w µs, is back at full capacity: the end of the next window
// while cur weighs, else the end of this one while prev does.
func resetAfter(w, e, prev, cur int64) int64 {
	switch {
	case cur > 0:
		return 2*w - e
	case prev > 0:
		return w - e
	}
	return 0
}

// Refund takes n units off the current window's count, then what is left
// of n off the previous window's, at most to 0 each (see Refunder). The key
// keeps its window index, so that a clock behind still cannot reopen an
// earlier window.
func (s *slidingWindowCounter) Refund(state State, now time.Time, n int64) (Decision, error) {
	st, idx, e, prev, cur, err := s.view(state, now)
	if err != nil {
		return Decision{}, err
	}
	w := s.window
	k := min(n, cur)
	cur -= k
	prev -= min(n-k, prev)
	if st.full != 0 {
		st.keep(idx, prev, cur, w)
	}
	room := s.limit - cur
	return Decision{
		Allowed:    true,
		Limit:      s.limit,
		Remaining:  max(0, room-s.weighted(prev, w-e)),
		ResetAfter: duration(resetAfter(w, e, prev, cur)),
	}, nil
}

// keep stores counts lowered by a refund or a lease's hand-back, in window
// idx of w µs: the key stays until its counts weigh nothing (the end of
// this window, or of the next while cur > 0), keeping its window index so
// that a clock behind still cannot reopen an earlier window.
func (st *slidingCounterState) keep(idx, prev, cur, w int64) {
	st.index, st.prev, st.cur = idx, prev, cur
	st.full = (idx + 1) * w
	if cur > 0 {
		st.full += w
	}
}

// mulDiv returns ⌊a*b/c⌋ and a*b mod c, exactly, for a, b >= 0 and c > 0
// whose quotient fits in an int64: a*b is taken as a 128-bit product.
func mulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	uq, ur := bits.Div64(hi, lo, uint64(c))
	return int64(uq), int64(ur)
}
