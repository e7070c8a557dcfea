package httplimit_test

import (
	"context"
	"time"
)

var bg = context.Background()

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// slowMachine is the timeout of tests whose healthy store must answer: far
// above a round trip, so that a loaded CI machine cannot fail them.
const slowMachine = 5 * time.Second
