package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

// A sliding log admits at most algorithm.MaxLogCost in one request, under
// any limit: a cost above it but within the limit can never pass, and is
// answered 413 without Retry-After, not 429 "retry in 60 seconds" — for
// the limiter's own strategy and for a key's tier above the limiter's
// limit. A cost at the cap is admitted.
func TestMiddlewareAboveMaxLogCost(t *testing.T) {
	big := algorithm.SlidingWindowLog(20_000, time.Minute)
	premium := fleetlimit.WithStrategyFor(func(_ context.Context, key string) (algorithm.Strategy, error) {
		if key == "premium" {
			return big, nil
		}
		return nil, nil
	})
	cost := httplimit.WithCost(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	})
	for name, c := range map[string]struct {
		s    algorithm.Strategy
		opts []fleetlimit.Option
		key  string
	}{
		"the limiter's": {s: big, key: "k"},
		"a key's tier":  {s: algorithm.SlidingWindowLog(100, time.Minute), opts: []fleetlimit.Option{premium}, key: "premium"},
	} {
		t.Run(name, func(t *testing.T) {
			mem := store.NewMemory()
			defer mem.Close()
			l, err := fleetlimit.New(c.s, mem, c.opts...)
			require.NoError(t, err)
			defer l.Close()
			h := httplimit.Middleware(l, httplimit.KeyConst(c.key), cost)(okHandler)
			call := func(n int64) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?n="+strconv.FormatInt(n, 10), nil))
				return rec
			}
			rec := call(algorithm.MaxLogCost + 1)
			require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, "10,001 can never pass a sliding log: %s", rec.Body)
			require.Empty(t, rec.Header().Get("Retry-After"), "waiting will not help")
			require.Contains(t, rec.Body.String(), "request cost 10001 exceeds 10000, the most the limit 20000 admits at once")
			require.Equal(t, "20000", rec.Header().Get("X-RateLimit-Remaining"), "nothing was charged")
			require.Equal(t, http.StatusOK, call(algorithm.MaxLogCost).Code, "10,000 passes")
		})
	}
}
