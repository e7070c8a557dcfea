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

// SweepLeasesByHand stops l's lease sweep timer (a test's virtual clock is
// not the timer's) and returns the sweep, to call at a time of the test's.
func SweepLeasesByHand(l *Limiter) func(now time.Time) {
	ls := l.leases
	ls.sweepMu.Lock()
	ls.manual = true
	if ls.timer != nil {
		ls.timer.Stop()
		ls.timer = nil
	}
	ls.sweepMu.Unlock()
	return l.sweepLeases
}

// LeasesHeld is how many keys l holds a lease of (spent or not).
func LeasesHeld(l *Limiter) int {
	n := 0
	for i := range l.leases.shards {
		sh := &l.leases.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// WaitNSleeping is l.WaitN(ctx, key, n) sleeping with sleep (a virtual
// clock's) instead of real timers.
func WaitNSleeping(l *Limiter, sleep func(context.Context, time.Duration) error, ctx context.Context, key string, n int64) (Result, error) {
	return l.waitN(ctx, key, n, sleep)
}
