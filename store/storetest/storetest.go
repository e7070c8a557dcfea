// Package storetest is the conformance suite for fleetlimit stores: a new
// store proves itself by passing Run. fleetlimit runs it against store.Memory
// and store.Redis on miniredis and on a real redis-server.
//
// The suite passes its own time in every Request (Now), so it needs no
// sleeping; it uses windows of minutes, so a Redis store's real-time key
// expiry never interferes with the virtual timeline.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// Open returns a fresh store for one subtest. The suite closes it.
type Open func(t *testing.T) store.Store

// T0 is the suite's starting instant, on a minute boundary.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs every conformance test against stores made by open.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"MatchesGoRule", testMatchesGoRule},
		{"ClockBehindAfterEviction", testClockBehindAfterEviction},
		{"AdmittedCounts", testAdmittedCounts},
		{"Values", testValues},
		{"NeverPassable", testNeverPassable},
		{"Isolation", testIsolation},
		{"OddKeys", testOddKeys},
		{"Concurrent", testConcurrent},
		{"Reset", testReset},
		{"RefundAndLeaseMatchGoRule", testRefundAndLeaseMatchGoRule},
		{"AtMostMatchesGoRule", testAtMostMatchesGoRule},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

func prefix() string { return fmt.Sprintf("st:%016x:", rand.Uint64()) }

// noError fails the test if err is not nil; msg is a format and its
// arguments.
func noError(t *testing.T, err error, msg ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%sunexpected error: %v", prefixed(msg), err)
	}
}

// equal fails the test unless want and got are deeply equal.
func equal(t *testing.T, want, got any, msg ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%swant %+v, got %+v", prefixed(msg), want, got)
	}
}

// isTrue fails the test unless cond holds.
func isTrue(t *testing.T, cond bool, msg ...any) {
	t.Helper()
	if !cond {
		t.Fatalf("%scondition does not hold", prefixed(msg))
	}
}

// prefixed formats msg (a format and its arguments) as "msg: ".
func prefixed(msg []any) string {
	if len(msg) == 0 {
		return ""
	}
	format, _ := msg[0].(string)
	return fmt.Sprintf(format, msg[1:]...) + ": "
}

func decide(t *testing.T, s store.Store, req store.Request) algorithm.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), req)
	noError(t, err)
	return d
}

// testMatchesGoRule: for every registered algorithm, the store's decisions on
// a deterministic timeline (bursts at window edges, costs 1-3, one cost above
// the limit) equal the strategy's Go rule applied to a fresh state.
func testMatchesGoRule(t *testing.T, s store.Store) {
	const limit, window = 4, time.Minute
	for _, e := range algorithm.Registry() {
		strat := e.New(limit, window)
		st := strat.NewState()
		p := prefix()
		now := T0
		for i := 0; i < 120; i++ {
			// Irregular steps with clusters just before and after edges.
			now = now.Add(time.Duration((i*7919)%13) * time.Second).Add(time.Duration(i%3) * time.Millisecond)
			n := int64(i%3 + 1)
			if i%17 == 0 {
				n = limit + 1
			}
			want, err := strat.Decide(st, now, n)
			noError(t, err)
			got := decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "k", N: n, Now: now})
			equal(t, want, got, "%s step %d at %v n=%d", e.Name, i, now.Sub(T0), n)
		}
	}
}

// testRefundAndLeaseMatchGoRule: for every registered algorithm, on a
// deterministic timeline that interleaves decisions with refunds (when the
// store is a store.Refunder and the algorithm an algorithm.Refunder whose
// script refunds) and with leases that give units back and take more (when
// the store is a store.Leaser and the algorithm an algorithm.Leaser whose
// script leases), every answer of the store equals the strategy's Go rule
// applied to a fresh state.
func testRefundAndLeaseMatchGoRule(t *testing.T, s store.Store) {
	const limit, window = 8, time.Minute
	ctx := context.Background()
	rf, storeRefunds := s.(store.Refunder)
	ls, storeLeases := s.(store.Leaser)
	for _, e := range algorithm.Registry() {
		strat := e.New(limit, window)
		sc := strat.Script()
		refunder, refunds := strat.(algorithm.Refunder)
		refunds = refunds && storeRefunds && (sc == nil || sc.Refunds)
		leaser, leases := strat.(algorithm.Leaser)
		leases = leases && storeLeases && (sc == nil || sc.Leases)
		if !refunds && !leases {
			continue
		}
		st := strat.NewState()
		p := prefix()
		now := T0
		var lastAt int64
		for i := range 150 {
			now = now.Add(time.Duration((i*7919)%11) * time.Second).Add(time.Duration(i%7) * time.Millisecond)
			n := int64(i%3 + 1)
			req := store.Request{Strategy: strat, Prefix: p, Key: "k", N: n, Now: now}
			where := fmt.Sprintf("%s step %d at %v n=%d", e.Name, i, now.Sub(T0), n)
			switch {
			case i%4 == 1 && refunds:
				want, err := refunder.Refund(st, now, n)
				noError(t, err, where)
				got, err := rf.Refund(ctx, req)
				noError(t, err, where)
				equal(t, want, got, "%s: refund", where)
			case i%4 == 3 && leases:
				terms := algorithm.LeaseTerms{Want: 5, Back: int64(i % 3), BackAt: lastAt}
				want, err := leaser.Lease(st, now, n, terms)
				noError(t, err, where)
				got, err := ls.Lease(ctx, req, terms)
				noError(t, err, where)
				equal(t, want, got, "%s: lease %+v", where, terms)
				lastAt = got.At
			default:
				want, err := strat.Decide(st, now, n)
				noError(t, err, where)
				equal(t, want, decide(t, s, req), "%s: decide", where)
			}
		}
	}
}

// testClockBehindAfterEviction replays a timeline found by the twin property
// test: a denied request at a later time evicts old units, then a clock
// behind is judged at the newest admission's instant, where units already
// exist. Every admission must still count (a Lua twin that reused member
// names there would let ZADD overwrite two units).
func testClockBehindAfterEviction(t *testing.T, s store.Store) {
	strat := algorithm.SlidingWindowLog(7, 5*time.Minute)
	st := strat.NewState()
	p := prefix()
	for i, x := range []struct {
		at time.Duration
		n  int64
	}{
		{10 * time.Minute, 2},
		{14*time.Minute + 58*time.Second, 1}, {14*time.Minute + 58*time.Second, 1},
		{14*time.Minute + 58*time.Second, 1}, {14*time.Minute + 58*time.Second, 1},
		{15*time.Minute + time.Second, 7}, // denied; evicts the units from 10m
		{12 * time.Minute, 2},             // behind: judged at 14m58s, admitted
		{12 * time.Minute, 2},             // denied: 6 of 7 are live
	} {
		now := T0.Add(x.at)
		want, err := strat.Decide(st, now, x.n)
		noError(t, err)
		got := decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "k", N: x.n, Now: now})
		equal(t, want, got, "step %d", i)
	}
}

// testAdmittedCounts: a burst at one instant admits exactly the limit, and
// once the key is full again (the last admission's ResetAfter later)
// exactly the limit again.
func testAdmittedCounts(t *testing.T, s store.Store) {
	for _, e := range algorithm.Registry() {
		strat := e.New(5, time.Minute)
		p := prefix()
		count := func(at time.Time) (admitted int, reset time.Duration) {
			for range 20 {
				d := decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "user", N: 1, Now: at})
				if d.Allowed {
					admitted, reset = admitted+1, d.ResetAfter
				}
			}
			return admitted, reset
		}
		first := T0.Add(time.Second)
		n, reset := count(first)
		equal(t, 5, n, e.Name)
		isTrue(t, reset > 0, "%s: admitted, so not full", e.Name)
		n, _ = count(first.Add(reset))
		equal(t, 5, n, "%s, %v later", e.Name, reset)
	}
}

// testValues checks Remaining, RetryAfter and ResetAfter through the store.
func testValues(t *testing.T, s store.Store) {
	p := prefix()
	req := func(strat algorithm.Strategy, at time.Duration, n int64) algorithm.Decision {
		return decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "v", N: n, Now: T0.Add(at)})
	}
	log := algorithm.SlidingWindowLog(2, time.Minute)
	equal(t, algorithm.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute}, req(log, 0, 1))
	equal(t, algorithm.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Minute}, req(log, 10*time.Second, 1))
	// The unit from 0 leaves at 60s (50s from now); the key is full at 70s.
	equal(t, algorithm.Decision{Limit: 2, RetryAfter: 50 * time.Second, ResetAfter: time.Minute}, req(log, 10*time.Second, 1))

	bucket := algorithm.TokenBucket(1, 10*time.Second, 2)
	equal(t, algorithm.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 20 * time.Second}, req(bucket, 0, 2))
	// 0.5 tokens after 5s: the other half takes 5s more; full at 20s.
	equal(t, algorithm.Decision{Limit: 2, RetryAfter: 5 * time.Second, ResetAfter: 15 * time.Second}, req(bucket, 5*time.Second, 1))

	fixed := algorithm.FixedWindow(2, time.Minute)
	equal(t, algorithm.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 15 * time.Second}, req(fixed, 45*time.Second, 2))
	equal(t, algorithm.Decision{Limit: 2, RetryAfter: 15 * time.Second, ResetAfter: 15 * time.Second}, req(fixed, 45*time.Second, 1))
}

// testNeverPassable: n above the limit is a plain denial that records
// nothing, even on a fresh key.
func testNeverPassable(t *testing.T, s store.Store) {
	for _, e := range algorithm.Registry() {
		strat := e.New(3, time.Minute)
		p := prefix()
		d := decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "big", N: 4, Now: T0})
		isTrue(t, !d.Allowed, e.Name)
		equal(t, int64(3), d.Remaining, e.Name)
		equal(t, time.Duration(0), d.ResetAfter, "%s: the key is still full", e.Name)
		equal(t, strat.Window(), d.RetryAfter, "%s: a full key tells a never-passable request a whole window", e.Name)
		for i := range 3 {
			isTrue(t, decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "big", N: 1, Now: T0}).Allowed, "%s request %d", e.Name, i)
		}
	}
}

// testIsolation: keys, prefixes and algorithms never share state.
func testIsolation(t *testing.T, s store.Store) {
	p1, p2 := prefix(), prefix()
	log := algorithm.SlidingWindowLog(1, time.Minute)
	bucket := algorithm.TokenBucket(1, time.Minute, 1)
	fixed := algorithm.FixedWindow(1, time.Minute)
	for _, r := range []store.Request{
		{Strategy: log, Prefix: p1, Key: "a"},
		{Strategy: log, Prefix: p1, Key: "b"},
		{Strategy: log, Prefix: p2, Key: "a"},
		{Strategy: bucket, Prefix: p1, Key: "a"},
		{Strategy: fixed, Prefix: p1, Key: "a"},
	} {
		r.N, r.Now = 1, T0
		isTrue(t, decide(t, s, r).Allowed, "%s %s %s", r.Strategy.Name(), r.Prefix, r.Key)
		isTrue(t, !decide(t, s, r).Allowed, "%s %s %s", r.Strategy.Name(), r.Prefix, r.Key)
	}
}

// testOddKeys: braces, percent signs, spaces, non-ASCII and maximal keys are
// ordinary keys, distinct from each other.
func testOddKeys(t *testing.T, s store.Store) {
	p := prefix()
	log := algorithm.SlidingWindowLog(1, time.Minute)
	keys := []string{"{a}", "}{", "{}", "{", "}", "%7B", "%", "a b", "ключ", "\x00\xff", strings.Repeat("k", store.MaxKeyLen)}
	for _, k := range keys {
		r := store.Request{Strategy: log, Prefix: p, Key: k, N: 1, Now: T0}
		isTrue(t, decide(t, s, r).Allowed, "%q", k)
	}
	for _, k := range keys {
		r := store.Request{Strategy: log, Prefix: p, Key: k, N: 1, Now: T0}
		isTrue(t, !decide(t, s, r).Allowed, "%q must be limited by its own earlier request", k)
	}
}

// testConcurrent: many goroutines on one key admit exactly the limit, and
// never report a negative Remaining.
func testConcurrent(t *testing.T, s store.Store) {
	for _, e := range algorithm.Registry() {
		strat := e.New(50, time.Hour)
		p := prefix()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for range 25 {
					d, err := s.Decide(context.Background(), store.Request{Strategy: strat, Prefix: p, Key: "hot", N: 1, Now: T0.Add(time.Second)})
					if err != nil {
						errs <- err
						return
					}
					if d.Remaining < 0 {
						errs <- fmt.Errorf("remaining %d", d.Remaining)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			noError(t, err, e.Name)
		}
		equal(t, int64(50), admitted.Load(), e.Name)
	}
}

// testReset, for a store.Resetter: after Reset, for every registered
// algorithm, the next decision on the key equals a fresh key's; the same key
// under another prefix or another algorithm keeps its state, as does
// another key; resetting a key that holds nothing succeeds.
func testReset(t *testing.T, s store.Store) {
	rs, ok := s.(store.Resetter)
	if !ok {
		t.Skipf("%T does not implement store.Resetter", s)
	}
	ctx := context.Background()
	es := algorithm.Registry()
	for i, e := range es {
		strat := e.New(3, time.Minute)
		next := es[(i+1)%len(es)].New(3, time.Minute)
		p, other := prefix(), prefix()
		fresh := decide(t, s, store.Request{Strategy: strat, Prefix: prefix(), Key: "k", N: 2, Now: T0})
		spent := []store.Request{
			{Strategy: strat, Prefix: p, Key: "other"},
			{Strategy: strat, Prefix: other, Key: "k"},
			{Strategy: next, Prefix: p, Key: "k"},
		}
		for _, r := range append(spent, store.Request{Strategy: strat, Prefix: p, Key: "k"}) {
			r.N, r.Now = 3, T0
			isTrue(t, decide(t, s, r).Allowed, "%s: spend %s %s %s", e.Name, r.Strategy.Name(), r.Prefix, r.Key)
		}
		noError(t, rs.Reset(ctx, store.Request{Strategy: strat, Prefix: p, Key: "k"}), e.Name)
		equal(t, fresh, decide(t, s, store.Request{Strategy: strat, Prefix: p, Key: "k", N: 2, Now: T0}), "%s: after Reset, a fresh key's decision", e.Name)
		for _, r := range spent {
			r.N, r.Now = 1, T0
			isTrue(t, !decide(t, s, r).Allowed, "%s: Reset also reset %s %s %s", e.Name, r.Strategy.Name(), r.Prefix, r.Key)
		}
		noError(t, rs.Reset(ctx, store.Request{Strategy: strat, Prefix: prefix(), Key: "never"}), "%s: a key that holds nothing", e.Name)
	}
}

// testClose: Close succeeds once, then reports ErrClosed, as do Decide and
// Reset.
func testClose(t *testing.T, s store.Store) {
	noError(t, s.Close())
	isTrue(t, errors.Is(s.Close(), store.ErrClosed))
	_, err := s.Decide(context.Background(), store.Request{Strategy: algorithm.SlidingWindowLog(1, time.Minute), Prefix: prefix(), Key: "k", N: 1, Now: T0})
	isTrue(t, errors.Is(err, store.ErrClosed), "%v", err)
	if rs, ok := s.(store.Resetter); ok {
		err = rs.Reset(context.Background(), store.Request{Strategy: algorithm.SlidingWindowLog(1, time.Minute), Prefix: prefix(), Key: "k"})
		isTrue(t, errors.Is(err, store.ErrClosed), "Reset after Close: %v", err)
	}
}
