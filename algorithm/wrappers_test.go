package algorithm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
)

// bare is a strategy with no rule interface but Strategy's own.
type bare struct{ algorithm.Strategy }

// A composite over a member, or a penalty box over an inner strategy, that
// lacks an operation's rule interface refuses the operation with an error
// wrapping errors.ErrUnsupported (membersAs, innerAs).
func TestWrappersRefuseWhatTheirStrategiesCannot(t *testing.T) {
	b := bare{algorithm.FixedWindow(5, time.Second)}
	comp := algorithm.All(algorithm.FixedWindow(9, time.Second), b)
	box := algorithm.Penalize(b, algorithm.Penalty{After: 2, Within: time.Second, Ban: time.Second, MaxBan: time.Minute})
	require.NoError(t, comp.Validate())
	require.NoError(t, box.Validate())
	now := proptest.Epoch
	terms := algorithm.LeaseTerms{Want: 2}
	for name, op := range map[string]func() error{
		"All's Refund": func() error { _, err := comp.(algorithm.Refunder).Refund(comp.NewState(), now, 1); return err },
		"All's Lease":  func() error { _, err := comp.(algorithm.Leaser).Lease(comp.NewState(), now, 1, terms); return err },
		"All's Charge": func() error { _, err := comp.(algorithm.Charger).Charge(comp.NewState(), now, 1, -1); return err },
		"box's Refund": func() error { _, err := box.(algorithm.Refunder).Refund(box.NewState(), now, 1); return err },
		"box's Lease":  func() error { _, err := box.(algorithm.Leaser).Lease(box.NewState(), now, 1, terms); return err },
		"box's Charge": func() error { _, err := box.(algorithm.Charger).Charge(box.NewState(), now, 1, -1); return err },
		"box's AtMost": func() error { _, err := box.(algorithm.Granter).AtMost(box.NewState(), now, 1); return err },
	} {
		require.ErrorIs(t, op(), errors.ErrUnsupported, name)
	}
}
