package httplimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// A batch endpoint takes what fits: each client may submit 100 events per
// minute, and a batch larger than what is left is accepted in part — the
// handler asks Limiter.AllowAtMost for the batch's size, keeps the events
// granted and tells the client how many were taken, so that it resubmits
// only the rest. Nothing fits: 429 with Retry-After, as the middleware
// answers. (Middleware admits or denies a request whole; a partial grant
// is the handler's decision, since only it knows how to split the body.)
func Example_partialBatch() {
	mem := store.NewMemory() // stores.Redis(t, rdb) to share the limit across a fleet
	defer mem.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, _ := fleetlimit.New(algorithm.FixedWindow(100, time.Minute), mem,
		fleetlimit.WithName("events"), fleetlimit.WithClock(func() time.Time { return now }))

	ingest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var events []string
		if err := json.NewDecoder(r.Body).Decode(&events); err != nil || len(events) == 0 || len(events) > 100 {
			http.Error(w, "want a JSON list of 1 to 100 events", http.StatusBadRequest)
			return
		}
		granted, res, err := l.AllowAtMost(r.Context(), r.Header.Get("X-User"), int64(len(events)))
		if err != nil && granted == 0 {
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		if granted == 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((res.RetryAfter+time.Second-1)/time.Second)))
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		// ... store events[:granted] ...
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"accepted":%d,"remaining":%d}`, granted, res.Remaining)
	})

	for _, batch := range []int{60, 60, 10} {
		now = now.Add(10 * time.Second)
		body := "[" + strings.TrimSuffix(strings.Repeat(`"e",`, batch), ",") + "]"
		req := httptest.NewRequest(http.MethodPost, "/events", strings.NewReader(body))
		req.Header.Set("X-User", "alice")
		rec := httptest.NewRecorder()
		ingest.ServeHTTP(rec, req)
		fmt.Printf("%d events: %d %s Retry-After: %q\n", batch, rec.Code, strings.TrimSpace(rec.Body.String()), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 60 events: 202 {"accepted":60,"remaining":40} Retry-After: ""
	// 60 events: 202 {"accepted":40,"remaining":0} Retry-After: ""
	// 10 events: 429 rate limited Retry-After: "30"
}
