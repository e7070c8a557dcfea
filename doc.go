// Package fleetlimit is a rate limiter whose limits hold across a whole fleet
// of servers.
//
// "100 requests per minute per user" is usually a counter in process memory.
// It passes every test on one machine, then silently breaks: four instances
// behind a load balancer let a user through at 4x the limit, and a fixed
// window lets 2x through around every window boundary. fleetlimit keeps the
// state in a store the fleet shares (Redis, through go-redis: standalone,
// Sentinel or Cluster) and changes it with one atomic operation per decision
// (a Lua script), with a written policy for when the store is down.
//
// A Limiter is one algorithm (package algorithm) over one store (package
// store):
//
//	shared, err := store.NewRedis(rdb) // rdb built with ContextTimeoutEnabled
//	login, err := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Minute), shared, fleetlimit.WithName("login"))
//	api, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 200), shared, fleetlimit.WithName("api"))
//	res, err := login.Allow(ctx, clientIP)
//
// Choose the algorithm per endpoint: the sliding-window log is exact and its
// memory grows with the limit; the token bucket is constant in memory and
// allows bursts up to its capacity; the sliding-window counter is constant
// in memory and admits at most its limit per aligned window and under twice
// it in any window-long interval (docs/guarantees.md); the fixed window is
// the naive counter, kept so that its boundary burst can be measured
// (docs/choosing.md compares them; go run ./cmd/compare measures them).
//
// Policies beyond one limit, each still one round trip per decision:
// algorithm.All(burst, daily) admits a request only when every member does
// and charges them all; WithStrategyFor picks a key's tier (a strategy of
// the same algorithm and window) per decision; WithPenalty bans a key that
// keeps being denied, with doubling bans.
//
// Operations on a key beside AllowN: Peek (what AllowN would answer,
// recording nothing), Reset, Refund (give back a cost that was charged but
// not used) and Wait / WaitN (block, in arrival order per process, until
// admitted or ctx ends).
//
// Fewer round trips, with the price stated and proven (docs/leases.md,
// docs/guarantees.md): WithDenialCache answers a repeat denial from memory
// and is exact; WithLeases admits from a batch of units taken from the
// store, at most K·(size−1) units over the limit for K instances.
//
// This package knows neither HTTP nor go-redis: it imports package
// algorithm (the rules) and package store (the Store interface it calls;
// that package's Redis store is what imports go-redis), and its own
// internal packages. Adapters sit on top of its exported API (package
// httplimit puts a Limiter in front of any net/http handler; the
// grpclimit, promobserver and otelobserver modules serve gRPC, Prometheus
// and OpenTelemetry; WithShadow measures a limit before it is enforced).
// docs/architecture.md maps the packages, the decision's stages and the
// file of each.
//
// Time is read at the edge: by default inside Redis (its TIME), so clock skew
// between app servers cannot bend a limit; WithClock supplies a clock instead
// (tests, simulations). Every decision is bounded by WithTimeout; when the
// store cannot answer, the FailurePolicy decides (or, with WithFallback, an
// in-process limiter at limit / instances) and the error satisfies
// errors.Is(err, ErrStoreUnavailable). A circuit breaker stops calling a
// store that keeps failing, so an outage costs microseconds per request, not
// a timeout; an Observer (SlogObserver for log/slog) sees every decision.
package fleetlimit
