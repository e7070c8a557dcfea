package algorithm

import (
	"fmt"
	"time"
)

// Charger is implemented by strategies that can charge a key past its
// limit, for a cost learnt after the work was admitted
// (fleetlimit.Reservation.Settle charges what the work cost above its
// estimate). The built-in strategies implement it, and so do All of them
// and a penalty box around one.
//
// Charge records n >= 1 units at now without asking whether they fit: the
// key goes into debt, which later requests repay before they pass, since
// Decide admits only what fits under the limit. The debt is capped:
// Charge records at most what keeps the key within maxDebt units past its
// limit (maxDebt < 0: the strategy's own Limit; for All, each member's own
// Limit), and the units it does not record are the Decision's Cut. The
// caller holds st's lock; Charge must not do I/O or read a clock.
//
// Its Decision: Allowed true (a charge is never refused), Limit,
// Remaining (the cost that could pass right after it, 0 while the key is
// in debt), ResetAfter (until full capacity; a token bucket's counts the
// whole debt), RetryAfter 0, and Cut. What "past its limit" means per
// strategy, in the units the strategy counts:
//
//   - TokenBucket: the bucket's level goes below zero, to at most -maxDebt
//     tokens; it refills from there at the rate, so the debt is repaid in
//     maxDebt*per/rate at most. In any interval of length d the bucket
//     then takes at most burst + rate*d/per + maxDebt tokens.
//   - SlidingWindowLog: the n units join the log at now (the charge's
//     time, not the admission's), up to limit + maxDebt live units; and at
//     most MaxLogCost in one charge (each unit is one sorted-set member).
//     Every interval of length window then holds at most limit + maxDebt.
//   - FixedWindow: the count of the window that holds now grows, up to
//     limit + maxDebt. The window counts at most that; a debt left when it
//     turns is forgiven (the strategy remembers one window only).
//   - SlidingWindowCounter: the current window's count grows, up to limit
//   - maxDebt, and weighs in the next window's estimate as any count
//     does. Every aligned window counts at most limit + maxDebt.
//
// Time never runs backwards for a key, as in Decide: a clock behind the
// key's newest record is judged at it (a token bucket's sees the lag as
// debt, so it records less, never more).
//
// The Lua twin (Script with Charges set) runs the same rule in the
// script's charge mode (see package scripts).
type Charger interface {
	Charge(st State, now time.Time, n, maxDebt int64) (Decision, error)
}

// Cut is, for a Charger's charge, the units the debt cap cut off: charged
// to no one. It is 0 for every other decision. A composite's is the most
// any member cut (each member's is in Members).
func (d Decision) Cut() int64 { return d.cut }

// Charges reports whether s can be charged past its limit on every store:
// a Charger whose script honours the charge mode (Script.Charges).
func Charges(s Strategy) bool {
	_, ok := s.(Charger)
	return ok && s.Script() != nil && s.Script().Charges
}

// chargeable returns s with Charges set, for the built-in scripts that
// charge.
func chargeable(s *Script) *Script {
	s.Charges = true
	return s
}

// capOver is the most a key may hold, in the strategy's units: limit plus
// the debt cap maxDebt (the limit when negative), at most MaxInt.
func capOver(limit, maxDebt int64) int64 {
	if maxDebt < 0 {
		maxDebt = limit
	}
	return min(limit+min(maxDebt, MaxInt), MaxInt)
}

// ChargeReply reads the reply of s's script in its charge mode: for a
// single strategy {1, remaining, cut, reset_after_us} (the calling
// convention's four integers, the third being the units cut off, since a
// charge never waits); for All those four per member; for a penalty box
// four of its own, then its inner strategy's.
func ChargeReply(s Strategy, ints []int64) (Decision, error) {
	switch s := s.(type) {
	case *penalized:
		if len(ints) < 4 {
			return Decision{}, fmt.Errorf("penalty: charge reply of %d integers", len(ints))
		}
		return ChargeReply(s.inner, ints[4:])
	case *all:
		if s.err != nil {
			return Decision{}, s.err
		}
		if len(ints) != 4*len(s.members) {
			return Decision{}, fmt.Errorf("all: charge reply of %d integers for %d members", len(ints), len(s.members))
		}
		ds := make([]Decision, len(s.members))
		for i, m := range s.members {
			ds[i] = chargeDecision(ints[4*i:4*i+4], m.Limit())
		}
		return s.charged(ds), nil
	}
	if len(ints) != 4 {
		return Decision{}, fmt.Errorf("%s: charge reply of %d integers", s.Name(), len(ints))
	}
	return chargeDecision(ints, s.Limit()), nil
}

// chargeDecision reads one strategy's four integers of a charge reply.
func chargeDecision(v []int64, limit int64) Decision {
	return Decision{Allowed: v[0] == 1, Limit: limit, Remaining: v[1], ResetAfter: duration(v[3]), cut: v[2]}
}

// charged combines the members' charge decisions: the composite's rule,
// and the most any member cut.
func (s *all) charged(ds []Decision) Decision {
	d := s.combine(ds, 1)
	for _, m := range ds {
		d.cut = max(d.cut, m.cut)
	}
	return d
}

// Charge charges n to every member by its own rule, each capped by its own
// debt cap (maxDebt, or each member's Limit when negative), and combines
// their standing after it (see All); Cut is the most any member cut. A
// member that cannot be charged makes it an error wrapping
// errors.ErrUnsupported, with no member charged.
func (s *all) Charge(state State, now time.Time, n, maxDebt int64) (Decision, error) {
	st, cs, err := membersAs[Charger](s, state, "be charged")
	if err != nil {
		return Decision{}, err
	}
	ds := make([]Decision, len(s.members))
	for i, c := range cs {
		d, err := c.Charge(st.members[i], now, n, maxDebt)
		if err != nil {
			return Decision{}, err
		}
		ds[i] = d
	}
	return s.charged(ds), nil
}

// Charge charges n by the inner strategy's rule; the ban state is as it
// was (a charge is no denial, and lifts no ban).
func (s *penalized) Charge(state State, now time.Time, n, maxDebt int64) (Decision, error) {
	st, c, err := innerAs[Charger](s, state, "be charged")
	if err != nil {
		return Decision{}, err
	}
	return c.Charge(st.inner, now, n, maxDebt)
}

// Charge charges n tokens (see Charger): the level may go below zero, to
// -maxDebt tokens, and the instant the bucket is full again moves on by
// n*per/rate. The debt is measured on the stored instant, unclamped, so a
// clock behind the last writer's sees the lag as debt and records less.
// The cap in units is also kept below 2^53 - R, so that every debt the
// Lua twin computes is an exact integer, and in time to what the bucket
// refills by 2^53 µs after the Unix epoch, so that the instant it is full
// again is one the Lua twin stores and reads back exactly (past MaxTime:
// a slow bucket with a large maxDebt); what either cap cuts off is Cut.
func (s *tokenBucket) Charge(state State, now time.Time, n, maxDebt int64) (Decision, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	if maxDebt < 0 {
		maxDebt = s.burst
	}
	ceiling := MaxInt - s.r // the most units owed
	if maxDebt <= (ceiling-s.capacity)/s.p {
		ceiling = s.capacity + maxDebt*s.p
	}
	t := now.UnixMicro()
	if room := MaxInt - t; ceilDiv(ceiling, s.r) > room {
		ceiling = room * s.r // the instant full again stays at most 2^53 µs
	}
	var owed int64
	over := false // owes the ceiling or more: nothing more is recorded
	if st.tat > t {
		if st.tat-t > ceilDiv(ceiling, s.r) {
			over = true
		} else {
			owed = (st.tat-t)*s.r - s.remainder(st)
		}
	}
	var k int64
	if !over && owed < ceiling {
		k = min(n, (ceiling-owed)/s.p)
	}
	d := Decision{Allowed: true, Limit: s.burst, cut: n - k}
	if k > 0 {
		owed += k * s.p
		wait := ceilDiv(owed, s.r)
		st.tat, st.e, st.r = t+wait, wait*s.r-owed, s.r
	}
	switch {
	case over:
		d.ResetAfter = duration(st.tat - t)
	default:
		d.Remaining = max(0, s.capacity-owed) / s.p
		d.ResetAfter = duration(ceilDiv(owed, s.r))
	}
	return d, nil
}

// Charge adds n units to the log at now (or at the newest entry's time
// when now is behind it), as few as keep the live units within limit +
// maxDebt and at most MaxLogCost (see Charger); expired units are evicted
// first, as Decide evicts them.
func (s *slidingWindowLog) Charge(state State, now time.Time, n, maxDebt int64) (Decision, error) {
	st, t, newest, err := s.live(state, now)
	if err != nil {
		return Decision{}, err
	}
	k := min(n, MaxLogCost, max(0, capOver(s.limit, maxDebt)-st.count))
	d := Decision{Allowed: true, Limit: s.limit, cut: n - k}
	if k > 0 {
		st.record(t, k, s.window)
		newest = t
	}
	d.Remaining = max(0, s.limit-st.count)
	if st.count > 0 {
		d.ResetAfter = duration(newest + s.window - t)
	}
	return d, nil
}

// Charge adds n to the count of the window that holds now, as much as
// keeps it within limit + maxDebt (see Charger).
func (s *fixedWindow) Charge(state State, now time.Time, n, maxDebt int64) (Decision, error) {
	st, idx, t, err := s.view(state, now)
	if err != nil {
		return Decision{}, err
	}
	end, count := (idx+1)*s.window, st.countIn(idx)
	k := min(n, max(0, capOver(s.limit, maxDebt)-count))
	if k > 0 {
		count += k
		st.index, st.count, st.end = idx, count, end
	}
	d := Decision{Allowed: true, Limit: s.limit, Remaining: max(0, s.limit-count), cut: n - k}
	if count > 0 {
		d.ResetAfter = duration(end - t)
	}
	return d, nil
}

// Charge adds n to the current window's count, as much as keeps it within
// limit + maxDebt (see Charger).
func (s *slidingWindowCounter) Charge(state State, now time.Time, n, maxDebt int64) (Decision, error) {
	st, idx, e, prev, cur, err := s.view(state, now)
	if err != nil {
		return Decision{}, err
	}
	w := s.window
	k := min(n, max(0, capOver(s.limit, maxDebt)-cur))
	if k > 0 {
		cur += k
		st.keep(idx, prev, cur, w)
	}
	return Decision{
		Allowed:    true,
		Limit:      s.limit,
		Remaining:  max(0, s.limit-cur-s.weighted(prev, w-e)),
		ResetAfter: duration(resetAfter(w, e, prev, cur)),
		cut:        n - k,
	}, nil
}
