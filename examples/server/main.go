// Command server is an HTTP server with a different rate limit per endpoint,
// one per algorithm, all in one shared Redis:
//
//	POST /login   by client IP, 5 per minute, exact (sliding-window log),
//	              fail-closed: while Redis is down it answers 503
//	GET  /api     by the X-User header, bursts of 5 then 1 per second
//	              (token bucket), fail-open bounded by an in-process fallback,
//	              RFC 9457 problem-details bodies
//	GET  /search  by client IP, 10 per minute per aligned window (fixed window)
//
// It prints curl commands to try at start.
//
//	go run ./examples/server                      # an embedded Redis (miniredis)
//	go run ./examples/server -redis 127.0.0.1:6379 # a real Redis
//	go run ./examples/server -addr 127.0.0.1:9090  # another listen address
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisAddr := flag.String("redis", "", "address of a real Redis (default: an embedded miniredis)")
	trusted := flag.String("trusted-proxies", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For is believed (default: none)")
	instances := flag.Int64("instances", 1, "instances of this server sharing the limits: the fallback admits limit/instances while Redis is down")
	flag.Parse()
	if err := run(*addr, *redisAddr, *trusted, *instances); err != nil {
		log.Fatal(err)
	}
}

func run(addr, redisAddr, trusted string, instances int64) error {
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
		fmt.Println("Redis: embedded miniredis (pass -redis ADDR for a real one)")
	} else {
		fmt.Println("Redis:", redisAddr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	shared, err := store.NewRedis(rdb)
	if err != nil {
		return err
	}
	defer shared.Close()
	// A wrong address is an error at start-up, with its cause, rather than
	// a failure policy applied to every request.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := shared.Ping(ctx); err != nil {
		return err
	}
	fallback := store.NewMemory()
	defer fallback.Close()

	var proxies []string
	if trusted != "" {
		proxies = strings.Split(trusted, ",")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h, err := newHandler(shared, fallback, proxies, instances, logger)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	fmt.Printf("Listening on %s. Try:\n\n%s\n", base, tryLines(base))

	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Println("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler puts one limiter, with its own algorithm, key, key prefix and
// failure policy, in front of each endpoint. All three share one store and
// one circuit breaker: a Redis outage is one outage for all of them.
// Extra options, if any, apply to all three limiters.
func newHandler(shared, fallback store.Store, trustedProxies []string, instances int64, logger *slog.Logger, extra ...fleetlimit.Option) (http.Handler, error) {
	breaker, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{})
	if err != nil {
		return nil, err
	}
	// with returns the options every limiter here shares, plus more.
	with := func(more ...fleetlimit.Option) []fleetlimit.Option {
		opts := append([]fleetlimit.Option{
			fleetlimit.WithBreaker(breaker),
			fleetlimit.WithObserver(fleetlimit.SlogObserver(logger)),
		}, extra...)
		return append(opts, more...)
	}
	clientIP, err := httplimit.KeyByClientIP(httplimit.ClientIPConfig{TrustedProxies: trustedProxies})
	if err != nil {
		return nil, err
	}

	login, err := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Minute), shared, with(
		fleetlimit.WithName("login"), fleetlimit.WithKeyPrefix("example:login:"), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))...)
	if err != nil {
		return nil, err
	}
	api, err := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 5), shared, with(
		fleetlimit.WithName("api"), fleetlimit.WithKeyPrefix("example:api:"), fleetlimit.WithFallback(fallback, instances))...)
	if err != nil {
		return nil, err
	}
	search, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), shared, with(
		fleetlimit.WithName("search"), fleetlimit.WithKeyPrefix("example:search:"))...)
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("POST /login", httplimit.Middleware(login, clientIP)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "login ok\n") })))
	mux.Handle("GET /api", httplimit.Middleware(api, httplimit.KeyByHeader("X-User"),
		httplimit.WithDenialWriter(httplimit.ProblemDetailsDenial))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, "{\"user\":%q}\n", r.Header.Get("X-User"))
		})))
	mux.Handle("GET /search", httplimit.Middleware(search, clientIP)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
		})))
	return mux, nil
}

// tryLines are the curl commands printed at start (and shown in docs/testing.md).
func tryLines(base string) string {
	return strings.ReplaceAll(`  # /login: 5 per minute per client IP, exact (sliding-window log): five 200s, then 429
  for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code}\n' -X POST BASE/login; done
  # a denial's headers: X-RateLimit-*, RateLimit-Policy, RateLimit, Retry-After
  curl -si -X POST BASE/login
  # /api: by X-User, bursts of 5 then 1 per second (token bucket); 429s are problem+json
  for i in $(seq 7); do curl -s -H 'X-User: alice' BASE/api; done
  curl -si -H 'X-User: bob' BASE/api
  # no X-User: 400
  curl -si BASE/api
  # /search: 10 per minute per client IP, per aligned minute (fixed window)
  curl -si 'BASE/search?q=redis'
`, "BASE", base)
}
