package compare

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// runSmall runs the scenarios (all when none is named) cut down to seconds
// on miniredis: a limit of 10 per minute, few users and windows, fleets of
// 1, 4 and 16. The root package's compare_test.go asserts what the table
// claims; these tests assert how Run builds it.
func runSmall(t *testing.T, srv *Server, scenarios ...string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Server: srv, Limit: 10, Window: time.Minute, Scenarios: scenarios, Users: 20, Instances: []int{1, 4, 16},
		OverloadUsers: 1, OverloadWindows: 3, FleetUsers: 1, FleetWindows: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRunEmbedded(t *testing.T) {
	srv, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rep := runSmall(t, srv)

	t.Run("every registered algorithm appears in every scenario, once", func(t *testing.T) {
		type id struct {
			scenario, algorithm, store string
			lease, floor               int64
			instances                  int
			limit                      int64
		}
		seen := map[id]bool{}
		for _, r := range rep.Rows {
			k := id{r.Scenario, r.Algorithm, r.Store, r.Lease, r.LeaseFloor, r.Instances, r.Limit}
			if seen[k] {
				t.Errorf("two rows for %+v", k)
			}
			seen[k] = true
		}
		for _, e := range algorithm.Registry() {
			want := []id{
				{"boundary burst", e.Name, StoreRedis, 0, 0, 1, 10},
				{"overload 3x", e.Name, StoreMemory, 0, 0, 1, 10},
				{manyUsersName, e.Name, StoreRedis, 0, 0, 1, 100},
			}
			// Every strategy that can lease gets lease rows over the shared
			// Redis in the overload and fleet scenarios, of fixed sizes and
			// adapting from 2; no other does.
			for _, n := range []int64{8, 64} {
				for _, k := range []id{{"overload 1.5x", e.Name, StoreRedis, n, 0, 1, 10}, {"fleet", e.Name, StoreRedis, n, 0, 16, 10},
					{"overload 1.5x", e.Name, StoreRedis, n, 2, 1, 10}, {"fleet", e.Name, StoreRedis, n, 2, 16, 10}} {
					if leases(e.New(10, time.Minute)) {
						want = append(want, k)
					} else if seen[k] {
						t.Errorf("row %+v for a strategy that cannot lease", k)
					}
				}
				if k := (id{"boundary burst", e.Name, StoreRedis, n, 0, 1, 10}); seen[k] {
					t.Errorf("row %+v: the boundary burst has no lease rows", k)
				}
			}
			for _, k := range want {
				if !seen[k] {
					t.Errorf("no row for %+v", k)
				}
			}
		}
	})

	t.Run("round trips are counted on the shared store only", func(t *testing.T) {
		for _, r := range rep.Rows {
			if r.Store == StoreMemory {
				if r.RoundTrips != nil || r.StoreCalls != 0 {
					t.Errorf("%s %s x%d memory: round trips %v, store calls %d", r.Scenario, r.Algorithm, r.Instances, r.RoundTrips, r.StoreCalls)
				}
				continue
			}
			if r.RoundTrips == nil || *r.RoundTrips != float64(r.StoreCalls)/float64(r.Decisions) {
				t.Errorf("%s %s x%d: round trips %v, %d calls for %d decisions", r.Scenario, r.Algorithm, r.Instances, r.RoundTrips, r.StoreCalls, r.Decisions)
			}
		}
	})

	t.Run("on the embedded server memory is estimated, nothing else", func(t *testing.T) {
		for _, r := range rep.Rows {
			if r.UsedMemory != nil || r.Commands != nil || r.LatencyP50 != nil || r.LatencyP99 != nil {
				t.Errorf("%s %s %s: measured %+v on miniredis", r.Scenario, r.Algorithm, r.Store, r)
			}
			estimated := r.Scenario == manyUsersName && r.Store == StoreRedis
			if estimated != (r.MemoryUsage != nil && *r.MemoryUsage > 0 && r.MemoryEstimated && r.KeyBytes > 0) {
				t.Errorf("%s %s %s: memory %v, estimated %v", r.Scenario, r.Algorithm, r.Store, r.MemoryUsage, r.MemoryEstimated)
			}
			if r.Store == StoreRedis && r.NotMeasured != "embedded" {
				t.Errorf("%s %s: not_measured %q, want embedded", r.Scenario, r.Algorithm, r.NotMeasured)
			}
		}
	})
}

func TestRunRealRedis(t *testing.T) {
	srv, err := Standalone(context.Background(), redistest.RealAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rep := runSmall(t, srv, Fleet)

	t.Run("measured on the real server", func(t *testing.T) {
		for _, r := range rep.Rows {
			if r.Store != StoreRedis {
				continue
			}
			// Other tests share the server, so commandstats can only
			// over-count: every decision is an EVALSHA plus at least one
			// command inside its script (with leases, only the decisions
			// that take a round trip).
			if r.Commands == nil || r.Lease == 0 && *r.Commands < 2 || r.LatencyP50 == nil || *r.LatencyP50 <= 0 || *r.LatencyP99 < *r.LatencyP50 {
				t.Errorf("%s %s x%d: commands %v, p50 %v, p99 %v", r.Scenario, r.Algorithm, r.Instances, r.Commands, r.LatencyP50, r.LatencyP99)
			}
		}
	})
}
