// Package fakeclock is a clock that moves only when a test says, for
// fleetlimit.WithClock, store.WithMemoryClock and BreakerConfig.Clock: time
// as an argument, so tests never sleep. Its Sleep is a virtual sleep, for
// code that waits (Limiter.WaitN) in such tests.
package fakeclock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock is a settable clock. The zero Clock reads the zero Time. It is safe
// for concurrent use.
type Clock struct {
	mu       sync.Mutex
	now      time.Time
	sleepers []*sleeper
}

// New returns a clock reading t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time; pass the method value as a clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (backwards too).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.wakeDue()
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.wakeDue()
}

// sleeper is a Sleep waiting for the clock to reach at.
type sleeper struct {
	at   time.Time
	wake chan struct{}
}

// Sleep blocks until the clock has been moved (Set, Advance) to d past its
// reading at the call, or ctx is done (then it returns ctx's error). It is
// a virtual time.Sleep for code under test that takes a sleep function.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	s := &sleeper{at: c.now.Add(d), wake: make(chan struct{})}
	if d <= 0 {
		c.mu.Unlock()
		return ctx.Err()
	}
	c.sleepers = append(c.sleepers, s)
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.sleepers = slices.DeleteFunc(c.sleepers, func(x *sleeper) bool { return x == s })
		c.mu.Unlock()
		return ctx.Err()
	}
}

// NextWake returns the earliest instant a Sleep waits for, and false when
// nothing sleeps.
func (c *Clock) NextWake() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for i, s := range c.sleepers {
		if i == 0 || s.at.Before(next) {
			next = s.at
		}
	}
	return next, len(c.sleepers) > 0
}

// wakeDue wakes the sleepers whose time has come. It requires that c.mu is
// held.
func (c *Clock) wakeDue() {
	c.sleepers = slices.DeleteFunc(c.sleepers, func(s *sleeper) bool {
		if s.at.After(c.now) {
			return false
		}
		close(s.wake)
		return true
	})
}
