package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
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
// 100,000 minus the usage the answers reported. The run is deterministic
// (the fake model's seed 1, a clock that stands still), and docs/costs.md
// quotes it: costsQuoteThisRun fails when the page's figures are not this
// run's.
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
	costsQuoteThisRun(t, reserve, admitted, used)
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

// costsQuote is docs/costs.md's account of TestGatewayChargesWhatWasUsed:
// the reservation, the completions admitted, the tokens they used, the
// one refused, the tokens left, and when charging every reservation in
// full would have refused.
var costsQuote = regexp.MustCompile(`(?s)request reserving ([\d,]+) tokens and using 1 to 20,000 at random, seed\s+1\), alice is admitted (\d+) completions using ([\d,]+) tokens and refused the\s+(\d+)th with ([\d,]+) tokens left, fewer than one reservation\. Charging every\s+reservation in full instead would have refused her after (\d+)\.`)

// costsQuoteThisRun checks that docs/costs.md quotes this run of
// TestGatewayChargesWhatWasUsed: reserve tokens a request, admitted
// completions using used tokens.
func costsQuoteThisRun(t *testing.T, reserve int64, admitted int, used int64) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/costs.md")
	require.NoError(t, err)
	got := costsQuote.FindAllStringSubmatch(string(doc), -1)
	require.Len(t, got, 1, "docs/costs.md quotes this test once (%s)", costsQuote)
	var quoted []int64
	for _, f := range got[0][1:] {
		n, err := strconv.ParseInt(strings.ReplaceAll(f, ",", ""), 10, 64)
		require.NoError(t, err)
		quoted = append(quoted, n)
	}
	want := []int64{reserve, int64(admitted), used, int64(admitted) + 1, TokensPerMinute - used, TokensPerMinute / reserve}
	require.Equal(t, want, quoted, "docs/costs.md's figures (reservation, admitted, used, refused, left, in full) against this run's")
}
