package faults_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// A wrong Redis address, as a new user would make it: Ping at start-up
// names the cause ("connection refused", not the deadline that go-redis's
// dial retries end in), and so does every decision's error, wrapping
// ErrStoreUnavailable and the dial's error (errors.Is finds
// syscall.ECONNREFUSED). A timeout too short to include a
// dial is refused by New.
func TestUnreachableRedisIsReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	st := stores.Redis(t, c)

	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	err = st.Ping(ctx)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "connection refused")

	l := newLimiter(t, algorithm.TokenBucket(5, time.Minute, 5), st, fleetlimit.WithTimeout(100*time.Millisecond))
	for range 3 {
		_, err := l.Allow(bg, "u")
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
		if !errors.Is(err, fleetlimit.ErrCircuitOpen) {
			require.ErrorContains(t, err, "connection refused")
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
		}
	}

	_, err = fleetlimit.New(algorithm.TokenBucket(5, time.Minute, 5), st, fleetlimit.WithTimeout(time.Millisecond))
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	require.ErrorContains(t, err, "MinTimeout")
}
