package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Lease runs the strategy's Go lease rule under the key's shard lock.
func (m *Memory) Lease(_ context.Context, req Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	l, err := memoryRule[algorithm.Leaser](m, req.Strategy, cannotLease)
	if err != nil {
		return algorithm.Grant{}, err
	}
	var g algorithm.Grant
	_, err = m.run(req, leaseMode, func(st algorithm.State, now time.Time, n int64) (algorithm.Decision, error) {
		var err error
		g, err = l.Lease(st, now, n, terms)
		return algorithm.Decision{Allowed: g.Units > 0}, err
	})
	return g, err
}

// Lease runs the strategy's script in its lease mode (in its ahead mode
// for a lease taken ahead, terms.Ahead, when the script honours it:
// algorithm.Script.LeasesAhead): one EVALSHA, as Decide. A composite's or
// penalty box's reply is read by the strategy (algorithm.LeaseReplier).
func (r *Redis) Lease(ctx context.Context, req Request, terms algorithm.LeaseTerms) (algorithm.Grant, error) {
	if r.closed.Load() {
		return algorithm.Grant{}, ErrClosed
	}
	script := req.Strategy.Script()
	if _, ok := req.Strategy.(algorithm.Leaser); !ok || script == nil || !script.Leases {
		return algorithm.Grant{}, cannotLease(req.Strategy)
	}
	mode := "lease"
	if terms.Ahead && script.LeasesAhead {
		mode = "ahead"
	}
	reply, err := r.eval(ctx, req, script, []any{terms.BackAt, terms.Back, terms.Want, mode})
	if err != nil {
		return algorithm.Grant{}, err
	}
	return parseGrant(reply, req.Strategy, req.N)
}

// parseGrant reads the reply of s's lease mode, or of its atmost mode
// (which replies as a lease does), for a request of cost n: a one-key
// script's five integers, or what s reads (algorithm.LeaseReplier).
func parseGrant(reply any, s algorithm.Strategy, n int64) (algorithm.Grant, error) {
	if rp, ok := s.(algorithm.LeaseReplier); ok {
		return readReply(reply, rp.LeaseReply, n)
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 5 {
		return algorithm.Grant{}, fmt.Errorf("%w: %v", ErrBadReply, reply)
	}
	units, ok1 := vals[0].(int64)
	at, ok2 := vals[4].(int64)
	if !ok1 || !ok2 {
		return algorithm.Grant{}, fmt.Errorf("%w: %v", ErrBadReply, reply)
	}
	d, err := parseReply(append([]any{min(units, 1)}, vals[1:4]...), s.Limit())
	if err != nil {
		return algorithm.Grant{}, err
	}
	return algorithm.Grant{Units: units, Decision: d, At: at}, nil
}

func cannotLease(s algorithm.Strategy) error {
	return fmt.Errorf("store: strategy %s cannot lease: %w: %w", s.Name(), ErrRejected, errors.ErrUnsupported)
}
