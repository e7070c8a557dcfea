package fleetlimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// A hot key with lease-ahead, on every store: once its first lease is
// held, no decision waits on a round trip while the key has capacity —
// each lease taken ahead lands (here: the test waits for it, as a round
// trip shorter than ⌊size/2⌋ decisions would) before the one being spent
// is — and the round trips per decision stay 1/size. Without lease-ahead
// every lease's end is a decision that waits.
func TestLeaseAheadHotKeyNeverWaits(t *testing.T) {
	const size, decisions = 64, 64 * 40
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			for _, ahead := range []bool{false, true} {
				var trips atomic.Int64
				opts := []fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
					fleetlimit.WithLeases(size, time.Hour)}
				if ahead {
					opts = append(opts, fleetlimit.WithLeaseAhead())
				}
				l, err := fleetlimit.New(algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), countLeases{st, &trips}, opts...)
				require.NoError(t, err)
				for range decisions {
					res, err := l.Allow(bg, "hot")
					require.NoError(t, err)
					require.True(t, res.Allowed)
					fleetlimit.SettleLeases(l)
				}
				waits := fleetlimit.LeaseWaits(l)
				if ahead {
					// The key's first decision (exact) and its first lease.
					require.Equal(t, int64(2), waits, "decisions that waited on a round trip")
				} else {
					require.Equal(t, int64(1+(decisions-1+size-1)/size), waits, "without lease-ahead: the exact decision and one per lease")
				}
				require.LessOrEqual(t, trips.Load(), int64(1+(decisions+size-1)/size), "lease round trips")
				require.NoError(t, l.Close())
			}
		})
	}
}

// countLeases is a store counting its Lease calls.
type countLeases struct {
	store.Store
	n *atomic.Int64
}

func (c countLeases) Lease(ctx context.Context, req store.Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	c.n.Add(1)
	return c.Store.(store.Leaser).Lease(ctx, req, terms)
}

// Close waits for a round trip taking a lease ahead and hands back what
// it took: no goroutine outlives Close, no unit is held after it.
func TestLeaseAheadCloseWaitsForTheRoundTrip(t *testing.T) {
	mem := stores.Memory(t)
	st := &gatedLeases{Store: mem, entered: make(chan struct{}, 1), release: make(chan struct{})}
	p := redistest.Prefix()
	l, err := fleetlimit.New(algorithm.FixedWindow(100, time.Hour), st, fleetlimit.WithKeyPrefix(p),
		fleetlimit.WithTimeout(time.Minute), fleetlimit.WithLeases(10, time.Hour), fleetlimit.WithLeaseAhead())
	require.NoError(t, err)
	exact, err := fleetlimit.New(algorithm.FixedWindow(100, time.Hour), mem, fleetlimit.WithKeyPrefix(p))
	require.NoError(t, err)
	fleetlimit.LeaseFromTheFirst(l)
	for i := range 6 { // a lease of 10: 9, 8 … 4 left; the spend leaving 5 goes ahead
		res, err := l.Allow(bg, "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
		if i == 0 {
			// Gated from the first lease on: the round trip taking the
			// next ahead runs on a goroutine of its own, which may reach
			// the store before the spend that started it returns.
			st.gate.Store(true)
		}
	}
	select {
	case <-st.entered:
	case <-time.After(time.Minute):
		t.Fatal("no lease was taken ahead")
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a round trip taking a lease ahead was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(st.release)
	require.NoError(t, <-closed)
	peek, err := exact.Peek(bg, "k", 1)
	require.NoError(t, err)
	require.Equal(t, int64(100-6), available(peek), "after Close the store is short of exactly the 6 admitted")
	_, err = fleetlimit.New(algorithm.FixedWindow(100, time.Hour), mem, fleetlimit.WithLeaseAhead())
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, "WithLeaseAhead without WithLeases")
}

// gatedLeases is a store whose Lease calls, once gate is set, announce
// themselves on entered and wait for release.
type gatedLeases struct {
	store.Store
	gate             atomic.Bool
	entered, release chan struct{}
}

func (g *gatedLeases) Lease(ctx context.Context, req store.Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	if g.gate.Load() && terms.Want > 0 {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Store.(store.Leaser).Lease(ctx, req, terms)
}

// Adaptive sizes step by step (memory, a virtual clock): a hot key's
// leases double from the floor to size; an instance gone quiet asks for
// half once a lease ages out mostly unspent.
func TestLeaseFloorSteps(t *testing.T) {
	st := stores.Memory(t)
	clock := &fakeclock.Clock{}
	clock.Set(proptest.Epoch)
	l, err := fleetlimit.New(algorithm.FixedWindow(1000, time.Hour), st, fleetlimit.WithKeyPrefix(redistest.Prefix()),
		fleetlimit.WithClock(clock.Now), fleetlimit.WithLeases(16, time.Minute), fleetlimit.WithLeaseFloor(2))
	require.NoError(t, err)
	fleetlimit.LeaseFromTheFirst(l)
	var sizes []int64
	for range 2 + 4 + 8 + 16 + 16 {
		lefts := fleetlimit.LeaseLefts(l, "k")
		res, err := l.Allow(bg, "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
		if len(lefts) == 0 || lefts[0] == 0 { // this request took a lease
			sizes = append(sizes, fleetlimit.LeaseLefts(l, "k")[0]+1)
		}
	}
	require.Equal(t, []int64{2, 4, 8, 16, 16}, sizes, "each lease spent at once: twice the last, up to size")
	// The last spent late (a minute on) asks for as many, 16; it ages out
	// with 15 unspent: the next asks for half, 8.
	clock.Set(proptest.Epoch.Add(time.Minute))
	_, err = l.Allow(bg, "k")
	require.NoError(t, err)
	require.Equal(t, []int64{15}, fleetlimit.LeaseLefts(l, "k"))
	clock.Set(proptest.Epoch.Add(2 * time.Minute))
	_, err = l.Allow(bg, "k")
	require.NoError(t, err)
	require.Equal(t, []int64{7}, fleetlimit.LeaseLefts(l, "k"))
	for _, opts := range [][]fleetlimit.Option{
		{fleetlimit.WithLeases(16, time.Minute), fleetlimit.WithLeaseFloor(17)},
		{fleetlimit.WithLeases(16, time.Minute), fleetlimit.WithLeaseFloor(1)},
		{fleetlimit.WithLeaseFloor(2)},
	} {
		_, err := fleetlimit.New(algorithm.FixedWindow(1000, time.Hour), st, opts...)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	}
}

// A penalty box leases ahead, and a lease taken ahead that the strategy
// denies is no strike: it decides nothing for a caller. On every store
// (the Cluster too), with one denial enough for a ban of an hour: the
// round trip taken ahead is denied (another instance spent the window),
// yet the next window admits; a request of the instance's own that finds
// its leases spent and is denied by its round trip starts the ban.
func TestLeaseAheadDenialIsNoStrike(t *testing.T) {
	for _, b := range leaseBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			var trips atomic.Int64
			s, penalty := algorithm.FixedWindow(20, time.Minute), fleetlimit.WithPenalty(1, time.Hour, time.Hour, 2*time.Hour)
			a := fleetlimit.LeaseFromTheFirst(limitersOf(t, s, countLeases{b.Store, &trips}, clock, penalty)(
				fleetlimit.WithLeases(8, time.Hour), fleetlimit.WithLeaseAhead()))
			exact, err := fleetlimit.New(s, b.Store, penalty, fleetlimit.WithKeyPrefix(a.KeyPrefix()), fleetlimit.WithClock(clock.Now))
			require.NoError(t, err)
			allow := func(l *fleetlimit.Limiter, n int64, want bool) fleetlimit.Result {
				t.Helper()
				res, err := l.AllowN(bg, "u", n)
				require.NoError(t, err)
				require.Equal(t, want, res.Allowed, "%+v", res)
				return res
			}
			// a leases min(8, max(1, 20/2)) = 8 and holds 7; the other
			// instance spends the window's 12 left.
			allow(a, 1, true)
			allow(exact, 12, true)
			// Three spends from the lease leave it 4 = ⌊8/2⌋: the next
			// lease is taken ahead, and denied (the window is spent).
			for range 3 {
				allow(a, 1, true)
			}
			fleetlimit.SettleLeases(a)
			require.Equal(t, int64(2), trips.Load(), "the lease and the one taken ahead")
			require.Equal(t, []int64{4}, fleetlimit.LeaseLefts(a, "u"), "the lease taken ahead took nothing")
			// The next window admits: no ban was started.
			clock.Set(proptest.Epoch.Add(time.Minute))
			peek, err := exact.Peek(bg, "u", 1)
			require.NoError(t, err)
			require.True(t, peek.Allowed, "a lease taken ahead and denied started a ban: %+v", peek)
			require.Equal(t, int64(19), peek.Remaining)
			// A request's own denied round trip is a strike: the other
			// instance spends the window, a spends its lease, then asks.
			allow(exact, 20, true)
			for range 4 {
				allow(a, 1, true)
			}
			res := allow(a, 1, false)
			require.Equal(t, time.Hour, res.RetryAfter, "a denied request of the instance's own started the ban")
			require.NoError(t, a.Close())
		})
	}
}

// Every strategy that leases leases ahead, on every store (the Cluster
// too): the four that lease, a composite of them, a penalty box, a tier
// (WithStrategyFor) of each, and partial grants (AllowAtMost) spending
// from a lease. A hot key's decisions never wait on a round trip once its
// first lease is held — the key's first decision (exact) and its first
// lease are the only two that wait — and the round trips stay one per
// size decisions.
func TestLeaseAheadEveryLeasingStrategy(t *testing.T) {
	const size, decisions, limit = 16, 16 * 12, 1_000_000
	fw, tb := algorithm.FixedWindow(limit, time.Hour), algorithm.TokenBucket(limit, time.Hour, limit)
	tier := func(s algorithm.Strategy) fleetlimit.Option {
		return fleetlimit.WithStrategyFor(func(context.Context, string) (algorithm.Strategy, error) { return s, nil })
	}
	penalty := fleetlimit.WithPenalty(3, time.Minute, time.Minute, time.Hour)
	cases := []struct {
		name   string
		s      algorithm.Strategy
		opts   []fleetlimit.Option
		atMost bool
	}{
		{"token_bucket", tb, nil, false},
		{"fixed_window", fw, nil, false},
		{"sliding_window_log", algorithm.SlidingWindowLog(limit, time.Hour), nil, false},
		{"sliding_window_counter", algorithm.SlidingWindowCounter(limit, time.Hour), nil, false},
		{"all", algorithm.All(fw, tb), nil, false},
		{"penalty", fw, []fleetlimit.Option{penalty}, false},
		{"penalty around all", algorithm.All(fw, tb), []fleetlimit.Option{penalty}, false},
		{"tier", fw, []fleetlimit.Option{tier(algorithm.FixedWindow(limit/2, time.Hour))}, false},
		{"tier of all", algorithm.All(fw, tb), []fleetlimit.Option{tier(algorithm.All(algorithm.FixedWindow(limit/2, time.Hour), tb))}, false},
		{"tier in a penalty box", fw, []fleetlimit.Option{tier(algorithm.FixedWindow(limit/2, time.Hour)), penalty}, false},
		{"allow at most", fw, nil, true},
	}
	for _, b := range leaseBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			for _, c := range cases {
				var trips atomic.Int64
				opts := append([]fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(proptest.Timeout),
					fleetlimit.WithLeases(size, time.Hour), fleetlimit.WithLeaseAhead()}, c.opts...)
				l, err := fleetlimit.New(c.s, grantingCount{countLeases{b.Store, &trips}}, opts...)
				require.NoError(t, err, c.name)
				for i := range decisions {
					var res fleetlimit.Result
					if c.atMost && i >= 2 { // once the lease is held: AllowAtMost does not take one
						_, res, err = l.AllowAtMost(bg, "hot", 1)
					} else {
						res, err = l.Allow(bg, "hot")
					}
					require.NoError(t, err, c.name)
					require.True(t, res.Allowed, "%s: decision %d", c.name, i)
					fleetlimit.SettleLeases(l)
				}
				require.Equal(t, int64(2), fleetlimit.LeaseWaits(l), "%s: decisions that waited on a round trip", c.name)
				require.LessOrEqual(t, trips.Load(), int64(1+(decisions+size-1)/size), "%s: lease round trips", c.name)
				require.NoError(t, l.Close(), c.name)
			}
		})
	}
}

// grantingCount is countLeases that grants part of a request too
// (store.Granter), as its store does.
type grantingCount struct{ countLeases }

func (g grantingCount) AtMost(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	return g.Store.(store.Granter).AtMost(ctx, req)
}
