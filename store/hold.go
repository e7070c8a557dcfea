package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Hold runs the strategy's Go rule for req.Permit under the key's shard
// lock.
func (m *Memory) Hold(_ context.Context, req Request) (algorithm.Decision, error) {
	if m.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	h, err := holderOf(req)
	if err != nil {
		return algorithm.Decision{}, err
	}
	op := *req.Permit
	return m.run(req, holdMode, func(st algorithm.State, now time.Time, _ int64) (algorithm.Decision, error) {
		return h.Hold(st, now, op)
	})
}

// Hold runs the strategy's script in the permit mode of req.Permit: one
// EVALSHA, as Decide, pipelined as decisions are.
func (r *Redis) Hold(ctx context.Context, req Request) (algorithm.Decision, error) {
	if r.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	if _, err := holderOf(req); err != nil {
		return algorithm.Decision{}, err
	}
	script := req.Strategy.Script()
	reply, err := r.eval(ctx, req, script, []any{req.Permit.ID, req.Permit.Kind.String()})
	if err != nil {
		return algorithm.Decision{}, err
	}
	if rp, ok := req.Strategy.(algorithm.Replier); ok {
		return parseLongReply(reply, rp, req.N)
	}
	return parseReply(reply, req.Strategy.Limit())
}

// holderOf returns req's strategy as an algorithm.Holder, or the error for
// a strategy that holds no permits or a request without a valid permit.
func holderOf(req Request) (algorithm.Holder, error) {
	h, ok := req.Strategy.(algorithm.Holder)
	if !ok || !algorithm.Holds(req.Strategy) {
		return nil, cannotHold(req.Strategy)
	}
	if req.Permit == nil {
		return nil, fmt.Errorf("store: hold on %q without a permit: %w", req.Key, ErrRejected)
	}
	if err := req.Permit.Validate(); err != nil {
		return nil, fmt.Errorf("store: hold on %q: %w: %w", req.Key, ErrRejected, err)
	}
	return h, nil
}

func cannotHold(s algorithm.Strategy) error {
	return fmt.Errorf("store: strategy %s holds no permits: %w: %w", s.Name(), ErrRejected, errors.ErrUnsupported)
}
