package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// TestGatewayChargesWhatWasUsed runs the gateway over miniredis on a
// clock that stands still, and sends alice's completions of max_tokens
// 20,000 until one is refused: each reserves its prompt and 20,000, and is
// settled at the usage the fake model reported, so the user is refused
// once fewer than a reservation's tokens are left — and not before, as
// charging every reservation in full would refuse her after 4 (4 × 20,008
// fit in 100,000, 5 do not). The tokens left
// (X-RateLimit-Remaining after the settle, in the trailer) are exactly
// 100,000 minus the usage the answers reported.
func TestGatewayChargesWhatWasUsed(t *testing.T) {
	_, c := redistest.Mini(t)
	clock := func() time.Time { return proptest.Epoch }
	h, err := newGateway(stores.Redis(t, c), newFakeModel(1), fleetlimit.WithClock(clock),
		fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(5*time.Second))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	const body = `{"prompt": "Write a haiku about rate limits.", "max_tokens": 20000}`
	reserve := promptTokens("Write a haiku about rate limits.") + 20000
	used, admitted := int64(0), 0
	for {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var answer struct{ Usage usage }
		if resp.StatusCode == http.StatusOK {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
		}
		_, err = io.Copy(io.Discard, resp.Body) // the trailers come after the body
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		if resp.StatusCode != http.StatusOK {
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			left, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Remaining"), 10, 64)
			require.NoError(t, err)
			require.Equal(t, TokensPerMinute-used, left, "refused with the unused tokens left")
			require.Less(t, left, reserve, "refused only once a reservation no longer fits")
			break
		}
		admitted++
		used += answer.Usage.TotalTokens
		require.LessOrEqual(t, answer.Usage.TotalTokens, reserve)
		left, err := strconv.ParseInt(resp.Trailer.Get("X-RateLimit-Remaining"), 10, 64)
		require.NoError(t, err, "the settled figures come as a trailer")
		require.Equal(t, TokensPerMinute-used, left, "after request %d", admitted)
		require.Less(t, admitted, 100, "the budget runs out")
	}
	t.Logf("admitted %d completions using %d tokens before a reservation of %d no longer fit", admitted, used, reserve)
	require.Greater(t, admitted, int(TokensPerMinute/reserve), "settling the usage admits more than charging every reservation would")
	// Bob has his own budget.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-User", "bob")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
