// Package ctxdone tells whether a context is done, without lagging its
// deadline.
package ctxdone

import (
	"context"
	"time"
)

// Err is ctx.Err(), or context.DeadlineExceeded once ctx's own deadline
// has passed: ctx.Err lags the deadline until the context's timer has run,
// and a caller that classifies a failure (the caller's deadline, or the
// store's fault?) must not be fooled by the lag.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
