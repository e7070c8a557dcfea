package algorithm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

// MaxMembers is the most strategies All combines.
const MaxMembers = 8

// Composite is implemented by a strategy made of member strategies (All).
// Its script takes one key per member (Script.Keys) and returns the four
// figures of the calling convention for each member in turn, which it reads
// as a Replier; its decisions list the members' (Decision.Members).
type Composite interface {
	Strategy
	// Members returns the member strategies, in order. The slice must not
	// be modified.
	Members() []Strategy
}

// All returns a strategy that admits a request only when every member
// admits it, and then charges every member; when any member denies, no
// member is charged. "10 per second AND 1,000 per day" is
// All(TokenBucket(10, time.Second, 10), SlidingWindowLog(1000, 24*time.Hour)).
//
// Each member keeps its own state under its own key (in Redis the user's
// key with the member's tag and position, all in the user's hash tag, so
// one Cluster slot holds them) and decides by its own rule; the composite
// adds only the rule that combines them. A decision is one lock on the
// memory store and one script on Redis: every member decides without
// writing, and only if all admit does each decide again and write. So the
// admitted requests are exactly those every member admits on its own
// timeline of admitted requests, and each member is charged exactly the
// admitted cost.
//
// The decision: Allowed when every member admits. Remaining and Limit are
// the tightest member's: the one with the least Remaining after the
// decision (the first such in order), or, when n exceeds some member's
// Limit so that the request can never pass, the member with the smallest
// such Limit. RetryAfter is the longest of the members' waits, which is
// exactly when the request would pass every member with no other traffic
// (each member, once it would admit it, goes on admitting it while nothing
// else is charged). ResetAfter is the longest of the members' ResetAfter:
// the composite is back at full capacity when every member is. Members
// lists each member's decision; a member that would have admitted a
// denied request shows its figures as they are, uncharged, Allowed and
// with no wait.
//
// Limit() is the smallest member limit (the most cost that can ever pass
// at once) and Window() the longest member window. Validate refuses no
// members or more than MaxMembers, a nil, invalid or composite member,
// two identical members, a member whose state cannot be copied (its State
// is not a Cloner) or whose script cannot peek (Script.Peeks false), and a
// member whose Limit is MaxInt (the composite reads a member's figures with
// a cost above its limit).
//
// A composite leases (Leaser, fleetlimit.WithLeases) when every member
// does: see Lease. It holds permits (Holds, fleetlimit.Limiter.Acquire)
// when one member does — a Concurrency limit beside rate limits, "at most
// 2 at once and 10 per hour" — see Hold; its plain decision (AllowN)
// charges the rate members and holds no slot. Validate refuses two
// members that hold permits.
//
// The returned Strategy is safe for concurrent use.
func All(members ...Strategy) Strategy {
	s := &all{members: append([]Strategy(nil), members...), holder: -1}
	s.err = s.validate()
	if s.err != nil {
		return s
	}
	names := make([]string, len(members))
	tags := make([]string, len(members))
	keys := make([]string, len(members))
	var src strings.Builder
	src.WriteString("-- algorithm.All of its members' scripts, then the driver (all.lua).\nlocal member, holds = {}, {}\n")
	s.limit, s.window = MaxInt, 0
	for i, m := range members {
		sc := m.Script()
		names[i], tags[i] = m.Name(), sc.Tag
		keys[i] = sc.Tag + "." + strconv.Itoa(i)
		fmt.Fprintf(&src, "member[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, sc.Source)
		if Holds(m) {
			s.holder = i
			fmt.Fprintf(&src, "holds[%d] = true\n", i+1)
		}
		margs := m.ScriptArgs()
		s.args = append(s.args, strconv.Itoa(len(margs)), strconv.FormatInt(m.Limit()+1, 10))
		s.args = append(s.args, margs...)
		s.limit = min(s.limit, m.Limit())
		s.window = max(s.window, m.Window())
	}
	src.WriteString(scripts.All())
	s.name = "all(" + strings.Join(names, ",") + ")"
	s.script = NewScript("all("+strings.Join(tags, ",")+")", src.String())
	s.script.Keys = keys
	s.script.Peeks = true
	s.script.Refunds, s.script.Leases = true, true
	s.script.Holds = s.holder >= 0
	s.script.AtMost = grantsAll(members)
	for _, m := range members {
		_, ok := m.(Refunder)
		s.script.Refunds = s.script.Refunds && ok && m.Script().Refunds
		_, ok = m.(Leaser)
		s.script.Leases = s.script.Leases && ok && m.Script().Leases
	}
	s.script.Charges = true
	for _, m := range members {
		s.script.Charges = s.script.Charges && Charges(m)
	}
	return s
}

type all struct {
	members []Strategy
	err     error // from validate, at construction
	name    string
	limit   int64
	window  time.Duration
	script  *Script
	args    []any
	holder  int // the member that holds permits (Holds), or -1
}

func (s *all) Name() string {
	if s.name == "" {
		return "all"
	}
	return s.name
}
func (s *all) Limit() int64          { return s.limit }
func (s *all) Window() time.Duration { return s.window }
func (s *all) Validate() error       { return s.err }
func (s *all) Script() *Script       { return s.script }
func (s *all) ScriptArgs() []any     { return s.args }
func (s *all) Members() []Strategy   { return s.members }

func (s *all) NewState() State {
	st := &allState{members: make([]State, len(s.members))}
	for i, m := range s.members {
		if m != nil {
			st.members[i] = m.NewState()
		}
	}
	return st
}

func (s *all) validate() error {
	const algo = "all"
	if len(s.members) == 0 || len(s.members) > MaxMembers {
		return fmt.Errorf("%s: needs 1 to %d members, got %d: %w", algo, MaxMembers, len(s.members), ErrInvalidStrategy)
	}
	for i, m := range s.members {
		if m == nil || isNilPointer(m) {
			return fmt.Errorf("%s: member %d is nil: %w", algo, i, ErrInvalidStrategy)
		}
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%s: member %d: %w", algo, i, err)
		}
		if Holds(m) {
			for j := range i {
				if Holds(s.members[j]) {
					return fmt.Errorf("%s: members %d and %d both hold permits; a composite has at most one concurrency limit: %w", algo, j, i, ErrInvalidStrategy)
				}
			}
		}
		if _, ok := m.(Replier); ok {
			return fmt.Errorf("%s: member %d (%s) is itself a composite or has a penalty box; list plain strategies and put a penalty around the whole: %w", algo, i, m.Name(), ErrInvalidStrategy)
		}
		if _, ok := m.NewState().(Cloner); !ok {
			return fmt.Errorf("%s: member %d (%s): its state is not an algorithm.Cloner, so it cannot decide without charging: %w", algo, i, m.Name(), ErrInvalidStrategy)
		}
		if sc := m.Script(); sc == nil || !sc.Peeks || len(sc.Keys) > 1 {
			return fmt.Errorf("%s: member %d (%s): its script must use one key and honour the peek flag (Script.Peeks): %w", algo, i, m.Name(), ErrInvalidStrategy)
		}
		if m.Limit() >= MaxInt {
			return fmt.Errorf("%s: member %d (%s): limit must be below 2^53: %w", algo, i, m.Name(), ErrInvalidStrategy)
		}
		for j := range i {
			if sameRule(s.members[j], m) {
				return fmt.Errorf("%s: members %d and %d are the same rule (%s with the same parameters): %w", algo, j, i, m.Name(), ErrInvalidStrategy)
			}
		}
	}
	return nil
}

// sameRule reports whether a and b apply the same rule: one script with the
// same parameters.
func sameRule(a, b Strategy) bool {
	if a.Script().SHA1 != b.Script().SHA1 {
		return false
	}
	aa, ba := a.ScriptArgs(), b.ScriptArgs()
	if len(aa) != len(ba) {
		return false
	}
	for i := range aa {
		if fmt.Sprint(aa[i]) != fmt.Sprint(ba[i]) {
			return false
		}
	}
	return true
}

// allState holds each member's state, in member order.
type allState struct {
	members []State
}

func (st *allState) FullAt() int64 {
	var at int64
	for _, m := range st.members {
		at = max(at, m.FullAt())
	}
	return at
}

func (st *allState) Clone() State {
	c := &allState{members: make([]State, len(st.members))}
	for i, m := range st.members {
		c.members[i] = m.(Cloner).Clone()
	}
	return c
}

// errMemberState reports a member state that is not a Cloner (All refuses
// such members, so only a State made elsewhere gets it).
var errMemberState = errors.New("all: member state cannot be copied")

// stateOf is state as the composite's: s's own error first (an invalid
// composite), ErrStateType for a state another strategy made.
func (s *all) stateOf(state State) (*allState, error) {
	if s.err != nil {
		return nil, s.err
	}
	st, ok := state.(*allState)
	if !ok || len(st.members) != len(s.members) {
		return nil, ErrStateType
	}
	return st, nil
}

// membersAs is stateOf with every member as R, the rule interface of an
// operation (Refunder, Leaser, Charger); a member that is not an R is an
// error wrapping errors.ErrUnsupported that says what it cannot do.
func membersAs[R any](s *all, state State, cannot string) (*allState, []R, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return nil, nil, err
	}
	rs := make([]R, len(s.members))
	for i, m := range s.members {
		r, ok := m.(R)
		if !ok {
			return nil, nil, fmt.Errorf("all: member %d (%s) cannot %s: %w", i, m.Name(), cannot, errors.ErrUnsupported)
		}
		rs[i] = r
	}
	return st, rs, nil
}

func (s *all) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	trial, ds, admit, err := s.try(st, now, n)
	if err != nil {
		return Decision{}, err
	}
	if admit {
		copy(st.members, trial)
		return s.combine(ds, n), nil
	}
	if err := s.uncharged(st, ds, now); err != nil {
		return Decision{}, err
	}
	return s.combine(ds, n), nil
}

// try decides a request of cost n by every member, each on a copy of its
// state, and returns the copies, the decisions and whether all admitted:
// the copies replace the states only when all admit, as the Lua twin
// decides with its peek flag and then again for real.
func (s *all) try(st *allState, now time.Time, n int64) ([]State, []Decision, bool, error) {
	trial := make([]State, len(s.members))
	ds := make([]Decision, len(s.members))
	admit := true
	for i, m := range s.members {
		c, ok := st.members[i].(Cloner)
		if !ok {
			return nil, nil, false, errMemberState
		}
		trial[i] = c.Clone()
		d, err := m.Decide(trial[i], now, n)
		if err != nil {
			return nil, nil, false, err
		}
		ds[i] = d
		admit = admit && d.Allowed
	}
	return trial, ds, admit, nil
}

// uncharged replaces, in the decisions ds of a denied request, those of
// the members that would have admitted it by their figures as they are
// (asIs).
func (s *all) uncharged(st *allState, ds []Decision, now time.Time) error {
	for i := range s.members {
		if !ds[i].Allowed {
			continue
		}
		var err error
		if ds[i], err = s.asIs(st, i, now); err != nil {
			return err
		}
	}
	return nil
}

// asIs is member i's figures as they are, uncharged and admitting: its
// decision on a cost above its limit, which is denied and reports the key
// unchanged. On a copy, as the Lua twin peeks: a rule may tidy its state
// on a denial (a sliding log drops expired entries), which a clock running
// behind would then miss.
func (s *all) asIs(st *allState, i int, now time.Time) (Decision, error) {
	m := s.members[i]
	cur, err := m.Decide(st.members[i].(Cloner).Clone(), now, m.Limit()+1)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: true, Limit: cur.Limit, Remaining: cur.Remaining, ResetAfter: cur.ResetAfter}, nil
}

// combine is the composite's rule (see All); members are in member order.
func (s *all) combine(members []Decision, n int64) Decision {
	d := Decision{Allowed: true, members: &members}
	tight := -1
	never := false // the tightest is a member n can never pass
	for i, m := range members {
		d.Allowed = d.Allowed && m.Allowed
		d.RetryAfter = max(d.RetryAfter, m.RetryAfter)
		d.ResetAfter = max(d.ResetAfter, m.ResetAfter)
		switch over := n > m.Limit; {
		case tight < 0:
			tight, never = i, over
		case over && (!never || m.Limit < members[tight].Limit):
			tight, never = i, true
		case !over && !never && m.Remaining < members[tight].Remaining:
			tight = i
		}
	}
	if tight >= 0 {
		d.Limit, d.Remaining = members[tight].Limit, members[tight].Remaining
	}
	return d
}

// Scaled is All of every member scaled by divisor; the members must all be
// Scalers (or the result is invalid, and says so from Validate).
func (s *all) Scaled(divisor int64) Strategy {
	if divisor <= 1 || s.err != nil {
		return s
	}
	scaled := make([]Strategy, len(s.members))
	for i, m := range s.members {
		sc, ok := m.(Scaler)
		if !ok {
			return &all{members: s.members, err: fmt.Errorf("all: member %d (%s) does not implement algorithm.Scaler: %w", i, m.Name(), ErrInvalidStrategy)}
		}
		scaled[i] = sc.Scaled(divisor)
	}
	return All(scaled...)
}

// Reply reads the script's reply, four integers per member, and combines
// the members' decisions.
func (s *all) Reply(ints []int64, n int64) (Decision, error) {
	if len(ints) != 4*len(s.members) {
		return Decision{}, fmt.Errorf("all: reply of %d integers for %d members", len(ints), len(s.members))
	}
	ds := make([]Decision, len(s.members))
	for i, m := range s.members {
		ds[i] = decisionOf(ints[4*i:4*i+4], m.Limit())
	}
	return s.combine(ds, n), nil
}

// Refund gives n back to every member by its own refund rule (each member
// was charged n for every admission) and combines the members' standing
// after it. A member that cannot refund makes it an error wrapping
// errors.ErrUnsupported, with nothing given back.
func (s *all) Refund(state State, now time.Time, n int64) (Decision, error) {
	st, rs, err := membersAs[Refunder](s, state, "refund")
	if err != nil {
		return Decision{}, err
	}
	ds := make([]Decision, len(s.members))
	for i, r := range rs {
		d, err := r.Refund(st.members[i], now, n)
		if err != nil {
			return Decision{}, err
		}
		ds[i] = d
	}
	return s.combine(ds, n), nil
}

// Lease first gives terms.Back back to every member by the member's own
// hand-back rule (each member was charged the lease's units, and each
// judges by terms.BackAt whether it can take them back), then takes a
// lease as one decision of the composite: the available units are the
// fewest any member has, the lease takes the fair share of those (see
// Leaser) and charges every member exactly that, as Decide charges an
// admission; when the request of cost n does not pass, it takes nothing
// and returns Decide's denial of n, with no member charged. A member that
// cannot lease makes it an error wrapping errors.ErrUnsupported, with
// nothing given back or taken. Grant.At is now, read once for all members.
func (s *all) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, ls, err := membersAs[Leaser](s, state, "lease")
	if err != nil {
		return Grant{}, err
	}
	ds := make([]Decision, len(s.members))
	available := int64(MaxInt)
	for i, l := range ls {
		// Want 0: the member only gives back, and says what it has left.
		g, err := l.Lease(st.members[i], now, 0, LeaseTerms{Back: terms.Back, BackAt: terms.BackAt})
		if err != nil {
			return Grant{}, err
		}
		ds[i] = g.Decision
		available = min(available, g.Decision.Remaining)
	}
	t := now.UnixMicro()
	if terms.Want == 0 {
		return Grant{Decision: s.combine(ds, n), At: t}, nil
	}
	return grant(s, st, now, t, n, s.limit, available, terms.Want)
}

// LeaseReply reads the lease mode's reply: granted, now, then four
// integers per member (the decision's, for the granted units or, denied,
// for n).
func (s *all) LeaseReply(ints []int64, n int64) (Grant, error) {
	if len(ints) < 2 {
		return Grant{}, fmt.Errorf("all: lease reply of %d integers", len(ints))
	}
	return leaseGrant(s, ints[2:], ints[0], ints[1], n)
}
