package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// refundBackends are the stores the refund properties run on: memory,
// miniredis and, under ./test.sh, the real redis-server and valkey-server.
// The clusters run the same script through the same store code; they are
// left out to keep the root package within go test's ten minutes on a
// loaded machine.
func refundBackends(t *testing.T) []proptest.Backend {
	names := []string{"memory", "miniredis"}
	if redistest.HaveReal(t) {
		names = append(names, "redis")
	}
	if redistest.HaveValkey(t) {
		names = append(names, "valkey")
	}
	return proptest.Backends(t, names...)
}

// TestPropertyRefundRestores: on every store and for every registered
// algorithm, one admitted request of a generated timeline is refunded at a
// time between its admission and its key's next request (inclusive). From
// then on every decision equals that of the same timeline without the
// request, and the refund's Result reports the key exactly as that timeline
// has it at the refund (a Peek of a never-passable cost there: Remaining
// and ResetAfter).
func TestPropertyRefundRestores(t *testing.T) {
	bs := refundBackends(t)
	for i := range bs {
		bs[i].Cases /= 2 // each case runs a timeline twice
	}
	proptest.CheckEntries(t, bs, func(b proptest.Backend, s proptest.Scenario) (string, error) {
		return checkRefundRestores(b.Store, s)
	})
}

func checkRefundRestores(st store.Store, s proptest.Scenario) (string, error) {
	evs := s.Events()
	with, err := proptest.NewRig(st, s.Strat.S)
	if err != nil {
		return "", err
	}
	without, err := proptest.NewRig(st, s.Strat.S)
	if err != nil {
		return "", err
	}
	// The request refunded is the first admitted one from the middle of
	// the timeline on, or else the last admitted one before it.
	j := -1
	for i, ev := range evs {
		res, err := with.At(ev)
		if err != nil {
			return "", err
		}
		if res.Allowed {
			j = i
			if i >= len(evs)/2 {
				break
			}
		}
	}
	if j < 0 {
		return "", nil
	}
	if j < len(evs)/2 {
		// No admission from the middle on: the rig has decided every event.
		// Decide the prefix again on a fresh one.
		if with, err = proptest.NewRig(st, s.Strat.S); err != nil {
			return "", err
		}
		if _, err := with.Run(evs[:j+1]); err != nil {
			return "", err
		}
	}
	ev := evs[j]
	// The refund comes halfway to the key's next request, or half a window
	// later if there is none.
	at := ev.At.Add(s.Strat.S.Window() / 2)
	for _, next := range evs[j+1:] {
		if next.Key == ev.Key {
			at = ev.At.Add(next.At.Sub(ev.At) / 2)
			break
		}
	}
	refund := proptest.Event{At: at, Key: ev.Key, N: ev.N, Refund: true}
	if _, err := without.Run(evs[:j]); err != nil {
		return "", err
	}
	got, err := with.At(refund)
	if err != nil {
		return "", err
	}
	peek, err := without.Peek(proptest.Event{At: at, Key: ev.Key, N: s.Strat.S.Limit() + 1})
	if err != nil {
		return "", err
	}
	want := fleetlimit.Result{Allowed: true, Limit: peek.Limit, Remaining: peek.Remaining, ResetAfter: peek.ResetAfter}
	desc := fmt.Sprintf("refunding request %d (%s at +%v) at +%v", j, ev, ev.At.Sub(s.Base), at.Sub(s.Base))
	if got != want {
		return fmt.Sprintf("%s: %+v, want the key as the timeline without it has it: %+v", desc, got, want), nil
	}
	after, err := with.Run(evs[j+1:])
	if err != nil {
		return "", err
	}
	alone, err := without.Run(evs[j+1:])
	if err != nil {
		return "", err
	}
	for i := range after {
		if after[i].Res != alone[i].Res {
			o := after[i]
			return fmt.Sprintf("%s, request %d (%s at +%v): %+v, but %+v without the refunded request",
				desc, j+1+i, o.Event, o.At.Sub(s.Base), o.Res, alone[i].Res), nil
		}
	}
	return "", nil
}

// TestPropertyRefundMintsNothing: on every store and for every registered
// algorithm, timelines where one arrival in four is a refund of its cost
// (often more than the key was charged). A refund is credited with at most
// what the key has been charged and not yet credited; then in every
// interval the admitted cost minus the credited refunds obeys the
// algorithm's own bound — a refund of n lets at most n more units through,
// and one of units never charged lets none through:
//
//   - sliding_window_log: at most limit in every interval of length W;
//   - token_bucket: at most burst + rate*d/per in every closed interval of
//     length d;
//   - fixed_window: at most limit in every aligned window;
//   - sliding_window_counter: at most limit in every aligned window and
//     2*limit - ceil(2*limit/W) in every interval of length W (µs).
//
// Every refund's Result is Allowed, with RetryAfter 0, Limit the
// strategy's and 0 <= Remaining <= Limit.
func TestPropertyRefundMintsNothing(t *testing.T) {
	bs := refundBackends(t)
	for i := range bs {
		bs[i].Cases /= 2 // the root package's properties share go test's ten minutes
	}
	proptest.CheckRefundEntries(t, bs, func(b proptest.Backend, s proptest.Scenario) (string, error) {
		outs, err := proptest.RunScenario(b.Store, s)
		if err != nil {
			return "", err
		}
		return checkRefundMintsNothing(s, outs), nil
	})
}

// credited is an outcome's net cost: n for an admission, minus the credited
// part of a refund, 0 for a denial.
type credited struct {
	at  int64 // µs
	net int64
}

func checkRefundMintsNothing(s proptest.Scenario, outs []proptest.Outcome) string {
	strat := s.Strat.S
	limit, w := strat.Limit(), strat.Window().Microseconds()
	byKey := make(map[string][]credited)
	owed := make(map[string]int64) // charged and not yet credited back
	for i, o := range outs {
		at := o.At.UnixMicro()
		switch {
		case o.Refund:
			r := o.Res
			if !r.Allowed || r.RetryAfter != 0 || r.Limit != limit || r.Remaining < 0 || r.Remaining > limit {
				return fmt.Sprintf("refund %d (%s at +%v): %+v", i, o.Event, o.At.Sub(s.Base), r)
			}
			c := min(o.N, owed[o.Key])
			owed[o.Key] -= c
			byKey[o.Key] = append(byKey[o.Key], credited{at, -c})
		case o.Res.Allowed:
			owed[o.Key] += o.N
			byKey[o.Key] = append(byKey[o.Key], credited{at, o.N})
		}
	}
	for key, cs := range byKey {
		switch s.Strat.Name {
		case "sliding_window_log":
			if msg := maxNetIn(key, cs, w, limit); msg != "" {
				return msg
			}
		case "sliding_window_counter":
			if msg := maxNetIn(key, cs, w, 2*limit-(2*limit+w-1)/w); msg != "" {
				return msg
			}
			fallthrough
		case "fixed_window":
			perWindow := make(map[int64]int64)
			for _, c := range cs {
				perWindow[c.at/w] += c.net
				if perWindow[c.at/w] > limit {
					return fmt.Sprintf("key %q: aligned window %d admitted %d net of refunds, above the limit %d", key, c.at/w, perWindow[c.at/w], limit)
				}
			}
		case "token_bucket":
			sc := s.Strat
			if msg := bucketNetBound(key, cs, sc.Rate, sc.Per.Microseconds(), sc.Burst); msg != "" {
				return msg
			}
		default:
			return fmt.Sprintf("no refund bound for algorithm %q: state it here and in docs/guarantees.md", s.Strat.Name)
		}
	}
	return ""
}

// bucketNetBound reports a closed interval of length d between events of
// cs whose net cost is above burst + rate*d/per (per in µs).
func bucketNetBound(key string, cs []credited, rate, per, burst int64) string {
	for i := range cs {
		if i > 0 && cs[i-1].at == cs[i].at {
			continue // a closed interval takes every event of its first instant
		}
		var net int64
		for j := i; j < len(cs); j++ {
			net += cs[j].net
			if j+1 < len(cs) && cs[j+1].at == cs[j].at {
				continue // a closed interval takes every event of its last instant
			}
			if d := cs[j].at - cs[i].at; net*per > burst*per+rate*d {
				return fmt.Sprintf("key %q: admitted %d net within %v, above burst %d + rate*d/per", key, net, time.Duration(d)*time.Microsecond, burst)
			}
		}
	}
	return ""
}

// maxNetIn reports an interval [t, t+w) starting at an event of cs (where
// the largest net sums start) whose net cost is above bound.
func maxNetIn(key string, cs []credited, w, bound int64) string {
	for i := range cs {
		if i > 0 && cs[i-1].at == cs[i].at {
			continue // the interval from this instant started at the first event of it
		}
		var net int64
		for _, c := range cs[i:] {
			if c.at >= cs[i].at+w {
				break
			}
			net += c.net
			if net > bound {
				return fmt.Sprintf("key %q: admitted %d net of refunds within %v from +%dµs, above %d", key, net, time.Duration(w)*time.Microsecond, cs[i].at, bound)
			}
		}
	}
	return ""
}

// Refund's errors: bad input changes nothing; a strategy or store that
// cannot refund says so; a caller gone is its context's error and changes
// nothing; a store failure is ErrStoreUnavailable under every policy, with
// nothing given back in the fallback store; an open circuit does not call
// the store.
func TestRefundErrors(t *testing.T) {
	strat := algorithm.FixedWindow(2, time.Hour)
	mem := stores.Memory(t)
	lim, err := fleetlimit.New(strat, mem, fleetlimit.WithClock(fixedClock(proptest.Epoch)))
	require.NoError(t, err)
	spent := func() {
		t.Helper()
		res, err := lim.Peek(bg, "u", 1)
		require.NoError(t, err)
		require.Equal(t, int64(0), res.Remaining, "u is no longer spent")
	}
	_, err = lim.AllowN(bg, "u", 2)
	require.NoError(t, err)
	spent()

	none := fleetlimit.Result{Limit: 2}
	for _, c := range []struct {
		key  string
		n    int64
		want error
	}{
		{"", 1, fleetlimit.ErrInvalidKey},
		{strings.Repeat("k", store.MaxKeyLen+1), 1, fleetlimit.ErrInvalidKey},
		{"u", 0, fleetlimit.ErrInvalidCost},
		{"u", -1, fleetlimit.ErrInvalidCost},
		{"u", algorithm.MaxInt + 1, fleetlimit.ErrInvalidCost},
	} {
		res, err := lim.Refund(bg, c.key, c.n)
		require.ErrorIs(t, err, c.want, "key of %d bytes, n=%d", len(c.key), c.n)
		require.Equal(t, none, res)
	}
	spent()

	ctx, cancel := context.WithCancel(bg)
	cancel()
	res, err := lim.Refund(ctx, "u", 2)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
	require.Equal(t, none, res)
	spent()

	// It works: 2 back, and the count never goes below 0.
	res, err = lim.Refund(bg, "u", 5)
	require.NoError(t, err)
	require.Equal(t, fleetlimit.Result{Allowed: true, Limit: 2, Remaining: 2}, res)

	l, err := fleetlimit.New(strat, decideOnly{mem})
	require.NoError(t, err)
	_, err = l.Refund(bg, "u", 1)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	l, err = fleetlimit.New(noRefund{strat}, mem)
	require.NoError(t, err)
	_, err = l.Refund(bg, "u", 1)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	// A Redis store refuses a script without the refund mode.
	_, c := redistest.Mini(t)
	_, err = stores.Redis(t, c).Refund(bg, store.Request{Strategy: noRefundScript{strat}, Key: "u", N: 1})
	require.ErrorIs(t, err, errors.ErrUnsupported)

	// A store that cannot answer, under every policy; FailLocal's fallback
	// is not refunded.
	mr, rc := redistest.Mini(t)
	for _, p := range []fleetlimit.FailurePolicy{fleetlimit.FailLocal, fleetlimit.FailOpen, fleetlimit.FailClosed} {
		opts := []fleetlimit.Option{fleetlimit.WithFailurePolicy(p), fleetlimit.WithClock(fixedClock(proptest.Epoch))}
		local := stores.Memory(t)
		if p == fleetlimit.FailLocal {
			opts = append(opts, fleetlimit.WithFallback(local, 1))
		}
		down, err := fleetlimit.New(strat, stores.Redis(t, rc), opts...)
		require.NoError(t, err)
		mr.Close()
		if p == fleetlimit.FailLocal {
			res, err := down.AllowN(bg, "u", 2) // charged in the fallback
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
			require.True(t, res.Allowed)
		}
		res, err := down.Refund(bg, "u", 2)
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "%v", p)
		require.ErrorIs(t, err, store.ErrUnavailable, "%v", p)
		require.Equal(t, none, res, "%v", p)
		if p == fleetlimit.FailLocal {
			res, err := local.Peek(bg, store.Request{Strategy: strat, Prefix: down.KeyPrefix(), Key: "u", N: 1, Now: proptest.Epoch})
			require.NoError(t, err)
			require.False(t, res.Allowed, "the refund was made in the fallback store")
		}
		require.NoError(t, mr.Restart())
	}

	// An open circuit: the store is not called.
	mr.Close()
	br, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{})
	require.NoError(t, err)
	down, err := fleetlimit.New(strat, stores.Redis(t, rc), fleetlimit.WithBreaker(br), fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	require.NoError(t, err)
	for range 100 {
		if _, err = down.Refund(bg, "u", 1); errors.Is(err, fleetlimit.ErrCircuitOpen) {
			break
		}
	}
	require.ErrorIs(t, err, fleetlimit.ErrCircuitOpen, "failed refunds never opened the circuit")
	require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
}

// noRefund is a strategy without a refund rule.
type noRefund struct{ algorithm.Strategy }

// noRefundScript has a refund rule in Go, but a script without the refund
// mode.
type noRefundScript struct{ algorithm.Strategy }

func (s noRefundScript) Refund(st algorithm.State, now time.Time, n int64) (algorithm.Decision, error) {
	return s.Strategy.(algorithm.Refunder).Refund(st, now, n)
}

func (s noRefundScript) Script() *algorithm.Script {
	return algorithm.NewScript(s.Strategy.Script().Tag, s.Strategy.Script().Source)
}
