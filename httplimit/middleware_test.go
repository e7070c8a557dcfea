package httplimit_test

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
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

// serve runs h on a real HTTP server for the test.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// response is what a test request got back.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends one request with the given header lines and reads the response.
func do(t *testing.T, srv *httptest.Server, method, path string, body io.Reader, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func get(t *testing.T, srv *httptest.Server, header ...string) response {
	t.Helper()
	return do(t, srv, http.MethodGet, "/", nil, header...)
}

// rateHeaders are the rate-limit fields of a response, "" when absent.
type rateHeaders struct {
	Limit, Remaining, Reset, RetryAfter, Policy, RateLimit string
}

func rateHeadersOf(h http.Header) rateHeaders {
	return rateHeaders{
		Limit:      h.Get("X-RateLimit-Limit"),
		Remaining:  h.Get("X-RateLimit-Remaining"),
		Reset:      h.Get("X-RateLimit-Reset"),
		RetryAfter: h.Get("Retry-After"),
		Policy:     h.Get("RateLimit-Policy"),
		RateLimit:  h.Get("RateLimit"),
	}
}

// requireDraftFields parses RateLimit-Policy and RateLimit as structured
// fields and checks that they say what the X-RateLimit fields say.
func requireDraftFields(t *testing.T, name string, window int64, h rateHeaders, msg string) {
	t.Helper()
	policy, err := parseSFList(h.Policy)
	require.NoError(t, err, "%s: RateLimit-Policy %q", msg, h.Policy)
	require.Len(t, policy, 1, msg)
	require.Equal(t, name, policy[0].Value, "%s: the policy item is an sf-string naming the limiter", msg)
	q, _ := policy[0].param("q")
	require.Equal(t, mustInt(t, h.Limit), q, "%s: q is the limit", msg)
	w, _ := policy[0].param("w")
	require.Equal(t, window, w, "%s: w is the window in seconds", msg)

	rl, err := parseSFList(h.RateLimit)
	require.NoError(t, err, "%s: RateLimit %q", msg, h.RateLimit)
	require.Len(t, rl, 1, msg)
	require.Equal(t, name, rl[0].Value, msg)
	r, _ := rl[0].param("r")
	require.Equal(t, mustInt(t, h.Remaining), r, "%s: r is the remaining quota", msg)
	tt, _ := rl[0].param("t")
	wantT := h.Reset
	if h.RetryAfter != "" {
		wantT = h.RetryAfter
	}
	require.Equal(t, mustInt(t, wantT), tt, "%s: t is Retry-After on a denial, X-RateLimit-Reset otherwise", msg)
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "%q", s)
	return n
}

// The headers carry exact values over a sequence of requests, for every
// algorithm on every store, and a 429's Retry-After, when honoured, lets the
// next request through.
func TestMiddlewareHeaders(t *testing.T) {
	type step struct {
		at     time.Duration // since proptest.Epoch; honour: at the previous Retry-After instead
		honour bool
		status int
		want   rateHeaders
		why    string
	}
	cases := []struct {
		name     string
		strategy algorithm.Strategy
		window   int64
		steps    []step
	}{
		{"login", algorithm.SlidingWindowLog(3, time.Minute), 60, []step{
			{0, false, 200, rateHeaders{"3", "2", "60", "", `"login";q=3;w=60`, `"login";r=2;t=60`}, "a unit admitted now counts for 60s"},
			{10 * time.Second, false, 200, rateHeaders{"3", "1", "60", "", `"login";q=3;w=60`, `"login";r=1;t=60`}, ""},
			{20500 * time.Millisecond, false, 200, rateHeaders{"3", "0", "60", "", `"login";q=3;w=60`, `"login";r=0;t=60`}, ""},
			{30250 * time.Millisecond, false, 429, rateHeaders{"3", "0", "51", "30", `"login";q=3;w=60`, `"login";r=0;t=30`},
				"full; the unit at 0 leaves at 60s: 29.75s rounds up to 30; all are gone at 80.5s: 50.25s rounds up to 51"},
			{0, true, 200, rateHeaders{"3", "0", "60", "", `"login";q=3;w=60`, `"login";r=0;t=60`}, "after the Retry-After, the request passes"},
		}},
		{"api", algorithm.TokenBucket(1, 10*time.Second, 2), 20, []step{
			{0, false, 200, rateHeaders{"2", "1", "10", "", `"api";q=2;w=20`, `"api";r=1;t=10`}, "one token every 10s, burst 2: full 20s after empty"},
			{0, false, 200, rateHeaders{"2", "0", "20", "", `"api";q=2;w=20`, `"api";r=0;t=20`}, ""},
			{4500 * time.Millisecond, false, 429, rateHeaders{"2", "0", "16", "6", `"api";q=2;w=20`, `"api";r=0;t=6`},
				"0.45 tokens back: 5.5s to the next whole one rounds up to 6, 15.5s to full rounds up to 16"},
			{0, true, 200, rateHeaders{"2", "0", "20", "", `"api";q=2;w=20`, `"api";r=0;t=20`}, "after the Retry-After, the request passes"},
		}},
		{"search", algorithm.FixedWindow(2, time.Minute), 60, []step{
			{15 * time.Second, false, 200, rateHeaders{"2", "1", "45", "", `"search";q=2;w=60`, `"search";r=1;t=45`}, "the window ends at the minute"},
			{15200 * time.Millisecond, false, 200, rateHeaders{"2", "0", "45", "", `"search";q=2;w=60`, `"search";r=0;t=45`}, "44.8s rounds up"},
			{50500 * time.Millisecond, false, 429, rateHeaders{"2", "0", "10", "10", `"search";q=2;w=60`, `"search";r=0;t=10`}, "9.5s to the next window"},
			{0, true, 200, rateHeaders{"2", "1", "60", "", `"search";q=2;w=60`, `"search";r=1;t=60`}, "the next window"},
		}},
	}
	for storeName, st := range stores.All(t) {
		for _, c := range cases {
			clk := fakeclock.New(proptest.Epoch)
			l, err := fleetlimit.New(c.strategy, st, fleetlimit.WithName(c.name), fleetlimit.WithClock(clk.Now),
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
			require.NoError(t, err)
			srv := serve(t, httplimit.Middleware(l, httplimit.KeyConst("client"))(okHandler))
			var retryAfter int64
			for i, s := range c.steps {
				msg := storeName + " " + c.name + " step " + strconv.Itoa(i) + ": " + s.why
				if s.honour {
					clk.Advance(time.Duration(retryAfter) * time.Second)
				} else {
					clk.Advance(proptest.Epoch.Add(s.at).Sub(clk.Now()))
				}
				resp := get(t, srv)
				require.Equal(t, s.status, resp.status, msg)
				got := rateHeadersOf(resp.header)
				require.Equal(t, s.want, got, msg)
				requireDraftFields(t, c.name, c.window, got, msg)
				if s.status == http.StatusTooManyRequests {
					retryAfter = mustInt(t, got.RetryAfter)
					require.Equal(t, "text/plain; charset=utf-8", resp.header.Get("Content-Type"))
					require.Equal(t, "rate limit exceeded: retry in "+got.RetryAfter+" seconds\n", resp.body)
				} else {
					require.Equal(t, "ok", resp.body, msg)
				}
			}
		}
	}
}

// Windows that are not whole seconds have no w parameter; names that an
// sf-string cannot hold are escaped or replaced; the draft fields can be
// turned off.
func TestMiddlewareDraftFieldEdges(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	l, err := fleetlimit.New(algorithm.TokenBucket(3, time.Second, 10), mem, fleetlimit.WithName(`we"ird\ näme`))
	require.NoError(t, err)
	resp := get(t, serve(t, httplimit.Middleware(l, httplimit.KeyConst("c"))(okHandler)))
	policy, err := parseSFList(resp.header.Get("RateLimit-Policy"))
	require.NoError(t, err)
	require.Equal(t, `we"ird\ n__me`, policy[0].Value, "quote and backslash escaped, the two UTF-8 bytes of ä replaced")
	_, hasW := policy[0].param("w")
	require.False(t, hasW, "a 3.33s refill has no whole-second window")

	resp = get(t, serve(t, httplimit.Middleware(l, httplimit.KeyConst("d"), httplimit.WithDraftHeaders(false))(okHandler)))
	require.Empty(t, resp.header.Values("RateLimit-Policy"))
	require.Empty(t, resp.header.Values("RateLimit"))
	require.Equal(t, "9", resp.header.Get("X-RateLimit-Remaining"), "the X- fields stay")
}

// WithDenialWriter(ProblemDetailsDenial) answers with RFC 9457 problem
// details of the draft's quota-exceeded type.
func TestMiddlewareProblemDetails(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	l, err := fleetlimit.New(algorithm.SlidingWindowLog(1, time.Minute), mem, fleetlimit.WithName("login"))
	require.NoError(t, err)
	srv := serve(t, httplimit.Middleware(l, httplimit.KeyConst("c"), httplimit.WithDenialWriter(httplimit.ProblemDetailsDenial))(okHandler))
	require.Equal(t, 200, get(t, srv).status)
	resp := get(t, srv)
	require.Equal(t, 429, resp.status)
	require.Equal(t, "application/problem+json", resp.header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(resp.body), &p), resp.body)
	require.Equal(t, httplimit.ProblemQuotaExceeded, p["type"])
	require.Equal(t, "Too Many Requests", p["title"])
	require.EqualValues(t, 429, p["status"])
	require.Equal(t, []any{"login"}, p["violated-policies"])
	require.Contains(t, p["detail"], "retry in 60 seconds")
}

// Behind no trusted proxy, a spoofed X-Forwarded-For buys no fresh quota;
// behind a trusted one, the proxy's view of the client is honoured.
func TestMiddlewareForwardedFor(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	newServer := func(trusted ...string) *httptest.Server {
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(2, time.Minute), mem, fleetlimit.WithKeyPrefix(redistest.Prefix()))
		require.NoError(t, err)
		key, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: trusted})
		require.NoError(t, err)
		return serve(t, httplimit.Middleware(l, key)(okHandler))
	}

	// The test server's peer is 127.0.0.1, which nobody trusts here.
	direct := newServer()
	var got []int
	for _, spoof := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"} {
		got = append(got, get(t, direct, "X-Forwarded-For", spoof).status)
	}
	require.Equal(t, []int{200, 200, 429, 429}, got, "every spoofed address shares the peer's quota")

	// Now 127.0.0.1 is a trusted proxy: each client it names has a quota.
	proxied := newServer("127.0.0.0/8")
	got = nil
	for _, client := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		got = append(got, get(t, proxied, "X-Forwarded-For", client).status)
	}
	require.Equal(t, []int{200, 200, 200}, got, "three clients behind the proxy")
	// A client of the proxy prepending its own entries changes nothing: the
	// proxy appended the real address last.
	got = nil
	for _, forged := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		got = append(got, get(t, proxied, "X-Forwarded-For", forged+", 203.0.113.9").status)
	}
	require.Equal(t, []int{200, 200, 429}, got, "forged entries left of the proxy's are ignored")
}

// A request that cannot be identified is answered 400 by default, or let
// through unlimited and without headers on request.
func TestMiddlewareKeyError(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	l, err := fleetlimit.New(algorithm.SlidingWindowLog(1, time.Minute), mem)
	require.NoError(t, err)
	strict := serve(t, httplimit.Middleware(l, httplimit.KeyByHeader("X-User"))(okHandler))
	resp := get(t, strict)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Contains(t, resp.body, "header X-User is missing")

	lenient := serve(t, httplimit.Middleware(l, httplimit.KeyByHeader("X-User"), httplimit.WithKeyErrorPassThrough())(okHandler))
	for range 3 {
		resp = get(t, lenient)
		require.Equal(t, http.StatusOK, resp.status)
		require.Empty(t, resp.header.Get("X-RateLimit-Limit"), "an unlimited request carries no limit headers")
	}

	// A key past store.MaxKeyLen is limited under its hash, pass-through or
	// not: padding a key does not get a client past the limit, and two
	// long keys are two clients.
	long := func(c string) string { return strings.Repeat(c, store.MaxKeyLen+1) }
	for name, srv := range map[string]*httptest.Server{"strict": strict, "lenient": lenient} {
		a, b := long(name[:1]), long(name[1:2])
		require.Equal(t, http.StatusOK, get(t, srv, "X-User", a).status, name)
		require.Equal(t, http.StatusTooManyRequests, get(t, srv, "X-User", a).status, "%s: the same long key is one client", name)
		require.Equal(t, http.StatusOK, get(t, srv, "X-User", b).status, "%s: another long key is another client", name)
	}
}

// WithCost charges by payload size; a cost that cannot pass is 413, an
// unknown length 411, a broken cost function 500.
func TestMiddlewareCost(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	l, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), mem, fleetlimit.WithClock(fixedClock(proptest.Epoch)))
	require.NoError(t, err)
	srv := serve(t, httplimit.Middleware(l, httplimit.KeyConst("c"), httplimit.WithCost(httplimit.CostByContentLength(100)))(okHandler))

	resp := do(t, srv, http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 250)))
	require.Equal(t, http.StatusOK, resp.status)
	require.Equal(t, "7", resp.header.Get("X-RateLimit-Remaining"), "250 bytes at 100 per unit cost 3")
	resp = do(t, srv, http.MethodGet, "/", nil)
	require.Equal(t, "6", resp.header.Get("X-RateLimit-Remaining"), "no body costs 1")

	resp = do(t, srv, http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 1001)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.status, "cost 11 can never pass a limit of 10")
	require.Empty(t, resp.header.Get("Retry-After"), "waiting will not help")
	require.Contains(t, resp.body, "request cost 11 exceeds the limit 10")
	require.Equal(t, "6", resp.header.Get("X-RateLimit-Remaining"), "and it was not charged")
	h := rateHeadersOf(resp.header)
	requireDraftFields(t, "fixed_window", 60, h, "413")
	require.Equal(t, `"fixed_window";r=6;t=`+h.Reset, h.RateLimit, "the RateLimit field agrees with X-RateLimit-Reset: no retry time for a request that can never pass")
	fresh := serve(t, httplimit.Middleware(l, httplimit.KeyConst("fresh"), httplimit.WithCost(httplimit.CostByContentLength(100)))(okHandler))
	resp = do(t, fresh, http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 1001)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.status)
	require.Equal(t, "0", resp.header.Get("X-RateLimit-Reset"), "an untouched key is full")
	require.Equal(t, `"fixed_window";r=10;t=0`, resp.header.Get("RateLimit"), "t agrees with the reset, not with a retry that can never pass")
	require.Empty(t, resp.header.Get("Retry-After"))

	huge := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
	huge.ContentLength = 1 << 62 // a cost beyond 2^53, which AllowN refuses
	rec := httptest.NewRecorder()
	httplimit.Middleware(l, httplimit.KeyConst("c"), httplimit.WithCost(httplimit.CostByContentLength(1)))(okHandler).ServeHTTP(rec, huge)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, "too large, not a server error")
	require.Contains(t, rec.Body.String(), "request cost 4611686018427387904 exceeds the limit 10")

	resp = do(t, srv, http.MethodPost, "/", io.MultiReader(strings.NewReader("chunked")))
	require.Equal(t, http.StatusLengthRequired, resp.status, "a body of unknown length cannot be charged")

	broken := serve(t, httplimit.Middleware(l, httplimit.KeyConst("c"), httplimit.WithCost(func(*http.Request) (int64, error) { return 0, nil }))(okHandler))
	resp = get(t, broken)
	require.Equal(t, http.StatusInternalServerError, resp.status)
	require.Contains(t, resp.body, "misconfigured")
}

// Misconfiguration is an error from NewMiddleware, and a panic at
// construction from Middleware: never a middleware that answers clients
// with the mistake.
func TestMiddlewareMisconfigured(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	l, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), mem)
	require.NoError(t, err)
	for name, mk := range map[string]func() (func(http.Handler) http.Handler, error){
		"nil limiter": func() (func(http.Handler) http.Handler, error) {
			return httplimit.NewMiddleware(nil, httplimit.KeyConst("c"))
		},
		"nil key": func() (func(http.Handler) http.Handler, error) { return httplimit.NewMiddleware(l, nil) },
		"nil cost": func() (func(http.Handler) http.Handler, error) {
			return httplimit.NewMiddleware(l, httplimit.KeyConst("c"), httplimit.WithCost(nil))
		},
		"nil denialer": func() (func(http.Handler) http.Handler, error) {
			return httplimit.NewMiddleware(l, httplimit.KeyConst("c"), httplimit.WithDenialWriter(nil))
		},
	} {
		mw, err := mk()
		require.Nil(t, mw, name)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, name)
	}
	require.PanicsWithError(t, "fleetlimit: invalid configuration: httplimit: nil limiter\nnil KeyFunc", func() {
		httplimit.Middleware(nil, nil)
	})
}

// The observer learns the route: the ServeMux pattern, or WithRoute.
func TestMiddlewareRoute(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	rec := &spy.Observer{}
	l, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), mem, fleetlimit.WithObserver(rec), fleetlimit.WithName("api"))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", httplimit.Middleware(l, httplimit.KeyConst("c"))(okHandler))
	mux.Handle("GET /other", httplimit.Middleware(l, httplimit.KeyConst("c"), httplimit.WithRoute("other-route"))(okHandler))
	srv := serve(t, mux)
	require.Equal(t, 200, do(t, srv, http.MethodGet, "/items/7", nil).status)
	require.Equal(t, 200, do(t, srv, http.MethodGet, "/other", nil).status)
	ev := rec.Take()
	require.Len(t, ev, 2)
	require.Equal(t, "GET /items/{id}", ev[0].Route)
	require.Equal(t, "other-route", ev[1].Route)
	require.Equal(t, "api", ev[0].Name)
}

// Stacked middlewares — a global limiter around a per-user one — each add
// their member to RateLimit-Policy and RateLimit (RFC 9651 lists, parsed
// here from every field line), X-RateLimit-* report the tightest, and each
// limiter charges independently: the outer one also counts the requests the
// inner one denies.
func TestMiddlewareStacked(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	clock := fixedClock(proptest.Epoch)
	global, err := fleetlimit.New(algorithm.SlidingWindowLog(100, time.Minute), mem, fleetlimit.WithName("global"), fleetlimit.WithClock(clock))
	require.NoError(t, err)
	user, err := fleetlimit.New(algorithm.SlidingWindowLog(3, time.Minute), mem, fleetlimit.WithName("user"), fleetlimit.WithClock(clock))
	require.NoError(t, err)
	h := httplimit.Middleware(global, httplimit.KeyConst("all"))(httplimit.Middleware(user, httplimit.KeyByHeader("X-User"))(okHandler))
	srv := serve(t, h)
	for i := range 4 {
		resp := get(t, srv, "X-User", "alice")
		policy, err := parseSFList(strings.Join(resp.header.Values("RateLimit-Policy"), ", "))
		require.NoError(t, err)
		limits, err := parseSFList(strings.Join(resp.header.Values("RateLimit"), ", "))
		require.NoError(t, err)
		require.Len(t, policy, 2, "request %d", i)
		require.Len(t, limits, 2, "request %d", i)
		require.Equal(t, []any{"global", "user"}, []any{policy[0].Value, policy[1].Value}, "outer first")
		rg, _ := limits[0].param("r")
		ru, _ := limits[1].param("r")
		require.Equal(t, int64(99-i), rg, "request %d: the global limiter charged every request, denied ones too", i)
		require.Equal(t, int64(max(0, 2-i)), ru, "request %d", i)
		require.Equal(t, strconv.Itoa(max(0, 2-i)), resp.header.Get("X-RateLimit-Remaining"), "request %d: the tightest limit", i)
		require.Equal(t, "3", resp.header.Get("X-RateLimit-Limit"), "request %d", i)
		if i < 3 {
			require.Equal(t, http.StatusOK, resp.status)
		} else {
			require.Equal(t, http.StatusTooManyRequests, resp.status)
		}
	}
}

// TestMiddlewareComposite: a limiter of several limits (algorithm.All) lists
// every member in RateLimit-Policy, a valid RFC 9651 list, and reports the
// tightest member in RateLimit and X-RateLimit-*: here the burst of 3 until
// it is spent; then, on a later second, the day's 5 that remain tighter
// than the refilled burst.
func TestMiddlewareComposite(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	now := proptest.Epoch
	l, err := fleetlimit.New(algorithm.All(
		algorithm.TokenBucket(3, time.Second, 3),
		algorithm.SlidingWindowLog(5, 24*time.Hour),
	), mem, fleetlimit.WithName("api"), fleetlimit.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	srv := serve(t, httplimit.Middleware(l, httplimit.KeyByHeader("X-User"))(okHandler))
	for i, c := range []struct {
		after       time.Duration
		status      int
		item        string
		remaining   int64
		limit, xrem string
	}{
		{0, http.StatusOK, "api.token_bucket", 2, "3", "2"},
		{0, http.StatusOK, "api.token_bucket", 1, "3", "1"},
		{0, http.StatusOK, "api.token_bucket", 0, "3", "0"},
		{0, http.StatusTooManyRequests, "api.token_bucket", 0, "3", "0"},
		{time.Second, http.StatusOK, "api.sliding_window_log", 1, "5", "1"},
		{0, http.StatusOK, "api.sliding_window_log", 0, "5", "0"},
		{time.Second, http.StatusTooManyRequests, "api.sliding_window_log", 0, "5", "0"},
	} {
		now = now.Add(c.after)
		resp := get(t, srv, "X-User", "alice")
		require.Equal(t, c.status, resp.status, "request %d", i)
		policy, err := parseSFList(strings.Join(resp.header.Values("RateLimit-Policy"), ", "))
		require.NoError(t, err)
		require.Len(t, policy, 2, "request %d: one policy per member", i)
		require.Equal(t, []any{"api.token_bucket", "api.sliding_window_log"}, []any{policy[0].Value, policy[1].Value})
		q0, _ := policy[0].param("q")
		w1, _ := policy[1].param("w")
		require.Equal(t, []any{int64(3), int64(86400)}, []any{q0, w1})
		limits, err := parseSFList(resp.header.Get("RateLimit"))
		require.NoError(t, err)
		require.Len(t, limits, 1, "request %d", i)
		require.Equal(t, c.item, limits[0].Value, "request %d: the tightest member", i)
		r, _ := limits[0].param("r")
		require.Equal(t, c.remaining, r, "request %d", i)
		require.Equal(t, c.limit, resp.header.Get("X-RateLimit-Limit"), "request %d", i)
		require.Equal(t, c.xrem, resp.header.Get("X-RateLimit-Remaining"), "request %d", i)
	}
}
