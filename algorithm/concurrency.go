package algorithm

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

var concurrencyScript = holding(NewScript("cc", scripts.Concurrency()))

// holding returns s with Peeks and Holds set, for the built-in script that
// holds permits.
func holding(s *Script) *Script {
	s.Peeks, s.Holds = true, true
	return s
}

// MaxPermitID is the longest permit identity (PermitOp.ID) accepted, in
// bytes.
const MaxPermitID = 64

// Concurrency returns a limit on how many requests of a key are in flight
// at once: at most limit permits held per key, by every instance sharing
// the store together. A permit is taken by an acquire and given back by a
// release of that same permit (each has its own identity, PermitOp.ID); one
// never released expires ttl after it was taken or last renewed, on the
// decision clock (the Redis server's TIME unless the caller gives a time),
// so a holder that crashes frees its slot by itself. Use it through
// fleetlimit.Limiter.Acquire.
//
// Its state per key is the set of held permits with their expiry instants
// (in Redis a sorted set: member the permit's identity, score its expiry in
// microseconds); permits expired at the decision's time are dropped by
// every operation on the key, and the key expires with its last permit.
//
// The plain decision (Decide, fleetlimit.Limiter.AllowN and Peek) holds
// nothing: it reports whether n slots are free now, with Remaining the
// free slots and, when denied, RetryAfter the time until enough held
// permits expire — an upper bound, since a release may free a slot sooner.
// Hold is the decision that takes, gives back or extends a permit.
//
// Validate refuses limit < 1 or above MaxInt and a ttl outside MinWindow to
// MaxWindow or not a whole number of microseconds. Window() is ttl. The
// returned Strategy is safe for concurrent use.
func Concurrency(limit int64, ttl time.Duration) Strategy {
	return &concurrency{limitWindow: newLimitWindow(limit, ttl)}
}

type concurrency struct{ limitWindow }

func (s *concurrency) Name() string    { return "concurrency" }
func (s *concurrency) Script() *Script { return concurrencyScript }
func (s *concurrency) NewState() State { return &concurrencyState{} }

func (s *concurrency) Validate() error {
	return s.check("concurrency", "ttl")
}

// PermitKind is what a Hold does to a permit.
type PermitKind uint8

const (
	// AcquirePermit takes a slot for the permit, if one is free.
	AcquirePermit PermitKind = iota + 1
	// ReleasePermit gives the permit's slot back.
	ReleasePermit
	// RenewPermit extends a held permit by the strategy's ttl.
	RenewPermit
)

// String is the kind's name in the calling convention: "acquire",
// "release" or "renew".
func (k PermitKind) String() string {
	switch k {
	case AcquirePermit:
		return "acquire"
	case ReleasePermit:
		return "release"
	case RenewPermit:
		return "renew"
	}
	return "PermitKind(" + strconv.Itoa(int(k)) + ")"
}

// PermitOp is one operation on one permit.
type PermitOp struct {
	Kind PermitKind
	// ID is the permit's identity: 1 to MaxPermitID bytes, unique per
	// permit (fleetlimit uses a random UUID).
	ID string
}

// Validate reports an unknown kind or an empty or over-long ID, wrapping
// ErrInvalidStrategy.
func (op PermitOp) Validate() error {
	if op.Kind < AcquirePermit || op.Kind > RenewPermit {
		return fmt.Errorf("permit: unknown operation %v: %w", op.Kind, ErrInvalidStrategy)
	}
	if op.ID == "" || len(op.ID) > MaxPermitID {
		return fmt.Errorf("permit: id of %d bytes, want 1 to %d: %w", len(op.ID), MaxPermitID, ErrInvalidStrategy)
	}
	return nil
}

// Holder is implemented by strategies that hold permits (Concurrency):
// besides Decide, which holds nothing, Hold applies one operation on one
// permit. Its Lua twin is the script's permit mode (see package scripts),
// which a script honours when it sets Script.Holds.
type Holder interface {
	// Hold applies op to st at now, atomically under st's lock, which the
	// caller holds. First every permit expired at now (its expiry <= now)
	// is dropped. Then:
	//
	//   - AcquirePermit: a permit already held is renewed (so a retried
	//     acquire never takes two slots); otherwise, when fewer than
	//     Limit permits are held, the permit is held until now + ttl.
	//     Denied: Remaining 0, RetryAfter the time until the earliest
	//     held permit expires (an upper bound on the wait: a release may
	//     come sooner).
	//   - ReleasePermit: the permit, if held, is dropped; no other permit
	//     is touched. Always Allowed: a release of a permit that is not
	//     held (released already, or expired) changes nothing.
	//   - RenewPermit: a held permit is held until now + ttl. A permit not
	//     held (expired, or released) is not brought back: denied, with
	//     RetryAfter ttl (a wait that means nothing but > 0).
	//
	// Remaining is the free slots after the operation, ResetAfter the time
	// until the last held permit expires (0 when none is held).
	Hold(st State, now time.Time, op PermitOp) (Decision, error)
}

// concurrencyState is the Go twin of the Redis sorted set: each held
// permit's identity and expiry (µs).
type concurrencyState struct {
	permits map[string]int64
}

func (st *concurrencyState) FullAt() int64 {
	var at int64
	for _, exp := range st.permits {
		at = max(at, exp)
	}
	return at
}

func (st *concurrencyState) Clone() State {
	return &concurrencyState{permits: maps(st.permits)}
}

// maps copies m (nil for an empty m).
func maps(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// live returns the expiries of the permits held at t (expiry > t), in
// increasing order.
func (st *concurrencyState) live(t int64) []int64 {
	var exps []int64
	for _, exp := range st.permits {
		if exp > t {
			exps = append(exps, exp)
		}
	}
	slices.Sort(exps)
	return exps
}

func (s *concurrency) state(state State) (*concurrencyState, error) {
	st, ok := state.(*concurrencyState)
	if !ok {
		return nil, ErrStateType
	}
	if s.limit <= 0 || s.window <= 0 {
		return nil, s.Validate()
	}
	return st, nil
}

// Decide reports whether n slots are free at now, and holds nothing (see
// Concurrency); st is not changed.
func (s *concurrency) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, err := s.state(state)
	if err != nil {
		return Decision{}, err
	}
	t := now.UnixMicro()
	exps := st.live(t)
	held := int64(len(exps))
	d := Decision{Limit: s.limit, Remaining: max(0, s.limit-held)}
	if held > 0 {
		d.ResetAfter = duration(exps[held-1] - t)
	}
	switch {
	case n > s.limit:
		d.RetryAfter = duration(neverPassable(micros(d.ResetAfter), s.window))
	case held+n > s.limit:
		// Enough permits must expire: the (held+n-limit)-th earliest.
		d.RetryAfter = duration(exps[held+n-s.limit-1] - t)
	default:
		d.Allowed = true
	}
	return d, nil
}

// Hold applies op to st at now (see Holder).
func (s *concurrency) Hold(state State, now time.Time, op PermitOp) (Decision, error) {
	st, err := s.state(state)
	if err != nil {
		return Decision{}, err
	}
	if err := op.Validate(); err != nil {
		return Decision{}, err
	}
	t := now.UnixMicro()
	for id, exp := range st.permits {
		if exp <= t {
			delete(st.permits, id)
		}
	}
	_, held := st.permits[op.ID]
	d := Decision{Limit: s.limit}
	switch op.Kind {
	case AcquirePermit:
		if held || int64(len(st.permits)) < s.limit {
			if st.permits == nil {
				st.permits = make(map[string]int64, 1)
			}
			st.permits[op.ID] = t + s.window
			d.Allowed = true
		} else {
			earliest := int64(MaxInt)
			for _, exp := range st.permits {
				earliest = min(earliest, exp)
			}
			d.RetryAfter = duration(earliest - t)
		}
	case ReleasePermit:
		delete(st.permits, op.ID)
		d.Allowed = true
	case RenewPermit:
		if held {
			st.permits[op.ID] = t + s.window
			d.Allowed = true
		} else {
			d.RetryAfter = s.d
		}
	}
	d.Remaining = max(0, s.limit-int64(len(st.permits)))
	if at := st.FullAt(); at > t {
		d.ResetAfter = duration(at - t)
	}
	return d, nil
}

// Holds reports whether s holds permits: it is a Holder whose script
// honours the permit modes (Script.Holds). Concurrency does, and so does a
// composite (All) with a Concurrency member.
func Holds(s Strategy) bool {
	if _, ok := s.(Holder); !ok {
		return false
	}
	sc := s.Script()
	return sc != nil && sc.Holds
}
