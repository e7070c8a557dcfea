package algorithm

import "time"

// Leaser is implemented by strategies that can lend part of a key's
// capacity to one instance of a fleet (fleetlimit.WithLeases): "take up to
// k units, at least n" and "give back units that a lease did not spend", as
// one atomic step whose Lua twin is the script's "lease" mode (see package
// scripts). The token bucket and the fixed window implement it; a strategy
// that does not (or whose Script does not set Leases) cannot be leased, and
// fleetlimit.New refuses WithLeases for it.
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

var (
	_ Leaser = (*tokenBucket)(nil)
	_ Leaser = (*fixedWindow)(nil)
)

// Lease gives back (see Leaser) by moving the instant the bucket is full
// again back·per/rate earlier, never past full — the tokens return exactly
// as if they had never been taken, unless the bucket would have filled in
// between, in which case it holds at most its burst — then leases from the
// bucket's level.
func (s *tokenBucket) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, ok := state.(*tokenBucketState)
	if !ok {
		return Grant{}, ErrStateType
	}
	if s.r == 0 {
		return Grant{}, s.Validate()
	}
	t := now.UnixMicro()
	if terms.Back > 0 && st.tat > t {
		e := st.e
		if st.r != s.r {
			e = 0 // in another tier's units: see Decide
		}
		u := e + min(terms.Back, s.burst)*s.p // more than burst fills any bucket
		st.tat, st.e, st.r = st.tat-u/s.r, u%s.r, s.r
		if st.tat <= t {
			*st = tokenBucketState{}
		}
	}
	var debt int64
	if st.tat > t {
		if st.tat-t > s.fill {
			debt = s.capacity
		} else {
			e := st.e
			if st.r != s.r {
				e = 0
			}
			debt = min((st.tat-t)*s.r-e, s.capacity)
		}
	}
	available := (s.capacity - debt) / s.p
	if terms.Want == 0 {
		return Grant{Decision: Decision{Limit: s.burst, Remaining: available}, At: t}, nil
	}
	g := n
	if n <= s.burst && n <= available {
		g = fairShare(n, terms.Want, available)
	}
	d, err := s.Decide(st, now, g)
	if err != nil || !d.Allowed {
		return Grant{Decision: d, At: t}, err
	}
	return Grant{Units: g, Decision: d, At: t}, nil
}

// Lease gives back (see Leaser) only to the window the earlier lease was
// taken in, while it is the key's current window: a count of that window
// is lowered by what the lease did not spend, at most to 0. Units of a
// lease from an earlier window are not given back (that window's count no
// longer limits anything, and lowering the current one would credit units
// it never charged).
func (s *fixedWindow) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, ok := state.(*fixedWindowState)
	if !ok {
		return Grant{}, ErrStateType
	}
	if s.window <= 0 || s.limit <= 0 {
		return Grant{}, s.Validate()
	}
	t := now.UnixMicro()
	idx := floorDiv(t, s.window)
	if st.end != 0 && st.index > idx {
		idx, t = st.index, st.index*s.window // as Decide judges it
	}
	var count int64
	if st.end != 0 && st.index == idx {
		count = st.count
		if terms.Back > 0 && floorDiv(terms.BackAt, s.window) == idx {
			count -= min(terms.Back, count)
			st.count = count // the window is kept, so a clock behind cannot reopen an earlier one
		}
	}
	available := max(0, s.limit-count)
	if terms.Want == 0 {
		return Grant{Decision: Decision{Limit: s.limit, Remaining: available}, At: t}, nil
	}
	g := n
	if n <= s.limit && n <= available {
		g = fairShare(n, terms.Want, available)
	}
	d, err := s.Decide(st, time.UnixMicro(t), g)
	if err != nil || !d.Allowed {
		return Grant{Decision: d, At: t}, err
	}
	return Grant{Units: g, Decision: d, At: t}, nil
}
