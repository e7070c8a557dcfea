package proptest

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// Timeout bounds one decision in the property tests: generous, so that a
// loaded machine under -race is never mistaken for a store failure.
const Timeout = 10 * time.Second

// Rig is a limiter on a virtual clock over a fresh key prefix of a store.
type Rig struct {
	lim   *fleetlimit.Limiter
	clock *fakeclock.Clock
	st    store.Store
	s     algorithm.Strategy
}

// NewRig returns a rig deciding s over st, failing closed, with opts
// applied last.
func NewRig(st store.Store, s algorithm.Strategy, opts ...fleetlimit.Option) (*Rig, error) {
	c := &fakeclock.Clock{}
	lim, err := fleetlimit.New(s, st, append([]fleetlimit.Option{
		fleetlimit.WithClock(c.Now),
		fleetlimit.WithKeyPrefix(redistest.Prefix()),
		fleetlimit.WithTimeout(Timeout),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Rig{lim: lim, clock: c, st: st, s: s}, nil
}

// Lease applies the rig's strategy's lease rule to ev's key on terms at
// ev's time, for a request of cost ev.N, straight through the rig's store
// (store.Leaser): the round trip a limiter with leases sends, here for
// the twin tests to compare Grants. The rig's limiter keeps no lease of
// it.
func (r *Rig) Lease(ev Event, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	l, ok := r.st.(store.Leaser)
	if !ok {
		return algorithm.Grant{}, fmt.Errorf("lease %q: store %T cannot lease", ev.Key, r.st)
	}
	r.clock.Set(ev.At)
	req := store.Request{Strategy: r.s, Prefix: r.lim.KeyPrefix(), Key: ev.Key, N: ev.N, Now: ev.At, Timeout: Timeout}
	g, err := l.Lease(context.Background(), req, terms)
	if err != nil {
		return g, fmt.Errorf("lease %s %q n=%d %+v: %w", ev.At.Format(time.RFC3339Nano), ev.Key, ev.N, terms, err)
	}
	return g, nil
}

// Peek peeks at ev's decision at its time (Limiter.Peek).
func (r *Rig) Peek(ev Event) (fleetlimit.Result, error) { return r.call(ev, "peek", r.lim.Peek) }

// RedisKeys are the Redis keys that hold key's state for the rig: one, or
// one per member of a composite.
func (r *Rig) RedisKeys(key string) []string {
	sc := r.lim.Strategy().Script()
	suffixes := sc.Keys
	if len(suffixes) == 0 {
		suffixes = []string{sc.Tag}
	}
	keys := make([]string, len(suffixes))
	for i, s := range suffixes {
		keys[i] = store.RedisKey(r.lim.KeyPrefix(), key, s)
	}
	return keys
}

// At decides ev at its time, or refunds it if it is a refund.
func (r *Rig) At(ev Event) (fleetlimit.Result, error) {
	if ev.Refund {
		return r.call(ev, "refund", r.lim.Refund)
	}
	return r.call(ev, "decide", r.lim.AllowN)
}

// AtMost grants up to ev's cost at its time (Limiter.AllowAtMost).
func (r *Rig) AtMost(ev Event) (int64, fleetlimit.Result, error) {
	r.clock.Set(ev.At)
	g, res, err := r.lim.AllowAtMost(context.Background(), ev.Key, ev.N)
	if err != nil {
		return g, res, fmt.Errorf("at most %s %q n=%d: %w", ev.At.Format(time.RFC3339Nano), ev.Key, ev.N, err)
	}
	return g, res, nil
}

// call sets the clock to ev's time and applies op (what it is) to ev.
func (r *Rig) call(ev Event, what string, op func(context.Context, string, int64) (fleetlimit.Result, error)) (fleetlimit.Result, error) {
	r.clock.Set(ev.At)
	res, err := op(context.Background(), ev.Key, ev.N)
	if err != nil {
		return res, fmt.Errorf("%s %s %q n=%d: %w", what, ev.At.Format(time.RFC3339Nano), ev.Key, ev.N, err)
	}
	return res, nil
}

// Reset resets key at the rig's current time (Limiter.Reset).
func (r *Rig) Reset(key string) error {
	if err := r.lim.Reset(context.Background(), key); err != nil {
		return fmt.Errorf("reset %q at %s: %w", key, r.clock.Now().Format(time.RFC3339Nano), err)
	}
	return nil
}

// Close closes the rig's limiter at at (Limiter.Close: it hands back its
// leases).
func (r *Rig) Close(at time.Time) error {
	r.clock.Set(at)
	return r.lim.Close()
}

// Outcome is a decided event.
type Outcome struct {
	Event
	Res fleetlimit.Result
}

// Run decides every event in order.
func (r *Rig) Run(evs []Event) ([]Outcome, error) {
	outs := make([]Outcome, 0, len(evs))
	for _, ev := range evs {
		res, err := r.At(ev)
		if err != nil {
			return nil, err
		}
		outs = append(outs, Outcome{ev, res})
	}
	return outs, nil
}

// RunScenario decides the scenario's events on a fresh rig over st.
func RunScenario(st store.Store, s Scenario) ([]Outcome, error) {
	r, err := NewRig(st, s.Strat.S)
	if err != nil {
		return nil, err
	}
	return r.Run(s.Events())
}

// Limiter is the rig's limiter.
func (r *Rig) Limiter() *fleetlimit.Limiter { return r.lim }

// SetClock sets the rig's clock to at.
func (r *Rig) SetClock(at time.Time) { r.clock.Set(at) }

// Reserve reserves ev's cost at its time (Limiter.Reserve).
func (r *Rig) Reserve(ev Event) (fleetlimit.Reservation, fleetlimit.Result, error) {
	r.clock.Set(ev.At)
	rv, res, err := r.lim.Reserve(context.Background(), ev.Key, ev.N)
	if err != nil {
		return rv, res, fmt.Errorf("reserve %s %q n=%d: %w", ev.At.Format(time.RFC3339Nano), ev.Key, ev.N, err)
	}
	return rv, res, nil
}

// Settle settles rv at at with the real cost actual (Reservation.Settle;
// actual 0 is Reservation.Cancel, whose Result is the zero Result).
func (r *Rig) Settle(rv fleetlimit.Reservation, at time.Time, actual int64) (fleetlimit.Result, error) {
	r.clock.Set(at)
	var res fleetlimit.Result
	var err error
	if actual == 0 {
		err = rv.Cancel(context.Background())
	} else {
		res, err = rv.Settle(context.Background(), actual)
	}
	if err != nil {
		return res, fmt.Errorf("settle %s (estimate %d) at %d: %w", at.Format(time.RFC3339Nano), rv.Estimate(), actual, err)
	}
	return res, nil
}
