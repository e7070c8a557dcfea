package fleetlimit_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

var bg = context.Background()

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func TestNewRejectsBadConfig(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	good := algorithm.SlidingWindowLog(10, time.Minute)
	cases := map[string]func() (*fleetlimit.Limiter, error){
		"nil strategy": func() (*fleetlimit.Limiter, error) { return fleetlimit.New(nil, mem) },
		"nil store":    func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, nil) },
		"limit 0": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(algorithm.SlidingWindowLog(0, time.Minute), mem)
		},
		"rate -1": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(algorithm.TokenBucket(-1, time.Second, 1), mem)
		},
		"burst 0": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(algorithm.TokenBucket(1, time.Second, 0), mem)
		},
		"period 0": func() (*fleetlimit.Limiter, error) { return fleetlimit.New(algorithm.TokenBucket(1, 0, 1), mem) },
		"window -1s": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(algorithm.FixedWindow(1, -time.Second), mem)
		},
		"limit above 2^53": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(algorithm.FixedWindow(1<<54, time.Minute), mem)
		},
		"prefix with brace": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(good, mem, fleetlimit.WithKeyPrefix("rl{x}:"))
		},
		"timeout 0": func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, mem, fleetlimit.WithTimeout(0)) },
		"timeout below the floor": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(good, mem, fleetlimit.WithTimeout(fleetlimit.MinTimeout-time.Microsecond))
		},
		"nil clock":       func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, mem, fleetlimit.WithClock(nil)) },
		"typed nil store": func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, (*store.Redis)(nil)) },
		"unknown policy":  func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, mem, fleetlimit.WithFailurePolicy(7)) },
		"empty name":      func() (*fleetlimit.Limiter, error) { return fleetlimit.New(good, mem, fleetlimit.WithName("")) },
		"prefix over 1024 B": func() (*fleetlimit.Limiter, error) {
			return fleetlimit.New(good, mem, fleetlimit.WithKeyPrefix(strings.Repeat("p", 1025)))
		},
	}
	for name, mk := range cases {
		l, err := mk()
		require.Nil(t, l, name)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, name)
	}
	_, err := fleetlimit.New(algorithm.SlidingWindowLog(0, time.Minute), mem)
	require.ErrorIs(t, err, algorithm.ErrInvalidStrategy)
	_, err = fleetlimit.New(good, mem, fleetlimit.WithTimeout(time.Millisecond))
	require.ErrorContains(t, err, "MinTimeout", "the error names the floor")
	_, err = fleetlimit.New(good, mem, fleetlimit.WithTimeout(fleetlimit.MinTimeout))
	require.NoError(t, err, "the floor itself is accepted")
}

// Bad input is an error and records nothing: the key still admits its full
// limit afterwards.
func TestBadInputRecordsNothing(t *testing.T) {
	for name, st := range stores.All(t) {
		for _, e := range algorithm.Registry() {
			l, err := fleetlimit.New(e.New(2, time.Minute), st, fleetlimit.WithClock(fixedClock(proptest.Epoch)), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
			require.NoError(t, err)
			for _, bad := range []struct {
				key  string
				n    int64
				want error
			}{
				{"", 1, fleetlimit.ErrInvalidKey},
				{strings.Repeat("k", store.MaxKeyLen+1), 1, fleetlimit.ErrInvalidKey},
				{"u", 0, fleetlimit.ErrInvalidCost},
				{"u", -5, fleetlimit.ErrInvalidCost},
				{"u", algorithm.MaxInt + 1, fleetlimit.ErrInvalidCost},
			} {
				res, err := l.AllowN(bg, bad.key, bad.n)
				require.ErrorIs(t, err, bad.want, "%s %s key len %d n %d", name, e.Name, len(bad.key), bad.n)
				require.False(t, res.Allowed)
			}
			for i := range 3 {
				res, err := l.Allow(bg, "u")
				require.NoError(t, err)
				require.Equal(t, i < 2, res.Allowed, "%s %s request %d", name, e.Name, i)
			}
		}
	}
}

// n above the limit is a plain denial, not an error, and does not spoil the
// key.
func TestCostAboveLimitIsPlainDenial(t *testing.T) {
	for name, st := range stores.All(t) {
		for _, e := range algorithm.Registry() {
			l, err := fleetlimit.New(e.New(5, time.Minute), st, fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(time.Second))), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
			require.NoError(t, err)
			res, err := l.AllowN(bg, "u", 6)
			require.NoError(t, err)
			require.False(t, res.Allowed, name)
			require.Positive(t, res.RetryAfter, "%s %s: denied means RetryAfter > 0", name, e.Name)
			res, err = l.AllowN(bg, "u", 5)
			require.NoError(t, err)
			require.True(t, res.Allowed, "%s %s", name, e.Name)
		}
	}
}

func TestClockOutOfRange(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	for _, at := range []time.Time{{}, time.Unix(-1, 0), fleetlimit.MaxTime().Add(time.Microsecond)} {
		l, err := fleetlimit.New(algorithm.FixedWindow(1, time.Minute), mem, fleetlimit.WithClock(fixedClock(at)))
		require.NoError(t, err)
		_, err = l.Allow(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrClockOutOfRange, "%v", at)
	}
}

// Limiters in many processes share one limit through one Redis; limiters
// with another prefix or algorithm keep separate limits.
func TestLimitersShareAStore(t *testing.T) {
	c := redistest.Real(t)
	p := redistest.Prefix()
	mk := func(s algorithm.Strategy, prefix string) *fleetlimit.Limiter {
		l, err := fleetlimit.New(s, stores.Redis(t, redis.NewClient(&redis.Options{Addr: c.Options().Addr, ContextTimeoutEnabled: true})), fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithTimeout(slowMachine))
		require.NoError(t, err)
		return l
	}
	a, b := mk(algorithm.SlidingWindowLog(3, time.Minute), p), mk(algorithm.SlidingWindowLog(3, time.Minute), p)
	other := mk(algorithm.SlidingWindowLog(3, time.Minute), p+"other:")
	bucket := mk(algorithm.TokenBucket(3, time.Minute, 3), p)
	admitted := 0
	for i := range 6 {
		l := a
		if i%2 == 1 {
			l = b
		}
		res, err := l.Allow(bg, "u")
		require.NoError(t, err)
		if res.Allowed {
			admitted++
		}
	}
	require.Equal(t, 3, admitted, "two instances, one limit")
	for _, l := range []*fleetlimit.Limiter{other, bucket} {
		res, err := l.Allow(bg, "u")
		require.NoError(t, err)
		require.True(t, res.Allowed, "%s has its own state", l.Name())
	}
}

// closedAddr is an address nothing listens on: connections are refused.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// When the store cannot decide — closed, refused, hung — the policy does, the
// error wraps ErrStoreUnavailable, and the call ends within the timeout
// (here 50ms, while the client itself would wait a minute): by default
// (FailLocal) an in-process limiter at the full limit, FailOpen admits
// without a bound, FailClosed denies.
func TestFailurePolicy(t *testing.T) {
	client := func(addr string) store.Store {
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, DialTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return stores.Redis(t, c)
	}
	failing := map[string]store.Store{
		"refused": client(closedAddr(t)),
		"hung":    client(redistest.HungAddr(t)),
	}
	for name, st := range failing {
		local, err := fleetlimit.New(algorithm.FixedWindow(10, time.Hour), st, fleetlimit.WithTimeout(50*time.Millisecond),
			fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithClock(fixedClock(proptest.Epoch)))
		require.NoError(t, err)
		// The default local store is shared by the process's limiters, and
		// other tests' virtual clocks may have moved its sweep horizon past
		// this one's: then it judges at the horizon, so the waits are not
		// compared here (see FailLocal).
		for i, want := range []fleetlimit.Result{
			{Allowed: true, Limit: 10, Remaining: 7},
			{Allowed: true, Limit: 10, Remaining: 4},
			{Allowed: true, Limit: 10, Remaining: 1},
			{Limit: 10, Remaining: 1},
		} {
			res, err := local.AllowN(bg, "u", 3)
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, name)
			require.Equal(t, !want.Allowed, res.RetryAfter > 0, "%s call %d", name, i)
			require.Positive(t, res.ResetAfter, "%s call %d", name, i)
			res.RetryAfter, res.ResetAfter = 0, 0
			require.Equal(t, want, res, "%s call %d: fail-local (the default) keeps the limit in process", name, i)
		}

		open, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st, fleetlimit.WithTimeout(50*time.Millisecond),
			fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
		require.NoError(t, err)
		res, err := open.AllowN(bg, "u", 3)
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, name)
		require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 10}, res, "%s: fail-open admits", name)

		shut, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st, fleetlimit.WithTimeout(50*time.Millisecond), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
		require.NoError(t, err)
		res, err = shut.Allow(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, name)
		require.Equal(t, fleetlimit.Result{Limit: 10, RetryAfter: fleetlimit.FailClosedRetryAfter, ResetAfter: fleetlimit.FailClosedRetryAfter}, res, "%s: fail-closed denies", name)
	}
}

// A store or go-redis client used after Close is the program's mistake,
// not an outage: every policy denies, with an error wrapping store.ErrClosed
// and not ErrStoreUnavailable; the breaker counts nothing and the observer
// sees no decision. (Before, FailOpen admitted every such call.)
func TestClosedStoreIsAnError(t *testing.T) {
	closed := store.NewMemory()
	require.NoError(t, closed.Close())
	closedClient := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	require.NoError(t, closedClient.Close())
	for name, st := range map[string]store.Store{"closed store": closed, "closed client": stores.Redis(t, closedClient)} {
		for _, policy := range []fleetlimit.FailurePolicy{fleetlimit.FailLocal, fleetlimit.FailOpen, fleetlimit.FailClosed} {
			observed := 0
			br := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1})
			l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st, fleetlimit.WithFailurePolicy(policy),
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithBreaker(br),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(fleetlimit.Event) { observed++ })))
			require.NoError(t, err)
			for range 3 {
				res, err := l.Allow(bg, "u")
				require.ErrorIs(t, err, store.ErrClosed, "%s, %v", name, policy)
				require.NotErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "%s, %v", name, policy)
				require.Equal(t, fleetlimit.Result{Limit: 10}, res, "%s, %v: denied, by no policy", name, policy)
			}
			require.Equal(t, fleetlimit.BreakerClosed, br.State(), "%s, %v: the breaker counts no mistake", name, policy)
			require.Zero(t, observed, "%s, %v: no decision was made", name, policy)
		}
	}
}

// A store whose own clock is out of range (a memory store's unset fake
// clock reads the year 1) is the program's mistake, not an outage: under
// every policy each decision is denied with only Limit set and an error
// wrapping ErrClockOutOfRange, not ErrStoreUnavailable; the breaker stays
// closed; the observer is told nothing.
func TestStoreClockOutOfRangeIsAnError(t *testing.T) {
	for _, policy := range []fleetlimit.FailurePolicy{fleetlimit.FailLocal, fleetlimit.FailOpen, fleetlimit.FailClosed} {
		st := store.NewMemory(store.WithMemoryClock(func() time.Time { return time.Time{} }))
		observed := 0
		br := newBreaker(t, fleetlimit.BreakerConfig{MinFailures: 1, MinOutage: -1})
		l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st, fleetlimit.WithFailurePolicy(policy),
			fleetlimit.WithBreaker(br), fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(fleetlimit.Event) { observed++ })))
		require.NoError(t, err)
		for range 3 {
			res, err := l.Allow(bg, "u")
			require.ErrorIs(t, err, fleetlimit.ErrClockOutOfRange, "%v", policy)
			require.ErrorIs(t, err, store.ErrClockOutOfRange, "%v", policy)
			require.NotErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "%v", policy)
			require.Equal(t, fleetlimit.Result{Limit: 10}, res, "%v: denied, by no policy", policy)
		}
		require.Equal(t, fleetlimit.BreakerClosed, br.State(), "%v: the breaker counts no mistake", policy)
		require.Zero(t, observed, "%v: no decision was made", policy)
		require.Zero(t, st.Len(), "%v: nothing recorded", policy)
		require.NoError(t, l.Close())
		require.NoError(t, st.Close())
	}
}

// A caller's cancelled context is reported as such, not as a store outage,
// is denied under either policy, and records nothing.
func TestCancelledContext(t *testing.T) {
	for name, st := range stores.All(t) {
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(1, time.Minute), st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		res, err := l.Allow(ctx, "u")
		require.ErrorIs(t, err, context.Canceled, name)
		require.False(t, errors.Is(err, fleetlimit.ErrStoreUnavailable), name)
		require.Equal(t, fleetlimit.Result{Limit: 1}, res, "%s: a cancelled caller is denied", name)
		open, err := fleetlimit.New(algorithm.SlidingWindowLog(1, time.Minute), st, fleetlimit.WithKeyPrefix(redistest.Prefix()),
			fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
		require.NoError(t, err)
		res, err = open.Allow(ctx, "u")
		require.ErrorIs(t, err, context.Canceled, name)
		require.Equal(t, fleetlimit.Result{Limit: 1}, res, "%s: a cancelled caller is denied even under FailOpen", name)
		res, err = l.Allow(bg, "u")
		require.NoError(t, err)
		require.True(t, res.Allowed, "%s: the cancelled call recorded nothing", name)
	}
}

// With the default clock a Redis store judges time by the server's TIME; the
// result is the same limit with no clock configured anywhere.
func TestDefaultServerClock(t *testing.T) {
	for name, st := range stores.All(t) {
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(3, time.Minute), st, fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
		require.NoError(t, err)
		var got []bool
		for range 5 {
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			got = append(got, res.Allowed)
		}
		require.Equal(t, []bool{true, true, true, false, false}, got, name)
	}
}

func TestAccessors(t *testing.T) {
	mem := store.NewMemory()
	defer mem.Close()
	s := algorithm.FixedWindow(1, time.Minute)
	l, err := fleetlimit.New(s, mem)
	require.NoError(t, err)
	require.Equal(t, "fixed_window", l.Name())
	require.Equal(t, fleetlimit.FailLocal, l.Policy())
	require.Equal(t, s, l.Strategy())
	l, err = fleetlimit.New(s, mem, fleetlimit.WithName("login"), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	require.NoError(t, err)
	require.Equal(t, "login", l.Name())
	require.Equal(t, "fail-closed", l.Policy().String())
}

// Callers whose own deadlines are shorter than the limiter's timeout, on a
// hung Redis, are denied when their deadline passes, under FailOpen too, and
// do not open the breaker: the deadline is the caller's, not the store's, and
// a client must not be able to open the breaker for everyone (and so, under
// FailOpen, lift the limit) by sending short deadlines. A caller whose
// deadline is longer than the limiter's timeout is decided by the policy and
// counted, as any timeout.
func TestCallerDeadlines(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.HungAddr(t), ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	st := stores.Redis(t, c)
	defer st.Close()
	l, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), st, fleetlimit.WithTimeout(200*time.Millisecond),
		fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	require.NoError(t, err)
	for i := range 2 * fleetlimit.DefaultBreakerConfig().MinFailures {
		ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
		res, err := l.Allow(ctx, "u")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
		require.NotErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "call %d", i)
		require.Equal(t, fleetlimit.Result{Limit: 10}, res, "call %d: denied", i)
	}
	require.Equal(t, fleetlimit.BreakerClosed, l.Breaker().State())
	for i := range fleetlimit.DefaultBreakerConfig().MinFailures {
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		res, err := l.Allow(ctx, "u")
		cancel()
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "call %d", i)
		require.ErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
		require.True(t, res.Allowed, "call %d: the limiter's own timeout is the store's failure: FailOpen decides", i)
	}
	require.Equal(t, fleetlimit.BreakerOpen, l.Breaker().State())
	_, err = l.Allow(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen)
}

// Two unnamed limiters share state only when they apply the same rule: a
// 5-per-minute bucket does not spend a 100-per-minute bucket's tokens, and
// two identical ones (a fleet's instances) do share.
func TestUnnamedLimitersDoNotShareByAccident(t *testing.T) {
	for name, st := range stores.All(t) {
		mk := func(s algorithm.Strategy) *fleetlimit.Limiter {
			l, err := fleetlimit.New(s, st, fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(time.Second))), fleetlimit.WithTimeout(slowMachine))
			require.NoError(t, err)
			return l
		}
		key := redistest.Prefix() // a fresh user: the server is shared
		small, big, small2 := mk(algorithm.TokenBucket(5, time.Minute, 5)), mk(algorithm.TokenBucket(100, time.Minute, 100)), mk(algorithm.TokenBucket(5, time.Minute, 5))
		require.NotEqual(t, small.KeyPrefix(), big.KeyPrefix(), name)
		require.Equal(t, small.KeyPrefix(), small2.KeyPrefix(), name)
		res, err := small.AllowN(bg, key, 5)
		require.NoError(t, err)
		require.True(t, res.Allowed, name)
		res, err = big.Allow(bg, key)
		require.NoError(t, err)
		require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 600 * time.Millisecond}, res, "%s: the big bucket is its own", name)
		res, err = small2.Allow(bg, key)
		require.NoError(t, err)
		require.False(t, res.Allowed, "%s: the same rule is the same limit", name)
	}
	for _, e := range algorithm.Registry() {
		a, err := fleetlimit.New(e.New(10, time.Minute), store.NewMemory())
		require.NoError(t, err)
		b, err := fleetlimit.New(e.New(11, time.Minute), store.NewMemory())
		require.NoError(t, err)
		require.NotEqual(t, a.KeyPrefix(), b.KeyPrefix(), e.Name)
	}
}

// Named limiters keep separate state for one user key by default — two
// endpoints of the same algorithm with different limits never read each
// other's — while limiters of one name share it, as a fleet's instances do.
func TestNamesSeparateState(t *testing.T) {
	for name, st := range stores.All(t) {
		mk := func(s algorithm.Strategy, opts ...fleetlimit.Option) *fleetlimit.Limiter {
			l, err := fleetlimit.New(s, st, append([]fleetlimit.Option{fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(time.Second))), fleetlimit.WithTimeout(slowMachine)}, opts...)...)
			require.NoError(t, err)
			return l
		}
		p := strings.TrimSuffix(strings.TrimPrefix(redistest.Prefix(), "test:"), ":") // fresh names: the server is shared
		login := mk(algorithm.TokenBucket(1, time.Minute, 1), fleetlimit.WithName(p+"login"))
		api := mk(algorithm.TokenBucket(100, time.Minute, 100), fleetlimit.WithName(p+"api"))
		api2 := mk(algorithm.TokenBucket(100, time.Minute, 100), fleetlimit.WithName(p+"api"))
		require.Equal(t, fleetlimit.DefaultKeyPrefix+p+"login:", login.KeyPrefix())
		res, err := login.Allow(bg, "alice")
		require.NoError(t, err)
		require.True(t, res.Allowed, name)
		res, err = api.AllowN(bg, "alice", 60)
		require.NoError(t, err)
		require.Equal(t, int64(40), res.Remaining, "%s: the api's bucket is its own", name)
		res, err = api2.AllowN(bg, "alice", 40)
		require.NoError(t, err)
		require.True(t, res.Allowed, name)
		require.Zero(t, res.Remaining, "%s: another instance named api shares it", name)
		explicit := mk(algorithm.TokenBucket(1, time.Minute, 1), fleetlimit.WithName("x"), fleetlimit.WithKeyPrefix("given:"))
		require.Equal(t, "given:", explicit.KeyPrefix())
	}
}

// An option that needs an optional store interface is New's
// ErrInvalidConfig over a store without it, naming the interface.
func TestOptionsNeedTheirStore(t *testing.T) {
	bare := struct{ store.Store }{store.NewMemory()} // Decide and Close only
	for _, c := range []struct {
		opt   fleetlimit.Option
		iface string
	}{
		{fleetlimit.WithLeases(8, time.Second), "store.Leaser"},
		{fleetlimit.WithOverrides(time.Second), "store.Overrider"},
		{fleetlimit.WithRegistry(time.Minute), "store.Registrar"},
	} {
		_, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 10), bare, c.opt)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
		require.ErrorContains(t, err, c.iface)
	}
}
