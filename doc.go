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
//	login, _ := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Minute), store.NewRedis(rdb))
//	api, _ := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 200), store.NewRedis(rdb))
//	res, err := login.Allow(ctx, clientIP)
//
// Choose the algorithm per endpoint: the sliding-window log is exact and its
// memory grows with the limit; the token bucket is constant in memory and
// allows bursts up to its capacity; the fixed window is the naive counter,
// kept so that its boundary burst can be measured.
//
// Middleware puts a Limiter in front of any net/http handler, keyed by a
// KeyFunc (KeyByHeader, KeyByClientIP behind trusted proxies, KeyJoin), and
// answers with X-RateLimit-* headers, the IETF draft RateLimit and
// RateLimit-Policy fields, 429 with Retry-After when denied, and 503 when a
// fail-closed limiter's store is down.
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
