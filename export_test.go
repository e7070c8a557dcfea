package fleetlimit

import (
	"context"
	"time"
)

// SetSleep makes l's WaitN sleep with sleep (a virtual clock's) instead of
// real timers.
func SetSleep(l *Limiter, sleep func(context.Context, time.Duration) error) { l.sleep = sleep }

// Waiting is the number of WaitN calls queued on key in l.
func Waiting(l *Limiter, key string) int { return l.waits.waiting(key) }
