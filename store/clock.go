package store

import (
	"context"
	"fmt"
	"time"
)

// Clocked is implemented by stores whose clock a limiter can read: Memory
// and Redis. fleetlimit compares it with a WithClock clock to report clock
// skew.
type Clocked interface {
	// Time returns the store's clock now: the Redis server's TIME (for a
	// Cluster, the TIME of the node the client picks), or the Memory
	// store's clock. Errors are classed as Decide's are.
	Time(ctx context.Context) (time.Time, error)
}

// Time returns the store's clock (see WithMemoryClock).
func (m *Memory) Time(context.Context) (time.Time, error) {
	if m.closed.Load() {
		return time.Time{}, ErrClosed
	}
	return m.clock(), nil
}

// Time returns the Redis server's TIME, in one round trip bounded by ctx.
func (r *Redis) Time(ctx context.Context) (time.Time, error) {
	if r.closed.Load() {
		return time.Time{}, ErrClosed
	}
	t, err := r.client.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("store: TIME: %w", redisError("", err))
	}
	return t, nil
}
