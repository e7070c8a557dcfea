package otelobserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/observertest"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/otelobserver"
	"github.com/fleetlimit/fleetlimit/store"
)

var bg = context.Background()

// slowMachine is the timeout of decisions a healthy store must make.
const slowMachine = 5 * time.Second

// newObserver returns an Observer on a fresh SDK MeterProvider and the
// in-memory reader that collects from it.
func newObserver(t *testing.T) (*otelobserver.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(bg) })
	obs, err := otelobserver.New(mp)
	require.NoError(t, err)
	return obs, reader
}

// collected is one collection, flattened: each data point as
// "instrument{key=value,...}" (keys sorted) -> value; a histogram's points
// as its count, with their bounds and bucket counts beside.
type collected struct {
	points  map[string]float64
	units   map[string]string // instrument -> unit
	bounds  map[string][]float64
	buckets map[string][]uint64
	sums    map[string]float64
	values  []string // every attribute value seen
}

// collect reads everything reader holds, as an exporter would.
func collect(t *testing.T, reader *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(bg, &rm))
	c := collected{points: map[string]float64{}, units: map[string]string{},
		bounds: map[string][]float64{}, buckets: map[string][]uint64{}, sums: map[string]float64{}}
	series := func(name string, set attribute.Set) string {
		var kvs []string
		for _, kv := range set.ToSlice() {
			kvs = append(kvs, string(kv.Key)+"="+kv.Value.Emit())
			c.values = append(c.values, kv.Value.Emit())
		}
		slices.Sort(kvs)
		return name + "{" + strings.Join(kvs, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelobserver.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			c.units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, d.IsMonotonic, m.Name)
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality, m.Name)
				for _, p := range d.DataPoints {
					c.points[series(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					c.points[series(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					s := series(m.Name, p.Attributes)
					c.points[s] = float64(p.Count)
					c.bounds[s] = p.Bounds
					c.buckets[s] = p.BucketCounts
					c.sums[s] = p.Sum
				}
			default:
				t.Fatalf("%s: unexpected aggregation %T", m.Name, m.Data)
			}
		}
	}
	return c
}

// requirePoints checks that c holds exactly want: every point with its
// value, and no other.
func requirePoints(t *testing.T, want map[string]float64, c collected) {
	t.Helper()
	for s, v := range want {
		require.Contains(t, c.points, s, "point missing; collected: %v", c.points)
		require.Equal(t, v, c.points[s], s)
	}
	for s := range c.points {
		require.Contains(t, want, s, "an unexpected point")
	}
}

// After the known sequence of decisions of observertest.Run — enforcing
// on a healthy store (memory, miniredis, then the real redis-server),
// fail-closed with its breaker opening and fail-open on a dead one, a
// caller gone, bad input, a shadow limiter, leases with a denial cache, no
// breaker — the collected points say exactly what happened, and no client
// key appears in them.
func TestObserverRecords(t *testing.T) {
	for storeName, st := range stores.All(t) {
		t.Run(storeName, func(t *testing.T) {
			obs, reader := newObserver(t)
			observertest.Run(t, st, obs)

			c := collect(t, reader)
			require.NotContains(t, c.values, observertest.Key, "the client's key is never an attribute")
			require.Equal(t, map[string]string{
				"fleetlimit.decisions":         "{decision}",
				"fleetlimit.cost":              "{cost}",
				"fleetlimit.shadow_admissions": "{decision}",
				"fleetlimit.decision.duration": "s",
				"fleetlimit.store.errors":      "{error}",
				"fleetlimit.breaker.state":     "{state}",
				"fleetlimit.permit.operations": "{operation}",
			}, c.units)
			requirePoints(t, map[string]float64{
				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=api,fleetlimit.result=allowed}": 2,
				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=api,fleetlimit.result=denied}":  2,
				"fleetlimit.decisions{fleetlimit.decider=caller,fleetlimit.limiter=api,fleetlimit.result=denied}": 1,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=api,fleetlimit.result=allowed}":      3,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=api,fleetlimit.result=denied}":       5,
				"fleetlimit.cost{fleetlimit.decider=caller,fleetlimit.limiter=api,fleetlimit.result=denied}":      1,
				"fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=api}":                   4,
				"fleetlimit.decision.duration{fleetlimit.decider=caller,fleetlimit.limiter=api}":                  1,
				"fleetlimit.breaker.state{fleetlimit.limiter=api}":                                                0,

				"fleetlimit.decisions{fleetlimit.decider=policy,fleetlimit.limiter=login,fleetlimit.result=denied}": 2,
				"fleetlimit.cost{fleetlimit.decider=policy,fleetlimit.limiter=login,fleetlimit.result=denied}":      2,
				"fleetlimit.decision.duration{fleetlimit.decider=policy,fleetlimit.limiter=login}":                  2,
				"fleetlimit.store.errors{error.type=unavailable,fleetlimit.limiter=login}":                          1,
				"fleetlimit.store.errors{error.type=circuit_open,fleetlimit.limiter=login}":                         1,
				"fleetlimit.breaker.state{fleetlimit.limiter=login}":                                                2,

				"fleetlimit.decisions{fleetlimit.decider=policy,fleetlimit.limiter=search,fleetlimit.result=allowed}": 1,
				"fleetlimit.cost{fleetlimit.decider=policy,fleetlimit.limiter=search,fleetlimit.result=allowed}":      1,
				"fleetlimit.decision.duration{fleetlimit.decider=policy,fleetlimit.limiter=search}":                   1,
				"fleetlimit.store.errors{error.type=unavailable,fleetlimit.limiter=search}":                           1,
				"fleetlimit.breaker.state{fleetlimit.limiter=search}":                                                 0,

				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=rollout,fleetlimit.result=allowed}": 3,
				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=rollout,fleetlimit.result=denied}":  2,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=rollout,fleetlimit.result=allowed}":      3,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=rollout,fleetlimit.result=denied}":       2,
				"fleetlimit.shadow_admissions{fleetlimit.limiter=rollout}":                                            2,
				"fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=rollout}":                   5,
				"fleetlimit.breaker.state{fleetlimit.limiter=rollout}":                                                0,

				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=leased,fleetlimit.result=allowed}": 5,
				"fleetlimit.decisions{fleetlimit.decider=lease,fleetlimit.limiter=leased,fleetlimit.result=allowed}": 3,
				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=leased,fleetlimit.result=denied}":  1,
				"fleetlimit.decisions{fleetlimit.decider=cache,fleetlimit.limiter=leased,fleetlimit.result=denied}":  1,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=leased,fleetlimit.result=allowed}":      5,
				"fleetlimit.cost{fleetlimit.decider=lease,fleetlimit.limiter=leased,fleetlimit.result=allowed}":      3,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=leased,fleetlimit.result=denied}":       1,
				"fleetlimit.cost{fleetlimit.decider=cache,fleetlimit.limiter=leased,fleetlimit.result=denied}":       1,
				"fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=leased}":                   6,
				"fleetlimit.decision.duration{fleetlimit.decider=lease,fleetlimit.limiter=leased}":                   3,
				"fleetlimit.decision.duration{fleetlimit.decider=cache,fleetlimit.limiter=leased}":                   1,
				"fleetlimit.breaker.state{fleetlimit.limiter=leased}":                                                0,

				"fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=bare,fleetlimit.result=allowed}": 1,
				"fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=bare,fleetlimit.result=allowed}":      2,
				"fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=bare}":                   1,

				// Permit operations, recorded apart: their limiters made
				// no decision.
				"fleetlimit.permit.operations{fleetlimit.decider=store,fleetlimit.limiter=permits,fleetlimit.permit.op=acquire,fleetlimit.result=allowed}":         2,
				"fleetlimit.permit.operations{fleetlimit.decider=store,fleetlimit.limiter=permits,fleetlimit.permit.op=acquire,fleetlimit.result=denied}":          1,
				"fleetlimit.permit.operations{fleetlimit.decider=store,fleetlimit.limiter=permits,fleetlimit.permit.op=release,fleetlimit.result=allowed}":         3,
				"fleetlimit.permit.operations{fleetlimit.decider=store,fleetlimit.limiter=permits,fleetlimit.permit.op=renew,fleetlimit.result=allowed}":           1,
				"fleetlimit.permit.operations{fleetlimit.decider=store,fleetlimit.limiter=permits,fleetlimit.permit.op=renew,fleetlimit.result=denied}":            1,
				"fleetlimit.permit.operations{fleetlimit.decider=fallback,fleetlimit.limiter=permits-down,fleetlimit.permit.op=acquire,fleetlimit.result=allowed}": 1,
				"fleetlimit.permit.operations{fleetlimit.decider=fallback,fleetlimit.limiter=permits-down,fleetlimit.permit.op=release,fleetlimit.result=allowed}": 1,
				"fleetlimit.breaker.state{fleetlimit.limiter=permits}":      0,
				"fleetlimit.breaker.state{fleetlimit.limiter=permits-down}": 0,
			}, c)
			// Every histogram: the documented bounds, 50µs to 100ms, and
			// bucket counts that add up to its count.
			require.NotEmpty(t, c.bounds)
			for s, bounds := range c.bounds {
				require.Equal(t, []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}, bounds, s)
				var sum uint64
				for _, n := range c.buckets[s] {
					sum += n
				}
				require.Equal(t, c.points[s], float64(sum), s)
			}
		})
	}
}

// Each cause of a store error has its error.type, on a real server where
// one is needed: a server that never answers (timeout), an error reply
// that means the server cannot serve anyone (unavailable), a key holding
// another type (rejected), refused connections (unavailable), and a breaker keeping
// the store out (circuit_open).
func TestObserverStoreErrorCauses(t *testing.T) {
	hungClient := redis.NewClient(&redis.Options{Addr: redistest.HungAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = hungClient.Close() })
	hung := stores.Redis(t, hungClient)
	mr, mini := redistest.Mini(t)
	loading, loadingClient := redistest.Mini(t)
	loading.SetError("LOADING Redis is loading the dataset in memory")
	refused := stores.Down(t)
	wrongType := map[string]store.Store{"miniredis": stores.Redis(t, mini)}
	if redistest.HaveReal(t) {
		wrongType["redis"] = stores.Redis(t, redistest.Real(t))
	}
	for name, st := range wrongType {
		t.Run("rejected/"+name, func(t *testing.T) {
			obs, reader := newObserver(t)
			l, err := fleetlimit.New(algorithm.SlidingWindowLog(10, time.Minute), st, fleetlimit.WithName("l"),
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine), fleetlimit.WithObserver(obs))
			require.NoError(t, err)
			k := store.RedisKey(l.KeyPrefix(), "bad", "sl")
			if name == "miniredis" {
				mr.HSet(k, "f", "v")
			} else {
				require.NoError(t, redistest.Real(t).HSet(bg, k, "f", "v").Err())
			}
			_, err = l.Allow(bg, "bad")
			require.ErrorIs(t, err, store.ErrRejected)
			requireOnlyError(t, reader, fleetlimit.CauseRejected.String())
		})
	}
	for _, tc := range []struct {
		name    string
		st      store.Store
		timeout time.Duration
		want    string
	}{
		// The hung server: the limiter's timeout passes (nothing is
		// measured against the clock; the test waits for it to pass).
		{name: "hung", st: hung, timeout: 50 * time.Millisecond, want: fleetlimit.CauseTimeout.String()},
		{name: "loading", st: stores.Redis(t, loadingClient), timeout: slowMachine, want: fleetlimit.CauseUnavailable.String()},
		{name: "refused", st: refused, timeout: slowMachine, want: fleetlimit.CauseUnavailable.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, reader := newObserver(t)
			l, err := fleetlimit.New(algorithm.SlidingWindowLog(10, time.Minute), tc.st, fleetlimit.WithName("l"),
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(tc.timeout), fleetlimit.WithObserver(obs),
				fleetlimit.WithoutBreaker())
			require.NoError(t, err)
			_, err = l.Allow(bg, "k")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
			requireOnlyError(t, reader, tc.want)
		})
	}
}

// requireOnlyError checks that reader's one store error is of cause want.
func requireOnlyError(t *testing.T, reader *sdkmetric.ManualReader, want string) {
	t.Helper()
	c := collect(t, reader)
	var errs []string
	for s, v := range c.points {
		if strings.HasPrefix(s, "fleetlimit.store.errors{") {
			errs = append(errs, fmt.Sprintf("%s=%v", s, v))
		}
	}
	require.Equal(t, []string{"fleetlimit.store.errors{error.type=" + want + ",fleetlimit.limiter=l}=1"}, errs)
}

// The breaker gauge follows the breaker through an outage of a Redis
// server (miniredis answering LOADING), read at each collection: closed
// (0), open after the failure (2), half-open when the cool-down is over
// (1), closed again after a probe the recovered server answers (0).
func TestObserverBreakerGauge(t *testing.T) {
	mr, c := redistest.Mini(t)
	clk := fakeclock.New(proptest.Epoch)
	breaker, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1, CoolDown: 100 * time.Millisecond,
		Clock: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	obs, reader := newObserver(t)
	l, err := fleetlimit.New(algorithm.FixedWindow(100, time.Minute), stores.Redis(t, c), fleetlimit.WithName("l"),
		fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine), fleetlimit.WithObserver(obs),
		fleetlimit.WithBreaker(breaker), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	require.NoError(t, err)
	gauge := func() float64 {
		t.Helper()
		points := collect(t, reader).points
		require.Contains(t, points, "fleetlimit.breaker.state{fleetlimit.limiter=l}")
		return points["fleetlimit.breaker.state{fleetlimit.limiter=l}"]
	}

	_, err = l.Allow(bg, "k")
	require.NoError(t, err)
	require.Equal(t, float64(0), gauge(), "healthy: closed")
	mr.SetError("LOADING Redis is loading the dataset in memory")
	_, err = l.Allow(bg, "k")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	require.NotErrorIs(t, err, fleetlimit.ErrCircuitOpen)
	require.Equal(t, float64(2), gauge(), "one failure opens it")
	_, err = l.Allow(bg, "k")
	require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen)
	require.Equal(t, float64(2), gauge(), "open for the cool-down")
	clk.Advance(100 * time.Millisecond)
	require.Equal(t, float64(1), gauge(), "the cool-down is over: half-open, with no decision needed to see it")
	mr.SetError("")
	_, err = l.Allow(bg, "k")
	require.NoError(t, err, "the probe")
	require.Equal(t, float64(0), gauge(), "the probe closed it")

	points := collect(t, reader).points
	require.Equal(t, float64(1), points["fleetlimit.store.errors{error.type=unavailable,fleetlimit.limiter=l}"])
	require.Equal(t, float64(1), points["fleetlimit.store.errors{error.type=circuit_open,fleetlimit.limiter=l}"])
	require.Equal(t, float64(2), points["fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=l,fleetlimit.result=allowed}"])
	require.Equal(t, float64(2), points["fleetlimit.decisions{fleetlimit.decider=policy,fleetlimit.limiter=l,fleetlimit.result=denied}"])
}

// Goroutines deciding on several limiters while a reader collects: every
// decision is counted once (under -race: no data race between Observe, a
// limiter's first decision and the breaker callback).
func TestObserverConcurrent(t *testing.T) {
	obs, reader := newObserver(t)
	st := stores.Memory(t)
	const limiters, goroutines, each = 3, 8, 200
	var ls []*fleetlimit.Limiter
	for i := range limiters {
		l, err := fleetlimit.New(algorithm.FixedWindow(1e6, time.Hour), st, fleetlimit.WithName(fmt.Sprintf("l%d", i)),
			fleetlimit.WithObserver(obs), fleetlimit.WithTimeout(slowMachine))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	collector := make(chan struct{})
	go func() {
		defer close(collector)
		for {
			select {
			case <-stop:
				return
			default:
				var rm metricdata.ResourceMetrics
				_ = reader.Collect(bg, &rm)
			}
		}
	}()
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				_, err := ls[(g+i)%limiters].AllowN(bg, fmt.Sprintf("key%d", g), 3)
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-collector

	var decided [limiters]float64 // goroutine g's call i went to limiter (g+i)%limiters
	for g := range goroutines {
		for i := range each {
			decided[(g+i)%limiters]++
		}
	}
	want := map[string]float64{}
	for i, n := range decided {
		name := fmt.Sprintf("l%d", i)
		want["fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter="+name+",fleetlimit.result=allowed}"] = n
		want["fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter="+name+",fleetlimit.result=allowed}"] = 3 * n
		want["fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter="+name+"}"] = n
		want["fleetlimit.breaker.state{fleetlimit.limiter="+name+"}"] = 0
	}
	requirePoints(t, want, collect(t, reader))
}

// Goroutines calling Observe directly, with no store between them to order
// their calls, each meeting every limiter for the first time in a
// different order: every decision is counted once, and under -race no
// access to a limiter's sets is unordered.
func TestObserveConcurrentFirstDecisions(t *testing.T) {
	obs, reader := newObserver(t)
	const names, goroutines = 50, 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range names {
				obs.Observe(fleetlimit.Event{Name: fmt.Sprintf("n%d", (i*7+g)%names), N: 1, Allowed: true})
			}
		})
	}
	close(start)
	wg.Wait()
	want := map[string]float64{}
	for i := range names {
		want[fmt.Sprintf("fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=n%d,fleetlimit.result=allowed}", i)] = goroutines
		want[fmt.Sprintf("fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=n%d,fleetlimit.result=allowed}", i)] = goroutines
		want[fmt.Sprintf("fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=n%d}", i)] = goroutines
	}
	requirePoints(t, want, collect(t, reader))
}

// A Decider this package does not know (one added to fleetlimit later) is
// recorded under its String, not dropped and not misfiled.
func TestObserverUnknownDecider(t *testing.T) {
	obs, reader := newObserver(t)
	obs.Observe(fleetlimit.Event{Name: "l", N: 2, Allowed: true, DecidedBy: fleetlimit.Decider(99), Latency: time.Millisecond})
	requirePoints(t, map[string]float64{
		"fleetlimit.decisions{fleetlimit.decider=Decider(99),fleetlimit.limiter=l,fleetlimit.result=allowed}": 1,
		"fleetlimit.cost{fleetlimit.decider=Decider(99),fleetlimit.limiter=l,fleetlimit.result=allowed}":      2,
		"fleetlimit.decision.duration{fleetlimit.decider=Decider(99),fleetlimit.limiter=l}":                   1,
	}, collect(t, reader))
}

// Latency is recorded in seconds, into the documented buckets: 300µs in
// (250µs, 500µs], 2ms in (1ms, 2.5ms], 1s above the last bound.
func TestObserverLatencySeconds(t *testing.T) {
	obs, reader := newObserver(t)
	for _, d := range []time.Duration{300 * time.Microsecond, 2 * time.Millisecond, time.Second} {
		obs.Observe(fleetlimit.Event{Name: "l", N: 1, Allowed: true, Latency: d})
	}
	c := collect(t, reader)
	s := "fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=l}"
	require.Equal(t, float64(3), c.points[s])
	require.InDelta(t, 1.0023, c.sums[s], 1e-9)
	//                      50µs 100µs 250µs 500µs 1ms 2.5ms 5ms 10ms 25ms 50ms 100ms +Inf
	require.Equal(t, []uint64{0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1}, c.buckets[s])
}

// After a limiter's first decision Observe allocates nothing, with the
// SDK recording behind it.
func TestObserveDoesNotAllocate(t *testing.T) {
	obs, _ := newObserver(t)
	e := storeEvent()
	obs.Observe(e)
	require.Zero(t, testing.AllocsPerRun(1000, func() { obs.Observe(e) }))
}

// After a limiter's first permit operation ObservePermit allocates
// nothing either.
func TestObservePermitDoesNotAllocate(t *testing.T) {
	obs, _ := newObserver(t)
	e := storeEvent()
	e.Permit = fleetlimit.PermitRelease
	obs.ObservePermit(e)
	require.Zero(t, testing.AllocsPerRun(1000, func() { obs.ObservePermit(e) }))
}

// A nil MeterProvider is a configuration error.
func TestNewRejectsNilMeterProvider(t *testing.T) {
	_, err := otelobserver.New(nil)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
}

// storeEvent is a denial by the store with a breaker, the common case.
func storeEvent() fleetlimit.Event {
	b, _ := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{})
	return fleetlimit.Event{Name: "api", Key: "alice", N: 1, Allowed: false, Latency: 300 * time.Microsecond,
		DecidedBy: fleetlimit.DecidedByStore, Breaker: b}
}

// BenchmarkObserve is one Observe on the SDK's MeterProvider, for a
// limiter that has decided before.
func BenchmarkObserve(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(bg) }()
	obs, err := otelobserver.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	e := storeEvent()
	obs.Observe(e)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Observe(e)
		}
	})
}

// A partial grant records its grant as allowed cost and the rest of n as
// denied (fleetlimit.Event.Cost); a settle records the units it charged
// past the estimate, and a cancel's units given back are no cost.
func TestObserverRecordsGrantsAndSettles(t *testing.T) {
	obs, reader := newObserver(t)
	observertest.GrantsAndSettles(t, obs)

	c := collect(t, reader)
	require.Equal(t, float64(4+6+5+3+2), c.points["fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=grants,fleetlimit.result=allowed}"])
	require.Equal(t, float64(4), c.points["fleetlimit.cost{fleetlimit.decider=store,fleetlimit.limiter=grants,fleetlimit.result=denied}"])
	// Two grants and two reservations are decisions; the cancel and the
	// settle are not.
	require.Equal(t, float64(4), c.points["fleetlimit.decisions{fleetlimit.decider=store,fleetlimit.limiter=grants,fleetlimit.result=allowed}"])
	require.Equal(t, float64(4), c.points["fleetlimit.decision.duration{fleetlimit.decider=store,fleetlimit.limiter=grants}"])
}
