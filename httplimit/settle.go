package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/fleetlimit/fleetlimit"
)

// SettleFunc says what a request really cost, once its handler has
// returned (or panicked): from the request, the status the handler wrote
// (200 when it wrote none), the response's header as the handler left it
// (a usage header it set, say), and the bytes of body it wrote. It must
// return at least 0; a negative cost is the function's bug, and the
// estimate then stands.
type SettleFunc func(r *http.Request, status int, header http.Header, written int64) int64

// WithSettledCost charges each request a cost known only after its
// handler: the middleware reserves the estimate before the handler runs
// (fleetlimit.Limiter.Reserve, of 1 or WithCost's cost) and, once the
// handler has returned, settles the reservation at settle's cost
// (Reservation.Settle): more is charged past the limit, up to the
// limiter's debt cap (fleetlimit.WithMaxDebt), less is given back. A
// request is admitted or denied on its estimate, with the same responses
// as without this option. CostByBytesWritten charges the response's body.
//
// The rate-limit headers go out with the response's header, before its
// cost is known: X-RateLimit-*, RateLimit and RateLimit-Policy describe
// the key after the estimate was charged. Once settled, the key's
// X-RateLimit-Remaining and X-RateLimit-Reset are sent again as HTTP
// trailers (declared in the Trailer header field before the handler runs,
// so an HTTP/1.1 body is sent chunked; a handler that sets Content-Length
// itself sends none), or in the header when the handler wrote nothing.
// The trailers are the settled figures when the settle is made, and absent
// otherwise. A reservation the store
// did not make (a degraded decision) and a settle that fails (the store
// unreachable for the limiter's timeout) send no trailers: the quota is
// unknown, and is omitted rather than invented. A failed settle leaves the
// estimate charged, and the limiter's Observer is told.
//
// The settle runs with the request's context without its cancellation: a
// client that hangs up after its handler ran still pays. A concurrency
// limit (whose request holds a permit, not a cost) refuses this option.
func WithSettledCost(settle SettleFunc) Option {
	return option(func(m *middleware, errs *[]error) {
		if settle == nil {
			*errs = append(*errs, errors.New("nil SettleFunc"))
		}
		m.settle = settle
	})
}

// CostByBytesWritten charges a request one unit per unit bytes of the
// response body its handler wrote, rounded up, and at least 1. unit must
// be >= 1; smaller values count as 1.
func CostByBytesWritten(unit int64) SettleFunc {
	unit = max(1, unit)
	return func(_ *http.Request, _ int, _ http.Header, written int64) int64 {
		return max(1, written/unit+min(1, written%unit))
	}
}

// settled is next, whose request reserved rv: it counts what next writes
// and, once next has returned or panicked, settles rv at m.settle's cost
// and, when the store made the reservation (exact) and headers are sent,
// sends the key's standing as trailers.
func (m *middleware) settled(next http.Handler, rv fleetlimit.Reservation, exact bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		trail := exact && m.adapter.Headers
		if trail {
			// Declared before the handler writes, so that net/http sends
			// the body chunked, with trailers.
			w.Header().Add("Trailer", HeaderRateLimitRemaining)
			w.Header().Add("Trailer", HeaderRateLimitReset)
		}
		defer func() {
			actual := m.settle(r, cw.status, w.Header(), cw.written)
			if actual < 0 {
				actual = rv.Estimate()
			}
			res, err := rv.Settle(context.WithoutCancel(r.Context()), actual)
			if !trail {
				return
			}
			// The header is sent by now (unless the handler wrote
			// nothing, and then it carries the settled figures): these
			// values go out as the declared trailers.
			h := w.Header()
			if err != nil {
				h.Del(HeaderRateLimitRemaining)
				h.Del(HeaderRateLimitReset)
				return
			}
			f := m.adapter.Policy.Fields(res, true)
			h.Set(HeaderRateLimitRemaining, strconv.FormatInt(f.Remaining, 10))
			h.Set(HeaderRateLimitReset, strconv.FormatInt(f.Reset, 10))
		}()
		next.ServeHTTP(cw, r)
	})
}

// countingWriter counts the status and body bytes a handler writes. It
// unwraps (http.ResponseController) to the writer it wraps, and flushes.
type countingWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	written     int64
}

func (w *countingWriter) WriteHeader(status int) {
	if !w.wroteHeader && status >= 200 {
		w.status, w.wroteHeader = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

// Flush flushes the writer it wraps, if it can.
func (w *countingWriter) Flush() {
	w.wroteHeader = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the writer it wraps, for http.ResponseController.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
