package fleetlimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// lagCtx is a context whose deadline has passed but whose Err is still nil,
// as a context's is between its deadline and the run of its timer (some
// microseconds on a busy machine). Before pass is set its deadline is an
// hour ahead.
type lagCtx struct {
	context.Context
	pass atomic.Bool
}

func (c *lagCtx) Deadline() (time.Time, bool) {
	if c.pass.Load() {
		return time.Now().Add(-time.Microsecond), true
	}
	return time.Now().Add(time.Hour), true
}

// passingStore is a store.Memory during whose decisions the caller's
// deadline passes.
type passingStore struct {
	*store.Memory
	ctx *lagCtx
}

func (s passingStore) Decide(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	d, err := s.Memory.Decide(ctx, req)
	s.ctx.pass.Store(true)
	return d, err
}

func (s passingStore) AtMost(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	d, err := s.Memory.AtMost(ctx, req)
	s.ctx.pass.Store(true)
	return d, err
}

// A caller whose own deadline has passed is never admitted, even while its
// context's Err still lags the deadline: before the call (nothing is
// recorded) and during it, at every entry point that can admit.
func TestDeadlinePassedIsNotAdmitted(t *testing.T) {
	calls := map[string]func(l *fleetlimit.Limiter, ctx context.Context) (bool, error){
		"Allow": func(l *fleetlimit.Limiter, ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, "k")
			return res.Allowed, err
		},
		"AllowAtMost": func(l *fleetlimit.Limiter, ctx context.Context) (bool, error) {
			n, res, err := l.AllowAtMost(ctx, "k", 1)
			return n > 0 || res.Allowed, err
		},
		"Reserve": func(l *fleetlimit.Limiter, ctx context.Context) (bool, error) {
			_, res, err := l.Reserve(ctx, "k", 1)
			return res.Allowed, err
		},
		"Wait": func(l *fleetlimit.Limiter, ctx context.Context) (bool, error) {
			res, err := l.Wait(ctx, "k")
			return res.Allowed, err
		},
	}
	for name, call := range calls {
		for _, during := range []bool{false, true} {
			ctx := &lagCtx{Context: context.Background()}
			ctx.pass.Store(!during)
			var st store.Store = store.NewMemory()
			if during {
				st = passingStore{Memory: st.(*store.Memory), ctx: ctx}
			}
			l, err := fleetlimit.New(algorithm.TokenBucket(1, time.Hour, 1), st, fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
			if err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatal("lagCtx's Err is not nil")
			}
			allowed, err := call(l, ctx)
			if allowed || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fleetlimit.ErrStoreUnavailable) {
				t.Errorf("%s, deadline passed during the call %v: allowed %v, err %v; want denied with context.DeadlineExceeded", name, during, allowed, err)
			}
			res, err := l.Allow(context.Background(), "k")
			if err != nil || res.Allowed == during {
				t.Errorf("%s, deadline passed during the call %v: the next call allowed %v (%v); want %v: the cost is recorded only once the store admitted it", name, during, res.Allowed, err, !during)
			}
			_ = l.Close()
		}
	}
}

// Acquire, on a concurrency limit, is not admitted past the deadline either,
// and holds no permit.
func TestDeadlinePassedIsNotAdmittedAcquire(t *testing.T) {
	ctx := &lagCtx{Context: context.Background()}
	ctx.pass.Store(true)
	l, err := fleetlimit.New(algorithm.Concurrency(1, time.Minute), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, res, err := l.Acquire(ctx, "k"); res.Allowed || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past the deadline: allowed %v, err %v", res.Allowed, err)
	}
	p, res, err := l.Acquire(context.Background(), "k")
	if err != nil || !res.Allowed {
		t.Fatalf("the next Acquire: allowed %v, err %v; the denied one must hold no permit", res.Allowed, err)
	}
	_ = p.Release(context.Background())
}

// MaxTime is in the year its doc says.
func TestMaxTimeYear(t *testing.T) {
	if y := fleetlimit.MaxTime().UTC().Year(); y != 2235 {
		t.Fatalf("MaxTime is in %d; its doc says 2235", y)
	}
}

// gatedLeaseTrips is a store.Memory whose lease round trips wait until gate is
// closed; each tells entered (without blocking) that it has begun.
type gatedLeaseTrips struct {
	*store.Memory
	entered chan struct{}
	gate    chan struct{}
}

func (s gatedLeaseTrips) Lease(ctx context.Context, req store.Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.gate
	return s.Memory.Lease(ctx, req, terms)
}

// With WithLeases, a caller that waits behind another call's lease round
// trip, and whose deadline passes during the wait, is not served by the
// lease that round trip brings, even while its context's Err still lags
// the deadline.
func TestDeadlinePassedWaitingOnALease(t *testing.T) {
	st := gatedLeaseTrips{Memory: store.NewMemory(), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	l, err := fleetlimit.New(algorithm.TokenBucket(100, time.Minute, 100), st,
		fleetlimit.WithLeases(10, time.Minute), fleetlimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fleetlimit.LeaseFromTheFirst(l)
	defer l.Close()
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(st.gate)
		}
	}
	defer open()

	first := make(chan error, 1)
	go func() {
		res, err := l.Allow(context.Background(), "k")
		if err == nil && !res.Allowed {
			err = errors.New("denied")
		}
		first <- err
	}()
	select {
	case <-st.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first call's lease round trip did not begin")
	}
	type answer struct {
		res fleetlimit.Result
		err error
	}
	ctx := &lagCtx{Context: context.Background()}
	second := make(chan answer, 1)
	go func() {
		res, err := l.Allow(ctx, "k")
		second <- answer{res, err}
	}()
	// The second call waits once it is counted (the first was counted
	// before its round trip).
	for end := time.Now().Add(5 * time.Second); fleetlimit.LeaseWaits(l) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the second call did not wait on the first's round trip")
		}
	}
	ctx.pass.Store(true)
	open()
	select {
	case a := <-second:
		if a.res.Allowed || !errors.Is(a.err, context.DeadlineExceeded) || errors.Is(a.err, fleetlimit.ErrStoreUnavailable) {
			t.Errorf("the call whose deadline passed while it waited: allowed %v, err %v; want denied with context.DeadlineExceeded", a.res.Allowed, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting call did not return")
	}
	select {
	case err := <-first:
		if err != nil {
			t.Errorf("the call that took the lease: %v; want allowed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first call did not return")
	}
}

// passingHolds is a store.Memory during whose holds the caller's deadline
// passes.
type passingHolds struct {
	*store.Memory
	ctx *lagCtx
}

func (s passingHolds) Hold(ctx context.Context, req store.Request) (algorithm.Decision, error) {
	d, err := s.Memory.Hold(ctx, req)
	s.ctx.pass.Store(true)
	return d, err
}

// An Acquire whose deadline passes while the store takes its slot is
// denied, and the slot is free again when Acquire returns: a concurrency
// limit does not lose a slot to a caller that never got its permit.
func TestDeadlinePassedDuringAcquireFreesTheSlot(t *testing.T) {
	ctx := &lagCtx{Context: context.Background()}
	mem := store.NewMemory()
	l, err := fleetlimit.New(algorithm.Concurrency(1, time.Hour), passingHolds{Memory: mem, ctx: ctx})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, res, err := l.Acquire(ctx, "k"); res.Allowed || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire whose deadline passed during the store's hold: allowed %v, err %v; want denied with context.DeadlineExceeded", res.Allowed, err)
	}
	p, res, err := l.Acquire(context.Background(), "k")
	if err != nil || !res.Allowed {
		t.Fatalf("the next Acquire: allowed %v, err %v; want allowed: the denied one's slot must be given back", res.Allowed, err)
	}
	_ = p.Release(context.Background())
}
