package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestPropertyAllowAtMostGrantsTheMostThatFits (guarantee 3 of
// docs/guarantees.md): on every store — memory, miniredis and, under
// ./test.sh, redis-server, a Redis Cluster, valkey-server and a Valkey
// Cluster — for every registered algorithm, composites and penalty boxes,
// on generated timelines (one in three unsorted, as skewed clocks deliver
// them) of AllowN and AllowAtMost (one arrival in four) over several keys,
// every AllowAtMost(n) grants exactly the most g <= n that the Go rule,
// run beside it on the same timeline (a second limiter over store.Memory),
// admits at that instant: Peek(g) is admitted there, unless g is 0, and
// Peek(g+1) denied, unless g is n. Its Result is that of AllowN(g) on the
// Go rule (AllowN(1)'s denial when g is 0), which then takes its place
// there, so that every later decision on both agrees too: the key is left
// as AllowN(g) leaves it. An n above algorithm.MaxCost is ErrInvalidCost
// and records nothing (the Go rule sees nothing of it, and the timelines
// still agree). So that it is not vacuous, every store sees partial
// grants, and every strategy, over the stores, grants of part of n and
// grants of nothing (per store, a kind's few cases on the Valkey Cluster
// drew no grant of part of n once, for composites, by chance).
func TestPropertyAllowAtMostGrantsTheMostThatFits(t *testing.T) {
	mem := proptest.Memory(t)
	bs := proptest.Backends(t, append([]string{"memory", "miniredis"}, proptest.RealNames(t)...)...)
	for _, k := range proptest.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			var all grantsSeen
			for _, b := range bs {
				t.Run(b.Name, func(t *testing.T) {
					g := proptest.WithAtMosts(proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return k.New(b, r) }, true))
					var seen grantsSeen
					// At least 40 cases, so that the Valkey Cluster's reduced
					// count still sees partial grants of penalty boxes.
					proptest.Check(t, max(40, b.Cases/2), prop.ForAll(func(s proptest.Scenario) (string, error) { return checkAtMost(mem, b.Store, s, &seen) }, g))
					if seen.part+seen.none == 0 {
						t.Errorf("vacuous: no partial grant at all")
					}
					all.part, all.none = all.part+seen.part, all.none+seen.none
				})
			}
			if all.part == 0 || all.none == 0 {
				t.Errorf("vacuous: %d grants of part of n and %d of nothing over every store", all.part, all.none)
			}
		})
	}
}

// grantsSeen counts the partial grants a property saw: of part of n, and
// of nothing.
type grantsSeen struct{ part, none int }

// checkAtMost runs s on st and on the Go rule (mem) side by side and
// reports the first partial grant that is not the most that fits, or the
// first Result that differs; seen counts the grants.
func checkAtMost(mem *store.Memory, st store.Store, s proptest.Scenario, seen *grantsSeen) (string, error) {
	lim, err := proptest.NewRig(st, s.Strat.S)
	if err != nil {
		return "", err
	}
	rule, err := proptest.NewRig(mem, s.Strat.S)
	if err != nil {
		return "", err
	}
	most := algorithm.MaxCost(s.Strat.S)
	for i, ev := range s.Events() {
		if !ev.AtMost {
			if diff, err := proptest.SameAt(lim, rule, s, i, ev); diff != "" || err != nil {
				return "the store, then the Go rule: " + diff, err
			}
			continue
		}
		if ev.N > most {
			g, res, err := lim.AtMost(ev)
			if !errors.Is(err, fleetlimit.ErrInvalidCost) || g != 0 || res.Allowed {
				return fmt.Sprintf("request %d (%s): n above the most %d: granted %d %+v, err %v; want 0 and ErrInvalidCost", i, ev, most, g, res, err), nil
			}
			continue
		}
		fits, err := mostThatFits(rule, ev)
		if err != nil {
			return "", err
		}
		g, got, err := lim.AtMost(ev)
		if err != nil {
			return "", err
		}
		if g != fits {
			return fmt.Sprintf("request %d (%s at +%v): granted %d, but the most that fits by the Go rule is %d", i, ev, ev.At.Sub(s.Base), g, fits), nil
		}
		switch {
		case g == 0:
			seen.none++
		case g < ev.N:
			seen.part++
		}
		take := ev
		take.AtMost, take.N = false, max(fits, 1)
		want, err := rule.At(take)
		if err != nil {
			return "", err
		}
		if want.Allowed != (fits > 0) || !proptest.SameResult(got, want) {
			return fmt.Sprintf("request %d (%s at +%v): granted %d with %+v %+v, but AllowN(%d) on the Go rule %+v %+v", i, ev, ev.At.Sub(s.Base), g, got, got.Limits(), take.N, want, want.Limits()), nil
		}
	}
	return "", nil
}

// mostThatFits is the largest g <= ev.N that r's AllowN would admit at
// ev's time, found by peeking (Peek records nothing): g passes and g+1
// does not (a cost passes whenever a larger one does).
func mostThatFits(r *proptest.Rig, ev proptest.Event) (int64, error) {
	lo, hi := int64(0), ev.N // lo passes (0 trivially); is hi the answer?
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		p := ev
		p.AtMost, p.N = false, mid
		res, err := r.Peek(p)
		if err != nil {
			return 0, err
		}
		if res.Allowed {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

// TestAllowAtMostSteps: a token bucket of 10 on a fixed clock, step by
// step: what fits is granted, then what is left, then nothing, with the
// wait for one token; bad input is an error and records nothing.
func TestAllowAtMostSteps(t *testing.T) {
	ctx := context.Background()
	clock := &fakeclock.Clock{}
	clock.Set(time.Unix(1_700_000_000, 0))
	mem := store.NewMemory(store.WithMemoryClock(clock.Now))
	t.Cleanup(func() { _ = mem.Close() })
	lim, err := fleetlimit.New(algorithm.TokenBucket(10, 10*time.Second, 10), mem, fleetlimit.WithClock(clock.Now))
	require.NoError(t, err)

	// A full bucket of 10 grants all 6 asked for.
	g, res, err := lim.AllowAtMost(ctx, "k", 6)
	require.NoError(t, err)
	require.Equal(t, int64(6), g)
	require.True(t, res.Allowed)
	require.Equal(t, int64(4), res.Remaining)
	require.Zero(t, res.RetryAfter)

	// 4 are left: 4 of 6 are granted, and nothing remains.
	g, res, err = lim.AllowAtMost(ctx, "k", 6)
	require.NoError(t, err)
	require.Equal(t, int64(4), g)
	require.True(t, res.Allowed)
	require.Zero(t, res.Remaining)

	// Empty: nothing is granted, not an error; one token is back in 1s.
	g, res, err = lim.AllowAtMost(ctx, "k", 6)
	require.NoError(t, err)
	require.Zero(t, g)
	require.False(t, res.Allowed)
	require.Equal(t, time.Second, res.RetryAfter)

	// Bad input is an error, with nothing granted or recorded: n < 1, n
	// above the burst (the most ever admitted at once), an empty key.
	for _, bad := range []struct {
		key  string
		n    int64
		want error
	}{{"k", 0, fleetlimit.ErrInvalidCost}, {"k", -1, fleetlimit.ErrInvalidCost}, {"k", 11, fleetlimit.ErrInvalidCost}, {"", 1, fleetlimit.ErrInvalidKey}} {
		g, res, err := lim.AllowAtMost(ctx, bad.key, bad.n)
		require.ErrorIs(t, err, bad.want, "key %q n=%d", bad.key, bad.n)
		require.Zero(t, g)
		require.False(t, res.Allowed)
	}
	// 2.5s later 2 tokens are back (the rejected calls took none).
	clock.Advance(2500 * time.Millisecond)
	g, _, err = lim.AllowAtMost(ctx, "k", 10)
	require.NoError(t, err)
	require.Equal(t, int64(2), g)

	// A caller gone is granted nothing, and told so.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	clock.Advance(time.Hour)
	g, res, err = lim.AllowAtMost(cctx, "k", 3)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, g)
	require.False(t, res.Allowed)
	// ... and nothing was taken: the full bucket grants all 10.
	g, _, err = lim.AllowAtMost(ctx, "k", 10)
	require.NoError(t, err)
	require.Equal(t, int64(10), g)
}

// TestAllowAtMostUnsupported: a concurrency limit cannot grant part of a
// request, and says so.
func TestAllowAtMostUnsupported(t *testing.T) {
	mem := store.NewMemory()
	t.Cleanup(func() { _ = mem.Close() })
	lim, err := fleetlimit.New(algorithm.Concurrency(3, time.Minute), mem)
	require.NoError(t, err)
	g, res, err := lim.AllowAtMost(context.Background(), "k", 1)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.Zero(t, g)
	require.False(t, res.Allowed)
}

// TestAllowAtMostFromALease: with leases, a partial grant that the key's
// lease holds in full is served from it in process (the store is not
// charged again: a limiter without leases over the same store sees the
// same Remaining before and after); one the lease cannot hold in full is an
// exact round trip, which grants what the store has left and leaves the
// lease as it is.
func TestAllowAtMostFromALease(t *testing.T) {
	ctx := context.Background()
	clock := &fakeclock.Clock{}
	clock.Set(time.Unix(1_700_000_000, 0))
	mem := store.NewMemory(store.WithMemoryClock(clock.Now))
	t.Cleanup(func() { _ = mem.Close() })
	s := algorithm.FixedWindow(100, time.Hour)
	leased, err := fleetlimit.New(s, mem, fleetlimit.WithClock(clock.Now), fleetlimit.WithLeases(20, time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = leased.Close() })
	exact, err := fleetlimit.New(s, mem, fleetlimit.WithClock(clock.Now))
	require.NoError(t, err)
	remaining := func() int64 { // what the store has left: a never-passable peek's Remaining
		t.Helper()
		res, err := exact.Peek(ctx, "k", 101)
		require.NoError(t, err)
		return res.Remaining
	}

	// The key's first round trip is exact; its second takes a lease of 20
	// (the fair share of the 99 left, at most the size) and spends 1.
	for range 2 {
		res, err := leased.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	require.Equal(t, int64(100-1-20), remaining())

	// 5 of the lease's 19: served in process, the store is not charged.
	g, res, err := leased.AllowAtMost(ctx, "k", 5)
	require.NoError(t, err)
	require.Equal(t, int64(5), g)
	require.True(t, res.Allowed)
	require.Equal(t, int64(79), remaining())

	// 50 is more than the lease's 14: an exact round trip grants 50 of the
	// store's 79 and leaves the lease's 14 held.
	g, _, err = leased.AllowAtMost(ctx, "k", 50)
	require.NoError(t, err)
	require.Equal(t, int64(50), g)
	require.Equal(t, int64(29), remaining())

	// The store has 29 left: 29 of 40 are granted.
	g, _, err = leased.AllowAtMost(ctx, "k", 40)
	require.NoError(t, err)
	require.Equal(t, int64(29), g)
	require.Zero(t, remaining())

	// The lease still holds 14, which serve a grant of 14 in process.
	g, _, err = leased.AllowAtMost(ctx, "k", 14)
	require.NoError(t, err)
	require.Equal(t, int64(14), g)
}

// A batch worker drains a queue of jobs at most 50 per second: each round
// it asks for as many as are queued, works on what it is granted, and
// when nothing is granted waits RetryAfter.
func ExampleLimiter_AllowAtMost() {
	mem := store.NewMemory() // store.NewRedis(rdb) to share the limit across a fleet of workers
	defer mem.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // stands in for the wall clock
	l, err := fleetlimit.New(algorithm.TokenBucket(50, time.Second, 50), mem, fleetlimit.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	queued := int64(120)
	for queued > 0 {
		granted, res, err := l.AllowAtMost(ctx, "worker-pool", min(queued, 50))
		if err != nil && granted == 0 {
			panic(err)
		}
		if granted == 0 {
			fmt.Printf("nothing granted, waiting %v\n", res.RetryAfter)
			now = now.Add(res.RetryAfter)
			continue
		}
		queued -= granted // ... run that many jobs ...
		fmt.Printf("ran %d, %d queued\n", granted, queued)
		now = now.Add(500 * time.Millisecond)
	}
	// Output:
	// ran 50, 70 queued
	// ran 25, 45 queued
	// ran 25, 20 queued
	// ran 20, 0 queued
}

// TestAllowAtMostStoreDown: with the store down, each failure policy
// decides a partial grant as its doc says, with an error wrapping
// ErrStoreUnavailable: FailOpen grants all of n, FailClosed nothing, and
// FailLocal grants from the in-process fallback by the same rule (a
// sliding log of 5: 3 of 3, then 2 of 3, then nothing).
func TestAllowAtMostStoreDown(t *testing.T) {
	ctx := context.Background()
	s := algorithm.SlidingWindowLog(5, time.Minute)
	for _, tc := range []struct {
		policy fleetlimit.FailurePolicy
		want   []int64
	}{
		{fleetlimit.FailOpen, []int64{3, 3, 3}},
		{fleetlimit.FailClosed, []int64{0, 0, 0}},
		{fleetlimit.FailLocal, []int64{3, 2, 0}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			opts := []fleetlimit.Option{fleetlimit.WithFailurePolicy(tc.policy), fleetlimit.WithoutBreaker(), fleetlimit.WithTimeout(time.Second)}
			if tc.policy == fleetlimit.FailLocal {
				local := store.NewMemory()
				t.Cleanup(func() { _ = local.Close() })
				opts = append(opts, fleetlimit.WithFallback(local, 1))
			}
			lim, err := fleetlimit.New(s, stores.Down(t), opts...)
			require.NoError(t, err)
			for i, want := range tc.want {
				g, res, err := lim.AllowAtMost(ctx, "k", 3)
				require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
				require.Equal(t, want, g, "call %d", i)
				require.Equal(t, want > 0, res.Allowed, "call %d", i)
			}
		})
	}
}

// TestAllowAtMostShadowAndTiers: in shadow mode a grant below n is raised
// to n and marked Shadow, though the store granted (and recorded) less;
// with tiers the most a request may ask is the key's tier's.
func TestAllowAtMostShadowAndTiers(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	t.Cleanup(func() { _ = mem.Close() })
	shadow, err := fleetlimit.New(algorithm.FixedWindow(4, time.Minute), mem, fleetlimit.WithShadow(), fleetlimit.WithName("shadow"))
	require.NoError(t, err)
	g, res, err := shadow.AllowAtMost(ctx, "k", 3)
	require.NoError(t, err)
	require.Equal(t, int64(3), g)
	require.False(t, res.Shadow)
	// 1 is left: the store grants 1, shadow mode lets all 3 through.
	g, res, err = shadow.AllowAtMost(ctx, "k", 3)
	require.NoError(t, err)
	require.Equal(t, int64(3), g)
	require.True(t, res.Shadow)
	require.Zero(t, res.Remaining)

	premium := algorithm.FixedWindow(100, time.Minute)
	tiered, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), mem, fleetlimit.WithName("tiered"),
		fleetlimit.WithStrategyFor(func(_ context.Context, key string) (algorithm.Strategy, error) {
			if key == "premium" {
				return premium, nil
			}
			return nil, nil
		}))
	require.NoError(t, err)
	g, _, err = tiered.AllowAtMost(ctx, "premium", 50)
	require.NoError(t, err)
	require.Equal(t, int64(50), g)
	g, _, err = tiered.AllowAtMost(ctx, "basic", 50)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)
	require.Zero(t, g)
}
