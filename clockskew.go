package fleetlimit

import (
	"context"
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

// SkewObserver is implemented by an Observer (WithObserver) that wants
// clock-skew reports: ObserveSkew is called, from a goroutine of the
// limiter's, once each time the limiter's clock is found more than
// ClockSkewThreshold from its store's and once each time it is back
// within it. A limiter compares the two only when it has WithClock, a
// store with a clock (store.Clocked: Memory and Redis) and an observer
// that is a SkewObserver (SlogObserver is one: it logs the reports); then
// at most every 10 s of its clock, on the first decision after that time,
// in the background: the store's clock is read in one round trip, and the
// limiter's is the one the decision read (the limiter's clock is never
// called from another goroutine).
type SkewObserver interface {
	ObserveSkew(Skew)
}

// skewWatch compares a limiter's clock with its store's (see
// SkewObserver). next and running are read on the decision path; skewed
// is touched only by the check that holds running.
type skewWatch struct {
	name    string
	timeout time.Duration
	st      store.Clocked
	to      SkewObserver
	next    atomic.Int64 // on the limiter's clock, Unix ns: the next check is due
	running atomic.Bool  // a check is under way
	skewed  bool
}

// newSkewWatch returns the watch of l, or nil when l reads no clock of its
// own, its store has none, or no observer wants the reports.
func newSkewWatch(l *Limiter) *skewWatch {
	st, ok := l.store.(store.Clocked)
	to, wants := l.cfg.observer.(SkewObserver)
	if l.cfg.clock == nil || !ok || !wants {
		return nil
	}
	return &skewWatch{name: l.cfg.name, timeout: l.cfg.timeout, st: st, to: to}
}

// due starts a check in the background if one is due at now (the
// limiter's clock, as the decision read it) and none is running. It costs
// an atomic load when none is due.
func (w *skewWatch) due(now time.Time) {
	n := now.UnixNano()
	if next := w.next.Load(); n < next && n > next-2*int64(skewCheckEvery) {
		return // not due (a clock that went far back is due at once)
	}
	if !w.running.CompareAndSwap(false, true) {
		return
	}
	w.next.Store(n + int64(skewCheckEvery))
	go w.check(now, time.Now())
}

// check measures the offset once, from mine (the limiter's clock when the
// real clock read sent), and reports a change of state.
func (w *skewWatch) check(mine, sent time.Time) {
	defer w.running.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	theirs, err := w.st.Time(ctx)
	if err != nil {
		return // the store's outage is the breaker's to report
	}
	// The store read its clock about halfway through the round trip.
	s := Skew{Name: w.name, Offset: theirs.Sub(mine.Add(time.Since(sent) / 2))}
	s.Skewed = s.Offset > ClockSkewThreshold || s.Offset < -ClockSkewThreshold
	if s.Skewed == w.skewed {
		return
	}
	w.skewed = s.Skewed
	w.to.ObserveSkew(s)
}
