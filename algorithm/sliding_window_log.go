package algorithm

import (
	"fmt"
	"slices"
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

var slidingWindowLogScript = chargeable(leasable(builtin(NewScript("sl", scripts.SlidingWindowLog()))))

// MaxLogLimit is the largest limit SlidingWindowLog accepts: at a million
// units a key's log holds up to a million sorted-set members (~100 MB).
const MaxLogLimit = 1_000_000

// MaxLogCost is the largest cost a sliding log admits in one request, or
// lends in one lease, whatever its limit. Each admitted unit is one
// sorted-set member that the decision's script writes, and a decision
// removes at most this many expired members (the rest of a mass of units
// that left the window together go with the next decisions; no lookup
// counts them), so one decision's work in Redis is bounded by it and not
// by the cost asked or the limit: about 9ms for an admission of 10,000
// units on redis-server 7.0 (faults/TestSlidingLogCostCap). A request of a
// larger cost is denied as one above the limit is — it can never pass, and
// nothing is written — and a lease takes at most this many units. A refund
// of n units still removes up to n members (all of them with one UNLINK).
const MaxLogCost = 10_000

// SlidingWindowLog returns the exact strategy: in every interval of length
// window, at most limit units of cost are admitted.
//
// Model: a log of admitted units per key — in Redis a sorted set, one member
// per unit scored by its admission time. A unit admitted at t counts against
// [t, t+window) and is evicted once now - window >= t. A request of cost n is
// admitted iff the live units plus n are at most limit and n is at most
// MaxLogCost, and then adds n units.
// Denied requests are not recorded, so a client that keeps hammering past the
// limit is admitted again as soon as its old admissions age out.
//
// Memory grows with the limit: up to limit members per active key (in Redis
// roughly 20-30 bytes each while a key holds at most 128 members, about 80-100
// bytes each beyond that, by Redis's zset encodings), expired ones not yet
// removed included. Choose TokenBucket where limits are large and
// approximate smoothing is enough.
//
// Time never runs backwards for a key: a request whose clock is behind the
// newest admission is judged at that admission's time. With client clocks
// (fleetlimit.WithClock) skewed by at most δ from each other, a window can
// appear up to 2δ shorter; with the default Redis server TIME it is exact.
//
// The returned Strategy is safe for concurrent use. Invalid parameters are
// reported by Validate, never by a panic.
func SlidingWindowLog(limit int64, window time.Duration) Strategy {
	return &slidingWindowLog{limitWindow: newLimitWindow(limit, window)}
}

type slidingWindowLog struct{ limitWindow }

func (s *slidingWindowLog) Name() string    { return "sliding_window_log" }
func (s *slidingWindowLog) Script() *Script { return slidingWindowLogScript }
func (s *slidingWindowLog) NewState() State { return &slidingLogState{} }

func (s *slidingWindowLog) Validate() error {
	if err := checkCount("sliding window log", "limit", s.limit); err != nil {
		return err
	}
	if s.limit > MaxLogLimit {
		return fmt.Errorf("sliding window log: limit %d is above %d: the log keeps one entry per admitted unit, so use TokenBucket for large limits: %w", s.limit, MaxLogLimit, ErrInvalidStrategy)
	}
	return checkWindow("sliding window log", "window", s.d)
}

// logEntry is n units admitted at the same instant (µs).
type logEntry struct{ at, n int64 }

// slidingLogState is the Go twin of the sorted set: live entries in
// log[head:], oldest first, with count the sum of their units.
type slidingLogState struct {
	log    []logEntry
	head   int
	count  int64
	window int64 // of the strategy that last admitted, for FullAt
}

func (st *slidingLogState) FullAt() int64 {
	if st.head == len(st.log) {
		return 0
	}
	return st.log[len(st.log)-1].at + st.window
}

// Clone copies the live entries only: a copy costs O(live entries), at most
// the limit.
func (st *slidingLogState) Clone() State {
	return &slidingLogState{log: slices.Clone(st.log[st.head:]), count: st.count, window: st.window}
}

// live returns state as the log's, checked, with the units that have left
// the window at now evicted, and t and newest as evict returns them: the
// first step of every operation on a log. The check is ErrStateType for
// another strategy's state, Validate's error for a log of no window or
// limit; a state that fails it is left as it was.
func (s *slidingWindowLog) live(state State, now time.Time) (st *slidingLogState, t, newest int64, err error) {
	st, ok := state.(*slidingLogState)
	if !ok {
		return nil, 0, 0, ErrStateType
	}
	if s.window <= 0 || s.limit <= 0 {
		return nil, 0, 0, s.Validate()
	}
	t, newest = s.evict(st, now)
	return st, t, newest, nil
}

func (s *slidingWindowLog) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, t, newest, err := s.live(state, now)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Limit: s.limit}
	if n <= s.limit && n <= MaxLogCost && st.count+n <= s.limit {
		st.record(t, n, s.window)
		d.Allowed = true
		d.Remaining = s.limit - st.count
		d.ResetAfter = duration(s.window)
		return d, nil
	}

	var reset int64
	if st.count > 0 {
		reset = newest + s.window - t
	}
	d.Remaining = max(0, s.limit-st.count) // a larger limit may share the key
	d.ResetAfter = duration(reset)
	if n > s.limit || n > MaxLogCost {
		d.RetryAfter = duration(neverPassable(reset, s.window))
		return d, nil
	}
	// The request fits once the oldest count+n-limit units have left: find the
	// entry holding the k-th oldest unit.
	k := st.count + n - s.limit
	for _, e := range st.log[st.head:] {
		if k <= e.n {
			d.RetryAfter = duration(e.at + s.window - t)
			break
		}
		k -= e.n
	}
	return d, nil
}

// record adds n units at t, the newest instant of the log, for a strategy
// of window µs.
func (st *slidingLogState) record(t, n, window int64) {
	if k := len(st.log); k > st.head && st.log[k-1].at == t {
		st.log[k-1].n += n
	} else {
		st.log = append(st.log, logEntry{at: t, n: n})
	}
	st.count += n
	st.window = window
}

// evict drops from st every unit admitted at or before t - window, where t
// is now, or the newest admission's time when now is behind it: time never
// runs backwards for a key (see the Lua twin). It returns t and the newest
// admission's time (0 for an empty log) as they were before the eviction.
func (s *slidingWindowLog) evict(st *slidingLogState, now time.Time) (t, newest int64) {
	t = now.UnixMicro()
	if live := st.log[st.head:]; len(live) > 0 {
		newest = live[len(live)-1].at
		t = max(t, newest)
	}
	cutoff := t - s.window
	for st.head < len(st.log) && st.log[st.head].at <= cutoff {
		st.count -= st.log[st.head].n
		st.head++
	}
	if st.head == len(st.log) {
		st.log, st.head = st.log[:0], 0
	} else if st.head > 32 && st.head*2 >= len(st.log) {
		st.log = st.log[:copy(st.log, st.log[st.head:])]
		st.head = 0
	}
	return t, newest
}

// Refund removes the key's n newest live units from the log, or all of
// them if it holds fewer (see Refunder); expired units are evicted first,
// as Decide evicts them.
func (s *slidingWindowLog) Refund(state State, now time.Time, n int64) (Decision, error) {
	st, t, _, err := s.live(state, now)
	if err != nil {
		return Decision{}, err
	}
	for n > 0 && len(st.log) > st.head {
		last := &st.log[len(st.log)-1]
		k := min(n, last.n)
		last.n -= k
		st.count -= k
		n -= k
		if last.n == 0 {
			st.log = st.log[:len(st.log)-1]
		}
	}
	d := Decision{Allowed: true, Limit: s.limit, Remaining: max(0, s.limit-st.count)}
	if len(st.log) > st.head {
		d.ResetAfter = duration(st.log[len(st.log)-1].at + s.window - t)
	} else {
		st.log, st.head = st.log[:0], 0
	}
	return d, nil
}
