package fleetlimit

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/store"
)

// ClockSkewThreshold is how far a limiter's own clock (WithClock) may be
// from its store's before the skew is reported. Instances that decide one
// key on clocks that far apart see its windows at different times: the one
// behind is judged at the newest admission's time by a sliding log and can
// be starved of a shared key, and a token bucket charges the one behind
// for the difference.
const ClockSkewThreshold = 250 * time.Millisecond

// skewCheckEvery is the most often a limiter compares the two clocks, on
// its own clock's time.
const skewCheckEvery = 10 * time.Second

// Skew is a clock-skew report (see SkewObserver).
type Skew struct {
	// Name is the limiter's name.
	Name string
	// Offset is the store's clock minus the limiter's, measured at the
	// middle of the round trip that read the store's clock: positive when
	// the limiter's clock is behind.
	Offset time.Duration
	// Skewed reports whether |Offset| is above ClockSkewThreshold; a report
	// with Skewed false says the clocks agree again.
	Skewed bool
}

// SkewObserver is implemented by an Observer (WithObserver) that also
// wants clock-skew reports: ObserveSkew is called, from a goroutine of the
// limiter's, once each time the limiter's clock is found more than
// ClockSkewThreshold from its store's and once each time it is back
// within it. Only a limiter with WithClock over a store that has a clock
// (store.Clocked: Memory and Redis) compares them, at most every 10 s of
// its clock, on the first decision after that time, in the background.
// Each report is also logged (slog.Default; at Warn when skewed, at Info
// when in agreement again).
type SkewObserver interface {
	ObserveSkew(Skew)
}

// skewWatch compares a limiter's clock with its store's (see
// SkewObserver). next and running are read on the decision path; skewed
// is touched only by the check that holds running.
type skewWatch struct {
	l       *Limiter
	st      store.Clocked
	next    atomic.Int64 // on the limiter's clock, Unix ns: the next check is due
	running atomic.Bool  // a check is under way
	skewed  bool
}

// newSkewWatch returns the watch of l, or nil when l reads no clock of its
// own or its store has none.
func newSkewWatch(l *Limiter) *skewWatch {
	st, ok := l.store.(store.Clocked)
	if l.cfg.clock == nil || !ok {
		return nil
	}
	return &skewWatch{l: l, st: st}
}

// due starts a check in the background if one is due at now (the
// limiter's clock) and none is running. It costs an atomic load when none
// is due.
func (w *skewWatch) due(now time.Time) {
	n := now.UnixNano()
	if next := w.next.Load(); n < next && n > next-2*int64(skewCheckEvery) {
		return // not due (a clock that went far back is due at once)
	}
	if !w.running.CompareAndSwap(false, true) {
		return
	}
	w.next.Store(n + int64(skewCheckEvery))
	go w.check()
}

// check measures the offset once and reports a change of state.
func (w *skewWatch) check() {
	defer w.running.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.timeout)
	defer cancel()
	t0 := w.l.cfg.clock()
	theirs, err := w.st.Time(ctx)
	t1 := w.l.cfg.clock()
	if err != nil {
		return // the store's outage is the breaker's to report
	}
	s := Skew{Name: w.l.cfg.name, Offset: theirs.Sub(t0.Add(t1.Sub(t0) / 2))}
	s.Skewed = s.Offset > ClockSkewThreshold || s.Offset < -ClockSkewThreshold
	if s.Skewed == w.skewed {
		return
	}
	w.skewed = s.Skewed
	level, msg := slog.LevelInfo, "fleetlimit: limiter's clock agrees with its store's again"
	if s.Skewed {
		level, msg = slog.LevelWarn, "fleetlimit: limiter's clock (WithClock) is skewed from its store's: instances deciding one key on different times bend its limit"
	}
	slog.Default().LogAttrs(ctx, level, msg, slog.String("name", s.Name), slog.Duration("offset", s.Offset),
		slog.Duration("threshold", ClockSkewThreshold))
	if so, ok := w.l.cfg.observer.(SkewObserver); ok {
		so.ObserveSkew(s)
	}
}
