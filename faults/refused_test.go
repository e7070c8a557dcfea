package faults_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/store"
)

// A redis-server that does not run our scripts — EVALSHA renamed away
// (rename-command EVALSHA "", as hardened deployments do), EVAL renamed
// away too, or EVAL alone (then EVALSHA answers NOSCRIPT and the fallback
// to EVAL is refused) — under 16 workers offering 1,000 decisions a second
// with FailOpen and the default breaker. The server answers, but can decide
// no one's request: that is an outage, not a refusal of one request. The
// circuit opens within a few timeouts and says so once at Error, naming the
// command; from then on decisions are the policy's without calling the
// store, but for the probes and the calls already in flight; every error
// wraps store.ErrCommandRefused; and Ping, at start-up, names the command.
func TestScriptCommandsRefused(t *testing.T) {
	const (
		workers = 16
		rate    = 1000
		window  = 2 * time.Second
	)
	for _, tc := range []struct {
		name    string
		args    []string
		missing string // what Ping names
	}{
		{"EVALSHA renamed", []string{"--rename-command", "EVALSHA", ""}, "EVALSHA"},
		{"EVALSHA and EVAL renamed", []string{"--rename-command", "EVALSHA", "", "--rename-command", "EVAL", ""}, "EVALSHA"},
		{"EVAL renamed", []string{"--rename-command", "EVAL", ""}, "EVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := captureDefaultLog(t)
			srv := redistest.StartServer(t, tc.args...)
			st := redisStore(t, srv.Client())

			err := st.Ping(bg)
			require.ErrorIs(t, err, store.ErrCommandRefused, "Ping")
			require.ErrorIs(t, err, store.ErrUnavailable, "Ping")
			require.Contains(t, err.Error(), ": "+tc.missing+" (", "Ping names the command")
			t.Logf("Ping: %v", err)

			// A refusal is answered at once: the timeout is generous so that
			// a loaded machine does not turn one into a timeout.
			l := newLimiter(t, algorithm.TokenBucket(rate, time.Second, rate), st,
				fleetlimit.WithTimeout(time.Second), fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
			stop := make(chan struct{})
			time.AfterFunc(window, func() { close(stop) })
			outs := offer(l, []string{"a", "b"}, workers, rate, stop)

			var opened time.Time
			timedOut := 0
			for _, o := range outs {
				require.ErrorIs(t, o.err, fleetlimit.ErrStoreUnavailable)
				require.Equal(t, degraded(fleetlimit.FailOpen, rate), o.res, "the policy decides")
				if errors.Is(o.err, fleetlimit.ErrCircuitOpen) {
					if opened.IsZero() || o.at.Before(opened) {
						opened = o.at
					}
					continue
				}
				if !errors.Is(o.err, store.ErrCommandRefused) {
					require.ErrorIs(t, o.err, context.DeadlineExceeded, "neither refused nor timed out")
					timedOut++
				}
			}
			require.LessOrEqual(t, 50*timedOut, len(outs), "calls that timed out instead of being refused")
			n := count3(outs)
			reachedAfter := 0
			for _, o := range outs {
				if !opened.IsZero() && o.at.After(opened) && !errors.Is(o.err, fleetlimit.ErrCircuitOpen) {
					reachedAfter++
				}
			}
			records := breakerRecords(logs.Take())
			for _, r := range records {
				t.Logf("log: %s %s %v", r.Level, r.Message, spy.Attrs(r))
			}
			t.Logf("%d decisions over %v: %d called the store and were refused or timed out (%d timed out; %d after the circuit opened), %d short-circuited",
				len(outs), window, n.failed, timedOut, reachedAfter, n.open)
			require.False(t, opened.IsZero(), "the circuit never opened")
			// After it opens, only the calls in flight then and one probe
			// per cool-down (at least DefaultCoolDown) reach the store.
			require.LessOrEqual(t, reachedAfter, workers+int(window/fleetlimit.DefaultBreakerConfig().CoolDown)+1, "calls that reached the store with the circuit open")
			require.Len(t, records, 1, "one record: it opened")
			require.Equal(t, slog.LevelError, records[0].Level)
			cause := spy.Attrs(records[0])["cause"].String()
			require.True(t, strings.Contains(cause, "'"+strings.ToLower(tc.missing)+"'"), "the record names the command: %s", cause)
		})
	}
}
