package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

// Rate-limit one endpoint by user: two requests per minute, then 429 with
// the headers that tell the client when to come back.
func ExampleMiddleware() {
	mem := store.NewMemory() // stores.Redis(t, rdb) to share the limit across a fleet
	defer mem.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, _ := fleetlimit.New(algorithm.SlidingWindowLog(2, time.Minute), mem,
		fleetlimit.WithName("reports"), fleetlimit.WithClock(func() time.Time { return now }))
	reports := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "report") })
	h := httplimit.Middleware(l, httplimit.KeyByHeader("X-User"))(reports)

	for i := range 3 {
		now = now.Add(10 * time.Second)
		req := httptest.NewRequest(http.MethodGet, "/reports", nil)
		req.Header.Set("X-User", "alice")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d: %d RateLimit: %s Retry-After: %q\n", i+1, rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 1: 200 RateLimit: "reports";r=1;t=60 Retry-After: ""
	// 2: 200 RateLimit: "reports";r=0;t=60 Retry-After: ""
	// 3: 429 RateLimit: "reports";r=0;t=40 Retry-After: "40"
}
