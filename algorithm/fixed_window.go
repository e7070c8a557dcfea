package algorithm

import (
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

var fixedWindowScript = chargeable(leasable(builtin(NewScript("fw", scripts.FixedWindow()))))

// FixedWindow returns the naive counter: at most limit units per window, with
// windows aligned to multiples of window since the Unix epoch.
//
// It is atomic and usable, and constant in memory (one short string per key),
// but not exact: a client can spend limit just before a window edge and limit
// again just after it, so an interval much shorter than window can admit
// 2*limit. fleetlimit keeps it on purpose, so that the burst can be shown and
// measured; prefer SlidingWindowLog or TokenBucket.
//
// Time never runs backwards for a key: a request whose clock is behind the
// newest window the key has counted in is judged at that window's start, so
// that a clock behind (fleetlimit.WithClock) cannot reopen an older window
// with a fresh count. With client clocks skewed by at most δ, an edge can
// come up to δ early; the burst around it is still at most 2*limit. With the
// default Redis server TIME there is no skew.
//
// Denied requests are not counted. The returned Strategy is safe for
// concurrent use. Invalid parameters are reported by Validate, never by a
// panic.
func FixedWindow(limit int64, window time.Duration) Strategy {
	return &fixedWindow{limitWindow: newLimitWindow(limit, window)}
}

type fixedWindow struct{ limitWindow }

func (s *fixedWindow) Name() string    { return "fixed_window" }
func (s *fixedWindow) Script() *Script { return fixedWindowScript }
func (s *fixedWindow) NewState() State { return &fixedWindowState{} }

func (s *fixedWindow) Validate() error {
	return s.check("fixed window", "window")
}

// fixedWindowState is the Go twin of the Redis value "<index>:<count>"; end
// is the end of window index (µs), 0 before the first admission.
type fixedWindowState struct {
	index, count, end int64
}

func (st *fixedWindowState) FullAt() int64 { return st.end }

func (st *fixedWindowState) Clone() State { c := *st; return &c }

// countIn is the key's count in window idx: 0 unless it last counted there.
func (st *fixedWindowState) countIn(idx int64) int64 {
	if st.end != 0 && st.index == idx {
		return st.count
	}
	return 0
}

func (s *fixedWindow) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, idx, t, err := s.view(state, now)
	if err != nil {
		return Decision{}, err
	}
	end, count := (idx+1)*s.window, st.countIn(idx)
	if n <= s.limit && count+n <= s.limit {
		st.index, st.count, st.end = idx, count+n, end
		return Decision{Allowed: true, Limit: s.limit, Remaining: s.limit - count - n, ResetAfter: duration(end - t)}, nil
	}
	d := Decision{Limit: s.limit}
	var reset int64
	if count > 0 {
		reset = end - t
	}
	d.Remaining = max(0, s.limit-count) // a larger limit may share the key
	d.ResetAfter = duration(reset)
	if n > s.limit {
		d.RetryAfter = duration(neverPassable(reset, s.window))
	} else {
		d.RetryAfter = duration(end - t)
	}
	return d, nil
}

// Refund lowers the count of the window that holds now by n, at most to 0
// (see Refunder). A key whose count belongs to an earlier window is left as
// it is: that count no longer limits anything. A clock behind the key's
// window is judged at that window's start, as Decide judges it.
func (s *fixedWindow) Refund(state State, now time.Time, n int64) (Decision, error) {
	st, idx, t, err := s.view(state, now)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Allowed: true, Limit: s.limit, Remaining: s.limit}
	if st.end == 0 || st.index != idx {
		return d, nil
	}
	// The state keeps its window even at a count of 0, so that a clock
	// behind still cannot reopen an earlier window.
	st.count -= min(n, st.count)
	d.Remaining = max(0, s.limit-st.count) // a larger limit may share the key
	if st.count > 0 {
		d.ResetAfter = duration(st.end - t)
	}
	return d, nil
}

// view returns state as this strategy's, and the index of the window now
// is judged in with the time it is judged at (µs): now, or the start of the
// key's window when now is behind it, for time never runs backwards for a
// key (see the Lua twin).
func (s *fixedWindow) view(state State, now time.Time) (st *fixedWindowState, idx, t int64, err error) {
	st, ok := state.(*fixedWindowState)
	if !ok {
		return nil, 0, 0, ErrStateType
	}
	if s.window <= 0 || s.limit <= 0 {
		return nil, 0, 0, s.Validate()
	}
	t = now.UnixMicro()
	idx = floorDiv(t, s.window)
	if st.end != 0 && st.index > idx {
		idx, t = st.index, st.index*s.window
	}
	return st, idx, t, nil
}
