package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// resetPeekBackends are the stores the key operations' properties run on: memory,
// miniredis and, under ./test.sh, the real servers and 3-master clusters of
// Redis and Valkey (proptest.RealNames), from backends (proptest.Backends,
// or proptest.ExpiringBackends for a test that reads TTLs).
func resetPeekBackends(t *testing.T, backends func(*testing.T, ...string) []proptest.Backend) []proptest.Backend {
	names := []string{"memory", "miniredis"}
	names = append(names, proptest.RealNames(t)...)
	return backends(t, names...)
}

// TestPropertyReset: on every store and for every registered algorithm, a
// generated timeline is cut in two, and the key of the first request of the
// second half is reset between them. From then on, that key's decisions
// equal a fresh key's (a fresh limiter given only that key's remaining
// requests), and every other key's equal those of the same timeline without
// the reset.
func TestPropertyReset(t *testing.T) {
	bs := resetPeekBackends(t, proptest.Backends)
	check := func(b proptest.Backend, s proptest.Scenario) (string, error) { return checkReset(b.Store, s) }
	proptest.CheckEntries(t, bs, check)
	proptest.CheckComposites(t, bs, check)
}

func checkReset(st store.Store, s proptest.Scenario) (string, error) {
	evs := s.Events()
	if len(evs) == 0 {
		return "", nil
	}
	k := len(evs) / 2
	key := evs[k].Key
	var rigs [3]*proptest.Rig // reset, fresh, untouched
	for i := range rigs {
		r, err := proptest.NewRig(st, s.Strat.S)
		if err != nil {
			return "", err
		}
		rigs[i] = r
	}
	before, err := rigs[0].Run(evs[:k])
	if err != nil {
		return "", err
	}
	if err := rigs[0].Reset(key); err != nil {
		return "", err
	}
	after, err := rigs[0].Run(evs[k:])
	if err != nil {
		return "", err
	}
	untouched, err := rigs[2].Run(evs)
	if err != nil {
		return "", err
	}
	var only []proptest.Event
	for _, ev := range evs[k:] {
		if ev.Key == key {
			only = append(only, ev)
		}
	}
	fresh, err := rigs[1].Run(only)
	if err != nil {
		return "", err
	}
	outs := append(before, after...)
	for i, o := range outs[k:] {
		want, of := untouched[k+i].Res, "the same timeline without the reset"
		if o.Key == key {
			want, of, fresh = fresh[0].Res, "a fresh key", fresh[1:]
		}
		if !proptest.SameResult(o.Res, want) {
			return fmt.Sprintf("request %d (%q n=%d at +%v), after resetting %q before request %d: %+v, want %+v, as for %s",
				k+i, o.Key, o.N, o.At.Sub(s.Base), key, k, o.Res, want, of), nil
		}
	}
	return "", nil
}

// Reset's contract on every store: a spent key is whole again, for every
// limiter sharing its prefix; other keys and other limiters' prefixes keep
// theirs.
func TestResetSteps(t *testing.T) {
	all := stores.All(t)
	if redistest.HaveReal(t) {
		all["cluster"] = stores.Redis(t, redistest.Cluster(t))
	}
	for name, st := range all {
		t.Run(name, func(t *testing.T) {
			p := redistest.Prefix()
			newLim := func(prefix string) *fleetlimit.Limiter {
				l, err := fleetlimit.New(algorithm.SlidingWindowLog(2, time.Hour), st,
					fleetlimit.WithKeyPrefix(prefix), fleetlimit.WithClock(fixedClock(proptest.Epoch)), fleetlimit.WithoutBreaker())
				require.NoError(t, err)
				return l
			}
			a, b, other := newLim(p), newLim(p), newLim(redistest.Prefix())
			for _, l := range []*fleetlimit.Limiter{a, other} {
				for _, k := range []string{"u", "v"} {
					res, err := l.AllowN(bg, k, 2)
					require.NoError(t, err)
					require.True(t, res.Allowed, "spend %s", k)
				}
			}
			require.NoError(t, a.Reset(bg, "u"))
			// b shares a's prefix: it sees u whole again, 2 of 2.
			res, err := b.AllowN(bg, "u", 2)
			require.NoError(t, err)
			require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Hour}, res)
			// v, and u under another prefix, are still spent.
			for _, c := range []struct {
				l   *fleetlimit.Limiter
				key string
			}{{a, "v"}, {other, "u"}} {
				res, err := c.l.Allow(bg, c.key)
				require.NoError(t, err)
				require.False(t, res.Allowed, "%s was reset too", c.key)
			}
			// Resetting a key that holds nothing succeeds.
			require.NoError(t, a.Reset(bg, "never-seen"))
		})
	}
}

// Reset's errors: bad input changes nothing; a store failure is
// ErrStoreUnavailable under every policy (Reset never fails open); a caller
// gone is its context's error; a store that cannot reset says so.
func TestResetErrors(t *testing.T) {
	strat := algorithm.TokenBucket(1, time.Hour, 1)
	mem := stores.Memory(t)
	lim, err := fleetlimit.New(strat, mem, fleetlimit.WithClock(fixedClock(proptest.Epoch)))
	require.NoError(t, err)
	res, err := lim.Allow(bg, "u")
	require.NoError(t, err)
	require.True(t, res.Allowed)

	for _, key := range []string{"", strings.Repeat("k", store.MaxKeyLen+1)} {
		require.ErrorIs(t, lim.Reset(bg, key), fleetlimit.ErrInvalidKey, "key of %d bytes", len(key))
	}
	require.Equal(t, 1, mem.Len(), "a bad key changed nothing")

	ctx, cancel := context.WithCancel(bg)
	cancel()
	err = lim.Reset(ctx, "u")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	res, err = lim.Allow(bg, "u")
	require.NoError(t, err)
	require.False(t, res.Allowed, "a cancelled Reset reset the key")

	// A store that cannot answer, under every policy.
	mr, c := redistest.Mini(t)
	for _, p := range []fleetlimit.FailurePolicy{fleetlimit.FailLocal, fleetlimit.FailOpen, fleetlimit.FailClosed} {
		down, err := fleetlimit.New(strat, stores.Redis(t, c), fleetlimit.WithFailurePolicy(p))
		require.NoError(t, err)
		mr.Close()
		err = down.Reset(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "%v", p)
		require.ErrorIs(t, err, store.ErrUnavailable, "%v", p)
		require.NoError(t, mr.Restart())
	}
	closed := store.NewMemory()
	require.NoError(t, closed.Close())
	l, err := fleetlimit.New(strat, closed)
	require.NoError(t, err)
	err = l.Reset(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	require.ErrorIs(t, err, store.ErrClosed)

	l, err = fleetlimit.New(strat, decideOnly{mem})
	require.NoError(t, err)
	require.ErrorIs(t, l.Reset(bg, "u"), errors.ErrUnsupported)
}

// decideOnly is a Store with nothing but Decide and Close.
type decideOnly struct{ s store.Store }

func (d decideOnly) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	return d.s.Decide(ctx, req)
}
func (d decideOnly) Close() error { return d.s.Close() }

// Under FailLocal, Reset also resets the key in the fallback store, so that
// the next outage does not hold a reset client to its old spending.
func TestResetFallback(t *testing.T) {
	strat := algorithm.FixedWindow(1, time.Hour)
	mr, c := redistest.Mini(t)
	local := stores.Memory(t)
	lim, err := fleetlimit.New(strat, stores.Redis(t, c), fleetlimit.WithFallback(local, 1),
		fleetlimit.WithClock(fixedClock(proptest.Epoch)), fleetlimit.WithoutBreaker())
	require.NoError(t, err)
	mr.Close() // the fallback decides, and spends u locally
	res, err := lim.Allow(bg, "u")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	require.True(t, res.Allowed)
	require.NoError(t, mr.Restart())
	require.NoError(t, lim.Reset(bg, "u"))
	require.Equal(t, 0, local.Len(), "the fallback still holds u")
}

// TestPropertyPeek: on every store and for every registered algorithm, each
// request of a generated timeline is peeked at and then decided. The peek
// equals the decision; on Redis the key's value (DUMP) and TTL are as before
// the peek (the TTL only runs down); and the decisions equal those of the
// same timeline decided without peeks.
func TestPropertyPeek(t *testing.T) {
	bs := resetPeekBackends(t, proptest.ExpiringBackends)
	proptest.CheckEntries(t, bs, checkPeek)
	proptest.CheckComposites(t, bs, checkPeek)
}

func checkPeek(b proptest.Backend, s proptest.Scenario) (string, error) {
	peeked, err := proptest.NewRig(b.Store, s.Strat.S)
	if err != nil {
		return "", err
	}
	evs := s.Events()
	plain, err := proptest.RunScenario(b.Store, s)
	if err != nil {
		return "", err
	}
	for i, ev := range evs {
		before, err := redisStates(b, peeked.RedisKeys(ev.Key))
		if err != nil {
			return "", err
		}
		p, err := peeked.Peek(ev)
		if err != nil {
			return "", err
		}
		after, err := redisStates(b, peeked.RedisKeys(ev.Key))
		if err != nil {
			return "", err
		}
		if msg := sameStates(before, after); msg != "" {
			return fmt.Sprintf("request %d (%q n=%d at +%v): the peek changed the key: %s", i, ev.Key, ev.N, ev.At.Sub(s.Base), msg), nil
		}
		d, err := peeked.At(ev)
		if err != nil {
			return "", err
		}
		if !proptest.SameResult(p, d) {
			return fmt.Sprintf("request %d (%q n=%d at +%v): peek %+v, then AllowN %+v", i, ev.Key, ev.N, ev.At.Sub(s.Base), p, d), nil
		}
		if !proptest.SameResult(d, plain[i].Res) {
			return fmt.Sprintf("request %d (%q n=%d at +%v): %+v after peeks, %+v without", i, ev.Key, ev.N, ev.At.Sub(s.Base), d, plain[i].Res), nil
		}
	}
	return "", nil
}

// keyState is a Redis key's value and TTL: a string, or a sorted set's
// members and scores (miniredis has no DUMP of a sorted set).
type keyState struct {
	value string
	ttl   time.Duration
}

// redisState reads key's state on b's Redis; the zero keyState in memory.
func redisState(b proptest.Backend, key string) (keyState, error) {
	if b.Client == nil {
		return keyState{}, nil
	}
	typ, err := b.Client.Type(bg, key).Result()
	if err != nil {
		return keyState{}, err
	}
	var v any
	switch typ {
	case "zset":
		v, err = b.Client.ZRangeWithScores(bg, key, 0, -1).Result()
	case "string":
		v, err = b.Client.Get(bg, key).Result()
	}
	if err != nil {
		return keyState{}, err
	}
	ttl, err := b.Client.PTTL(bg, key).Result()
	return keyState{fmt.Sprintf("%s %v", typ, v), ttl}, err
}

// redisStates is redisState of each key.
func redisStates(b proptest.Backend, keys []string) ([]keyState, error) {
	states := make([]keyState, len(keys))
	for i, k := range keys {
		var err error
		if states[i], err = redisState(b, k); err != nil {
			return nil, err
		}
	}
	return states, nil
}

// sameStates is sameState of each key's before and after.
func sameStates(before, after []keyState) string {
	for i := range before {
		if msg := sameState(before[i], after[i]); msg != "" {
			return fmt.Sprintf("key %d: %s", i, msg)
		}
	}
	return ""
}

// sameState says how after differs from before, when it does by more than
// the TTL running down in real time.
func sameState(before, after keyState) string {
	if before.value != after.value {
		return fmt.Sprintf("value %q became %q", before.value, after.value)
	}
	if after.ttl > before.ttl || after.ttl < before.ttl-time.Second {
		return fmt.Sprintf("TTL %v became %v", before.ttl, after.ttl)
	}
	return ""
}

// Peek under every failure policy when the store cannot answer: as AllowN
// would decide, with ErrStoreUnavailable; under FailLocal the fallback only
// peeks. Bad input and a caller gone are as for AllowN; the observer hears
// nothing; a store that cannot peek says so.
func TestPeekErrors(t *testing.T) {
	strat := algorithm.FixedWindow(2, time.Hour)
	mr, c := redistest.Mini(t)
	mr.Close()
	local := stores.Memory(t)
	obs := &countingObserver{}
	newLim := func(opts ...fleetlimit.Option) *fleetlimit.Limiter {
		opts = append(opts, fleetlimit.WithClock(fixedClock(proptest.Epoch)), fleetlimit.WithObserver(obs))
		l, err := fleetlimit.New(strat, stores.Redis(t, c), opts...)
		require.NoError(t, err)
		return l
	}
	fresh := fleetlimit.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Hour}
	for name, c := range map[string]struct {
		lim  *fleetlimit.Limiter
		want fleetlimit.Result
	}{
		"FailLocal":  {newLim(fleetlimit.WithFallback(local, 1)), fresh},
		"FailOpen":   {newLim(fleetlimit.WithFailurePolicy(fleetlimit.FailOpen)), fleetlimit.Result{Allowed: true, Limit: 2}},
		"FailClosed": {newLim(fleetlimit.WithFailurePolicy(fleetlimit.FailClosed)), fleetlimit.Result{Limit: 2, RetryAfter: fleetlimit.FailClosedRetryAfter, ResetAfter: fleetlimit.FailClosedRetryAfter}},
	} {
		for range 3 {
			res, err := c.lim.Peek(bg, "u", 1)
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, name)
			require.Equal(t, c.want, res, name)
		}
	}
	require.Equal(t, 0, local.Len(), "the fallback recorded a peek")
	require.Zero(t, obs.n.Load(), "the observer heard of a peek")

	lim, err := fleetlimit.New(strat, local, fleetlimit.WithClock(fixedClock(proptest.Epoch)))
	require.NoError(t, err)
	_, err = lim.Peek(bg, "", 1)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidKey)
	_, err = lim.Peek(bg, "u", 0)
	require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	res, err := lim.Peek(ctx, "u", 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, fleetlimit.Result{Limit: 2}, res)
	require.Equal(t, 0, local.Len())

	lim, err = fleetlimit.New(strat, decideOnly{local})
	require.NoError(t, err)
	_, err = lim.Peek(bg, "u", 1)
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

type countingObserver struct{ n atomic.Int64 }

func (o *countingObserver) Observe(fleetlimit.Event) { o.n.Add(1) }
