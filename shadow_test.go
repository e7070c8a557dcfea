package fleetlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// A shadow limiter on every store, step by step on a pinned clock: it
// admits what a limit of 2 admits, turns the third request's denial into a
// shadow admission (the denial's fields, Allowed and Shadow set), records
// nothing for it, and tells the observer "would deny". Peek agrees. A
// caller gone and bad input are not turned into admissions.
func TestShadowSteps(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			rec := &spy.Observer{}
			prefix := redistest.Prefix()
			opts := []fleetlimit.Option{fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithTimeout(slowMachine),
				fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(time.Second)))}
			shadow, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), st,
				append(opts, fleetlimit.WithShadow(), fleetlimit.WithObserver(rec))...)
			require.NoError(t, err)
			// The same limit enforced, on the same keys: it sees what the
			// shadow limiter recorded.
			enforced, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), st, opts...)
			require.NoError(t, err)

			for i := range 2 {
				res, err := shadow.Allow(bg, "alice")
				require.NoError(t, err)
				require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 2, Remaining: int64(1 - i), ResetAfter: 59 * time.Second}, res, "request %d: admitted by the limit", i)
			}
			p, err := shadow.Peek(bg, "alice", 1)
			require.NoError(t, err)
			res, err := shadow.Allow(bg, "alice")
			require.NoError(t, err)
			// The limit's denial: retry at the window's end, 59s away.
			want := fleetlimit.Result{Allowed: true, Shadow: true, Limit: 2, RetryAfter: 59 * time.Second, ResetAfter: 59 * time.Second}
			require.Equal(t, want, res, "the third request: a shadow admission")
			require.Equal(t, want, p, "Peek says what AllowN does")

			// Nothing was recorded for the shadow admission: the enforcing
			// limiter sees the key holding 2, no more.
			d, err := enforced.Allow(bg, "alice")
			require.NoError(t, err)
			require.Equal(t, fleetlimit.Result{Limit: 2, RetryAfter: 59 * time.Second, ResetAfter: 59 * time.Second}, d)

			// A cost above the limit can never pass: in shadow it is admitted too.
			res, err = shadow.AllowN(bg, "bob", 3)
			require.NoError(t, err)
			require.True(t, res.Allowed && res.Shadow, "%+v", res)

			events := rec.Take()
			require.Len(t, events, 4)
			for i, e := range events {
				would := i >= 2
				require.Equal(t, !would, e.Allowed, "event %d: the observer sees the decision", i)
				require.Equal(t, would, e.Shadow, "event %d", i)
				require.Equal(t, fleetlimit.DecidedByStore, e.DecidedBy)
				require.Same(t, shadow.Breaker(), e.Breaker, "the event carries the limiter's breaker")
			}

			// A caller gone is denied, shadow or not.
			ctx, cancel := context.WithCancel(bg)
			cancel()
			res, err = shadow.Allow(ctx, "carol")
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, fleetlimit.Result{Limit: 2}, res)
			e := rec.Take()
			require.Len(t, e, 1)
			require.False(t, e[0].Allowed || e[0].Shadow)
			require.Equal(t, fleetlimit.DecidedByCaller, e[0].DecidedBy)

			// Bad input is an error, not an admission.
			res, err = shadow.Allow(bg, "")
			require.ErrorIs(t, err, fleetlimit.ErrInvalidKey)
			require.False(t, res.Allowed || res.Shadow)
		})
	}
}

// A shadow limiter whose store is down under FailClosed admits, as shadow
// admissions, with the store's error; the observer sees the policy's
// denial.
func TestShadowFailClosed(t *testing.T) {
	closed := stores.Down(t)
	rec := &spy.Observer{}
	l, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), closed, fleetlimit.WithShadow(), fleetlimit.WithObserver(rec),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	require.NoError(t, err)
	res, err := l.Allow(bg, "alice")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	require.Equal(t, fleetlimit.Result{Allowed: true, Shadow: true, Limit: 2,
		RetryAfter: fleetlimit.FailClosedRetryAfter, ResetAfter: fleetlimit.FailClosedRetryAfter}, res)
	e := rec.Take()
	require.Len(t, e, 1)
	require.True(t, !e[0].Allowed && e[0].Shadow && e[0].Degraded())
	require.Equal(t, fleetlimit.DecidedByPolicy, e[0].DecidedBy)
}

// TestPropertyShadow: on every store and for every registered algorithm, a
// generated timeline decided by a shadow limiter and by an enforcing one
// (each over its own key prefix) gets the same decisions, except that each
// denial is a shadow admission with the denial's fields; and on Redis, each
// key's recorded state (value and TTL) is the same in both at the end.
func TestPropertyShadow(t *testing.T) {
	proptest.CheckEntries(t, resetPeekBackends(t, proptest.ExpiringBackends), func(b proptest.Backend, s proptest.Scenario) (string, error) {
		return checkShadow(b, s)
	})
}

func checkShadow(b proptest.Backend, s proptest.Scenario) (string, error) {
	evs := s.Events()
	enforced, err := proptest.NewRig(b.Store, s.Strat.S)
	if err != nil {
		return "", err
	}
	shadow, err := proptest.NewRig(b.Store, s.Strat.S, fleetlimit.WithShadow())
	if err != nil {
		return "", err
	}
	// Interleaved, so that each key's TTL on the real server runs down
	// by about as much real time in both.
	for i, ev := range evs {
		want, err := enforced.At(ev)
		if err != nil {
			return "", err
		}
		got, err := shadow.At(ev)
		if err != nil {
			return "", err
		}
		w := want
		if !w.Allowed {
			w.Allowed, w.Shadow = true, true
		}
		if got != w {
			return fmt.Sprintf("request %d (%q n=%d at +%v): shadow %+v, enforcing %+v",
				i, ev.Key, ev.N, ev.At.Sub(s.Base), got, want), nil
		}
	}
	for _, k := range proptest.Keys {
		// The shadow's write came a moment after the enforcing one's:
		// its TTL is the longer.
		sh, err := redisStates(b, shadow.RedisKeys(k))
		if err != nil {
			return "", err
		}
		en, err := redisStates(b, enforced.RedisKeys(k))
		if err != nil {
			return "", err
		}
		if msg := sameStates(sh, en); msg != "" {
			return fmt.Sprintf("key %q: from the shadow limiter's state to the enforcing one's: %s", k, msg), nil
		}
	}
	return "", nil
}
