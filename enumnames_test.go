package fleetlimit_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
)

// TestEnumNames: every value of the exported enumerations has its name,
// and a value past the last prints as Type(n).
func TestEnumNames(t *testing.T) {
	for want, v := range map[string]fmt.Stringer{
		"none": fleetlimit.CauseNone, "unavailable": fleetlimit.CauseUnavailable, "timeout": fleetlimit.CauseTimeout,
		"circuit_open": fleetlimit.CauseCircuitOpen, "rejected": fleetlimit.CauseRejected, "Cause(5)": fleetlimit.Cause(5),
		"store": fleetlimit.DecidedByStore, "policy": fleetlimit.DecidedByPolicy, "fallback": fleetlimit.DecidedByFallback,
		"caller": fleetlimit.DecidedByCaller, "cache": fleetlimit.DecidedByCache, "lease": fleetlimit.DecidedByLease,
		"override": fleetlimit.DecidedByOverride, "Decider(7)": fleetlimit.Decider(7),
		"acquire": fleetlimit.PermitAcquire, "release": fleetlimit.PermitRelease, "renew": fleetlimit.PermitRenew,
		"PermitOp(4)": fleetlimit.PermitOp(4),
		"fail-local":  fleetlimit.FailLocal, "fail-open": fleetlimit.FailOpen, "fail-closed": fleetlimit.FailClosed,
		"FailurePolicy(3)": fleetlimit.FailurePolicy(3), "FailurePolicy(-1)": fleetlimit.FailurePolicy(-1),
		"closed": fleetlimit.BreakerClosed, "half-open": fleetlimit.BreakerHalfOpen, "open": fleetlimit.BreakerOpen,
		"BreakerState(3)": fleetlimit.BreakerState(3), "BreakerState(-1)": fleetlimit.BreakerState(-1),
	} {
		require.Equal(t, want, v.String())
	}
	require.Equal(t, "none", fleetlimit.NotPermit.String())
}
