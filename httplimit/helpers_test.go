package httplimit_test

import (
	"context"
	"time"
)

var bg = context.Background()

// t0 is a fixed instant on a minute boundary.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// slowMachine is the timeout of tests whose healthy store must answer: far
// above a round trip, so that a loaded CI machine cannot fail them.
const slowMachine = 5 * time.Second
