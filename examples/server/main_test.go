package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// The server answers as the curl lines it prints say it will.
func TestServerAnswersAsPrinted(t *testing.T) {
	mr, c := redistest.Mini(t)
	mr.SetTime(proptest.Epoch.Add(30 * time.Second)) // Redis TIME stands still: no refill mid-test
	shared, fallback := stores.Redis(t, c), store.NewMemory()
	t.Cleanup(func() { _ = shared.Close(); _ = fallback.Close() })
	// A generous timeout: a loaded CI machine must not turn a decision into
	// a store failure.
	h, err := newHandler(shared, fallback, nil, 1, slog.New(slog.NewTextHandler(io.Discard, nil)), fleetlimit.WithTimeout(5*time.Second))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	send := func(method, path string, header ...string) *http.Response {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	var codes []int
	for range 6 {
		codes = append(codes, send(http.MethodPost, "/login").StatusCode)
	}
	require.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes, "/login: 5 per minute, then 429")
	denied := send(http.MethodPost, "/login")
	require.Equal(t, `"login";q=5;w=60`, denied.Header.Get("RateLimit-Policy"))
	require.NotEmpty(t, denied.Header.Get("Retry-After"))

	codes = nil
	for range 7 {
		resp := send(http.MethodGet, "/api", "X-User", "alice")
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 429 {
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		}
	}
	require.Equal(t, []int{200, 200, 200, 200, 200, 429, 429}, codes, "/api: a burst of 5")
	require.Equal(t, 200, send(http.MethodGet, "/api", "X-User", "bob").StatusCode, "bob has his own bucket")
	require.Equal(t, 400, send(http.MethodGet, "/api").StatusCode, "no X-User")
	search := send(http.MethodGet, "/search?q=redis")
	require.Equal(t, 200, search.StatusCode)
	require.Equal(t, "9", search.Header.Get("X-RateLimit-Remaining"))
	require.True(t, strings.HasPrefix(search.Header.Get("RateLimit"), `"search";r=9;t=`))
	require.Contains(t, tryLines("http://x"), "curl -si 'http://x/search?q=redis'")
}
