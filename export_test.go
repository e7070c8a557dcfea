package fleetlimit

import (
	"context"
	"time"
)

// Waiting is the number of WaitN calls queued on key in l.
func Waiting(l *Limiter, key string) int {
	q := l.waits
	q.mu.Lock()
	defer q.mu.Unlock()
	if kq := q.keys[key]; kq != nil {
		return len(kq.waiters)
	}
	return 0
}

// SweepLeasesByHand stops l's lease sweep timer and starts no other (a
// test's virtual clock is not the timer's), and returns the sweep, to call
// at a time of the test's.
func SweepLeasesByHand(l *Limiter) func(now time.Time) {
	s := l.sweep
	s.mu.Lock()
	s.afterFunc = func(time.Duration, func()) *time.Timer { return nil }
	s.mu.Unlock()
	s.stop()
	return l.sweepLeases
}

// LeasesHeld is how many keys l holds a lease of (spent or not).
func LeasesHeld(l *Limiter) int { return l.leases.Len() }

// WaitNSleeping is l.WaitN(ctx, key, n) sleeping with sleep (a virtual
// clock's) instead of real timers.
func WaitNSleeping(l *Limiter, sleep func(context.Context, time.Duration) error, ctx context.Context, key string, n int64) (Result, error) {
	return l.waitN(ctx, key, n, sleep)
}
