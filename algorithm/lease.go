package algorithm

import (
	"cmp"
	"slices"
	"time"
)

// Leaser is implemented by strategies that can lend part of a key's
// capacity to one instance of a fleet (fleetlimit.WithLeases): "take up to
// k units, at least n" and "give back units that a lease did not spend", as
// one atomic step whose Lua twin is the script's "lease" mode (see package
// scripts). The token bucket, the fixed window, the sliding log and the
// sliding-window counter implement it, and so do All and Penalize, by their
// members' or inner strategy's lease rules (a composite leases when all its
// members do); a strategy that does not (or whose Script does not set
// Leases) cannot be leased, and fleetlimit.New refuses WithLeases for it.
type Leaser interface {
	// Lease first gives terms.Back units back to st, where the strategy
	// can take them back exactly (see each strategy), then takes a lease:
	// when a request of cost n would be admitted now, it takes
	// g = min(terms.Want, max(n, ⌊available/2⌋)) units (the fair share: a
	// lease never takes more than half of what the key has left, unless n
	// alone needs more), charges them as Decide(st, now, g) does and
	// returns them with that Decision. Otherwise it takes nothing and
	// returns Decide's denial of n. terms.Want >= n >= 0; n = 0 with
	// terms.Want = 0 only gives back. The caller holds st's lock.
	Lease(st State, now time.Time, n int64, terms LeaseTerms) (Grant, error)
}

// LeaseTerms are what a lease asks for, beside the request's cost.
type LeaseTerms struct {
	// Want is the most units to take (fleetlimit.WithLeases' size, or the
	// request's cost when that is larger).
	Want int64
	// Back is how many units of an earlier lease were not spent, to give
	// back first; BackAt is that lease's Grant.At.
	Back, BackAt int64
	// Ahead marks a lease taken ahead (fleetlimit.WithLeaseAhead): its
	// round trip decides nothing for a caller, so a strategy whose state
	// a denial changes (DenialCounter: Penalize) leaves that state as it
	// was when it denies the lease. The plain strategies and All lease
	// alike either way. On Redis it is sent as the "ahead" mode to a
	// script that honours it (Script.LeasesAhead), and as "lease" to any
	// other.
	Ahead bool
}

// Grant is what a lease took.
type Grant struct {
	// Units is how many units were taken: 0 when the request was denied,
	// else at least its cost.
	Units int64
	// Decision is Decide's for Units (or, denied, for the request's cost).
	Decision Decision
	// At is the time the lease was judged at, in microseconds since the
	// Unix epoch on the decision clock (the Redis server's TIME unless the
	// caller gave one): a later hand-back names its lease by it.
	At int64
}

// fairShare is the units a lease takes of available ones, for a request of
// cost n asking for want (see Leaser).
func fairShare(n, want, available int64) int64 {
	return min(want, max(n, available/2))
}

// leaseGrant is the Grant of a lease reply whose head reports granted
// units judged at at: its decision, in rest, is r's reading (Replier) for
// the cost it was made for, the granted units or, when none, n.
func leaseGrant(r Replier, rest []int64, granted, at, n int64) (Grant, error) {
	cost := n
	if granted > 0 {
		cost = granted
	}
	d, err := r.Reply(rest, cost)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Units: granted, Decision: d, At: at}, nil
}

// LeaseReplier is implemented by leasing strategies whose lease mode
// replies with other than a one-key script's five integers {granted,
// remaining, retry_after_us, reset_after_us, now} (All, Penalize): a store
// hands it every integer of the reply, in order, with the request's cost
// n, and it returns the grant.
type LeaseReplier interface {
	LeaseReply(ints []int64, n int64) (Grant, error)
}

// Lease gives back (see Leaser) by the token bucket's Refund — the
// tokens return exactly as if they had never been taken, unless the bucket
// would have filled in between, in which case it holds at most its burst —
// then leases from the bucket's level.
func (s *tokenBucket) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Grant{}, err
	}
	if terms.Back > 0 {
		if _, err := s.Refund(st, now, terms.Back); err != nil {
			return Grant{}, err
		}
	}
	t := now.UnixMicro()
	available := (s.capacity - s.debt(st, t)) / s.p
	return grant(s, st, now, t, n, s.burst, available, terms.Want)
}

// Lease gives back (see Leaser) by the fixed window's Refund, only to the
// window the earlier lease was taken in, while it is the key's current
// window: units of a lease from an earlier window are not given back (that
// window's count no longer limits anything, and lowering the current one
// would credit units it never charged).
func (s *fixedWindow) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, idx, t, err := s.view(state, now)
	if err != nil {
		return Grant{}, err
	}
	if terms.Back > 0 && floorDiv(terms.BackAt, s.window) == idx {
		if _, err := s.Refund(st, now, terms.Back); err != nil {
			return Grant{}, err
		}
	}
	var count int64
	if st.end != 0 && st.index == idx {
		count = st.count
	}
	available := max(0, s.limit-count)
	return grant(s, st, now, t, n, s.limit, available, terms.Want)
}

// Lease gives back (see Leaser) only the earlier lease's own units: up to
// terms.Back of the units admitted at terms.BackAt, the instant that lease
// was stamped at, while they are still live. Units admitted at one instant
// are interchangeable (they leave the window together), so which of them
// go does not matter; newer units, which other requests were charged, are
// never touched, and units that have left the window are gone already.
// Time is judged as Decide judges it (never behind the key's newest
// admission), once, before the hand-back: the lease is stamped at that
// time even if the hand-back removed the newest units. A lease takes at
// most MaxLogCost units (terms.Want is capped there), as a request does.
func (s *slidingWindowLog) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, t, _, err := s.live(state, now)
	if err != nil {
		return Grant{}, err
	}
	if terms.Back > 0 {
		st.unlog(terms.BackAt, terms.Back)
	}
	available := max(0, s.limit-st.count)
	if terms.Want == 0 { // reports the strategy's limit, not the lease's cap that grant is given
		return Grant{Decision: Decision{Limit: s.limit, Remaining: available}, At: t}, nil
	}
	return grant(s, st, time.UnixMicro(t), t, n, min(s.limit, MaxLogCost), available, min(terms.Want, MaxLogCost))
}

// unlog removes up to n of the live units admitted at (µs), and no
// others. Requires that expired units have been evicted.
func (st *slidingLogState) unlog(at, n int64) {
	live := st.log[st.head:]
	i, found := slices.BinarySearchFunc(live, at, func(e logEntry, at int64) int { return cmp.Compare(e.at, at) })
	if !found {
		return
	}
	k := min(n, live[i].n)
	live[i].n -= k
	st.count -= k
	if live[i].n == 0 {
		st.log = slices.Delete(st.log, st.head+i, st.head+i+1)
	}
	if st.head == len(st.log) {
		st.log, st.head = st.log[:0], 0
	}
}

// Lease gives back (see Leaser) to the count of the window the earlier
// lease was taken in, at most to 0: the current window's count, or the
// previous window's while it still weighs in the estimate. Only that
// window's count is lowered (a refund would go on to the previous one):
// the lease's unspent units were charged there and nowhere else. Units of
// a lease two or more windows old weigh nothing and are not given back.
// The key keeps its window index, as after a Refund.
func (s *slidingWindowCounter) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, idx, e, prev, cur, err := s.view(state, now)
	if err != nil {
		return Grant{}, err
	}
	w := s.window
	if terms.Back > 0 && st.full != 0 {
		switch floorDiv(terms.BackAt, w) {
		case idx:
			cur -= min(terms.Back, cur)
		case idx - 1:
			prev -= min(terms.Back, prev)
		}
		st.keep(idx, prev, cur, w)
	}
	t := idx*w + e
	available := max(0, s.limit-cur-s.weighted(prev, w-e))
	return grant(s, st, now, t, n, s.limit, available, terms.Want)
}

// grant takes a lease for a request of cost n from st, which has available
// units and admits a cost of at most limit, judged at t (µs): the fair
// share when n passes, else Decide's denial of n. A lease that wants
// nothing (want 0) takes nothing and decides nothing: it reports limit and
// available.
func grant(s Strategy, st State, now time.Time, t, n, limit, available, want int64) (Grant, error) {
	if want == 0 {
		return Grant{Decision: Decision{Limit: limit, Remaining: available}, At: t}, nil
	}
	g := n
	if n <= limit && n <= available {
		g = fairShare(n, want, available)
	}
	d, err := s.Decide(st, now, g)
	if err != nil || !d.Allowed {
		return Grant{Decision: d, At: t}, err
	}
	return Grant{Units: g, Decision: d, At: t}, nil
}
