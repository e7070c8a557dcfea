package ratelimitheader

import (
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Seconds is d in whole seconds, rounded up; 0 for d <= 0. Clients read
// seconds, and a rounded-down wait would send them back too early.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfter is the Retry-After of a denial that waits d: Seconds(d), at
// least 1 (a denial is never "retry now").
func RetryAfter(d time.Duration) int64 { return max(1, Seconds(d)) }

// Policy holds the field values of one limiter that never change: built
// once per middleware or interceptor, safe for concurrent use.
type Policy struct {
	limitN int64
	limit  string // the limit in decimal
	policy string // the RateLimit-Policy member: "name";q=100;w=60
	item   string // the start of the RateLimit member: "name";r=
	window string // the member's ";w=60", or none
	// members are a composite limiter's (algorithm.All), one per member;
	// nil for a single strategy.
	members []Policy
}

// NewPolicy returns the fields of a limiter named name with strategy limit
// and window, e.g. NewPolicy(l.Name(), l.Strategy().Limit(),
// l.Strategy().Window()). The window is stated (w) only when it is a whole
// number of seconds: the draft has no sub-second windows, and a rounded one
// would misstate the policy.
func NewPolicy(name string, limit int64, window time.Duration) Policy {
	item := sfString(name)
	var w string
	if window >= time.Second && window%time.Second == 0 {
		w = ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return Policy{
		limitN: limit,
		limit:  strconv.FormatInt(limit, 10),
		policy: item + ";q=" + strconv.FormatInt(limit, 10) + w,
		item:   item + ";r=",
		window: w,
	}
}

// ForLimiter returns the fields of l: NewPolicy of its name, limit and
// window, and for a composite (algorithm.All) one policy per member, named
// "name.member" (with ".i", counting from 0, when a member's algorithm
// repeats), so that RateLimit-Policy lists every member and RateLimit names
// the tightest.
func ForLimiter(l *fleetlimit.Limiter) Policy {
	s := l.Strategy()
	p := NewPolicy(l.Name(), s.Limit(), s.Window())
	c, ok := s.(algorithm.Composite)
	if !ok {
		return p
	}
	count := map[string]int{}
	for _, m := range c.Members() {
		count[m.Name()]++
	}
	seen := map[string]int{}
	for _, m := range c.Members() {
		name := l.Name() + "." + m.Name()
		if count[m.Name()] > 1 {
			name += "." + strconv.Itoa(seen[m.Name()])
			seen[m.Name()]++
		}
		p.members = append(p.members, NewPolicy(name, m.Limit(), m.Window()))
	}
	return p
}

// Limit is the limiter's limit in decimal, as X-RateLimit-Limit states it
// when no decision says otherwise.
func (p Policy) Limit() string { return p.limit }

// String is the limiter's RateLimit-Policy value, e.g. "login";q=5;w=60:
// the name as an sf-string, the quota q and the window w in seconds; for a
// composite every member's, as a list.
func (p Policy) String() string { return p.policyFor(nil) }

// policyFor is the RateLimit-Policy value with the quotas of res (a key's
// own limits may differ from the limiter's: fleetlimit.WithStrategyFor),
// or the limiter's when res is nil.
func (p Policy) policyFor(res *fleetlimit.Result) string {
	if len(p.members) == 0 {
		if res == nil {
			return p.policy
		}
		return p.withQuota(res.Limit)
	}
	var limits []fleetlimit.LimitResult
	if res != nil {
		limits = res.Limits()
	}
	var b strings.Builder
	for i, m := range p.members {
		if i > 0 {
			b.WriteString(", ")
		}
		if len(limits) == len(p.members) {
			b.WriteString(m.withQuota(limits[i].Limit))
		} else {
			b.WriteString(m.policy)
		}
	}
	return b.String()
}

// withQuota is the policy member with quota q.
func (p Policy) withQuota(q int64) string {
	if q == p.limitN {
		return p.policy
	}
	return strings.TrimSuffix(p.item, ";r=") + ";q=" + strconv.FormatInt(q, 10) + p.window
}

// tightest returns the member whose figures res reports (the first with
// its Limit and Remaining) and that member's own ResetAfter, or p itself
// and res's ResetAfter for a single strategy. A composite's ResetAfter is
// its slowest member's; the tightest member's item must carry its own.
func (p Policy) tightest(res fleetlimit.Result) (Policy, time.Duration) {
	limits := res.Limits()
	if len(p.members) == 0 || len(limits) != len(p.members) {
		return p, res.ResetAfter
	}
	for i, l := range limits {
		if l.Limit == res.Limit && l.Remaining == res.Remaining {
			return p.members[i], l.ResetAfter
		}
	}
	return p, res.ResetAfter
}

// Fields are the values that one decision's fields state.
type Fields struct {
	// Limit is the limit in decimal, as X-RateLimit-Limit states it: the
	// Result's (the tightest member's, for a composite).
	Limit string
	// Remaining is the Result's Remaining: X-RateLimit-Remaining and
	// RateLimit's r.
	Remaining int64
	// Reset is Seconds(ResetAfter): X-RateLimit-Reset, the seconds until
	// the whole quota is back (for a composite, every member's).
	Reset int64
	// RetryAfter is the Retry-After to send in seconds (at least 1), or 0
	// for none: the request was admitted, or it can never pass.
	RetryAfter int64
	// Policy is the RateLimit-Policy value, with the quotas that applied
	// to this key; for a composite every member's, as a list.
	Policy string
	// RateLimit is the limiter's RateLimit member, e.g. "login";r=4;t=60;
	// for a composite the tightest member's, with that member's reset.
	RateLimit string
}

// Fields returns what the fields state for res, a decision the store made.
// canPass is false for a request that can never pass (its cost is above
// the limit): its denial gets no Retry-After, since waiting will not help.
//
// RateLimit's t is the time until more quota is available, as the draft
// defines it, chosen so that it never contradicts the other fields: on an
// admission (a shadow admission included: the request went through) it is
// the reset of the limit the item names (by then all of its quota is
// back); on a denial that a retry can pass it is RetryAfter (by then this
// request would pass), because the draft says Retry-After should not point
// earlier than t; on a denial no retry can pass it is the named limit's
// reset. For a composite the item names the tightest member and its reset
// is that member's own (LimitResult.ResetAfter), not the composite's
// ResetAfter, which is its slowest member's: a 10-per-second bucket beside
// a daily quota resets in a second, not a day.
func (p Policy) Fields(res fleetlimit.Result, canPass bool) Fields {
	tight, reset := p.tightest(res)
	f := Fields{Remaining: res.Remaining, Reset: Seconds(res.ResetAfter), Policy: p.policyFor(&res)}
	if res.Limit == p.limitN {
		f.Limit = p.limit
	} else {
		f.Limit = strconv.FormatInt(res.Limit, 10)
	}
	t := Seconds(reset)
	if !res.Allowed && canPass {
		f.RetryAfter = RetryAfter(res.RetryAfter)
		t = f.RetryAfter
	}
	f.RateLimit = tight.item + strconv.FormatInt(res.Remaining, 10) + ";t=" + strconv.FormatInt(t, 10)
	return f
}

// sfString serializes s as an RFC 8941 sf-string: in double quotes, with '"'
// and '\' escaped. Bytes outside printable ASCII, which an sf-string cannot
// hold, become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
