package fleetlimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// Every decision reaches the observer with what it was about; bad input is
// not a decision and does not.
func TestObserverSeesEveryDecision(t *testing.T) {
	for name, st := range stores.All(t) {
		rec := &spy.Observer{}
		l, err := fleetlimit.New(algorithm.FixedWindow(3, time.Minute), st, fleetlimit.WithName("search"),
			fleetlimit.WithObserver(rec), fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(time.Second))), fleetlimit.WithKeyPrefix(redistest.Prefix()),
			fleetlimit.WithTimeout(slowMachine))
		require.NoError(t, err)
		_, err = l.AllowN(bg, "alice", 2)
		require.NoError(t, err)
		_, err = l.AllowN(bg, "alice", 2)
		require.NoError(t, err)
		_, err = l.AllowN(bg, "", 1)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidKey)
		_, err = l.AllowN(bg, "alice", 0)
		require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)

		ev := rec.Take()
		require.Len(t, ev, 2, "%s: two decisions, two bad calls not observed", name)
		for i, e := range ev {
			require.Equal(t, "search", e.Name, name)
			require.Equal(t, "fixed_window", e.Algorithm)
			require.Equal(t, "alice", e.Key)
			require.Equal(t, int64(2), e.N)
			require.Empty(t, e.Route, "no route outside the middleware")
			require.Equal(t, i == 0, e.Allowed, "%s event %d", name, i)
			require.Equal(t, []int64{1, 1}[i], e.Remaining)
			require.False(t, e.Degraded())
			require.NoError(t, e.Err)
			require.Equal(t, fleetlimit.DecidedByStore, e.DecidedBy)
			require.GreaterOrEqual(t, e.Latency, time.Duration(0))
		}
	}
}

// The slog adapter logs admissions at Debug, denials at Info and degraded
// decisions at Warn with the error and the policy; a logger at Warn keeps
// only the last.
func TestSlogObserver(t *testing.T) {
	closed := stores.Down(t)
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelWarn} {
		var buf bytes.Buffer
		obs := fleetlimit.SlogObserver(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})))
		mem := store.NewMemory()
		defer mem.Close()
		l, err := fleetlimit.New(algorithm.SlidingWindowLog(1, time.Minute), mem, fleetlimit.WithName("login"), fleetlimit.WithObserver(obs))
		require.NoError(t, err)
		down, err := fleetlimit.New(algorithm.SlidingWindowLog(1, time.Minute), closed, fleetlimit.WithName("login"),
			fleetlimit.WithObserver(obs), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
		require.NoError(t, err)
		_, _ = l.Allow(bg, "203.0.113.7")
		_, _ = l.Allow(bg, "203.0.113.7")
		_, _ = down.Allow(bg, "203.0.113.7")

		var records []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			records = append(records, rec)
		}
		wantLevels := []string{"DEBUG", "INFO", "WARN"}
		if level == slog.LevelWarn {
			wantLevels = wantLevels[2:]
		}
		require.Len(t, records, len(wantLevels))
		for i, r := range records {
			require.Equal(t, wantLevels[i], r["level"])
			require.Equal(t, "login", r["name"])
			require.Equal(t, "sliding_window_log", r["algorithm"])
			require.Equal(t, "203.0.113.7", r["key"])
		}
		last := records[len(records)-1]
		require.Equal(t, false, last["allowed"])
		require.Equal(t, "fail-closed", last["policy"])
		require.Equal(t, "policy", last["decided_by"])
		require.Contains(t, last["error"], "store unavailable")
	}
}

// Event.Cause classifies a degraded decision's store error as the limiter
// returns it: a refused port is unavailable, an open breaker
// circuit_open, a deadline timeout; a store decision and a cancelled caller have
// none, and the sentinels nested in another wrapping still classify.
func TestEventCause(t *testing.T) {
	decide := func(st store.Store, ctx context.Context, opts ...fleetlimit.Option) fleetlimit.Event {
		t.Helper()
		rec := &spy.Observer{}
		l, err := fleetlimit.New(algorithm.FixedWindow(3, time.Minute), st,
			append([]fleetlimit.Option{fleetlimit.WithObserver(rec), fleetlimit.WithTimeout(slowMachine)}, opts...)...)
		require.NoError(t, err)
		_, _ = l.Allow(ctx, "alice")
		ev := rec.Take()
		require.Len(t, ev, 1)
		return ev[0]
	}
	require.Equal(t, fleetlimit.CauseNone, decide(stores.Memory(t), bg).Cause())
	require.Equal(t, fleetlimit.CauseUnavailable, decide(stores.Down(t), bg).Cause())
	gone, cancel := context.WithCancel(bg)
	cancel()
	require.Equal(t, fleetlimit.CauseNone, decide(stores.Down(t), gone).Cause(), "the caller, not the store, failed")

	wrapped := func(err error) fleetlimit.Event {
		return fleetlimit.Event{Err: fmt.Errorf("fleetlimit: outer: %w", fmt.Errorf("%w: %w", fleetlimit.ErrStoreUnavailable, err))}
	}
	for err, want := range map[error]fleetlimit.Cause{
		fleetlimit.ErrCircuitOpen: fleetlimit.CauseCircuitOpen,
		context.DeadlineExceeded:  fleetlimit.CauseTimeout,
		store.ErrRejected:         fleetlimit.CauseRejected,
		errors.New("READONLY"):    fleetlimit.CauseUnavailable,
	} {
		require.Equal(t, want, wrapped(err).Cause(), "%v", err)
	}
	for c, s := range map[fleetlimit.Cause]string{fleetlimit.CauseNone: "none", fleetlimit.CauseCircuitOpen: "circuit_open",
		fleetlimit.CauseRejected: "rejected", fleetlimit.Cause(200): "Cause(200)"} {
		require.Equal(t, s, c.String())
	}
}
