// Package fakeclock is a clock that moves only when a test says, for
// fleetlimit.WithClock, store.WithMemoryClock and BreakerConfig.Clock: time
// as an argument, so tests never sleep.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable clock. The zero Clock reads the zero Time. It is safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
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
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
