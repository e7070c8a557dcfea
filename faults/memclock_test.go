package faults_test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// deadAddr returns a loopback address where nothing listens: every
// connection is refused at once.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// While Redis is down the fallback (an in-process store.Memory with its
// default clock, sweeping every 5ms) decides. The limiter reads the wall
// clock itself (WithClock, as an app saving Redis the TIME call would), and
// once that clock glitches a century ahead, for one request on another key.
// That reading must count for nothing but its own key: a 5/hour quota spent
// just before stays spent through dozens of sweeps, for every algorithm.
// (It came back in full within milliseconds when the sweeper followed the
// latest time any caller had passed.) Nothing here needs a real server:
// the shared store is a Redis that refuses connections.
func TestFallbackSurvivesAFarFutureClockReading(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	shared := redisStore(t, c)
	fallback := store.NewMemory(store.WithSweepInterval(5 * time.Millisecond))
	t.Cleanup(func() { _ = fallback.Close() })

	var glitch atomic.Bool
	clock := func() time.Time {
		if glitch.Swap(false) {
			return time.Now().Add(100 * 365 * 24 * time.Hour)
		}
		return time.Now()
	}
	for _, e := range algorithm.Registry() {
		l := newLimiter(t, e.New(5, time.Hour), shared, fleetlimit.WithClock(clock),
			fleetlimit.WithFallback(fallback, 1), fleetlimit.WithTimeout(time.Second))
		for i := range 6 {
			res, err := l.Allow(bg, "u")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, "%s: Redis is down", e.Name)
			require.Equal(t, i < 5, res.Allowed, "%s: request %d, decided by the fallback", e.Name, i)
		}
		glitch.Store(true)
		res, err := l.Allow(bg, "glitched")
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, e.Name)
		require.True(t, res.Allowed, "%s: the glitched reading decides its own key", e.Name)
		require.False(t, glitch.Load(), "%s: the glitch was read", e.Name)

		for deadline := time.Now().Add(250 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			res, err := l.Allow(bg, "u")
			require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable, e.Name)
			require.False(t, res.Allowed, "%s: the hourly quota came back after the glitch", e.Name)
		}
	}
}
