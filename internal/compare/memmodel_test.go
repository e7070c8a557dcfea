package compare

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// TestMemoryModelMatchesRedis runs the many-users scenario on the embedded
// miniredis, where bytes per key are the model's estimate, and on the real
// redis-server, where they are MEMORY USAGE, and holds the estimate within
// 10% of the measurement for every algorithm at limits 10 to 10,000: a
// string in each encoding, a sorted set as a listpack and as a skiplist.
func TestMemoryModelMatchesRedis(t *testing.T) {
	real, err := Standalone(context.Background(), redistest.RealAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	emb, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()

	limits := []int64{10, 100, 1000, 10_000}
	memory := func(srv *Server) map[string]Row {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		rep, err := Run(ctx, Config{
			Server: srv, Limit: 10, Scenarios: []string{ManyUsers}, Users: 20, MemoryLimits: limits,
			// A decision of 10,000 units takes a second or more on miniredis
			// under the race detector, and miniredis runs one at a time: few
			// concurrent clients keep each within the decision timeout.
			Workers: 2,
		})
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]Row{}
		for _, r := range rep.Rows {
			if r.Users == 20 || r.Limit > 10 {
				rows[r.Algorithm+"/"+thousands(r.Limit)] = r
			}
		}
		return rows
	}
	measured, estimated := memory(real), memory(emb)
	for _, e := range algorithm.Registry() {
		for _, l := range limits {
			k := e.Name + "/" + thousands(l)
			m, est := measured[k], estimated[k]
			if m.MemoryUsage == nil || m.MemoryEstimated || est.MemoryUsage == nil || !est.MemoryEstimated {
				t.Errorf("%s: measured %+v, estimated %+v", k, m, est)
				continue
			}
			off := (*est.MemoryUsage - *m.MemoryUsage) / *m.MemoryUsage
			t.Logf("%-32s MEMORY USAGE %9.0f, model %9.0f (%+.1f%%)", k, *m.MemoryUsage, *est.MemoryUsage, 100*off)
			if math.Abs(off) > 0.10 {
				t.Errorf("%s: the model estimates %.0f bytes per key, Redis measures %.0f (%+.1f%%, want within 10%%)",
					k, *est.MemoryUsage, *m.MemoryUsage, 100*off)
			}
		}
	}
}
