package fleetlimit

import (
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Shadow reports a shadow admission: the limiter is in shadow mode
	// (WithShadow) and admitted a request that it denied. Allowed is then
	// true and every other field is the denial's (RetryAfter > 0, the
	// denial's Remaining); nothing was recorded for it, as for any denial.
	// Adapters let such a request through as admitted.
	Shadow bool
	// Limit is the strategy's capacity: limit, or burst for a token bucket.
	// A sliding log of 100 per minute reports 100.
	Limit int64
	// Remaining is the cost that can still pass right after this decision,
	// never negative. After 3 of 100 are admitted in a window it is 97; a
	// token bucket reports whole tokens, rounded down.
	Remaining int64
	// RetryAfter is 0 when Allowed (but for a shadow admission) and > 0
	// when denied: how long until the same request would pass with no
	// other traffic. When n can never pass (n above algorithm.MaxCost of the
	// key's strategy: n > Limit, or n > algorithm.MaxLogCost for a sliding
	// log) it is ResetAfter, or the strategy's window if the key is already
	// full; retrying will not help.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back at full capacity with no
	// further traffic (0: it already is). For a sliding log admitted just now
	// it is the window.
	ResetAfter time.Duration

	limits *[]LimitResult // see Limits; a pointer keeps Result comparable
}

// Limits returns each member's figures, in order, when the limiter's
// strategy is a composite (algorithm.All), and nil otherwise. The Result's
// own Allowed, Limit, Remaining, RetryAfter and ResetAfter are the
// composite's (see algorithm.All for how they combine the members'). The
// slice must not be modified. A composite's Results compare equal (==) only
// to their copies.
func (r Result) Limits() []LimitResult {
	if r.limits == nil {
		return nil
	}
	return *r.limits
}

// LimitResult is one member's figures in a composite decision.
type LimitResult struct {
	// Name is the member strategy's name, e.g. "token_bucket".
	Name string
	// Limit and Window are the member's (algorithm.Strategy Limit, Window).
	Limit  int64
	Window time.Duration
	// Remaining, RetryAfter and ResetAfter are as in Result, for this
	// member alone. A member that would have admitted a denied request
	// shows its figures uncharged, with RetryAfter 0.
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	// Cut is, for a Reservation's Settle, the units this member's debt cap
	// (WithMaxDebt) cut off the charge; Event.Cut is the most any member
	// cut. 0 for every other decision.
	Cut int64
}

// resultOf is the Result of s's decision d.
func resultOf(s algorithm.Strategy, d algorithm.Decision) Result {
	var r Result
	r.set(s, &d)
	return r
}

// set makes r the Result of s's decision d, field by field and in place:
// settle's path, on which a copy of a whole Result or Decision costs more
// than the rest of the stage.
func (r *Result) set(s algorithm.Strategy, d *algorithm.Decision) {
	r.Allowed, r.Shadow, r.Limit, r.Remaining = d.Allowed, false, d.Limit, d.Remaining
	r.RetryAfter, r.ResetAfter, r.limits = d.RetryAfter, d.ResetAfter, nil
	if ds := d.Members(); len(ds) > 0 {
		r.limits = limitsOf(s, ds)
	}
}

// limitsOf is each member's figures in a composite decision whose members
// decided ds, or nil when s is not that composite.
func limitsOf(s algorithm.Strategy, ds []algorithm.Decision) *[]LimitResult {
	c, ok := rule.Inner(s).(algorithm.Composite) // a penalty box's members are its strategy's
	if !ok || len(c.Members()) != len(ds) {
		return nil
	}
	limits := make([]LimitResult, len(ds))
	for i, m := range c.Members() {
		limits[i] = LimitResult{Name: m.Name(), Limit: m.Limit(), Window: m.Window(), Remaining: ds[i].Remaining, RetryAfter: ds[i].RetryAfter, ResetAfter: ds[i].ResetAfter, Cut: ds[i].Cut()}
	}
	return &limits
}

// outcome says how a decision was made, for the observer: a Decider in the
// low bits and two flags. It is one byte so that decide's results fit in
// registers (a wider outcome measurably slowed the happy path).
type outcome uint8

const (
	outcomeCircuitOpen outcome = 1 << 6 // the breaker kept the store out of it
	outcomeInvalid     outcome = 1 << 7 // bad input: no decision was made
)

func decidedBy(by Decider, circuitOpen bool) outcome {
	o := outcome(by)
	if circuitOpen {
		o |= outcomeCircuitOpen
	}
	return o
}

func (o outcome) by() Decider       { return Decider(o &^ (outcomeCircuitOpen | outcomeInvalid)) }
func (o outcome) circuitOpen() bool { return o&outcomeCircuitOpen != 0 }
func (o outcome) invalid() bool     { return o&outcomeInvalid != 0 }
