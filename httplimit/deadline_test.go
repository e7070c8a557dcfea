package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

// passedCtx is a context whose deadline has passed while its Err is still
// nil, as a context's is until its timer has run.
type passedCtx struct{ context.Context }

func (passedCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Microsecond), true }

// A request whose context's deadline has passed is answered 499 and its
// handler never runs, even before the context's Err says so.
func TestMiddlewareDeadlinePassed(t *testing.T) {
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), store.NewMemory(), fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ran := false
	h := httplimit.Middleware(l, httplimit.KeyConst("k"))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(passedCtx{context.Background()}))
	if rec.Code != httplimit.StatusClientClosedRequest || ran {
		t.Fatalf("status %d, handler ran %v; want %d and not run", rec.Code, ran, httplimit.StatusClientClosedRequest)
	}
}
