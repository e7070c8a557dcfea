package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Response header fields the middleware writes. net/http sends them in its
// canonical case (X-Ratelimit-Limit, Ratelimit-Policy); field names are
// case-insensitive.
const (
	HeaderRateLimitLimit     = "X-RateLimit-Limit"
	HeaderRateLimitRemaining = "X-RateLimit-Remaining"
	HeaderRateLimitReset     = "X-RateLimit-Reset"
	HeaderRetryAfter         = "Retry-After"
	// HeaderRateLimitPolicy and HeaderRateLimit are the fields of the IETF
	// draft draft-ietf-httpapi-ratelimit-headers-10, structured-field Lists
	// (RFC 8941/9651) of one Item each.
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
)

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is the Retry-After of a denial: whole seconds, rounded
// up, at least 1 (a denial is never "retry now").
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }

// headerValues are the parts of a limiter's headers that never change,
// built once per middleware.
type headerValues struct {
	limitN int64
	limit  string // X-RateLimit-Limit
	policy string // RateLimit-Policy: "name";q=100;w=60
	item   string // the start of RateLimit: "name";r=
	window string // the policy's ";w=60", or none
	// members are a composite's (algorithm.All), one per member, named
	// "name.member" (and ".i" after a member name that repeats); nil for a
	// single strategy.
	members []headerValues
}

// newLimiterHeaderValues builds the static header values of l: one policy
// for a single strategy, one per member for a composite.
func newLimiterHeaderValues(l *fleetlimit.Limiter) headerValues {
	s := l.Strategy()
	hv := newHeaderValues(l.Name(), s.Limit(), s.Window())
	c, ok := s.(algorithm.Composite)
	if !ok {
		return hv
	}
	seen := map[string]int{}
	for _, m := range c.Members() {
		seen[m.Name()]++
	}
	repeats := map[string]int{}
	for _, m := range c.Members() {
		name := l.Name() + "." + m.Name()
		if seen[m.Name()] > 1 {
			name += "." + strconv.Itoa(repeats[m.Name()])
			repeats[m.Name()]++
		}
		hv.members = append(hv.members, newHeaderValues(name, m.Limit(), m.Window()))
	}
	return hv
}

// newHeaderValues builds the static header values of a limiter named name
// with strategy limit and window. The window is given as w only when it is
// a whole number of seconds: the draft has no sub-second windows, and a
// rounded one would misstate the policy.
func newHeaderValues(name string, limit int64, window time.Duration) headerValues {
	item := sfString(name)
	var w string
	if window >= time.Second && window%time.Second == 0 {
		w = ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	}
	return headerValues{
		limitN: limit,
		limit:  strconv.FormatInt(limit, 10),
		policy: item + ";q=" + strconv.FormatInt(limit, 10) + w,
		item:   item + ";r=",
		window: w,
	}
}

// policyFor is the policy with quota limit: the static one, or for a key
// whose limit differs (fleetlimit.WithStrategyFor) one built for it.
func (hv *headerValues) policyFor(limit int64) string {
	if limit == hv.limitN {
		return hv.policy
	}
	return strings.TrimSuffix(hv.item, ";r=") + ";q=" + strconv.FormatInt(limit, 10) + hv.window
}

// limitFor is X-RateLimit-Limit for limit, as policyFor.
func (hv *headerValues) limitFor(limit int64) string {
	if limit == hv.limitN {
		return hv.limit
	}
	return strconv.FormatInt(limit, 10)
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

// setLimitHeaders writes the headers of a decision the store made.
//
// RateLimit's t is the time until more quota is available, as the draft
// defines it, chosen so that it never contradicts the other fields: on an
// admission it is X-RateLimit-Reset (by then all of the quota is back); on a
// denial that a retry can pass (retry) it is Retry-After (by then this
// request would pass), because the draft says Retry-After should not point
// earlier than t. A denial no retry can pass gets no Retry-After, and t is
// X-RateLimit-Reset.
//
// Stacked middlewares (a global limiter around a per-user one) each add
// their member to RateLimit-Policy and RateLimit, which the draft defines
// as lists; X-RateLimit-* hold one limit, so they keep the tightest: the one
// with the least Remaining.
//
// A composite limiter (algorithm.All) lists every member in
// RateLimit-Policy and reports its tightest member (Result.Limit and
// Remaining are that member's) in RateLimit and X-RateLimit-*.
func (hv *headerValues) setLimitHeaders(h http.Header, res fleetlimit.Result, draft, retry bool) {
	reset := ceilSeconds(res.ResetAfter)
	limit, item := hv.limitFor(res.Limit), hv.item
	if tight := hv.tightest(res); tight != nil {
		item = tight.item
	}
	if tighter(h, res.Remaining) {
		h.Set(HeaderRateLimitLimit, limit)
		h.Set(HeaderRateLimitRemaining, strconv.FormatInt(res.Remaining, 10))
		h.Set(HeaderRateLimitReset, strconv.FormatInt(reset, 10))
	}
	t := reset
	if !res.Allowed && retry {
		t = retryAfterSeconds(res.RetryAfter)
		h.Set(HeaderRetryAfter, strconv.FormatInt(t, 10))
	}
	if draft {
		hv.addPolicies(h, &res)
		h.Add(HeaderRateLimit, item+strconv.FormatInt(res.Remaining, 10)+";t="+strconv.FormatInt(t, 10))
	}
}

// addPolicies adds the limiter's policies (every member's, for a composite)
// to RateLimit-Policy, with the quotas of res (a key's own limits may
// differ from the limiter's), or the limiter's when res is nil.
func (hv *headerValues) addPolicies(h http.Header, res *fleetlimit.Result) {
	if len(hv.members) == 0 {
		if res == nil {
			h.Add(HeaderRateLimitPolicy, hv.policy)
		} else {
			h.Add(HeaderRateLimitPolicy, hv.policyFor(res.Limit))
		}
		return
	}
	var limits []fleetlimit.LimitResult
	if res != nil {
		limits = res.Limits()
	}
	for i, m := range hv.members {
		if len(limits) != len(hv.members) {
			h.Add(HeaderRateLimitPolicy, m.policy)
		} else {
			h.Add(HeaderRateLimitPolicy, m.policyFor(limits[i].Limit))
		}
	}
}

// tightest returns the header values of the member whose figures res
// reports (the first with its Limit and Remaining), or nil for a single
// strategy.
func (hv *headerValues) tightest(res fleetlimit.Result) *headerValues {
	limits := res.Limits()
	if len(hv.members) == 0 || len(limits) != len(hv.members) {
		return nil
	}
	for i, l := range limits {
		if l.Limit == res.Limit && l.Remaining == res.Remaining {
			return &hv.members[i]
		}
	}
	return nil
}

// tighter reports whether remaining is less than the X-RateLimit-Remaining
// an outer middleware already set, or none is set.
func tighter(h http.Header, remaining int64) bool {
	prev := h.Get(HeaderRateLimitRemaining)
	if prev == "" {
		return true
	}
	p, err := strconv.ParseInt(prev, 10, 64)
	return err != nil || remaining < p
}

// setDegradedHeaders writes the headers of a decision the store did not
// make: only what is known without it — the limit and the policy. Remaining,
// reset and the RateLimit field are omitted rather than guessed: the shared
// count is unknown, and a fallback's local count is not the client's quota.
func (hv *headerValues) setDegradedHeaders(h http.Header, draft bool) {
	if h.Get(HeaderRateLimitLimit) == "" {
		h.Set(HeaderRateLimitLimit, hv.limit)
	}
	if draft {
		hv.addPolicies(h, nil)
	}
}
