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

// LeaseKeysSeen is how many keys l remembers deciding exactly, to lease
// them at their next round trip.
func LeaseKeysSeen(l *Limiter) int { return l.leases.Seen() }

// LeaseFromTheFirst makes l take a lease at a key's first round trip, as
// at every later one, rather than decide it exactly: for step tests of the
// lease mechanics, whose units are counted from a key's first request. It
// returns l.
func LeaseFromTheFirst(l *Limiter) *Limiter {
	l.leases.LeaseFirst()
	return l
}

// SettleLeases waits for l's round trips taking leases ahead.
func SettleLeases(l *Limiter) { l.leases.Settle() }

// LeaseWaits is how many of l's decisions waited on a round trip (or were
// decided exactly): all but those its leases served at once.
func LeaseWaits(l *Limiter) int64 { return l.leases.Waited() }

// LeaseLefts is what each of l's leases of key holds, the older first.
func LeaseLefts(l *Limiter, key string) []int64 { return l.leases.Lefts(key) }

// RefreshRegistry writes l's registry entry again now, as its refresh
// goroutine does at each tick, and reports the conflicts it finds.
func RefreshRegistry(l *Limiter) { l.reg.refresh() }

// RegistryDone is closed when l's registry refresh goroutine has ended.
func RegistryDone(l *Limiter) <-chan struct{} { return l.reg.done }

// RegistryInstance is l's instance id in the registry.
func RegistryInstance(l *Limiter) string { return l.reg.instance }

// BoxedTiers is how many tiers l keeps in its penalty box, and the most it
// keeps (penaltyBoxes).
func BoxedTiers(l *Limiter) (n, most int) {
	k := 0
	l.boxes.m.Range(func(any, any) bool { k++; return true })
	return k, maxBoxes
}
