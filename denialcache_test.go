package fleetlimit_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestPropertyDenialCacheExact: on every store (memory, miniredis, and
// under ./test.sh the real server and the Cluster), for every registered
// algorithm, for composites and for penalty boxes (whose strikes must
// reach the store, and whose bans may be answered from memory), a limiter
// with a denial cache and one
// without, fed the same single-instance timeline, answer every AllowN and
// every Peek identically, field by field and member by member. The
// timelines mix costs, repeat requests at one instant, reset a key halfway
// (Reset must forget the key's entry), switch the key's tier at random for
// the registered algorithms (WithStrategyFor: the cache must not answer for
// another limit), and use caches of 1, 2 or 64 keys (eviction). Each
// subtest also asserts that the cache answered some requests, so that the
// property is not vacuous.
func TestPropertyDenialCacheExact(t *testing.T) {
	bs := resetPeekBackends(t, proptest.Backends)
	run := func(t *testing.T, newStrat func(proptest.Backend, *rand.Rand) proptest.StratCase, tiers bool, cases func(proptest.Backend) int) {
		for _, b := range bs {
			t.Run(b.Name, func(t *testing.T) {
				var hits atomic.Int64
				g := proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return newStrat(b, r) }, false)
				proptest.Check(t, cases(b), prop.ForAll(func(s proptest.Scenario) (string, error) {
					return checkDenialCache(t, b, s, tiers, &hits)
				}, g))
				if hits.Load() == 0 {
					t.Errorf("the denial cache answered no request in any case: the property is vacuous")
				}
			})
		}
	}
	for _, e := range proptest.RegistryEntries(t) {
		t.Run(e.Name, func(t *testing.T) {
			run(t, proptest.EntryCases(e), true, func(b proptest.Backend) int { return max(1, b.Cases/2) })
		})
	}
	// Composites and penalty boxes are answered from memory more rarely (a
	// composite's denial stands only when every member's figures do, and a
	// cached denial is trusted at most denial.MaxTrust): at least 40 cases
	// each, so that a backend run at reduced counts (the Valkey Cluster's)
	// still sees some answers.
	t.Run("all", func(t *testing.T) {
		run(t, proptest.AllCase, false, func(b proptest.Backend) int { return max(40, b.Cases/4) })
	})
	t.Run("penalty", func(t *testing.T) {
		run(t, proptest.PenaltyCase, false, func(b proptest.Backend) int { return max(40, b.Cases/4) })
	})
}

func checkDenialCache(t *testing.T, b proptest.Backend, s proptest.Scenario, tiers bool, hits *atomic.Int64) (string, error) {
	seed := fnv.New64a()
	fmt.Fprint(seed, s.String())
	r := rand.New(rand.NewSource(int64(seed.Sum64())))
	strats := []algorithm.Strategy{s.Strat.S}
	if tiers {
		e := proptest.RegistryEntry(t, s.Strat.Name)
		strats = append(strats, e.New(1+r.Int63n(s.Strat.S.Limit()), s.Strat.S.Window()), e.New(2*s.Strat.S.Limit(), s.Strat.S.Window()))
	}
	var tier atomic.Value
	tier.Store(strats[0])
	strategyFor := fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) {
		return tier.Load().(algorithm.Strategy), nil
	})
	var cached atomic.Int64
	count := fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
		if e.DecidedBy == fleetlimit.DecidedByCache {
			cached.Add(1)
		}
	}))
	maxKeys := []int{1, 2, 64}[r.Intn(3)]
	with, err := proptest.NewRig(b.Store, s.Strat.S, strategyFor, count, fleetlimit.WithDenialCache(maxKeys))
	if err != nil {
		return "", err
	}
	without, err := proptest.NewRig(b.Store, s.Strat.S, strategyFor)
	if err != nil {
		return "", err
	}
	evs := s.Events()
	half := len(evs) / 2
	for i, ev := range evs {
		if tiers && r.Intn(4) == 0 {
			tier.Store(strats[r.Intn(len(strats))])
		}
		if i == half && i > 0 {
			for _, rig := range []*proptest.Rig{with, without} {
				if err := rig.Reset(ev.Key); err != nil {
					return "", err
				}
			}
		}
		ops := []string{"request"}
		if r.Intn(3) == 0 {
			ops = []string{"peek", "request"}
		}
		for _, op := range ops {
			call := (*proptest.Rig).At
			if op == "peek" {
				call = (*proptest.Rig).Peek
			}
			got, err := call(with, ev)
			if err != nil {
				return "", err
			}
			want, err := call(without, ev)
			if err != nil {
				return "", err
			}
			if !proptest.SameResult(got, want) {
				return fmt.Sprintf("%s %d (%q n=%d at +%v), cache of %d keys, tier limit %d: %+v %v, want %+v %v", op,
					i, ev.Key, ev.N, ev.At.Sub(s.Base), maxKeys, tier.Load().(algorithm.Strategy).Limit(), got, got.Limits(), want, want.Limits()), nil
			}
		}
	}
	hits.Add(cached.Load())
	return "", nil
}

// TestDenialCacheBan: with a penalty box, a denial that is a strike goes
// to the store every time (it must be counted), and once the ban starts a
// client hammering the key is answered from memory until the ban ends.
func TestDenialCacheBan(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			var by []fleetlimit.Decider
			l, err := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 1), st,
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithClock(clock.Now),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) { by = append(by, e.DecidedBy) })),
				fleetlimit.WithDenialCache(10), fleetlimit.WithPenalty(3, time.Minute, 10*time.Second, time.Minute))
			require.NoError(t, err)
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			// Three strikes at one instant, each from the store: the third
			// starts a ban of 10s.
			for range 3 {
				res, err = l.Allow(bg, "u")
				require.NoError(t, err)
				require.False(t, res.Allowed)
			}
			require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second}, res)
			require.Equal(t, []fleetlimit.Decider{fleetlimit.DecidedByStore, fleetlimit.DecidedByStore,
				fleetlimit.DecidedByStore, fleetlimit.DecidedByStore}, by, "strikes reach the store")
			// Banned: hammering is answered from memory, the wait counting
			// down, for up to a second (MaxTrust) after the store's answer;
			// then the store is asked again (a banned request is no strike)
			// and its answer is remembered again.
			by = nil
			for i := 1; i <= 9; i++ {
				clock.Set(proptest.Epoch.Add(time.Duration(i) * 100 * time.Millisecond))
				res, err = l.Allow(bg, "u")
				require.NoError(t, err)
				wait := 10*time.Second - time.Duration(i)*100*time.Millisecond
				require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: wait, ResetAfter: wait}, res)
			}
			require.Equal(t, slices.Repeat([]fleetlimit.Decider{fleetlimit.DecidedByCache}, 9), by)
			for _, step := range []struct {
				at time.Duration
				by fleetlimit.Decider
			}{{5 * time.Second, fleetlimit.DecidedByStore}, {5500 * time.Millisecond, fleetlimit.DecidedByCache}} {
				by = nil
				clock.Set(proptest.Epoch.Add(step.at))
				res, err = l.Allow(bg, "u")
				require.NoError(t, err)
				wait := 10*time.Second - step.at
				require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: wait, ResetAfter: wait}, res)
				require.Equal(t, []fleetlimit.Decider{step.by}, by, "at %v", step.at)
			}
			// The ban ends: the store admits.
			clock.Set(proptest.Epoch.Add(10 * time.Second))
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)

			// A ban shorter than the bucket's own wait: the cache answers
			// only until the ban ends, though the request still waits;
			// from then on each denial is a strike again and reaches the
			// store, and two of them start the next ban, doubled.
			slow, err := fleetlimit.New(algorithm.TokenBucket(1, 10*time.Second, 1), st,
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithClock(clock.Now),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) { by = append(by, e.DecidedBy) })),
				fleetlimit.WithDenialCache(10), fleetlimit.WithPenalty(2, time.Minute, time.Second, time.Minute))
			require.NoError(t, err)
			start := clock.Now()
			at := func(d time.Duration) (fleetlimit.Result, fleetlimit.Decider) {
				clock.Set(start.Add(d))
				by = nil
				res, err := slow.Allow(bg, "u")
				require.NoError(t, err)
				require.Len(t, by, 1)
				return res, by[0]
			}
			res, _ = at(0)
			require.True(t, res.Allowed)
			at(0)          // strike 1
			res, _ = at(0) // strike 2: banned for 1s, the bucket's wait is 10s
			require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second}, res)
			_, d := at(500 * time.Millisecond)
			require.Equal(t, fleetlimit.DecidedByCache, d, "banned")
			res, d = at(time.Second)
			require.Equal(t, fleetlimit.DecidedByStore, d, "the ban is over: a strike")
			require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: 9 * time.Second, ResetAfter: 9 * time.Second}, res)
			res, d = at(2 * time.Second)
			require.Equal(t, fleetlimit.DecidedByStore, d, "a strike")
			require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: 8 * time.Second, ResetAfter: 8 * time.Second}, res, "the second ban, of 2s")
			res, d = at(2500 * time.Millisecond)
			require.Equal(t, fleetlimit.DecidedByCache, d, "banned again")
			require.Equal(t, fleetlimit.Result{Limit: 1, RetryAfter: 7500 * time.Millisecond, ResetAfter: 7500 * time.Millisecond}, res)
			_, d = at(4 * time.Second)
			require.Equal(t, fleetlimit.DecidedByStore, d, "the second ban ended at 4s")
		})
	}
}

// The denial cache step by step, on a virtual clock: a client hammering a
// spent key is answered from memory with the wait counting down, then the
// store admits it again at the exact moment; the observer sees each cached
// denial as DecidedByCache; shadow mode turns it into a shadow admission;
// Reset forgets it.
func TestDenialCacheSteps(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			var by []fleetlimit.Decider
			obs := fleetlimit.ObserverFunc(func(e fleetlimit.Event) { by = append(by, e.DecidedBy) })
			newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 2), st, append([]fleetlimit.Option{
					fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithClock(clock.Now),
					fleetlimit.WithObserver(obs), fleetlimit.WithDenialCache(10)}, opts...)...)
				require.NoError(t, err)
				return l
			}
			l := newLim()
			for range 2 {
				res, err := l.Allow(bg, "u")
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			// Spent: the store denies, 1s to the next token, 2s to full.
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.Equal(t, fleetlimit.Result{Limit: 2, RetryAfter: time.Second, ResetAfter: 2 * time.Second}, res)
			// 300ms later: from the cache, 700ms to go.
			clock.Set(proptest.Epoch.Add(300 * time.Millisecond))
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.Equal(t, fleetlimit.Result{Limit: 2, RetryAfter: 700 * time.Millisecond, ResetAfter: 1700 * time.Millisecond}, res)
			// A cost of 2 is not answered from the cache (its wait is not known).
			res, err = l.AllowN(bg, "u", 2)
			require.NoError(t, err)
			require.Equal(t, fleetlimit.Result{Limit: 2, RetryAfter: 1700 * time.Millisecond, ResetAfter: 1700 * time.Millisecond}, res)
			// At exactly 1s the token is back: the store admits.
			clock.Set(proptest.Epoch.Add(time.Second))
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, []fleetlimit.Decider{fleetlimit.DecidedByStore, fleetlimit.DecidedByStore, fleetlimit.DecidedByStore,
				fleetlimit.DecidedByCache, fleetlimit.DecidedByStore, fleetlimit.DecidedByStore}, by)

			// Reset forgets: the key is whole at once.
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.NoError(t, l.Reset(bg, "u"))
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed, "answered from the cache after Reset")

			// Shadow: the cached denial is a shadow admission.
			s := newLim(fleetlimit.WithShadow())
			for range 3 {
				_, err := s.Allow(bg, "v")
				require.NoError(t, err)
			}
			by = nil
			res, err = s.Allow(bg, "v")
			require.NoError(t, err)
			require.True(t, res.Allowed && res.Shadow, "%+v", res)
			require.Equal(t, []fleetlimit.Decider{fleetlimit.DecidedByCache}, by)
		})
	}
}

func TestWithDenialCacheRejectsBadSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, err := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 1), stores.Memory(t), fleetlimit.WithDenialCache(n))
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, "maxKeys %d", n)
	}
}

// With the store's clock (no WithClock), the cache measures the wait on
// this process's monotonic clock from the moment the request was sent, so
// that it never answers a denial longer than the store would: a cached
// RetryAfter is at most what the store says afterwards.
func TestDenialCacheStoreClock(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			p := redistest.Prefix()
			newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.TokenBucket(1, time.Hour, 1), st, append([]fleetlimit.Option{
					fleetlimit.WithKeyPrefix(p), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
				require.NoError(t, err)
				return l
			}
			var byCache atomic.Int64
			l := newLim(fleetlimit.WithDenialCache(4), fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
				if e.DecidedBy == fleetlimit.DecidedByCache {
					byCache.Add(1)
				}
			})))
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			first, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.False(t, first.Allowed)
			require.Zero(t, byCache.Load(), "the first denial is the store's")
			// The store's view now, through a limiter without a cache.
			truth, err := newLim().Peek(bg, "u", 1)
			require.NoError(t, err)
			cached, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.Equal(t, int64(1), byCache.Load(), "the repeat is the cache's")
			require.False(t, cached.Allowed)
			require.Positive(t, cached.RetryAfter)
			require.LessOrEqual(t, cached.RetryAfter, truth.RetryAfter, "the cache answers a longer wait than the store")
			require.LessOrEqual(t, cached.RetryAfter, first.RetryAfter)
		})
	}
}

// BenchmarkDenialCache: a client hammering a key it has spent (1 per hour),
// with and without the denial cache, on memory, miniredis and the real
// server, from 1 goroutine and from 64. "store-calls/op" is the share of
// decisions that reached the store (1 without the cache).
func BenchmarkDenialCache(b *testing.B) {
	for _, name := range []string{"memory", "miniredis", "redis"} {
		for _, cache := range []bool{false, true} {
			for _, procs := range []int{1, 64} {
				b.Run(fmt.Sprintf("%s/cache=%v/goroutines=%d", name, cache, procs), func(b *testing.B) {
					var st store.Store
					switch name {
					case "memory":
						st = stores.Memory(b)
					case "miniredis":
						_, c := redistest.Mini(b)
						st = stores.Redis(b, c)
					case "redis":
						st = stores.Redis(b, redistest.Real(b))
					}
					benchHammer(b, st, cache, procs)
				})
			}
		}
	}
}

func benchHammer(b *testing.B, st store.Store, cache bool, procs int) {
	var storeCalls atomic.Int64
	opts := []fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(10 * time.Second),
		fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
			if e.DecidedBy == fleetlimit.DecidedByStore {
				storeCalls.Add(1)
			}
		}))}
	if cache {
		opts = append(opts, fleetlimit.WithDenialCache(1024))
	}
	l, err := fleetlimit.New(algorithm.TokenBucket(1, time.Hour, 1), st, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if res, err := l.Allow(bg, "abuser"); err != nil || !res.Allowed {
		b.Fatalf("the first request: %+v, %v", res, err)
	}
	storeCalls.Store(0)
	b.ReportAllocs()
	b.SetParallelism(max(1, procs/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	if procs == 1 {
		for b.Loop() {
			if res, err := l.Allow(bg, "abuser"); err != nil || res.Allowed {
				b.Fatalf("%+v, %v", res, err)
			}
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if res, err := l.Allow(bg, "abuser"); err != nil || res.Allowed {
					b.Errorf("%+v, %v", res, err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(storeCalls.Load())/float64(b.N), "store-calls/op")
}
