package algorithm

import (
	"errors"
	"fmt"
	"time"
)

// Hold applies op to a composite with a member that holds permits (see
// Holder and All): an acquire admits only when every member admits a
// request of cost 1 — the holder by its plain decision (a slot is free),
// decided on a copy as Decide decides — and then charges every other
// member 1 and takes the permit in the holder, one atomic step; when any
// member denies, nothing is charged or taken. A release or renew applies
// op to the holder only: the other members are neither charged nor given
// anything back, and report their figures as they are. The decision is
// combined as Decide combines it; a composite without a holder gets an
// error wrapping errors.ErrUnsupported.
func (s *all) Hold(state State, now time.Time, op PermitOp) (Decision, error) {
	if s.err != nil {
		return Decision{}, s.err
	}
	if s.holder < 0 {
		return Decision{}, fmt.Errorf("%s holds no permits: %w", s.Name(), errors.ErrUnsupported)
	}
	st, err := s.stateOf(state)
	if err != nil {
		return Decision{}, err
	}
	if err := op.Validate(); err != nil {
		return Decision{}, err
	}
	h := s.members[s.holder].(Holder)
	if op.Kind != AcquirePermit {
		ds := make([]Decision, len(s.members))
		var err error
		for i := range s.members {
			if i == s.holder {
				ds[i], err = h.Hold(st.members[i], now, op)
			} else {
				ds[i], err = s.asIs(st, i, now)
			}
			if err != nil {
				return Decision{}, err
			}
		}
		return s.combine(ds, 1), nil
	}
	trial, ds, admit, err := s.try(st, now, 1)
	if err != nil {
		return Decision{}, err
	}
	if admit {
		if ds[s.holder], err = h.Hold(trial[s.holder], now, op); err != nil {
			return Decision{}, err
		}
		if ds[s.holder].Allowed { // as it is whenever its plain decision admits
			copy(st.members, trial)
		}
		return s.combine(ds, 1), nil
	}
	if err := s.uncharged(st, ds, now); err != nil {
		return Decision{}, err
	}
	return s.combine(ds, 1), nil
}
