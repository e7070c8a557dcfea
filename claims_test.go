package fleetlimit_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/stretchr/testify/require"
)

// A limiter that would share keys with a live limiter of this process
// under another rule is refused by New, with a message that says which and
// what to do; limiters that are one limit (same name, same strategy), or
// whose keys differ, are not.
func TestSharedKeysUnderAnotherRuleAreRefused(t *testing.T) {
	_, rdb := redistest.Mini(t)
	shared, err := store.NewRedis(rdb)
	require.NoError(t, err)
	other := store.NewMemory()
	defer other.Close()
	tb := func(n int64) algorithm.Strategy { return algorithm.TokenBucket(n, time.Minute, n) }
	name := fleetlimit.WithName
	prefix := fleetlimit.WithKeyPrefix

	api, err := fleetlimit.New(tb(10), shared, name("api"))
	require.NoError(t, err)
	for _, c := range []struct {
		what  string
		s     algorithm.Strategy
		st    store.Store
		opts  []fleetlimit.Option
		wants []string // in the error; none: accepted
	}{
		{"same name, another limit", tb(3), shared, []fleetlimit.Option{name("api")},
			[]string{`limiter "api" applies token_bucket, 3 per 1m0s`, "applies token_bucket, 10 per 1m0s", `key prefix "ratelimit:api:"`, "WithName"}},
		{"same name, another algorithm", algorithm.SlidingWindowLog(10, time.Minute), shared, []fleetlimit.Option{name("api")},
			[]string{"sliding_window_log", "token_bucket", "WithName"}},
		{"same name and strategy: another instance of one limit", tb(10), shared, []fleetlimit.Option{name("api")}, nil},
		{"same name over another store", tb(3), other, []fleetlimit.Option{name("api")}, nil},
		{"another name", tb(3), shared, []fleetlimit.Option{name("search")}, nil},
		{"same name, another prefix", tb(3), shared, []fleetlimit.Option{name("api"), prefix("v2:")}, nil},
		{"unnamed, another limit", tb(3), shared, nil, nil},
	} {
		l, err := fleetlimit.New(c.s, c.st, c.opts...)
		if c.wants == nil {
			require.NoError(t, err, c.what)
			require.NotNil(t, l, c.what)
			continue
		}
		require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig, c.what)
		require.Nil(t, l, c.what)
		for _, w := range c.wants {
			require.Contains(t, err.Error(), w, c.what)
		}
	}

	// Different names under one explicit prefix share keys all the same.
	_, err = fleetlimit.New(tb(10), shared, name("a"), prefix("given:"))
	require.NoError(t, err)
	_, err = fleetlimit.New(tb(3), shared, name("b"), prefix("given:"))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	require.Contains(t, err.Error(), `limiter "a"`)
	require.Contains(t, err.Error(), "WithKeyPrefix")
	// Different algorithms under one prefix do not: their keys differ.
	_, err = fleetlimit.New(algorithm.FixedWindow(3, time.Minute), shared, name("c"), prefix("given:"))
	require.NoError(t, err)

	runtime.KeepAlive(api)
}

// A limiter's claim ends with it: once the garbage collector has freed the
// only limiter named "gone", another rule may take the name.
func TestClaimsEndWithTheLimiter(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	p := strings.TrimSuffix(strings.TrimPrefix(redistest.Prefix(), "test:"), ":")
	func() {
		_, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), st, fleetlimit.WithName(p+"gone"))
		require.NoError(t, err)
	}()
	runtime.GC()
	runtime.GC()
	_, err := fleetlimit.New(algorithm.FixedWindow(3, time.Minute), st, fleetlimit.WithName(p+"gone"))
	require.NoError(t, err)
}

// Two unnamed limiters that differ in any parameter never share a key:
// their namespaces differ, so neither is refused and neither reads the
// other's state (TestUnnamedLimitersDoNotShareByAccident shows the state).
func TestUnnamedLimitersDifferInEveryParameter(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	for _, e := range algorithm.Registry() {
		prefixes := map[string]string{}
		for _, v := range []struct {
			limit  int64
			window time.Duration
		}{{10, time.Minute}, {11, time.Minute}, {10, 2 * time.Minute}, {10, time.Minute + time.Millisecond}} {
			l, err := fleetlimit.New(e.New(v.limit, v.window), st)
			require.NoError(t, err, e.Name)
			what := fmt.Sprint(v.limit, " per ", v.window)
			if other, dup := prefixes[l.KeyPrefix()]; dup {
				t.Errorf("%s: %s and %s share the key prefix %q", e.Name, other, what, l.KeyPrefix())
			}
			prefixes[l.KeyPrefix()] = what
		}
	}
	bucket, err := fleetlimit.New(algorithm.TokenBucket(10, time.Minute, 10), st)
	require.NoError(t, err)
	smallBurst, err := fleetlimit.New(algorithm.TokenBucket(10, time.Minute, 2), st)
	require.NoError(t, err)
	require.NotEqual(t, bucket.KeyPrefix(), smallBurst.KeyPrefix(), "burst is a parameter too")
}
