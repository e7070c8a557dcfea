package algorithm

import (
	"errors"
	"fmt"
	"time"
)

// Granter is implemented by strategies that can grant part of a request:
// "admit as much of n as fits now, possibly nothing", as one atomic step
// (fleetlimit.Limiter.AllowAtMost), whose Lua twin is the script's "atmost"
// mode (see package scripts). The token bucket, the fixed window, the
// sliding log and the sliding-window counter implement it, and so do All
// (when every member does and none holds permits) and Penalize (when its
// inner strategy does); a strategy that does not, or whose Script does not
// set AtMost, cannot grant part of a request.
type Granter interface {
	// AtMost admits the largest cost g <= n that Decide(st, now, g) would
	// admit now, charging it exactly as Decide does, and returns Decide's
	// decision for g with Granted = g. When not even a cost of 1 fits, it
	// returns Decide's denial of a request of cost 1 (so its RetryAfter is
	// when one unit will fit) with Granted 0, and changes st exactly as
	// that denial does (a penalty box counts it). The decision is exact for
	// 1 <= n <= MaxCost(s): callers refuse a larger n. The caller holds
	// st's lock.
	AtMost(st State, now time.Time, n int64) (Decision, error)
}

// The built-in single strategies' scripts honour the atmost mode (see
// Script.AtMost); All's and Penalize's say so when they are built.
func init() {
	for _, s := range []*Script{tokenBucketScript, fixedWindowScript, slidingWindowLogScript, slidingWindowCounterScript} {
		s.AtMost = true
	}
}

// Grants reports whether s can grant part of a request: it is a Granter
// whose script honours the atmost mode (Script.AtMost).
func Grants(s Strategy) bool {
	if _, ok := s.(Granter); !ok {
		return false
	}
	sc := s.Script()
	return sc != nil && sc.AtMost
}

// MaxCost is the largest cost s can ever admit in one request: its Limit,
// and for a sliding log at most MaxLogCost; for All, the smallest of its
// members'; for Penalize, its inner strategy's; 0 for a nil strategy (or
// a composite with a nil member), which admits nothing.
func MaxCost(s Strategy) int64 {
	if isNilPointer(s) {
		return 0
	}
	switch s := s.(type) {
	case nil:
		return 0
	case *slidingWindowLog:
		return min(s.limit, MaxLogCost)
	case *all:
		c := s.limit
		for _, m := range s.members {
			c = min(c, MaxCost(m))
		}
		return c
	case *penalized:
		if s.inner != nil {
			return MaxCost(s.inner)
		}
	}
	return s.Limit()
}

// atMost is the partial grant of a single strategy s that leases (l is s):
// the units available now are what its lease rule reports with nothing
// asked or given back (LeaseTerms{}), at most n and MaxCost(s); they are
// decided as one request, or, when none is available, a request of 1 is
// (and denied).
func atMost(s Strategy, l Leaser, st State, now time.Time, n int64) (Decision, error) {
	g, err := l.Lease(st, now, 0, LeaseTerms{})
	if err != nil {
		return Decision{}, err
	}
	k := min(n, g.Decision.Remaining, MaxCost(s))
	d, err := s.Decide(st, now, max(k, 1))
	if err != nil {
		return Decision{}, err
	}
	return granted(d, k)
}

// granted is d, the decision of a partial grant of k units (of 1 when k is
// 0), with Granted set; an admission that does not match k is an error, so
// that a rule whose available count is wrong cannot pass unnoticed.
func granted(d Decision, k int64) (Decision, error) {
	if d.Allowed != (k > 0) {
		return Decision{}, fmt.Errorf("%w: a partial grant of %d was decided allowed=%v", errGrant, k, d.Allowed)
	}
	d.Granted = k
	return d, nil
}

// errGrant reports a partial grant whose decision disagrees with the units
// the rule found available: a strategy's bug, never the caller's.
var errGrant = errors.New("partial grant inconsistent with its decision")

// AtMost takes the most of n tokens the bucket holds (see Granter).
func (s *tokenBucket) AtMost(st State, now time.Time, n int64) (Decision, error) {
	return atMost(s, s, st, now, n)
}

// AtMost takes the most of n that the window has left (see Granter).
func (s *fixedWindow) AtMost(st State, now time.Time, n int64) (Decision, error) {
	return atMost(s, s, st, now, n)
}

// AtMost logs the most of n that the window has left, at most MaxLogCost
// (see Granter).
func (s *slidingWindowLog) AtMost(st State, now time.Time, n int64) (Decision, error) {
	return atMost(s, s, st, now, n)
}

// AtMost admits the most of n that the estimate has room for (see
// Granter).
func (s *slidingWindowCounter) AtMost(st State, now time.Time, n int64) (Decision, error) {
	return atMost(s, s, st, now, n)
}

// AtMost grants the most of n that every member can take now — the fewest
// units any member has left, read as All reads a member's figures as they
// are (its decision on a cost above its limit, on a copy) — and decides
// them as one request of the composite, which charges every member exactly
// that, all or none; with nothing left in some member, a request of 1 is
// decided (and denied, no member charged).
func (s *all) AtMost(state State, now time.Time, n int64) (Decision, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	k := n
	for i := range s.members {
		d, err := s.asIs(st, i, now)
		if err != nil {
			return Decision{}, err
		}
		k = min(k, d.Remaining)
	}
	d, err := s.Decide(st, now, max(k, 1))
	if err != nil {
		return Decision{}, err
	}
	if !d.Allowed {
		// Only for n above MaxCost(s), as the Lua twin: nothing granted.
		k = 0
	}
	return granted(d, k)
}

// grantsAll reports whether a composite of members can grant part of a
// request: every member can, and none holds permits.
func grantsAll(members []Strategy) bool {
	for _, m := range members {
		if !Grants(m) || Holds(m) {
			return false
		}
	}
	return true
}

// AtMost is the inner strategy's partial grant, under the ban: banned, it
// grants nothing and returns Decide's ban denial of a request of 1, which
// counts nothing; otherwise a grant of 0 is a denial and counts toward a
// ban exactly as a denied decision does, and a grant above 0 is an
// admission, never counted.
func (s *penalized) AtMost(state State, now time.Time, n int64) (Decision, error) {
	st, g, err := innerAs[Granter](s, state, "grant part of a request")
	if err != nil {
		return Decision{}, err
	}
	t := now.UnixMicro()
	if t < st.until {
		return s.Decide(st, now, 1) // banned: reads, and writes nothing
	}
	d, err := g.AtMost(st.inner, now, n)
	if err != nil || d.Allowed {
		return d, err
	}
	return s.count(st, t, d), nil
}
