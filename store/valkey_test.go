package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// logLines captures what go-redis logs (redis.SetLogger) until the test
// ends, then restores go-redis's default logger.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// matching returns the captured lines that contain any of subs.
func (l *logLines) matching(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

func captureLogs(t *testing.T) *logLines {
	l := &logLines{}
	redis.SetLogger(l)
	t.Cleanup(logging.Enable)
	return l
}

// go-redis v9.23 sends CLIENT MAINT_NOTIFICATIONS on every new connection
// (MaintNotificationsConfig's default mode, auto). Valkey 8 answers
// "ERR unknown subcommand": in auto mode go-redis then turns the feature
// off for that client, logs nothing and carries on. Over at least 8
// connections per client (MinIdleConns; standalone and each of the
// cluster's masters), 64 decisions succeed and go-redis logs no line about
// it, while the same capture sees a failed dial's line (so the capture
// works). Not parallel: the logger is global.
func TestValkeyConnectionsLogNothing(t *testing.T) {
	logs := captureLogs(t)
	const conns = 8
	for name, c := range map[string]redis.UniversalClient{
		"valkey":         redistest.Valkey(t, func(o *redis.Options) { o.MinIdleConns = conns }),
		"valkey-cluster": redistest.ValkeyCluster(t, func(o *redis.ClusterOptions) { o.MinIdleConns = conns }),
	} {
		s := stores.Redis(t, c, store.WithMaxInFlight(16))
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		p := redistest.Prefix()
		for i := range 64 {
			wg.Go(func() {
				_, err := s.Decide(context.Background(), store.Request{Strategy: algorithm.FixedWindow(100, time.Minute), Prefix: p, Key: fmt.Sprint("u", i%8), N: 1, Timeout: 10 * time.Second})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, name)
		}
		require.Eventually(t, func() bool { return c.PoolStats().TotalConns >= conns }, 10*time.Second, 10*time.Millisecond,
			"%s: %d connections open", name, c.PoolStats().TotalConns)
	}
	require.Empty(t, logs.matching("maint", "MAINT", "unknown subcommand", "HELLO"), "go-redis logs about Valkey's connections")

	// The capture sees go-redis's lines: a dial to a closed port logs one.
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	_ = decideOnce(stores.Redis(t, c))
	require.Eventually(t, func() bool { return len(logs.matching("failed to dial")) > 0 }, 5*time.Second, 10*time.Millisecond)
}

// What the maintenance-notifications mode does on Valkey: "disabled" sends
// nothing and works; "enabled" insists, and Valkey's refusal fails every
// connection (docs/operations.md says to leave the default or disable it).
func TestValkeyMaintNotificationsModes(t *testing.T) {
	addr := redistest.ValkeyAddr(t)
	for mode, works := range map[maintnotifications.Mode]bool{
		maintnotifications.ModeDisabled: true,
		maintnotifications.ModeAuto:     true,
		maintnotifications.ModeEnabled:  false,
	} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: mode}})
		t.Cleanup(func() { _ = c.Close() })
		err := decideWithin(stores.Redis(t, c), 10*time.Second)
		if works {
			require.NoError(t, err, mode)
		} else {
			require.ErrorContains(t, err, "unknown subcommand 'maint_notifications'", mode)
		}
	}
}
