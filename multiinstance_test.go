package fleetlimit_test

// Many instances of one limit: K Limiters, each with its own Redis client,
// over one shared Redis hold the limit exactly; K Limiters each with its own
// memory let K times the limit through. These run in real time (the store's
// clock, Redis TIME or time.Now) with real concurrency.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// Cases per algorithm and store: each case dials up to 16 clients.
const (
	fleetMiniCases   = 60
	fleetRealCases   = 100
	fleetMemoryCases = 200
)

// fleetCase is traffic to K instances: request i costs Costs[i] and goes to
// instance i mod K (round-robin, as a load balancer does), sent by Workers
// concurrent goroutines.
type fleetCase struct {
	K       int
	Limit   int64
	Costs   []int64
	Workers int
	Uniform bool // every request costs the same
}

func (f fleetCase) String() string {
	return fmt.Sprintf("K=%d instances, limit %d, %d workers, costs %v", f.K, f.Limit, f.Workers, f.Costs)
}

// fleetGen generates fleet traffic that always exceeds the limit: half the
// time every request costs the same c in 1..3 (so that the admitted total
// does not depend on the order), otherwise costs of 1 to 4. With unitCost,
// every request costs 1 and every instance gets more than the limit.
func fleetGen(unitCost bool) gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		r := p.Rng
		f := fleetCase{K: 1 + r.Intn(16), Limit: 1 + r.Int63n(20), Workers: 2 + r.Intn(7)}
		switch {
		case unitCost:
			f.Uniform = true
			for range int64(f.K)*f.Limit + 1 + r.Int63n(int64(f.K)*f.Limit) {
				f.Costs = append(f.Costs, 1)
			}
		case r.Intn(2) == 0:
			f.Uniform = true
			c := 1 + r.Int63n(3)
			for range f.Limit/c*2 + 2 + r.Int63n(int64(f.K)+1) {
				f.Costs = append(f.Costs, c)
			}
		default:
			var sum int64
			for sum <= 2*f.Limit || len(f.Costs) < f.K {
				c := 1 + r.Int63n(4)
				f.Costs = append(f.Costs, c)
				sum += c
			}
		}
		return gopter.NewGenResult(f, gopter.NoShrinker)
	}
}

// midWindow returns a window of about an hour in which now sits at least 5
// minutes from either edge of its aligned window, so that a fixed window
// cannot roll over and a token bucket refills less than a token during a
// case (the refill is one token per 3 minutes at most).
func midWindow(now time.Time) time.Duration {
	const margin = 5 * time.Minute
	for w := time.Hour; ; w += time.Minute {
		off := time.Duration(now.UnixMicro()%w.Microseconds()) * time.Microsecond
		if off >= margin && off <= w-margin {
			return w
		}
	}
}

// runFleet sends the traffic through the limiters concurrently and returns
// each request's Result.
func runFleet(lims []*fleetlimit.Limiter, key string, f fleetCase) ([]fleetlimit.Result, error) {
	ctx := context.Background()
	res := make([]fleetlimit.Result, len(f.Costs))
	errs := make([]error, len(f.Costs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range f.Workers {
		wg.Go(func() {
			for i := range next {
				res[i], errs[i] = lims[i%len(lims)].AllowN(ctx, key, f.Costs[i])
			}
		})
	}
	for i := range f.Costs {
		next <- i
	}
	close(next)
	wg.Wait()
	return res, errors.Join(errs...)
}

// admittedCost sums the cost of the admitted requests.
func admittedCost(costs []int64, res []fleetlimit.Result) int64 {
	var sum int64
	for i, r := range res {
		if r.Allowed {
			sum += costs[i]
		}
	}
	return sum
}

// realTimeLimiter is a limiter on the store's own clock.
func realTimeLimiter(s algorithm.Strategy, st store.Store, prefix string) (*fleetlimit.Limiter, error) {
	return fleetlimit.New(s, st, fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithTimeout(proptest.Timeout),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
}

// realTimeRedisLimiter is realTimeLimiter over a Redis store on c.
func realTimeRedisLimiter(s algorithm.Strategy, c redis.UniversalClient, prefix string) (*fleetlimit.Limiter, error) {
	st, err := store.NewRedis(c)
	if err != nil {
		return nil, err
	}
	return realTimeLimiter(s, st, prefix)
}

// TestPropertyMultiInstanceSharedRedis: K = 1..16 limiter instances, each
// with its own Redis client, over one Redis (miniredis, the real server, the
// real 3-master Redis Cluster and, when named, the real valkey-server),
// hit concurrently, admit exactly what one instance admits:
//   - the admitted requests' Remaining values form one chain Limit-n1,
//     Limit-n1-n2, ...: Redis applied them one at a time, no update lost;
//   - one instance given the same requests in that serial order decides
//     every one of them the same (Allowed and Remaining);
//   - with equal costs, one instance given the requests in arrival order
//     admits the same total.
//
// All of it within one window (see midWindow) and on Redis's own clock.
func TestPropertyMultiInstanceSharedRedis(t *testing.T) {
	type server struct {
		name  string
		dial  func() redis.UniversalClient
		cases int
	}
	m, _ := redistest.Mini(t)
	realAddr, clusterAddrs := redistest.RealAddr(t), redistest.ClusterAddrs(t)
	servers := []server{
		{"miniredis", func() redis.UniversalClient { return newFleetClient(m.Addr()) }, fleetMiniCases},
		{"redis", func() redis.UniversalClient { return newFleetClient(realAddr) }, fleetRealCases},
		{"cluster", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs, ContextTimeoutEnabled: true})
		}, fleetRealCases / 2},
	}
	redistest.Real(t)    // fail early when the real server does not answer
	redistest.Cluster(t) // or the cluster
	if redistest.HaveValkey(t) {
		valkeyAddr := redistest.Valkey(t).Options().Addr
		servers = append(servers, server{"valkey", func() redis.UniversalClient { return newFleetClient(valkeyAddr) }, fleetRealCases / 2})
	}
	for _, e := range proptest.RegistryEntries(t) {
		t.Run(e.Name, func(t *testing.T) {
			for _, srv := range servers {
				t.Run(srv.name, func(t *testing.T) {
					proptest.Check(t, srv.cases, prop.ForAll(func(f fleetCase) (string, error) {
						return checkSharedRedis(srv.dial, e, f)
					}, fleetGen(false)))
				})
			}
		})
	}
}

func newFleetClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

func checkSharedRedis(dial func() redis.UniversalClient, e algorithm.Entry, f fleetCase) (string, error) {
	ctx := context.Background()
	clients := make([]redis.UniversalClient, f.K+1)
	for i := range clients {
		clients[i] = dial()
		defer clients[i].Close()
	}
	now, err := clients[0].Time(ctx).Result()
	if err != nil {
		return "", err
	}
	s := e.New(f.Limit, midWindow(now))
	prefix := redistest.Prefix()
	lims := make([]*fleetlimit.Limiter, f.K)
	for i := range lims {
		if lims[i], err = realTimeRedisLimiter(s, clients[i], prefix); err != nil {
			return "", err
		}
	}
	res, err := runFleet(lims, "user", f)
	if err != nil {
		return "", err
	}

	// The serial order Redis applied, witnessed by Remaining.
	var admitted, denied []int
	for i, r := range res {
		if r.Allowed {
			admitted = append(admitted, i)
		} else {
			denied = append(denied, i)
		}
	}
	slices.SortStableFunc(admitted, func(a, b int) int { return cmp.Compare(res[b].Remaining, res[a].Remaining) })
	left := s.Limit()
	for _, i := range admitted {
		if res[i].Remaining != left-f.Costs[i] {
			return fmt.Sprintf("admitted requests do not form one serial chain: after %d left, request %d (n=%d) reports Remaining %d; Remaining of all: %v",
				left, i, f.Costs[i], res[i].Remaining, res), nil
		}
		left = res[i].Remaining
	}

	// One instance, the same requests in that order.
	one, err := realTimeRedisLimiter(s, clients[f.K], redistest.Prefix())
	if err != nil {
		return "", err
	}
	for _, i := range append(admitted, denied...) {
		r, err := one.AllowN(ctx, "user", f.Costs[i])
		if err != nil {
			return "", err
		}
		// Denied requests are replayed last, so only admissions must
		// report the same Remaining.
		if r.Allowed != res[i].Allowed || (r.Allowed && r.Remaining != res[i].Remaining) {
			return fmt.Sprintf("request %d (n=%d): %d instances gave %+v, one instance in their serial order %+v", i, f.Costs[i], f.K, res[i], r), nil
		}
	}

	total := admittedCost(f.Costs, res)
	if f.Uniform {
		// One instance, the same requests in arrival order.
		one, err := realTimeRedisLimiter(s, clients[f.K], redistest.Prefix())
		if err != nil {
			return "", err
		}
		seq := make([]fleetlimit.Result, len(f.Costs))
		for i, c := range f.Costs {
			if seq[i], err = one.AllowN(ctx, "user", c); err != nil {
				return "", err
			}
		}
		if want := admittedCost(f.Costs, seq); total != want {
			return fmt.Sprintf("%d instances admitted %d, one instance %d", f.K, total, want), nil
		}
	}
	if total > s.Limit() {
		return fmt.Sprintf("%d instances admitted %d > limit %d", f.K, total, s.Limit()), nil
	}
	return "", nil
}

// TestPropertyMultiInstancePerProcessMemory reproduces the classic failure:
// K = 1..16 instances, each with its own store.Memory, behind a round-robin
// load balancer, admit exactly K x limit (every instance its own limit) when
// each receives more than the limit. The same traffic through K limiters
// over one shared store admits exactly the limit.
func TestPropertyMultiInstancePerProcessMemory(t *testing.T) {
	for _, e := range proptest.RegistryEntries(t) {
		t.Run(e.Name, func(t *testing.T) {
			proptest.Check(t, fleetMemoryCases, prop.ForAll(func(f fleetCase) (string, error) {
				s := e.New(f.Limit, midWindow(time.Now()))
				perProcess := make([]*fleetlimit.Limiter, f.K)
				shared := make([]*fleetlimit.Limiter, f.K)
				one := store.NewMemory()
				defer one.Close()
				for i := range f.K {
					own := store.NewMemory()
					defer own.Close()
					var err error
					if perProcess[i], err = realTimeLimiter(s, own, "p:"); err != nil {
						return "", err
					}
					if shared[i], err = realTimeLimiter(s, one, "p:"); err != nil {
						return "", err
					}
				}
				res, err := runFleet(perProcess, "user", f)
				if err != nil {
					return "", err
				}
				if total, want := admittedCost(f.Costs, res), int64(f.K)*s.Limit(); total != want {
					return fmt.Sprintf("%d per-process instances admitted %d, want K x limit = %d", f.K, total, want), nil
				}
				res, err = runFleet(shared, "user", f)
				if err != nil {
					return "", err
				}
				if total := admittedCost(f.Costs, res); total != s.Limit() {
					return fmt.Sprintf("%d instances over one shared store admitted %d, want the limit %d", f.K, total, s.Limit()), nil
				}
				return "", nil
			}, fleetGen(true)))
		})
	}
}
