package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// AtMost runs the strategy's Go partial grant under the key's shard lock.
// A key it does not hold and that grants nothing is not kept (unless the
// strategy keeps something of the denial: a penalty box counts it).
func (m *Memory) AtMost(_ context.Context, req Request) (algorithm.Decision, error) {
	g, err := memoryRule[algorithm.Granter](m, req.Strategy, cannotGrant)
	if err != nil {
		return algorithm.Decision{}, err
	}
	return m.run(req, atMostMode, func(st algorithm.State, now time.Time, n int64) (algorithm.Decision, error) {
		return g.AtMost(st, now, n)
	})
}

// AtMost runs the strategy's script in its atmost mode: one EVALSHA, as
// Decide, pipelined as decisions are. The reply is a lease's (see package
// scripts), read as Lease reads it.
func (r *Redis) AtMost(ctx context.Context, req Request) (algorithm.Decision, error) {
	if r.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	if !algorithm.Grants(req.Strategy) {
		return algorithm.Decision{}, cannotGrant(req.Strategy)
	}
	reply, err := r.eval(ctx, req, req.Strategy.Script(), []any{"atmost"})
	if err != nil {
		return algorithm.Decision{}, err
	}
	// Nothing granted is a denial of a request of 1: read it as one.
	g, err := parseGrant(reply, req.Strategy, 1)
	if err != nil {
		return algorithm.Decision{}, err
	}
	if g.Units < 0 || g.Units > req.N || g.Decision.Allowed != (g.Units > 0) {
		return algorithm.Decision{}, fmt.Errorf("%w: granted %d of %d, allowed %v", ErrBadReply, g.Units, req.N, g.Decision.Allowed)
	}
	g.Decision.Granted = g.Units
	return g.Decision, nil
}

func cannotGrant(s algorithm.Strategy) error {
	return fmt.Errorf("store: strategy %s cannot grant part of a request: %w: %w", s.Name(), ErrRejected, errors.ErrUnsupported)
}
