package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// TestMiddlewareHoldsAPermit: with a concurrency limit of 1, a request
// holds its permit while its handler runs — a second request meanwhile is
// 429 with Retry-After, the handler not run — and gives it back when the
// handler returns, and when it panics.
func TestMiddlewareHoldsAPermit(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			lim, err := fleetlimit.New(algorithm.Concurrency(1, time.Minute), st,
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
			if err != nil {
				t.Fatal(err)
			}
			var inner *httptest.ResponseRecorder
			mw := httplimit.Middleware(lim, httplimit.KeyConst("user"))
			serve := func() *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/export", nil))
				return rec
			}
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/nested": // a request while this one holds the slot
					inner = serve()
				case "/panic":
					panic(http.ErrAbortHandler)
				}
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/nested", nil))
			if rec.Code != http.StatusOK || inner == nil || inner.Code != http.StatusTooManyRequests || inner.Header().Get("Retry-After") == "" {
				t.Fatalf("outer %d, inner %+v: want 200 and, while it ran, 429 with Retry-After", rec.Code, inner)
			}
			if rec := serve(); rec.Code != http.StatusOK {
				t.Fatalf("after the handler returned: %d, want 200 (its permit given back)", rec.Code)
			}
			func() {
				defer func() {
					if p := recover(); !errors.Is(p.(error), http.ErrAbortHandler) {
						t.Fatalf("recovered %v", p)
					}
				}()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/panic", nil))
			}()
			if rec := serve(); rec.Code != http.StatusOK {
				t.Fatalf("after the handler panicked: %d, want 200 (its permit given back)", rec.Code)
			}
			if _, err := httplimit.NewMiddleware(lim, httplimit.KeyConst("user"), httplimit.WithCost(httplimit.CostByContentLength(1))); !errors.Is(err, fleetlimit.ErrInvalidConfig) {
				t.Errorf("WithCost on a concurrency limit: %v, want ErrInvalidConfig", err)
			}
		})
	}
}
