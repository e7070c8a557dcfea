package httplimit_test

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// TestMiddlewareSettlesTheCost: with WithSettledCost a request reserves
// its estimate (WithCost: 10) before its handler and is charged the bytes
// its handler wrote once it has returned — more past the limit, up to the
// debt cap, less given back. The headers describe the key after the
// estimate; the trailers after the settle. On memory, miniredis and the
// real server.
func TestMiddlewareSettlesTheCost(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			obs := &spy.Observer{}
			lim, err := fleetlimit.New(algorithm.FixedWindow(100, time.Hour), st,
				fleetlimit.WithClock(fakeclock.New(proptest.Epoch).Now), fleetlimit.WithKeyPrefix(redistest.Prefix()),
				fleetlimit.WithTimeout(slowMachine), fleetlimit.WithObserver(obs))
			require.NoError(t, err)
			mw := httplimit.Middleware(lim, func(*http.Request) (string, error) { return "user", nil },
				httplimit.WithCost(func(*http.Request) (int64, error) { return 10, nil }),
				httplimit.WithSettledCost(httplimit.CostByBytesWritten(1)))
			ran := 0
			srv := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran++
				n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
				_, _ = io.WriteString(w, strings.Repeat("x", n))
			})))
			get := func(bytes int) *http.Response {
				t.Helper()
				resp, err := http.Get(srv.URL + "/?bytes=" + strconv.Itoa(bytes))
				require.NoError(t, err)
				_, err = io.ReadAll(resp.Body) // the trailers come after the body
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				return resp
			}
			remaining := func(resp *http.Response) (header, trailer string) {
				return resp.Header.Get(httplimit.HeaderRateLimitRemaining), resp.Trailer.Get(httplimit.HeaderRateLimitRemaining)
			}

			// 10 reserved, 30 written: 20 more charged.
			resp := get(30)
			h, tr := remaining(resp)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "90", h, "the header describes the key after the estimate")
			require.Equal(t, "70", tr, "the trailer describes the key after the settle")
			// 10 reserved, 3 written: 7 given back.
			resp = get(3)
			h, tr = remaining(resp)
			require.Equal(t, []string{"60", "67"}, []string{h, tr})
			// A runaway: 10 reserved (43 of 100 counted), 500 written. 490
			// more would be 433 past the limit; the debt cap (the limit,
			// 100) cuts 333.
			obs.Take()
			resp = get(500)
			h, tr = remaining(resp)
			require.Equal(t, []string{"57", "0"}, []string{h, tr})
			var cut int64
			for _, e := range obs.Take() {
				if e.Settle {
					cut = e.Cut
				}
			}
			require.Equal(t, int64(333), cut, "the cut is reported to the observer")
			// In debt: the next request is denied on its estimate, and its
			// handler does not run.
			resp = get(1)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			require.Equal(t, 3, ran)
			res, err := lim.Peek(bg, "user", 1)
			require.NoError(t, err)
			require.False(t, res.Allowed, "the window holds 200 of 100")
		})
	}
}

// TestSettledCostRefusals: WithSettledCost refuses a nil function and a
// concurrency limit.
func TestSettledCostRefusals(t *testing.T) {
	key := func(*http.Request) (string, error) { return "user", nil }
	lim, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), stores.Memory(t))
	require.NoError(t, err)
	_, err = httplimit.NewMiddleware(lim, key, httplimit.WithSettledCost(nil))
	require.True(t, errors.Is(err, fleetlimit.ErrInvalidConfig), "nil SettleFunc: %v", err)
	conc, err := fleetlimit.New(algorithm.Concurrency(2, time.Minute), stores.Memory(t))
	require.NoError(t, err)
	_, err = httplimit.NewMiddleware(conc, key, httplimit.WithSettledCost(httplimit.CostByBytesWritten(1)))
	require.True(t, errors.Is(err, fleetlimit.ErrInvalidConfig), "a concurrency limit: %v", err)
}
