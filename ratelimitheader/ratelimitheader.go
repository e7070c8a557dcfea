package ratelimitheader

import (
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit"
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
	limit  string // the limit in decimal
	policy string // the RateLimit-Policy member: "name";q=100;w=60
	item   string // the start of the RateLimit member: "name";r=
}

// NewPolicy returns the fields of a limiter named name with strategy limit
// and window, e.g. NewPolicy(l.Name(), l.Strategy().Limit(),
// l.Strategy().Window()). The window is stated (w) only when it is a whole
// number of seconds: the draft has no sub-second windows, and a rounded one
// would misstate the policy.
func NewPolicy(name string, limit int64, window time.Duration) Policy {
	item := sfString(name)
	policy := item + ";q=" + strconv.FormatInt(limit, 10)
	if window >= time.Second && window%time.Second == 0 {
		policy += ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return Policy{
		limit:  strconv.FormatInt(limit, 10),
		policy: policy,
		item:   item + ";r=",
	}
}

// Limit is the limit in decimal, as X-RateLimit-Limit states it.
func (p Policy) Limit() string { return p.limit }

// String is the limiter's RateLimit-Policy member, e.g. "login";q=5;w=60:
// the name as an sf-string, the quota q and the window w in seconds.
func (p Policy) String() string { return p.policy }

// Fields are the values that one decision's fields state.
type Fields struct {
	// Remaining is the Result's Remaining: X-RateLimit-Remaining and
	// RateLimit's r.
	Remaining int64
	// Reset is Seconds(ResetAfter): X-RateLimit-Reset, the seconds until
	// the whole quota is back.
	Reset int64
	// RetryAfter is the Retry-After to send in seconds (at least 1), or 0
	// for none: the request was admitted, or it can never pass.
	RetryAfter int64
	// RateLimit is the limiter's RateLimit member, e.g. "login";r=4;t=60.
	RateLimit string
}

// Fields returns what the fields state for res, a decision the store made.
// canPass is false for a request that can never pass (its cost is above
// the limit): its denial gets no Retry-After, since waiting will not help.
//
// RateLimit's t is the time until more quota is available, as the draft
// defines it, chosen so that it never contradicts the other fields: on an
// admission (a shadow admission included: the request went through) it is
// Reset (by then all of the quota is back); on a denial that a retry can
// pass it is RetryAfter (by then this request would pass), because the
// draft says Retry-After should not point earlier than t; on a denial no
// retry can pass it is Reset.
func (p Policy) Fields(res fleetlimit.Result, canPass bool) Fields {
	f := Fields{Remaining: res.Remaining, Reset: Seconds(res.ResetAfter)}
	t := f.Reset
	if !res.Allowed && canPass {
		f.RetryAfter = RetryAfter(res.RetryAfter)
		t = f.RetryAfter
	}
	f.RateLimit = p.item + strconv.FormatInt(res.Remaining, 10) + ";t=" + strconv.FormatInt(t, 10)
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
