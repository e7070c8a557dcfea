package fleetlimit_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// skews is an Observer that hands on clock-skew reports.
type skews chan fleetlimit.Skew

func (skews) Observe(fleetlimit.Event)        {}
func (s skews) ObserveSkew(k fleetlimit.Skew) { s <- k }

// next returns the next report, or fails after a while.
func (s skews) next(t *testing.T) fleetlimit.Skew {
	t.Helper()
	select {
	case k := <-s:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no skew report")
		return fleetlimit.Skew{}
	}
}

// none checks that no report comes within a short while.
func (s skews) none(t *testing.T, why string) {
	t.Helper()
	select {
	case k := <-s:
		t.Fatalf("%s: reported %+v", why, k)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestClockSkewReported: two clocks, the limiter's (WithClock) and the
// memory store's, stepped by hand. A skew above ClockSkewThreshold is
// reported once, with its offset, to a SkewObserver, and once more when the
// clocks agree again; checks in between report nothing.
func TestClockSkewReported(t *testing.T) {
	storeClock := fakeclock.New(proptest.Epoch)
	mine := fakeclock.New(proptest.Epoch)
	mem := store.NewMemory(store.WithMemoryClock(storeClock.Now))
	defer mem.Close()
	reports := make(skews, 4)
	l, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 100), mem, fleetlimit.WithName("skewed"),
		fleetlimit.WithClock(mine.Now), fleetlimit.WithObserver(reports))
	require.NoError(t, err)
	decideAt := func(d time.Duration, ahead time.Duration) {
		t.Helper()
		storeClock.Set(proptest.Epoch.Add(d))
		mine.Set(proptest.Epoch.Add(d + ahead))
		_, err := l.Allow(bg, "u")
		require.NoError(t, err)
	}
	decideAt(0, 0)
	reports.none(t, "clocks agree")
	decideAt(11*time.Second, 5*time.Second) // a check is due: 5 s ahead
	// The offset is measured at the middle of the round trip, on a
	// virtual clock that stands still: off by half of it, here a little.
	k := reports.next(t)
	require.True(t, k.Skewed)
	require.Equal(t, "skewed", k.Name)
	require.InDelta(t, -5*time.Second, k.Offset, float64(200*time.Millisecond), "offset %v", k.Offset)
	decideAt(12*time.Second, 6*time.Second) // not due yet
	decideAt(30*time.Second, 4*time.Second) // due, still skewed: nothing new
	reports.none(t, "still skewed")
	// In agreement again: reported once a check runs (the one due
	// at 40 s may still be waiting behind the last on a loaded machine).
	var back fleetlimit.Skew
	for i := 0; back.Name == ""; i++ {
		require.Less(t, i, 50, "no report of the clocks agreeing again")
		decideAt(time.Duration(50+11*i)*time.Second, 0)
		select {
		case back = <-reports:
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.False(t, back.Skewed)
	require.InDelta(t, 0, back.Offset, float64(200*time.Millisecond), "offset %v", back.Offset)
	reports.none(t, "in agreement since")
}

// TestClockSkewAgainstRedisTIME: a limiter whose clock runs 5 s ahead of
// the real redis-server's TIME reports an offset of about -5 s.
func TestClockSkewAgainstRedisTIME(t *testing.T) {
	reports := make(skews, 1)
	l, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 100), stores.Redis(t, redistest.Real(t)),
		fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(5*time.Second),
		fleetlimit.WithClock(func() time.Time { return time.Now().Add(5 * time.Second) }), fleetlimit.WithObserver(reports))
	require.NoError(t, err)
	_, err = l.Allow(bg, "u")
	require.NoError(t, err)
	k := reports.next(t)
	require.True(t, k.Skewed)
	require.InDelta(t, -5*time.Second, k.Offset, float64(time.Second), "offset %v", k.Offset)
}

// TestSlogObserverLogsSkew: SlogObserver is a SkewObserver: a limiter
// whose clock is 5 s ahead of its store's logs it once, at Warn.
func TestSlogObserverLogsSkew(t *testing.T) {
	log := &spy.Log{}
	clock := fakeclock.New(proptest.Epoch)
	mem := store.NewMemory(store.WithMemoryClock(clock.Now))
	defer mem.Close()
	l, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 100), mem, fleetlimit.WithName("ahead"),
		fleetlimit.WithClock(func() time.Time { return clock.Now().Add(5 * time.Second) }),
		fleetlimit.WithObserver(fleetlimit.SlogObserver(slog.New(log))))
	require.NoError(t, err)
	_, err = l.Allow(bg, "u")
	require.NoError(t, err)
	var skewed []slog.Record
	for deadline := time.Now().Add(10 * time.Second); len(skewed) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, r := range log.Take() {
			if _, ok := spy.Attrs(r)["offset"]; ok {
				skewed = append(skewed, r)
			}
		}
	}
	require.Len(t, skewed, 1)
	require.Equal(t, slog.LevelWarn, skewed[0].Level)
	require.InDelta(t, -5*time.Second, spy.Attrs(skewed[0])["offset"].Duration(), float64(200*time.Millisecond))
}

// TestNoClockNoSkewWatch: without WithClock the store's clock decides, and
// nothing is compared or reported.
func TestNoClockNoSkewWatch(t *testing.T) {
	reports := make(skews, 1)
	l, err := fleetlimit.New(algorithm.TokenBucket(100, time.Second, 100), store.NewMemory(), fleetlimit.WithObserver(reports))
	require.NoError(t, err)
	_, err = l.Allow(bg, "u")
	require.NoError(t, err)
	reports.none(t, "without WithClock")
}
