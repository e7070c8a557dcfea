package algorithm

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/scripts"
)

// Penalty is a penalty box: a key denied After times within Within is
// refused outright for Ban, and for twice as long on each repeat, up to
// MaxBan. See Penalize.
type Penalty struct {
	// After is how many denials within Within start a ban (>= 1).
	After int64
	// Within is how long a count of denials runs from its first denial.
	Within time.Duration
	// Ban is the first ban's length; each later one doubles, up to MaxBan.
	Ban, MaxBan time.Duration
}

// Validate reports a penalty that Penalize cannot apply, wrapping
// ErrInvalidStrategy.
func (p Penalty) Validate() error {
	const algo = "penalty"
	if err := checkCount(algo, "after", p.After); err != nil {
		return err
	}
	for _, d := range []struct {
		what string
		v    time.Duration
	}{{"within", p.Within}, {"ban", p.Ban}, {"max ban", p.MaxBan}} {
		if err := checkWindow(algo, d.what, d.v); err != nil {
			return err
		}
	}
	if p.MaxBan < p.Ban {
		return fmt.Errorf("%s: max ban %v is shorter than the first ban %v: %w", algo, p.MaxBan, p.Ban, ErrInvalidStrategy)
	}
	return nil
}

// Replier is implemented by strategies whose script replies with more than
// the calling convention's four integers (All, Penalize): a store hands it
// every integer of the reply, in order, with the request's cost n, and it
// returns the decision.
type Replier interface {
	Reply(ints []int64, n int64) (Decision, error)
}

// Penalize returns s with a penalty box: each decision is s's, except that
// a key s has denied p.After times within p.Within is then refused outright
// for p.Ban, and on each later ban for twice as long as the one before, up
// to p.MaxBan. A key that goes p.MaxBan after its last ban ends without
// another starts again at p.Ban. A request refused by a ban is not counted
// (so a ban always lifts), charges nothing, and gets RetryAfter = the ban's
// remaining time, or s's own wait for it if that is longer: exactly when it
// would pass with no other traffic. Remaining is 0 from the denial that
// starts a ban until the ban ends; ResetAfter is at least the ban's
// remaining time. Limit, Window and Name are s's.
//
// The ban is checked and set in the same decision as s's (one lock in
// memory, one script on Redis: s's own script, wrapped, then the penalty's
// driver), in a key of its own beside s's (Script.Keys), which expires once
// nothing in it matters; Reset removes it with s's. On Redis out of memory
// a denial is answered but not counted.
//
// With leases (fleetlimit.WithLeases, when s leases: Leaser), a lease round
// trip is judged as a decision is: banned, it takes nothing and gets the
// ban's denial; otherwise s's lease, and a lease round trip s denies counts
// toward a ban exactly as a denied decision does — unless the lease was
// taken ahead (LeaseTerms.Ahead), which decides nothing for a caller and
// is never counted (see Lease).
//
// Penalize refuses (through Validate) an invalid p or s, an s that is
// already penalized, and one whose state cannot be copied or whose script
// cannot peek: a banned request reads s's figures without changing them.
// The returned Strategy is safe for concurrent use.
func Penalize(s Strategy, p Penalty) Strategy {
	ps := &penalized{inner: s, p: p}
	if ps.err = ps.validate(); ps.err != nil {
		return ps
	}
	_, leases := s.(Leaser)
	ps.script = penaltyScript(s.Script(), leases)
	ps.args = append([]any{
		strconv.FormatInt(p.After, 10), strconv.FormatInt(micros(p.Within), 10),
		strconv.FormatInt(micros(p.Ban), 10), strconv.FormatInt(micros(p.MaxBan), 10),
		strconv.FormatInt(s.Limit()+1, 10),
	}, s.ScriptArgs()...)
	return ps
}

// penaltyScripts caches the penalty script of each inner script (by its
// digest and the modes it honours: one source serves composites whose
// members differ in them): tiers (fleetlimit.WithStrategyFor) are penalized on
// every decision.
var penaltyScripts sync.Map // penaltyScriptKey → *Script

type penaltyScriptKey struct {
	sha1            string
	refunds, leases bool
	charges, atmost bool
}

// penaltyScript is the penalty box's script around inner; it leases when
// inner does and the inner strategy is a Leaser.
func penaltyScript(inner *Script, leaser bool) *Script {
	key := penaltyScriptKey{sha1: inner.SHA1, refunds: inner.Refunds, leases: inner.Leases && leaser, charges: inner.Charges, atmost: inner.AtMost}
	if v, ok := penaltyScripts.Load(key); ok {
		return v.(*Script)
	}
	src := "-- algorithm.Penalize of its inner script, then the driver (penalty.lua).\nlocal inner = function(KEYS, ARGV)\n" +
		inner.Source + "\nend\n" + scripts.Penalty()
	keys := inner.Keys
	if len(keys) == 0 {
		keys = []string{inner.Tag}
	}
	s := NewScript("pen("+inner.Tag+")", src)
	s.Keys = append(append([]string(nil), keys...), "ban")
	s.Peeks, s.Refunds, s.Leases, s.LeasesAhead = true, key.refunds, key.leases, key.leases
	s.Charges, s.AtMost = key.charges, key.atmost
	v, _ := penaltyScripts.LoadOrStore(key, s)
	return v.(*Script)
}

type penalized struct {
	inner  Strategy
	p      Penalty
	err    error
	script *Script
	args   []any
}

// Unwrap returns the strategy the penalty box is around.
func (s *penalized) Unwrap() Strategy { return s.inner }

// Penalty returns the penalty box's parameters.
func (s *penalized) Penalty() Penalty { return s.p }

func (s *penalized) Name() string {
	if s.inner == nil {
		return "penalty"
	}
	return s.inner.Name()
}
func (s *penalized) Limit() int64 {
	if s.inner == nil {
		return 0
	}
	return s.inner.Limit()
}
func (s *penalized) Window() time.Duration {
	if s.inner == nil {
		return 0
	}
	return s.inner.Window()
}
func (s *penalized) Validate() error   { return s.err }
func (s *penalized) Script() *Script   { return s.script }
func (s *penalized) ScriptArgs() []any { return s.args }

func (s *penalized) NewState() State {
	if s.inner == nil {
		return &penaltyState{}
	}
	return &penaltyState{inner: s.inner.NewState()}
}

func (s *penalized) validate() error {
	if err := s.p.Validate(); err != nil {
		return err
	}
	m := s.inner
	if m == nil || isNilPointer(m) {
		return fmt.Errorf("penalty: nil strategy: %w", ErrInvalidStrategy)
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if _, ok := m.(*penalized); ok {
		return fmt.Errorf("penalty: %s already has a penalty box: %w", m.Name(), ErrInvalidStrategy)
	}
	if _, ok := m.NewState().(Cloner); !ok {
		return fmt.Errorf("penalty: %s: its state is not an algorithm.Cloner, so a banned request cannot read it unchanged: %w", m.Name(), ErrInvalidStrategy)
	}
	if sc := m.Script(); sc == nil || !sc.Peeks {
		return fmt.Errorf("penalty: %s: its script must honour the peek flag (Script.Peeks): %w", m.Name(), ErrInvalidStrategy)
	}
	if m.Limit() >= MaxInt {
		return fmt.Errorf("penalty: %s: limit must be below 2^53: %w", m.Name(), ErrInvalidStrategy)
	}
	return nil
}

// Scaled is the penalty box around s's strategy scaled by divisor, when it
// can be.
func (s *penalized) Scaled(divisor int64) Strategy {
	sc, ok := s.inner.(Scaler)
	if divisor <= 1 || s.err != nil || !ok {
		return s
	}
	return Penalize(sc.Scaled(divisor), s.p)
}

// penaltyState is the inner strategy's state and the Go twin of the
// penalty's Redis value "<denials>:<since>:<until>:<strikes>" (µs).
type penaltyState struct {
	inner                          State
	denials, since, until, strikes int64
	maxBan, within                 int64 // µs, for FullAt
}

func (st *penaltyState) FullAt() int64 {
	at := st.inner.FullAt()
	if st.denials > 0 {
		at = max(at, st.since+st.within)
	}
	if st.strikes > 0 {
		at = max(at, st.until+st.maxBan)
	}
	return at
}

func (st *penaltyState) Clone() State {
	c := *st
	c.inner = st.inner.(Cloner).Clone()
	return &c
}

// CountsDenials is true: a denial that is not a ban is a strike (see
// DenialCounter).
func (s *penalized) CountsDenials() bool { return true }

// Penalty modes, as the Lua twin's reply states them.
const (
	penaltyNone    = 0 // the inner decision stands
	penaltyBanned  = 1 // this denial starts a ban
	penaltyBan     = 2 // banned; the inner decision is its peek at n
	penaltyBanOpen = 3 // banned; the inner strategy would admit n
)

// stateOf is state as the penalty box's: s's own error first (an invalid
// box), ErrStateType for a state another strategy made.
func (s *penalized) stateOf(state State) (*penaltyState, error) {
	if s.err != nil {
		return nil, s.err
	}
	st, ok := state.(*penaltyState)
	if !ok || st.inner == nil {
		return nil, ErrStateType
	}
	return st, nil
}

// innerAs is stateOf with the inner strategy as R, the rule interface of
// an operation (Refunder, Leaser, Granter, Charger); an inner strategy that
// is not an R is an error wrapping errors.ErrUnsupported that says what it
// cannot do.
func innerAs[R any](s *penalized, state State, cannot string) (*penaltyState, R, error) {
	var r R
	st, err := s.stateOf(state)
	if err != nil {
		return nil, r, err
	}
	r, ok := s.inner.(R)
	if !ok {
		return nil, r, fmt.Errorf("penalty: %s cannot %s: %w", s.inner.Name(), cannot, errors.ErrUnsupported)
	}
	return st, r, nil
}

func (s *penalized) Decide(state State, now time.Time, n int64) (Decision, error) {
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	t := now.UnixMicro()
	st.within, st.maxBan = micros(s.p.Within), micros(s.p.MaxBan)
	peekInner := func(cost int64) (Decision, error) {
		return s.inner.Decide(st.inner.(Cloner).Clone(), now, cost)
	}
	if t < st.until {
		d, err := peekInner(n)
		if err != nil {
			return Decision{}, err
		}
		mode := int64(penaltyBan)
		if d.Allowed {
			if d, err = peekInner(s.inner.Limit() + 1); err != nil {
				return Decision{}, err
			}
			if c, ok := s.inner.(*all); ok {
				// Combined for this request, as the Lua twin's reply is.
				d = c.combine(d.Members(), n)
			}
			mode = penaltyBanOpen
		}
		return penaltyDecision(d, mode, st.until-t), nil
	}
	d, err := s.inner.Decide(st.inner, now, n)
	if err != nil || d.Allowed {
		return d, err
	}
	return s.count(st, t, d), nil
}

// count counts the inner strategy's denial d at t (µs), when the key is
// not banned, and returns the penalty's decision: d, or the denial that
// starts a ban.
func (s *penalized) count(st *penaltyState, t int64, d Decision) Decision {
	within, ban, maxBan := micros(s.p.Within), micros(s.p.Ban), micros(s.p.MaxBan)
	st.within, st.maxBan = within, maxBan
	strikes := st.strikes
	if strikes > 0 && t >= st.until && t-st.until >= maxBan {
		strikes = 0
	}
	denials, since, until := st.denials, st.since, st.until
	if since == 0 || t-since >= within {
		since, denials = t, 0
	}
	denials++
	mode, wait := int64(penaltyNone), int64(0)
	if denials >= s.p.After {
		b := ban
		for range strikes {
			if b >= maxBan {
				break
			}
			b *= 2
		}
		b = min(b, maxBan)
		until, strikes, denials, since = t+b, strikes+1, 0, 0
		mode, wait = penaltyBanned, b
	}
	st.denials, st.since, st.until, st.strikes = denials, since, until, strikes
	return penaltyDecision(d, mode, wait)
}

// Reply reads the Lua twin's reply: the penalty's four integers, then the
// inner script's.
func (s *penalized) Reply(ints []int64, n int64) (Decision, error) {
	if len(ints) < 8 {
		return Decision{}, fmt.Errorf("penalty: reply of %d integers", len(ints))
	}
	var d Decision
	if r, ok := s.inner.(Replier); ok {
		var err error
		if d, err = r.Reply(ints[4:], n); err != nil {
			return Decision{}, err
		}
	} else {
		if len(ints) != 8 {
			return Decision{}, fmt.Errorf("penalty: reply of %d integers", len(ints))
		}
		d = decisionOf(ints[4:8], s.inner.Limit())
	}
	return penaltyDecision(d, ints[0], ints[1]), nil
}

// penaltyDecision is the decision d of the inner strategy under the
// penalty's mode, with wait (µs) the ban's length or remaining time.
func penaltyDecision(d Decision, mode, wait int64) Decision {
	if mode == penaltyNone {
		return d
	}
	if mode == penaltyBanOpen {
		// The inner strategy would admit n: only the ban holds it up.
		d.RetryAfter = 0
		if d.members != nil {
			ms := append([]Decision(nil), *d.members...)
			for i := range ms {
				ms[i].RetryAfter = 0
			}
			d.members = &ms
		}
	}
	d.Allowed = false
	d.Remaining = 0
	d.ban = duration(wait)
	d.RetryAfter = max(d.RetryAfter, duration(wait))
	d.ResetAfter = max(d.ResetAfter, duration(wait))
	return d
}

// decisionOf reads the calling convention's four integers.
func decisionOf(v []int64, limit int64) Decision {
	return Decision{Allowed: v[0] == 1, Limit: limit, Remaining: v[1], RetryAfter: duration(v[2]), ResetAfter: duration(v[3])}
}

// Refund gives n back by the inner strategy's refund rule; the ban state
// is as it was (a refund lifts no ban and uncounts no denial).
func (s *penalized) Refund(state State, now time.Time, n int64) (Decision, error) {
	st, r, err := innerAs[Refunder](s, state, "refund")
	if err != nil {
		return Decision{}, err
	}
	return r.Refund(st.inner, now, n)
}

// Lease gives terms.Back back by the inner strategy's lease rule in any
// case (a ban lifts no charge), then, when terms.Want > 0: banned, takes
// nothing and returns Decide's ban denial of n; otherwise takes the inner
// strategy's lease, and a denied one counts toward a ban exactly as a
// denied decision does, unless it was taken ahead (terms.Ahead: no caller
// waits on it, so its denial is no request's, and the ban state is left as
// it was). Requests a lease then admits in process are admissions: they
// are never counted. An inner strategy that cannot lease
// makes it an error wrapping errors.ErrUnsupported, with nothing changed.
func (s *penalized) Lease(state State, now time.Time, n int64, terms LeaseTerms) (Grant, error) {
	st, l, err := innerAs[Leaser](s, state, "lease")
	if err != nil {
		return Grant{}, err
	}
	t := now.UnixMicro()
	if terms.Want == 0 || t < st.until {
		g, err := l.Lease(st.inner, now, 0, LeaseTerms{Back: terms.Back, BackAt: terms.BackAt})
		if err != nil || terms.Want == 0 {
			return g, err
		}
		d, err := s.Decide(st, now, n) // banned: reads, and writes nothing
		return Grant{Decision: d, At: t}, err
	}
	g, err := l.Lease(st.inner, now, n, terms)
	if err != nil || g.Units > 0 || terms.Ahead {
		return g, err
	}
	g.Decision = s.count(st, t, g.Decision)
	return g, nil
}

// LeaseReply reads the Lua twin's lease reply: the penalty's mode and
// wait, the units granted and the time judged at, then the inner script's
// decision (four integers, or four per member of a composite).
func (s *penalized) LeaseReply(ints []int64, n int64) (Grant, error) {
	if len(ints) < 8 {
		return Grant{}, fmt.Errorf("penalty: lease reply of %d integers", len(ints))
	}
	return leaseGrant(s, ints, ints[2], ints[3], n) // Reply reads only the mode and wait of the head
}
