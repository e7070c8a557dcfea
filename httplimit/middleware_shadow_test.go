package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// A shadow limiter never answers 429 (nor 413, nor 503 when its store is
// down under FailClosed): the handler runs for every request. By default no
// rate-limit header is sent; WithShadowHeaders(true) sends them as the
// limiter decided, with no Retry-After.
func TestMiddlewareShadow(t *testing.T) {
	for storeName, st := range stores.All(t) {
		for _, headers := range []bool{false, true} {
			l, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), st, fleetlimit.WithName("search"), fleetlimit.WithShadow(),
				fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(15*time.Second))),
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
			require.NoError(t, err)
			var opts []httplimit.Option
			if headers {
				opts = append(opts, httplimit.WithShadowHeaders(true))
			}
			srv := serve(t, httplimit.Middleware(l, httplimit.KeyConst("client"), opts...)(okHandler))
			want := []rateHeaders{
				{"2", "1", "45", "", `"search";q=2;w=60`, `"search";r=1;t=45`},
				{"2", "0", "45", "", `"search";q=2;w=60`, `"search";r=0;t=45`},
				// The shadow admission: the denial's quota, and no
				// Retry-After, since the request went through.
				{"2", "0", "45", "", `"search";q=2;w=60`, `"search";r=0;t=45`},
			}
			for i, w := range want {
				resp := get(t, srv)
				require.Equal(t, http.StatusOK, resp.status, "%s request %d", storeName, i)
				require.Equal(t, "ok", resp.body)
				if !headers {
					w = rateHeaders{}
				}
				require.Equal(t, w, rateHeadersOf(resp.header), "%s headers=%v request %d", storeName, headers, i)
			}
		}
	}

	l, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), stores.Down(t), fleetlimit.WithShadow(),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	require.NoError(t, err)
	srv := serve(t, httplimit.Middleware(l, httplimit.KeyConst("client"), httplimit.WithCost(func(*http.Request) (int64, error) { return 3, nil }))(okHandler))
	resp := get(t, srv)
	require.Equal(t, http.StatusOK, resp.status, "store down, fail-closed, in shadow: let through")
	require.Equal(t, rateHeaders{}, rateHeadersOf(resp.header))
}
