package fleetlimit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/observertest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// TestAtMostObserverSeesEveryGrant: the Observer is told about every
// AllowAtMost once, as an Event with AtMost set, N the cost asked for and
// Granted what was granted (0 included), Allowed being Granted > 0, with
// who decided and the store's error; a shadow grant reports the real
// grant; calls with invalid input are not observed; an AllowN beside them
// is observed as before (AtMost false, Granted 0). On every store, then
// with the store down (FailOpen grants all of n, degraded), then with the
// caller gone.
func TestAtMostObserverSeesEveryGrant(t *testing.T) {
	type ev struct {
		name            string
		atMost          bool
		n, granted      int64
		allowed, shadow bool
		remaining       int64
		by              fleetlimit.Decider
		degraded        bool
	}
	const byStore = fleetlimit.DecidedByStore
	ctx := context.Background()
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			rec := &permitRecorder{}
			s := algorithm.FixedWindow(10, time.Hour)
			lim, err := fleetlimit.New(s, st, fleetlimit.WithName("plain"), fleetlimit.WithObserver(rec), fleetlimit.WithKeyPrefix("obs-atmost:"))
			require.NoError(t, err)
			grant := func(l *fleetlimit.Limiter, key string, n, want int64) {
				t.Helper()
				g, _, err := l.AllowAtMost(ctx, key, n)
				require.NoError(t, err)
				require.Equal(t, want, g)
			}
			grant(lim, "k", 4, 4)
			grant(lim, "k", 10, 6)
			grant(lim, "k", 3, 0)
			_, _, err = lim.AllowAtMost(ctx, "", 3)
			require.ErrorIs(t, err, fleetlimit.ErrInvalidKey)
			_, _, err = lim.AllowAtMost(ctx, "k", 11)
			require.ErrorIs(t, err, fleetlimit.ErrInvalidCost)
			_, err = lim.AllowN(ctx, "j", 2)
			require.NoError(t, err)

			shadow, err := fleetlimit.New(s, st, fleetlimit.WithName("shadow"), fleetlimit.WithObserver(rec), fleetlimit.WithShadow(), fleetlimit.WithKeyPrefix("obs-atmost-shadow:"))
			require.NoError(t, err)
			grant(shadow, "k", 7, 7)
			grant(shadow, "k", 7, 7) // 3 granted, raised to 7

			gone, cancel := context.WithCancel(ctx)
			cancel()
			g, _, err := lim.AllowAtMost(gone, "k", 1)
			require.ErrorIs(t, err, context.Canceled)
			require.Zero(t, g)

			want := []ev{
				{"plain", true, 4, 4, true, false, 6, byStore, false},
				{"plain", true, 10, 6, true, false, 0, byStore, false},
				{"plain", true, 3, 0, false, false, 0, byStore, false},
				{"plain", false, 2, 0, true, false, 8, byStore, false}, // AllowN, unchanged
				{"shadow", true, 7, 7, true, false, 3, byStore, false},
				{"shadow", true, 7, 3, true, true, 0, byStore, false},
				{"plain", true, 1, 0, false, false, 0, fleetlimit.DecidedByCaller, true},
			}
			var got []ev
			for _, e := range rec.decisions {
				require.Equal(t, "fixed_window", e.Algorithm)
				got = append(got, ev{e.Name, e.AtMost, e.N, e.Granted, e.Allowed, e.Shadow, e.Remaining, e.DecidedBy, e.Degraded()})
			}
			require.Equal(t, want, got)
			require.Empty(t, rec.permits)
		})
	}
	t.Run("down", func(t *testing.T) {
		rec := &permitRecorder{}
		lim, err := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Minute), stores.Down(t), fleetlimit.WithObserver(rec),
			fleetlimit.WithFailurePolicy(fleetlimit.FailOpen), fleetlimit.WithoutBreaker(), fleetlimit.WithTimeout(time.Second))
		require.NoError(t, err)
		g, _, err := lim.AllowAtMost(ctx, "k", 3)
		require.ErrorIs(t, err, fleetlimit.ErrStoreUnavailable)
		require.Equal(t, int64(3), g)
		require.Len(t, rec.decisions, 1)
		e := rec.decisions[0]
		require.True(t, e.AtMost)
		require.Equal(t, [2]int64{3, 3}, [2]int64{e.N, e.Granted})
		require.True(t, e.Allowed)
		require.Equal(t, fleetlimit.DecidedByPolicy, e.DecidedBy)
		require.ErrorIs(t, e.Err, fleetlimit.ErrStoreUnavailable)
	})
}

// TestSlogObserverGrantsAndSettles: SlogObserver logs a partial grant with
// what it granted, and a settle marked as one (observertest's sequence:
// grants of 4 of 4 and 6 of 10, a reservation of 5 cancelled, one of 3
// settled at 5), each once.
func TestSlogObserverGrantsAndSettles(t *testing.T) {
	log := &spy.Log{}
	observertest.GrantsAndSettles(t, fleetlimit.SlogObserver(slog.New(log)))
	type rec struct {
		n, granted int64
		settle     bool
	}
	var got []rec
	for _, r := range log.Take() {
		a := spy.Attrs(r)
		var g rec
		g.n = a["n"].Int64()
		if v, ok := a["granted"]; ok {
			g.granted = v.Int64()
		}
		if v, ok := a["settle"]; ok {
			g.settle = v.Bool()
		}
		got = append(got, g)
	}
	require.Equal(t, []rec{{4, 4, false}, {10, 6, false}, {5, 0, false}, {-5, 0, true}, {3, 0, false}, {2, 0, true}}, got)
}
