package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Charge runs the strategy's Go charge rule under the key's shard lock. A
// key it does not hold starts fresh, and is kept once the charge recorded
// something.
func (m *Memory) Charge(_ context.Context, req Request, maxDebt int64) (algorithm.Decision, error) {
	c, err := memoryRule[algorithm.Charger](m, req.Strategy, cannotCharge)
	if err != nil {
		return algorithm.Decision{}, err
	}
	return m.run(req, chargeMode, func(st algorithm.State, now time.Time, n int64) (algorithm.Decision, error) {
		return c.Charge(st, now, n, maxDebt)
	})
}

// Charge runs the strategy's script in its charge mode: one EVALSHA, as
// Decide, pipelined as decisions are. The reply is read by
// algorithm.ChargeReply.
func (r *Redis) Charge(ctx context.Context, req Request, maxDebt int64) (algorithm.Decision, error) {
	if r.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	if !algorithm.Charges(req.Strategy) {
		return algorithm.Decision{}, cannotCharge(req.Strategy)
	}
	reply, err := r.eval(ctx, req, req.Strategy.Script(), []any{maxDebt, "charge"})
	if err != nil {
		return algorithm.Decision{}, err
	}
	ints, err := replyInts(reply)
	if err != nil {
		return algorithm.Decision{}, err
	}
	d, err := algorithm.ChargeReply(req.Strategy, ints)
	if err != nil {
		return algorithm.Decision{}, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	return d, nil
}

func cannotCharge(s algorithm.Strategy) error {
	return fmt.Errorf("store: strategy %s cannot be charged past its limit: %w: %w", s.Name(), ErrRejected, errors.ErrUnsupported)
}
