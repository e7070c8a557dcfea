package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/ratelimitheader"
	"github.com/fleetlimit/fleetlimit/store"
)

// Middleware returns net/http middleware that charges every request to the
// client key names, through l, before the next handler runs. When l's
// strategy is a concurrency limit (algorithm.Concurrency), each request
// instead holds a permit (Limiter.Acquire) for the next handler's whole
// run, given back when it returns or panics; a denial is the same 429
// with Retry-After (the time until the earliest held permit expires, an
// upper bound), and WithCost is refused. Per-endpoint
// limits are plain code: wrap each handler with its own limiter.
//
//	login := Middleware(loginLimiter, clientIP)
//	mux.Handle("POST /login", login(loginHandler))
//
// Responses:
//   - admitted: the next handler runs, with X-RateLimit-Limit,
//     X-RateLimit-Remaining, X-RateLimit-Reset (whole seconds until the quota
//     is full again, rounded up) and, unless WithDraftHeaders(false), the IETF
//     draft fields RateLimit-Policy ("name";q=100;w=60) and RateLimit
//     ("name";r=42;t=18) already set;
//   - denied: 429 Too Many Requests with the same headers and Retry-After
//     (whole seconds, rounded up, at least 1);
//   - a shadow admission (fleetlimit.WithShadow): the next handler runs;
//     a shadow limiter sends no rate-limit headers unless
//     WithShadowHeaders(true);
//   - cost above the limit, or above algorithm.MaxLogCost for a sliding
//     log (algorithm.MaxCost of the key's strategy; WithCost): 413 Content
//     Too Large, no Retry-After: waiting will not help;
//   - store unavailable: the decision is degraded (see Limiter.AllowN). If
//     it admits (FailOpen, or the fallback), the next handler runs; if it
//     denies (FailClosed, or the fallback), 503 Service Unavailable with
//     Retry-After, not 429: the client did nothing wrong. Either way only
//     X-RateLimit-Limit and RateLimit-Policy are sent: the remaining quota
//     is unknown and is omitted rather than invented;
//   - the client is gone (the request's context is done: the client
//     closed or half-closed its connection, or a deadline set on the
//     request passed): StatusClientClosedRequest (499), the handler does
//     not run. The status is nginx's for the same case; it keeps such
//     requests out of both the 2xx and the 5xx counts;
//   - the key cannot be found (a KeyFunc error, or an empty key): 400 Bad
//     Request by default, because an unidentified request let through
//     unlimited would be a way around the limit; WithKeyErrorPassThrough
//     lets it through instead, without headers. A key longer than
//     store.MaxKeyLen is not an error: it is limited under its SHA-256
//     ("sha256:" and 43 base64url characters), so that a client cannot pad
//     its key past the limit;
//   - the cost cannot be found (a CostFunc error): 400 Bad Request, or 411
//     Length Required for CostByContentLength without a length.
//
// Each request waits at most the limiter's timeout for the decision. The
// bodies of the responses the middleware writes itself are small plain text
// by default; WithDenialWriter(ProblemDetailsDenial) makes them RFC 9457
// problem details.
//
// Middleware panics, when it is called, if l or key is nil or an option is
// invalid: a programming mistake found at start-up, as http.Handle does for a
// bad pattern, rather than a 500 naming the mistake to every client. Use
// NewMiddleware to get the error instead (for configuration read at run
// time).
func Middleware(l *fleetlimit.Limiter, key KeyFunc, opts ...Option) func(http.Handler) http.Handler {
	mw, err := NewMiddleware(l, key, opts...)
	if err != nil {
		panic(err)
	}
	return mw
}

// NewMiddleware is Middleware returning an error wrapping fleetlimit.ErrInvalidConfig
// for a nil limiter or KeyFunc or an invalid option.
func NewMiddleware(l *fleetlimit.Limiter, key KeyFunc, opts ...Option) (func(http.Handler) http.Handler, error) {
	m := &middleware{
		l:     l,
		key:   key,
		draft: true,
		deny:  PlainTextDenial,
	}
	errs := ratelimitheader.Apply(m, opts, Option.apply)
	var err error
	m.adapter, err = ratelimitheader.NewAdapter(ratelimitheader.AdapterConfig{Name: "httplimit", Unit: "request", Limiter: l, HasKey: key != nil,
		ShadowHeaders: m.shadowHeaders, HasCost: m.cost != nil, HasSettledCost: m.settle != nil, Errs: errs})
	if err != nil {
		return nil, err
	}
	return m.wrap, nil
}

// Option configures Middleware.
type Option interface {
	apply(m *middleware, errs *[]error)
}

type option func(*middleware, *[]error)

func (f option) apply(m *middleware, errs *[]error) { f(m, errs) }

// WithRoute names the route in the events the limiter's Observer receives
// (Event.Route). Default: the ServeMux pattern that matched the request.
func WithRoute(route string) Option {
	return option(func(m *middleware, _ *[]error) { m.route = route })
}

// WithKeyErrorPassThrough lets a request whose key cannot be found through
// to the next handler, unlimited and without rate-limit headers, instead of
// answering 400 Bad Request (the default). Use it only where every client
// can be identified in practice, or where unidentified traffic is limited
// elsewhere: otherwise leaving the key out is a way around the limit.
func WithKeyErrorPassThrough() Option {
	return option(func(m *middleware, _ *[]error) { m.passOnKeyError = true })
}

// WithShadowHeaders sends the rate-limit headers of a shadow limiter
// (fleetlimit.WithShadow) as if it enforced its limit, without Retry-After:
// its requests are all let through, a shadow admission as an admission with
// the denial's Remaining and Reset. Default: off, so that clients are not
// told of a limit that is not in force. Limiters that are not in shadow
// mode always send headers.
func WithShadowHeaders(on bool) Option {
	return option(func(m *middleware, _ *[]error) { m.shadowHeaders = on })
}

// WithDraftHeaders turns the IETF draft fields RateLimit-Policy and RateLimit
// on or off. Default: on.
func WithDraftHeaders(on bool) Option {
	return option(func(m *middleware, _ *[]error) { m.draft = on })
}

// CostFunc says how much a request costs: AllowN's n. It must return at
// least 1; an error answers 400 Bad Request (411 Length Required when it
// wraps ErrLengthRequired).
type CostFunc func(*http.Request) (int64, error)

// WithCost charges each request cost(r) instead of 1, e.g. its payload size
// with CostByContentLength. A request costing more than the limit (or than
// algorithm.MaxLogCost, for a sliding log: algorithm.MaxCost of the key's
// strategy), which can never pass, is answered 413 Content Too Large; a cost below 1 is the cost function's bug and is
// answered 500 Internal Server Error.
func WithCost(cost CostFunc) Option {
	return option(func(m *middleware, errs *[]error) {
		if cost == nil {
			*errs = append(*errs, errors.New("nil CostFunc"))
		}
		m.cost = cost
	})
}

// ErrLengthRequired is returned by CostByContentLength for a request whose
// length is unknown (a chunked body).
var ErrLengthRequired = errors.New("httplimit: request length required")

// CostByContentLength charges a request one unit per unit bytes of its body,
// rounded up, and at least 1 (a request without a body costs 1). A body of
// unknown length (chunked) is ErrLengthRequired, answered 411 Length
// Required: the request cannot be charged before it is read. unit must be >=
// 1; smaller values count as 1.
func CostByContentLength(unit int64) CostFunc {
	unit = max(1, unit)
	return func(r *http.Request) (int64, error) {
		if r.ContentLength < 0 {
			return 0, ErrLengthRequired
		}
		return max(1, r.ContentLength/unit+min(1, r.ContentLength%unit)), nil
	}
}

// WithDenialWriter sets how the middleware writes the responses it answers
// itself (429, 503, 499, 400, 411, 413, 500): every header but Content-Type is
// already set when it is called, and it must write the status d.Status.
// Default: PlainTextDenial.
func WithDenialWriter(f DenialWriter) Option {
	return option(func(m *middleware, errs *[]error) {
		if f == nil {
			*errs = append(*errs, errors.New("nil DenialWriter"))
		}
		m.deny = f
	})
}

// StatusClientClosedRequest is the status Middleware writes when the client
// went away before the decision was made (nginx's 499 Client Closed
// Request): the request is not admitted and the handler does not run.
const StatusClientClosedRequest = 499

// Denial is a response the middleware answers itself.
type Denial struct {
	// Status is the HTTP status code to write: 429, 503, 499, 400, 411,
	// 413 or 500.
	Status int
	// Name is the limiter's name, as in the RateLimit-Policy field.
	Name string
	// Detail is a one-line explanation for the client, e.g. "rate limit
	// exceeded: retry in 3 seconds".
	Detail string
	// Result is the limiter's decision (zero when no decision was made).
	Result fleetlimit.Result
	// Err is the error behind a 503, 499, 400, 411 or 500; nil for 429 and
	// 413.
	Err error
}

// DenialWriter writes a Denial's status and body.
type DenialWriter func(w http.ResponseWriter, r *http.Request, d Denial)

// PlainTextDenial writes d.Detail as a text/plain body: the default.
func PlainTextDenial(w http.ResponseWriter, _ *http.Request, d Denial) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	_, _ = fmt.Fprintln(w, d.Detail)
}

// Problem types of draft-ietf-httpapi-ratelimit-headers-10, section 5.
const (
	ProblemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// ProblemDetailsDenial writes an RFC 9457 problem details body
// (application/problem+json). A 429 has the draft's quota-exceeded type and a
// 503 its temporary-reduced-capacity type, each with the draft's
// violated-policies member naming the limiter; other statuses are
// about:blank.
func ProblemDetailsDenial(w http.ResponseWriter, _ *http.Request, d Denial) {
	p := struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail,omitempty"`
		Violated []string `json:"violated-policies,omitempty"`
	}{Type: "about:blank", Title: statusText(d.Status), Status: d.Status, Detail: d.Detail}
	switch d.Status {
	case http.StatusTooManyRequests:
		p.Type, p.Violated = ProblemQuotaExceeded, []string{d.Name}
	case http.StatusServiceUnavailable:
		p.Type, p.Violated = ProblemTemporaryReducedCapacity, []string{d.Name}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(d.Status)
	_ = json.NewEncoder(w).Encode(p)
}

type middleware struct {
	l              *fleetlimit.Limiter
	key            KeyFunc
	cost           CostFunc
	route          string
	passOnKeyError bool
	draft          bool
	shadowHeaders  bool // WithShadowHeaders
	deny           DenialWriter
	settle         SettleFunc // WithSettledCost: Reserve, and settle once the handler returns (settle.go)
	// adapter is what NewMiddleware derived from l: its policy, whether to
	// send rate-limit headers (Headers: not a shadow limiter, or
	// shadowHeaders), and whether l is a concurrency limit (Holds:
	// Acquire, and hold the permit while the handler runs).
	adapter ratelimitheader.Adapter
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	key, err := m.key(r)
	if err != nil {
		m.keyError(next, w, r, err)
		return
	}
	if len(key) > store.MaxKeyLen {
		key = hashedKey(key)
	}
	n := int64(1)
	if m.cost != nil {
		if n, err = m.cost(r); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, ErrLengthRequired) {
				status = http.StatusLengthRequired
			}
			m.deny(w, r, Denial{Status: status, Name: m.l.Name(), Err: err, Detail: err.Error()})
			return
		}
	}
	route := m.route
	if route == "" {
		route = r.Pattern
	}
	// A concurrency limit holds a permit for the handler's whole run.
	// Otherwise a cost beyond what AllowN accepts cannot pass any limit
	// either: charge the most it accepts, so that the answer is a 413, not
	// a 500.
	var res fleetlimit.Result
	switch {
	case m.adapter.Holds:
		var permit fleetlimit.Permit
		permit, res, err = m.l.Acquire(fleetlimit.ContextWithRoute(r.Context(), route), key)
		defer m.release(permit, r) // after the handler returns or panics
	case m.settle != nil:
		var rv fleetlimit.Reservation
		rv, res, err = m.l.Reserve(fleetlimit.ContextWithRoute(r.Context(), route), key, min(n, algorithm.MaxInt))
		next = m.settled(next, rv, err == nil)
	default:
		res, err = m.l.AllowN(fleetlimit.ContextWithRoute(r.Context(), route), key, min(n, algorithm.MaxInt))
	}
	gone := ctxdone.Err(r.Context())
	switch {
	case gone != nil:
		// The client went away (or half-closed its connection, or its
		// context's deadline passed): it is never admitted, and the handler
		// never runs. Without a status written here net/http would answer an
		// implicit 200.
		if cause := context.Cause(r.Context()); cause != nil {
			gone = cause
		}
		m.deny(w, r, Denial{Status: StatusClientClosedRequest, Name: m.l.Name(), Result: res, Err: gone,
			Detail: "client closed request"})
	case err == nil:
		// A request costing more than the key's strategy ever admits at once
		// (its limit; at most algorithm.MaxLogCost for a sliding log) can
		// never pass: its headers describe the quota alone, with no
		// Retry-After to invite a retry.
		most := m.adapter.MaxCost(res)
		never := !res.Allowed && n > most
		if m.adapter.Headers {
			m.setLimitHeaders(w.Header(), res, !never)
		}
		switch {
		case res.Allowed:
			next.ServeHTTP(w, r)
		case never:
			m.deny(w, r, Denial{Status: http.StatusRequestEntityTooLarge, Name: m.l.Name(), Result: res,
				Detail: exceeds("request", n, most, res.Limit)})
		default:
			secs := ratelimitheader.RetryAfter(res.RetryAfter)
			m.deny(w, r, Denial{Status: http.StatusTooManyRequests, Name: m.l.Name(), Result: res,
				Detail: "rate limit exceeded: retry in " + plural(secs, "second")})
		}
	case errors.Is(err, fleetlimit.ErrInvalidKey):
		m.keyError(next, w, r, err)
	case errors.Is(err, fleetlimit.ErrInvalidCost), errors.Is(err, fleetlimit.ErrClockOutOfRange):
		m.deny(w, r, Denial{Status: http.StatusInternalServerError, Name: m.l.Name(), Err: err,
			Detail: "rate limiter misconfigured"})
	default:
		// Degraded: the store did not decide (or the client went away).
		if m.adapter.Headers {
			m.setDegradedHeaders(w.Header())
		}
		if res.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		secs := ratelimitheader.RetryAfter(res.RetryAfter)
		w.Header().Set(HeaderRetryAfter, strconv.FormatInt(secs, 10))
		m.deny(w, r, Denial{Status: http.StatusServiceUnavailable, Name: m.l.Name(), Result: res, Err: err,
			Detail: "rate limiter unavailable: retry in " + plural(secs, "second")})
	}
}

// release gives back the permit a concurrency limit's request held, when
// its handler has returned or panicked, even if the client has gone: the
// request's context without its cancellation. A release that cannot reach
// the store is retried within the limiter's timeout and otherwise left to
// the permit's ttl (see fleetlimit.Permit.Release); the response is
// already written, so there is no one to tell.
func (m *middleware) release(p fleetlimit.Permit, r *http.Request) {
	_ = p.Release(context.WithoutCancel(r.Context()))
}

// hashedKey is the key under which a key longer than store.MaxKeyLen is
// limited: "sha256:" and the digest in unpadded base64url.
func hashedKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// keyError answers a request whose client cannot be identified.
func (m *middleware) keyError(next http.Handler, w http.ResponseWriter, r *http.Request, err error) {
	if m.passOnKeyError {
		next.ServeHTTP(w, r)
		return
	}
	m.deny(w, r, Denial{Status: http.StatusBadRequest, Name: m.l.Name(), Err: err, Detail: err.Error()})
}

// statusText is http.StatusText, knowing StatusClientClosedRequest too.
func statusText(status int) string {
	if status == StatusClientClosedRequest {
		return "Client Closed Request"
	}
	return http.StatusText(status)
}

// exceeds is the detail of a request (or call) of cost n that can never
// pass: above the limit, or above most, the most the limit admits in one
// request (a sliding log's algorithm.MaxLogCost).
func exceeds(unit string, n, most, limit int64) string {
	if most < limit {
		return fmt.Sprintf("%s cost %d exceeds %d, the most the limit %d admits at once", unit, n, most, limit)
	}
	return fmt.Sprintf("%s cost %d exceeds the limit %d", unit, n, limit)
}

// plural is "1 second", "3 seconds".
func plural(n int64, unit string) string {
	s := strconv.FormatInt(n, 10) + " " + unit
	if n != 1 {
		s += "s"
	}
	return s
}
