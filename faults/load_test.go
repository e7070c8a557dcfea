package faults_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

const (
	loadInstances  = 16
	loadGoroutines = 64
)

// fleet returns loadInstances limiters of s sharing one key prefix, each
// with a client (a connection pool) of its own, as separate processes
// would have.
func fleet(t *testing.T, newClient func() redis.UniversalClient, s algorithm.Strategy, opts ...fleetlimit.Option) []*fleetlimit.Limiter {
	p := redistest.Prefix()
	ls := make([]*fleetlimit.Limiter, loadInstances)
	for i := range ls {
		ls[i] = newLimiter(t, s, redisStore(t, newClient()), append([]fleetlimit.Option{fleetlimit.WithKeyPrefix(p)}, opts...)...)
	}
	return ls
}

// hammer runs loadGoroutines goroutines per limiter, each making calls
// calls of cost n on one key, and checks every answer: no error, Remaining
// never negative, a denial only when less than n remains, and each
// admission seeing a state of its own (the Remaining values of the
// admissions are exactly limit-n, limit-2n, ..., 0, once each). It returns
// the cost admitted.
func hammer(t *testing.T, ls []*fleetlimit.Limiter, limit, n int64, calls int) int64 {
	t.Helper()
	var mu sync.Mutex
	seen := make(map[int64]int)
	var admitted int64
	var firstErr error
	var wg sync.WaitGroup
	for _, l := range ls {
		for range loadGoroutines {
			wg.Go(func() {
				for range calls {
					res, err := l.AllowN(bg, "hot", n)
					mu.Lock()
					switch {
					case err != nil:
						firstErr = cmpOr(firstErr, err)
					case res.Remaining < 0:
						firstErr = cmpOr(firstErr, fmt.Errorf("Remaining %d", res.Remaining))
					case !res.Allowed && res.Remaining >= n:
						firstErr = cmpOr(firstErr, fmt.Errorf("denied with %d remaining", res.Remaining))
					case res.Allowed:
						admitted += n
						seen[res.Remaining]++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	require.NoError(t, firstErr)
	for r := int64(0); r < limit; r += n {
		require.Equal(t, 1, seen[r], "Remaining %d: one admission saw it", r)
	}
	return admitted
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// load is how the fleet's 16 x 64 = 1024 goroutines spend a limit: one
// call each of cost 1 for limits 1 and 100; for 10,000, two calls each of
// cost 10 (20,480 units offered, 1,000 calls admitted), which keeps the run
// short under -race while every unit of the limit is still contended for.
func load(limit int64) (n int64, calls int) {
	if limit > 1000 {
		return limit / 1000, 2
	}
	return 1, 1
}

// 16 limiter instances x 64 goroutines on one key admit exactly the limit,
// for limits 1, 100 and 10,000, for every algorithm, on the real server:
// with the clock pinned mid-window every algorithm is exact within it (the
// sliding log always; the token bucket admits its burst and refills
// nothing; the fixed window counts one aligned window); with the server's
// own TIME (an hour's window) the exact algorithms are exact still.
func TestLoadOneKey(t *testing.T) {
	addr := redistest.RealAddr(t)
	newClient := func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, e := range algorithm.Registry() {
		for _, limit := range []int64{1, 100, 10_000} {
			s := e.New(limit, time.Hour)
			n, calls := load(limit)
			got := hammer(t, fleet(t, newClient, s, fleetlimit.WithClock(fixedClock(t0))), limit, n, calls)
			require.Equal(t, limit, got, "%s limit %d, pinned clock", e.Name, limit)
			if e.Exact {
				got = hammer(t, fleet(t, newClient, s), limit, n, calls)
				require.Equal(t, limit, got, "%s limit %d, server TIME", e.Name, limit)
			}
		}
	}
}

// The same on the real cluster, each instance with a ClusterClient of its
// own, at limit 100 (one key lives on one master: the other limits would
// only repeat the single-server run).
func TestLoadOneKeyCluster(t *testing.T) {
	newClient := func() redis.UniversalClient { return redistest.Cluster(t) }
	for _, e := range algorithm.Registry() {
		for _, limit := range []int64{100} {
			s := e.New(limit, time.Hour)
			got := hammer(t, fleet(t, newClient, s, fleetlimit.WithClock(fixedClock(t0))), limit, 1, 1)
			require.Equal(t, limit, got, "%s limit %d, pinned clock", e.Name, limit)
		}
	}
}
