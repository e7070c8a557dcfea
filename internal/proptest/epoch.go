package proptest

import (
	"time"

	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// Epoch is the tests' fixed instant, 2026-01-01 00:00:00 UTC: a whole
// number of days since the Unix epoch, so windows of a millisecond, a
// second, a minute, an hour or a day all have an edge here.
//
// It is storetest.T0, defined there because the conformance suite is public
// and imports only the standard library and fleetlimit's own packages: it
// cannot import this package, which brings gopter.
var Epoch = storetest.T0

// EdgeAfter returns the first multiple of w since the Unix epoch at or after
// t.
func EdgeAfter(t time.Time, w time.Duration) time.Time {
	tus, wus := t.UnixMicro(), w.Microseconds()
	return time.UnixMicro((tus + wus - 1) / wus * wus).UTC()
}
