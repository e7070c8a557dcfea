package httplimit

import (
	"net/http"
	"strconv"

	"github.com/fleetlimit/fleetlimit"
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

// setLimitHeaders writes the headers of a decision the store made;
// canPass is false for a request that can never pass (see
// ratelimitheader.Policy.Fields, which says how RateLimit's t is chosen).
//
// Stacked middlewares (a global limiter around a per-user one) each add
// their member to RateLimit-Policy and RateLimit, which the draft defines
// as lists; X-RateLimit-* hold one limit, so they keep the tightest: the one
// with the least Remaining. A composite limiter (algorithm.All) lists
// every member in RateLimit-Policy and reports its tightest member in
// RateLimit, with that member's own reset as t, and X-RateLimit-*
// (Result.Limit and Remaining are that member's; X-RateLimit-Reset is when
// every member is full again).
func (m *middleware) setLimitHeaders(h http.Header, res fleetlimit.Result, canPass bool) {
	f := m.adapter.Policy.Fields(res, canPass)
	if tighter(h, f.Remaining) {
		h.Set(HeaderRateLimitLimit, f.Limit)
		h.Set(HeaderRateLimitRemaining, strconv.FormatInt(f.Remaining, 10))
		h.Set(HeaderRateLimitReset, strconv.FormatInt(f.Reset, 10))
	}
	if f.RetryAfter > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(f.RetryAfter, 10))
	}
	if m.draft {
		h.Add(HeaderRateLimitPolicy, f.Policy)
		h.Add(HeaderRateLimit, f.RateLimit)
	}
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
func (m *middleware) setDegradedHeaders(h http.Header) {
	if h.Get(HeaderRateLimitLimit) == "" {
		h.Set(HeaderRateLimitLimit, m.adapter.Policy.Limit())
	}
	if m.draft {
		h.Add(HeaderRateLimitPolicy, m.adapter.Policy.String())
	}
}
