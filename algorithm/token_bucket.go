package algorithm

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

var tokenBucketScript = chargeable(leasable(builtin(NewScript("tb", scripts.TokenBucket()))))

// TokenBucket returns a token bucket: rate tokens refill per period per,
// continuously; the bucket holds at most burst; a request of cost n takes n
// tokens or is denied and takes none. A key starts full.
//
// In any interval of length d it admits at most burst + rate*d/per. Its
// decisions equal golang.org/x/time/rate's Limiter.AllowN(t, n) with
// rate.Every(per/rate) and the same burst, on the same timeline. Memory per
// key is constant: in Redis one short string (a plain integer whenever rate
// divides per in microseconds), whatever the rate or burst.
//
// The arithmetic is exact: tokens are counted in integer units (rate and per
// reduced by their greatest common divisor) and time in integer
// microseconds, so that 1 token per year and 10^9 tokens per second are both
// exact. burst*per/gcd(rate, per µs) must stay below 2^53; Validate says so
// when it does not.
//
// Time never runs backwards for a key: a request whose clock is behind the
// last writer's gets no refill for the gap — it sees the bucket as the last
// writer left it, charged for the lag, and at worst empty — so a slow clock
// never takes extra tokens. With client clocks (fleetlimit.WithClock) skewed
// by at most δ, a clock ahead of the others can take at most δ*rate/per extra
// tokens, once; with the default Redis server TIME, none. The equality with
// x/time/rate holds for timelines whose time never runs backwards.
//
// A denial's RetryAfter and ResetAfter are read off the instant the bucket
// is full again, so they count whole a debt past the capacity (a charge:
// Charger, a reservation settled for more than the bucket holds) and a
// clock's lag: the request passes at RetryAfter, not a microsecond before.
//
// The returned Strategy is safe for concurrent use. Invalid parameters are
// reported by Validate, never by a panic.
func TokenBucket(rate int64, per time.Duration, burst int64) Strategy {
	s := &tokenBucket{rate: rate, per: per, burst: burst}
	if s.Validate() == nil {
		g := gcd(rate, micros(per))
		s.r, s.p = rate/g, micros(per)/g
		s.capacity = burst * s.p
		s.fill = ceilDiv(s.capacity, s.r)
		s.args = []any{strconv.FormatInt(burst, 10), strconv.FormatInt(s.r, 10), strconv.FormatInt(s.p, 10)}
	}
	return s
}

type tokenBucket struct {
	rate, burst int64
	per         time.Duration
	r, p        int64 // units refilled per µs; units per token
	capacity    int64 // burst * p
	fill        int64 // µs to fill an empty bucket
	args        []any
}

func (s *tokenBucket) Name() string          { return "token_bucket" }
func (s *tokenBucket) Limit() int64          { return s.burst }
func (s *tokenBucket) Window() time.Duration { return duration(s.fill) }
func (s *tokenBucket) Script() *Script       { return tokenBucketScript }
func (s *tokenBucket) ScriptArgs() []any     { return s.args }
func (s *tokenBucket) NewState() State       { return &tokenBucketState{} }

func (s *tokenBucket) Validate() error {
	const algo = "token bucket"
	if err := checkCount(algo, "rate", s.rate); err != nil {
		return err
	}
	if err := checkCount(algo, "burst", s.burst); err != nil {
		return err
	}
	if err := checkWindow(algo, "period", s.per); err != nil {
		return err
	}
	us := micros(s.per)
	g := gcd(s.rate, us)
	r, p := s.rate/g, us/g
	// capacity + r must stay below 2^53; compare by division to avoid overflow.
	if s.burst > (MaxInt-r)/p {
		return fmt.Errorf("%s: burst %d at %d per %v is too large for exact arithmetic: burst*period/gcd(rate, period in µs) must stay below 2^53; lower the burst or the period: %w",
			algo, s.burst, s.rate, s.per, ErrInvalidStrategy)
	}
	return nil
}

// tokenBucketState is the Go twin of the Redis value: the bucket is full
// again at tat - e/r microseconds (tat is rounded up, 0 <= e < r); tat <= now
// means full. r is the R of the bucket that wrote e (0 when e is 0).
type tokenBucketState struct {
	tat, e, r int64
}

func (st *tokenBucketState) FullAt() int64 { return st.tat }

func (st *tokenBucketState) Clone() State { c := *st; return &c }

func (s *tokenBucket) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	t := now.UnixMicro()
	debt := s.debt(st, t)
	if n <= s.burst && debt+n*s.p <= s.capacity {
		debt += n * s.p
		wait := ceilDiv(debt, s.r) // µs until full again
		st.tat, st.e, st.r = t+wait, wait*s.r-debt, s.r
		return Decision{Allowed: true, Limit: s.burst, Remaining: (s.capacity - debt) / s.p, ResetAfter: duration(wait)}, nil
	}
	d := Decision{Limit: s.burst, Remaining: (s.capacity - debt) / s.p}
	reset := s.fullIn(st, t)
	d.ResetAfter = duration(reset)
	if n > s.burst {
		d.RetryAfter = duration(neverPassable(reset, s.fill))
	} else {
		// ceil((owed + n*p - capacity)/r) for the units owed unclamped,
		// (tat-t)*r - e, computed without the product: tat-t less
		// floor((e + capacity - n*p)/r), which is at least 1 when denied.
		d.RetryAfter = duration(reset - (s.remainder(st)+s.capacity-n*s.p)/s.r)
	}
	return d, nil
}

// fullIn is the time until the bucket is full again at t, in µs, read off
// the stored instant: tat - t (e/r is less than a microsecond), unclamped,
// so that a debt past the capacity (a charge: Charger, a reservation's
// settle) or a clock behind the last writer's counts whole, as the debt
// seen at t (clamped at the capacity) cannot.
func (s *tokenBucket) fullIn(st *tokenBucketState, t int64) int64 {
	return max(0, st.tat-t)
}

// debt is the capacity minus the bucket's level at t, in units: 0 when full,
// at most the capacity.
func (s *tokenBucket) debt(st *tokenBucketState, t int64) int64 {
	switch {
	case st.tat <= t:
		return 0
	case st.tat-t > s.fill:
		return s.capacity // a clock far behind sees an empty bucket
	}
	return min((st.tat-t)*s.r-s.remainder(st), s.capacity)
}

// remainder is st's e in this bucket's units: e, or 0 when a bucket of
// another rate wrote it (a per-key tier, fleetlimit.WithStrategyFor), which
// counts the debt up to a microsecond's refill high, never low.
func (s *tokenBucket) remainder(st *tokenBucketState) int64 {
	if st.r != s.r {
		return 0
	}
	return st.e
}

// Refund puts n tokens back (see Refunder): the instant the bucket is full
// again moves n*per/rate earlier, and once it is at or before now the
// bucket is full and the key's state is a fresh key's. The move is made on
// the stored instant, not on the debt seen at now, so a clock behind the
// last writer's gets back exactly n tokens, never the lag as well.
func (s *tokenBucket) Refund(state State, now time.Time, n int64) (Decision, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	t := now.UnixMicro()
	if st.tat > t {
		// Full at tat - e/r; n tokens earlier is tat - (e + n*p)/r. More
		// than burst tokens fill any bucket, and keep u below 2^53.
		u := s.remainder(st) + min(n, s.burst)*s.p
		st.tat, st.e, st.r = st.tat-u/s.r, u%s.r, s.r
		if st.tat <= t {
			*st = tokenBucketState{}
		}
	}
	debt := s.debt(st, t)
	return Decision{
		Allowed:    true,
		Limit:      s.burst,
		Remaining:  (s.capacity - debt) / s.p,
		ResetAfter: duration(s.fullIn(st, t)),
	}, nil
}

// stateOf returns state as this strategy's, or the error Decide and Refund
// return.
func (s *tokenBucket) stateOf(state State) (*tokenBucketState, error) {
	st, ok := state.(*tokenBucketState)
	if !ok {
		return nil, ErrStateType
	}
	if s.r == 0 { // not valid: its units were never computed
		return nil, s.Validate()
	}
	return st, nil
}
