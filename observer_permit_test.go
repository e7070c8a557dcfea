package fleetlimit_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/internal/observertest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// permitRecorder is a PermitObserver that keeps every event, decisions and
// permit operations apart.
type permitRecorder struct {
	mu                 sync.Mutex
	decisions, permits []fleetlimit.Event
}

func (r *permitRecorder) Observe(e fleetlimit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions = append(r.decisions, e)
}

func (r *permitRecorder) ObservePermit(e fleetlimit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.permits = append(r.permits, e)
}

var _ fleetlimit.PermitObserver = (*permitRecorder)(nil)

// A PermitObserver is told about every Acquire, Release and Renew, once
// each, in order, with the operation, its outcome and who decided it; the
// permit operations never reach Observe, and AllowN's decisions never
// reach ObservePermit. The sequence is observertest.Run's (its permits
// and permits-down limiters).
func TestPermitObserverSeesEveryOperation(t *testing.T) {
	type op struct {
		name      string
		op        fleetlimit.PermitOp
		allowed   bool
		remaining int64
		by        fleetlimit.Decider
		degraded  bool
	}
	const store, fallback = fleetlimit.DecidedByStore, fleetlimit.DecidedByFallback
	want := []op{
		{"permits", fleetlimit.PermitAcquire, true, 1, store, false},
		{"permits", fleetlimit.PermitAcquire, true, 0, store, false},
		{"permits", fleetlimit.PermitAcquire, false, 0, store, false}, // both slots held
		{"permits", fleetlimit.PermitRenew, true, 0, store, false},
		{"permits", fleetlimit.PermitRelease, true, 1, store, false},
		{"permits", fleetlimit.PermitRelease, true, 1, store, false}, // no longer held: harmless
		{"permits", fleetlimit.PermitRenew, false, 1, store, false},  // released: ErrPermitExpired, not a store error
		{"permits", fleetlimit.PermitRelease, true, 2, store, false},
		{"permits-down", fleetlimit.PermitAcquire, true, 1, fallback, true}, // the default fallback: 1 instance, the whole limit in process
		{"permits-down", fleetlimit.PermitRelease, true, 2, fallback, false},
	}
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			rec := &permitRecorder{}
			observertest.Run(t, st, rec)
			var got []op
			for _, e := range rec.permits {
				require.Equal(t, "concurrency", e.Algorithm, "%+v", e)
				require.Equal(t, observertest.Key, e.Key)
				require.Equal(t, int64(1), e.N)
				require.Equal(t, e.Degraded(), e.Err != nil)
				got = append(got, op{e.Name, e.Permit, e.Allowed, e.Remaining, e.DecidedBy, e.Degraded()})
			}
			require.Equal(t, want, got)
			for _, e := range rec.decisions {
				require.Equal(t, fleetlimit.NotPermit, e.Permit, "%+v", e)
				require.NotContains(t, []string{"permits", "permits-down"}, e.Name, "a permit operation reached Observe")
			}
			require.Len(t, rec.decisions, 24, "observertest.Run's decisions: api 5, login 2, search 1, rollout 5, leased 10, bare 1")
		})
	}
}
