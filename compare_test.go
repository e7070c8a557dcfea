package fleetlimit_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/compare"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// The comparison that cmd/compare prints, reduced so that it runs in seconds,
// with what its table claims asserted: the truths a user reads in it. How
// the tool builds the table (its rows, what it measures on which server) is
// tested in internal/compare. compareLimit is small so that the embedded
// miniredis (a fresh Lua state per script call) stays fast.
const (
	compareLimit  = 10
	compareWindow = time.Minute
)

var compareFleet = []int{1, 4, 16}

// reducedComparison is the full comparison on fewer users and windows.
func reducedComparison(srv *compare.Server, scenarios ...string) compare.Config {
	return compare.Config{
		Server: srv, Limit: compareLimit, Window: compareWindow, Scenarios: scenarios,
		Users: 20, Instances: compareFleet,
		OverloadUsers: 1, OverloadWindows: 3, FleetUsers: 1, FleetWindows: 1,
	}
}

// rows indexes a report by scenario, algorithm, store and instances.
type rows map[string]compare.Row

func index(t *testing.T, rep *compare.Report) rows {
	t.Helper()
	out := rows{}
	for _, r := range rep.Rows {
		k := rowKey(r.Scenario, adaptive(r.Algorithm, r.Lease, r.LeaseFloor), r.Store, r.Instances, r.Limit)
		if _, dup := out[k]; dup {
			t.Fatalf("two rows for %s", k)
		}
		out[k] = r
	}
	return out
}

// leased names an algorithm with leases of size n in a row key.
func leased(algo string, n int64) string {
	if n == 0 {
		return algo
	}
	return fmt.Sprintf("%s+leases %d", algo, n)
}

// adaptive names an algorithm with leases of up to size n adapting from
// floor (0: fixed) in a row key.
func adaptive(algo string, n, floor int64) string {
	if floor == 0 {
		return leased(algo, n)
	}
	return fmt.Sprintf("%s+leases %d-%d", algo, floor, n)
}

func rowKey(scenario, algo, store string, k int, limit int64) string {
	return fmt.Sprintf("%s/%s/%s/x%d/limit %d", scenario, algo, store, k, limit)
}

func (rs rows) get(t *testing.T, scenario, algo, store string, k int, limit int64) compare.Row {
	t.Helper()
	r, ok := rs[rowKey(scenario, algo, store, k, limit)]
	if !ok {
		t.Fatalf("no row %s", rowKey(scenario, algo, store, k, limit))
	}
	return r
}

func runComparison(t *testing.T, cfg compare.Config) *compare.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := compare.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// singleLimiter reports whether r's admissions were decided by one state per
// user: one shared store, or a single instance.
func singleLimiter(r compare.Row) bool {
	return r.Store == compare.StoreRedis || r.Instances == 1
}

func TestCompareTruths(t *testing.T) {
	srv, err := compare.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rep := runComparison(t, reducedComparison(srv))
	rs := index(t, rep)
	entries := algorithm.Registry()

	t.Run("fixed window admits twice the limit at a window edge", func(t *testing.T) {
		for _, st := range []string{compare.StoreRedis, compare.StoreMemory} {
			r := rs.get(t, "boundary burst", "fixed_window", st, 1, compareLimit)
			if r.Admitted != 2*compareLimit || r.WorstWindow != 2 || r.Ideal != compareLimit {
				t.Errorf("%s: admitted %d (ideal %d), worst %.2f x limit; want %d, %d, 2.00",
					st, r.Admitted, r.Ideal, r.WorstWindow, 2*compareLimit, compareLimit)
			}
			if r.OverAdmission != 100 {
				t.Errorf("%s: over-admission %.1f%%, want 100%%", st, r.OverAdmission)
			}
		}
	})

	t.Run("every algorithm stays within its bound", func(t *testing.T) {
		for _, r := range rep.Rows {
			if !singleLimiter(r) || r.Lease > 0 {
				continue
			}
			switch e := entry(t, entries, r.Algorithm); {
			case e.Exact:
				// At most limit in any window-long interval.
				if r.WorstWindow > 1 {
					t.Errorf("%s %s %s x%d: %.2f x limit in one window, bound 1", r.Scenario, r.Algorithm, r.Store, r.Instances, r.WorstWindow)
				}
			case r.Algorithm == "token_bucket":
				// burst + rate*d/per in any interval d: 2 x limit in a window.
				if r.WorstWindow > 2 {
					t.Errorf("%s %s x%d: %.2f x limit in one window, bound 2", r.Scenario, r.Store, r.Instances, r.WorstWindow)
				}
			}
		}
		for _, s := range rep.Series {
			if s.Store == compare.StoreMemory && s.Instances > 1 || s.Lease > 0 {
				continue
			}
			switch s.Algorithm {
			case "token_bucket":
				if err := conformsToBucket(s.Admitted, s.Limit, compareWindow, s.Limit); err != nil {
					t.Errorf("%s %s x%d: %v", s.Scenario, s.Store, s.Instances, err)
				}
			case "fixed_window":
				if err := withinAlignedWindows(s.Admitted, s.Limit, compareWindow); err != nil {
					t.Errorf("%s %s x%d: %v", s.Scenario, s.Store, s.Instances, err)
				}
			}
		}
	})

	t.Run("the counter sits between the fixed window and the log", func(t *testing.T) {
		for _, r := range rep.Rows {
			if r.Algorithm != "sliding_window_counter" || !singleLimiter(r) {
				continue
			}
			log := rs.get(t, r.Scenario, "sliding_window_log", r.Store, r.Instances, r.Limit)
			fixed := rs.get(t, r.Scenario, "fixed_window", r.Store, r.Instances, r.Limit)
			if r.WorstWindow < log.WorstWindow || r.WorstWindow > fixed.WorstWindow {
				t.Errorf("%s %s x%d: worst window %.2f x limit, want between the log's %.2f and the fixed window's %.2f",
					r.Scenario, r.Store, r.Instances, r.WorstWindow, log.WorstWindow, fixed.WorstWindow)
			}
		}
		// Where the fixed window doubles the limit at its edges, the counter
		// stays well below it, and above the exact log.
		for _, scenario := range []string{"boundary burst", "overload 3x"} {
			r := rs.get(t, scenario, "sliding_window_counter", compare.StoreRedis, 1, compareLimit)
			fixed := rs.get(t, scenario, "fixed_window", compare.StoreRedis, 1, compareLimit)
			if r.WorstWindow >= fixed.WorstWindow {
				t.Errorf("%s: counter %.2f x limit, fixed window %.2f; want the counter strictly below", scenario, r.WorstWindow, fixed.WorstWindow)
			}
		}
		r := rs.get(t, "overload 3x", "sliding_window_counter", compare.StoreRedis, 1, compareLimit)
		if r.WorstWindow <= 1 {
			t.Errorf("overload 3x: counter %.2f x limit; an estimate from two aligned windows exceeds the limit in some sliding window, as the log never does", r.WorstWindow)
		}
		// Within its proven bound, and never more than a fixed window in
		// any aligned window.
		for _, s := range rep.Series {
			if s.Algorithm != "sliding_window_counter" || s.Store == compare.StoreMemory && s.Instances > 1 {
				continue
			}
			if err := withinAlignedWindows(s.Admitted, s.Limit, compareWindow); err != nil {
				t.Errorf("%s %s x%d: %v", s.Scenario, s.Store, s.Instances, err)
			}
		}
	})

	checkFleet(t, rs, entries)
	checkLeaseRows(t, rep, rs)
}

// checkLeaseRows asserts what the lease rows claim: every decision without a
// lease is one round trip and a lease never makes more; what a fleet with
// leases admits stays within the bound docs/guarantees.md states
// (TestPropertyLeaseBound proves it on random timelines).
func checkLeaseRows(t *testing.T, rep *compare.Report, rs rows) {
	t.Run("without leases, one round trip per decision; with leases, at most one", func(t *testing.T) {
		for _, r := range rep.Rows {
			if r.Store != compare.StoreRedis {
				continue
			}
			switch {
			case r.Lease == 0 && r.StoreCalls != r.Decisions:
				t.Errorf("%s %s x%d: %d store calls for %d decisions, want one each", r.Scenario, r.Algorithm, r.Instances, r.StoreCalls, r.Decisions)
			case r.Lease > 0 && (r.StoreCalls < 1 || r.StoreCalls > r.Decisions):
				t.Errorf("%s %s x%d, leases of %d: %d store calls for %d decisions, want 1 to %d", r.Scenario, r.Algorithm, r.Instances, r.Lease, r.StoreCalls, r.Decisions, r.Decisions)
			}
		}
	})
	t.Run("every strategy that can lease has lease rows", func(t *testing.T) {
		for _, e := range algorithm.Registry() {
			s := e.New(compareLimit, compareWindow)
			if _, ok := s.(algorithm.Leaser); !ok || s.Script() == nil || !s.Script().Leases {
				continue
			}
			for _, n := range []int64{8, 64} {
				for _, algo := range []string{leased(e.Name, n), adaptive(e.Name, n, 2)} {
					rs.get(t, "overload 3x", algo, compare.StoreRedis, 1, compareLimit)
					for _, k := range compareFleet {
						rs.get(t, "fleet", algo, compare.StoreRedis, k, compareLimit)
					}
				}
			}
		}
	})
	t.Run("leased admissions stay within the stated bound", func(t *testing.T) {
		// K instances each hold at most size-1 unspent units of a key (size
		// the largest, for adaptive sizes): a
		// token bucket admits at most burst + rate*d/per + K*(size-1) in any
		// interval d, a fixed window at most limit + K*(size-1) per aligned
		// window, a sliding log at most limit + K*(size-1) in any interval
		// of length W, a counter at most that per aligned window and
		// 2*limit - ceil(2*limit/W) + K*(size-1) in any interval of length W.
		checked := 0
		for _, s := range rep.Series {
			if s.Lease == 0 {
				continue
			}
			slack := int64(s.Instances) * (s.Lease - 1)
			var err error
			switch s.Algorithm {
			case "token_bucket":
				err = conformsToBucket(s.Admitted, s.Limit, compareWindow, s.Limit+slack)
			case "fixed_window":
				err = withinAlignedWindows(s.Admitted, s.Limit+slack, compareWindow)
			case "sliding_window_log":
				err = withinSlidingWindows(s.Admitted, s.Limit+slack, compareWindow)
			case "sliding_window_counter":
				w := compareWindow.Microseconds()
				if err = withinAlignedWindows(s.Admitted, s.Limit+slack, compareWindow); err == nil {
					err = withinSlidingWindows(s.Admitted, 2*s.Limit-(2*s.Limit+w-1)/w+slack, compareWindow)
				}
			default:
				continue // a strategy leasable later states its own bound
			}
			checked++
			if err != nil {
				t.Errorf("%s %s x%d, leases of %d (floor %d): %v", s.Scenario, s.Algorithm, s.Instances, s.Lease, s.Floor, err)
			}
		}
		if checked == 0 {
			t.Error("no lease series checked")
		}
	})
}

// TestCompareLeasesHotKey: on a key that never runs short (one instance,
// the token bucket's refill above its traffic, a limit high enough that
// half of what is left always exceeds the lease), every lease is full and
// spent before it ages, so a fleet of one makes one round trip per size
// decisions: ⌈decisions/size⌉ in all.
func TestCompareLeasesHotKey(t *testing.T) {
	srv, err := compare.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const limit = 1000
	rep := runComparison(t, compare.Config{
		Server: srv, Limit: limit, Window: compareWindow, Scenarios: []string{compare.Fleet},
		Instances: []int{1}, FleetUsers: 1, FleetWindows: 1, Algorithms: []string{"token_bucket"},
	})
	rs := index(t, rep)
	for _, n := range []int64{8, 64} {
		r := rs.get(t, "fleet", leased("token_bucket", n), compare.StoreRedis, 1, limit)
		if r.Admitted != r.Sent {
			t.Fatalf("leases of %d: admitted %d of %d: the key ran short, the test's premise", n, r.Admitted, r.Sent)
		}
		// The key's first decision is exact; every later round trip takes
		// a lease of n.
		if want := 1 + (r.Decisions-1+n-1)/n; r.StoreCalls > want {
			t.Errorf("leases of %d: %d round trips for %d decisions, want at most 1 + ⌈(%d−1)/%d⌉ = %d", n, r.StoreCalls, r.Decisions, r.Decisions, n, want)
		}
		t.Logf("leases of %d: %d round trips for %d decisions (%.4f each)", n, r.StoreCalls, r.Decisions, *r.RoundTrips)
		// Adaptive sizes from 2: every lease is spent at once, so each asks
		// for twice the last, up to n: at most ⌈log2(n/2)⌉ more leases.
		a := rs.get(t, "fleet", adaptive("token_bucket", n, 2), compare.StoreRedis, 1, limit)
		growth := int64(bits.Len64(uint64(n/2 - 1)))
		if want := 1 + growth + (a.Decisions-1+n-1)/n; a.StoreCalls > want || a.Admitted != a.Sent {
			t.Errorf("leases of 2 to %d: %d round trips for %d decisions (admitted %d of %d), want at most %d", n, a.StoreCalls, a.Decisions, a.Admitted, a.Sent, want)
		}
		t.Logf("leases of 2 to %d: %d round trips for %d decisions (%.4f each)", n, a.StoreCalls, a.Decisions, *a.RoundTrips)
	}
}

// checkFleet asserts the fleet scenario's claims: per-process stores admit K
// times what one instance does, a shared store exactly what one instance
// does, and the exact algorithm exactly the limit.
func checkFleet(t *testing.T, rs rows, entries []algorithm.Entry) {
	t.Run("per-process stores over-admit K times", func(t *testing.T) {
		for _, e := range entries {
			one := rs.get(t, "fleet", e.Name, compare.StoreMemory, 1, compareLimit)
			for _, k := range compareFleet[1:] {
				r := rs.get(t, "fleet", e.Name, compare.StoreMemory, k, compareLimit)
				// Each of the K instances sees the traffic one instance sees
				// in the K=1 run (shifted by less than one request).
				if lo, hi := int64(k)*one.Admitted-int64(k), int64(k)*one.Admitted+int64(k); r.Admitted < lo || r.Admitted > hi {
					t.Errorf("%s x%d: admitted %d, want %d x %d (±%d)", e.Name, k, r.Admitted, k, one.Admitted, k)
				}
				if e.Exact && r.WorstWindow != float64(k) {
					t.Errorf("%s x%d: worst %.2f x limit, want exactly %d (each instance is exact on its own)", e.Name, k, r.WorstWindow, k)
				}
			}
		}
	})
	t.Run("a shared store admits what one limiter does", func(t *testing.T) {
		for _, e := range entries {
			for _, k := range compareFleet {
				r := rs.get(t, "fleet", e.Name, compare.StoreRedis, k, compareLimit)
				if r.Admitted != r.OneInstance {
					t.Errorf("%s x%d shared: admitted %d, one instance alone admits %d", e.Name, k, r.Admitted, r.OneInstance)
				}
				if e.Exact && (r.Admitted != r.Ideal || r.WorstWindow != 1) {
					t.Errorf("%s x%d shared: admitted %d (ideal %d), worst %.2f x limit; want exactly the limit",
						e.Name, k, r.Admitted, r.Ideal, r.WorstWindow)
				}
			}
		}
	})
}

func entry(t *testing.T, entries []algorithm.Entry, name string) algorithm.Entry {
	t.Helper()
	i := slices.IndexFunc(entries, func(e algorithm.Entry) bool { return e.Name == name })
	if i < 0 {
		t.Fatalf("row for unregistered algorithm %q", name)
	}
	return entries[i]
}

// conformsToBucket checks that admissions never exceed a token bucket of
// burst tokens refilled at rate per period: in every interval d, at most
// burst + rate*d/period. It replays an exact bucket in integer units (one
// token = period in µs; rate units refill per µs).
func conformsToBucket(admitted []compare.Event, rate int64, period time.Duration, burst int64) error {
	per := period.Microseconds()
	capacity := burst * per
	level, last := capacity, int64(0)
	for i, ev := range admitted {
		if i > 0 {
			level = min(capacity, level+(ev.At-last)*rate)
		}
		last = ev.At
		if level < ev.N*per {
			return fmt.Errorf("admission %d at %dµs: %d units past the bound of %d + %d per %v", i, ev.At, ev.N, burst, rate, period)
		}
		level -= ev.N * per
	}
	return nil
}

// withinAlignedWindows checks that no epoch-aligned window admitted more than
// limit. Admissions are relative to an origin that is a window edge.
func withinAlignedWindows(admitted []compare.Event, limit int64, window time.Duration) error {
	w := window.Microseconds()
	perWindow := map[int64]int64{}
	for _, ev := range admitted {
		idx := ev.At / w
		if ev.At < 0 && ev.At%w != 0 {
			idx--
		}
		perWindow[idx] += ev.N
		if perWindow[idx] > limit {
			return fmt.Errorf("aligned window %d admitted %d, limit %d", idx, perWindow[idx], limit)
		}
	}
	return nil
}

// withinSlidingWindows checks that no interval of length window, (t-W, t],
// admitted more than limit for any one user. Admissions are in time order.
func withinSlidingWindows(admitted []compare.Event, limit int64, window time.Duration) error {
	w := window.Microseconds()
	byUser := map[int][]compare.Event{}
	for _, ev := range admitted {
		byUser[ev.User] = append(byUser[ev.User], ev)
	}
	for user, evs := range byUser {
		var sum int64
		from := 0
		for _, ev := range evs {
			sum += ev.N
			for evs[from].At <= ev.At-w {
				sum -= evs[from].N
				from++
			}
			if sum > limit {
				return fmt.Errorf("user %d: %d admitted in the window ending at %dµs, limit %d", user, sum, ev.At, limit)
			}
		}
	}
	return nil
}

// TestCompareRealRedis runs the fleet scenario and the memory measurement on
// the real redis-server: the shared-store claim holds on the real thing, and
// MEMORY USAGE shows the token bucket constant and the sliding log growing
// with the limit.
func TestCompareRealRedis(t *testing.T) {
	srv, err := compare.Standalone(context.Background(), redistest.RealAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	entries := algorithm.Registry()

	rep := runComparison(t, reducedComparison(srv, compare.Fleet))
	rs := index(t, rep)
	checkFleet(t, rs, entries)
	t.Run("memory per key", func(t *testing.T) {
		limits := []int64{10, 100, 1000}
		cfg := reducedComparison(srv, compare.ManyUsers)
		cfg.MemoryLimits = limits
		rs := index(t, runComparison(t, cfg))
		bytes := func(algo string, limit int64) float64 {
			r := rs.get(t, "many users", algo, compare.StoreRedis, 1, limit)
			if r.MemoryUsage == nil || *r.MemoryUsage <= 0 {
				t.Fatalf("%s at %d: MEMORY USAGE not measured", algo, limit)
			}
			return *r.MemoryUsage
		}
		for i := 1; i < len(limits); i++ {
			lo, hi := limits[i-1], limits[i]
			for _, algo := range []string{"token_bucket", "sliding_window_counter"} {
				if a, b := bytes(algo, lo), bytes(algo, hi); a != b {
					t.Errorf("%s: %.0f bytes per key at a limit of %d, %.0f at %d; want constant", algo, a, lo, b, hi)
				}
			}
			// Ten times the limit, ten times the sorted-set members: at
			// least five times the bytes.
			if a, b := bytes("sliding_window_log", lo), bytes("sliding_window_log", hi); b < 5*a {
				t.Errorf("sliding log: %.0f bytes per key at a limit of %d, %.0f at %d; want growth with the limit", a, lo, b, hi)
			}
		}
		t.Logf("bytes per key at limits %v: sliding log %.0f %.0f %.0f, token bucket %.0f, sliding-window counter %.0f",
			limits, bytes("sliding_window_log", 10), bytes("sliding_window_log", 100), bytes("sliding_window_log", 1000),
			bytes("token_bucket", 10), bytes("sliding_window_counter", 10))
	})
}

// The capacity table of docs/operations.md, measured: on redis-servers of
// the test's own (INFO deltas need a quiet server), keys named as in
// production ("ratelimit:{user-0000001}:tb"), every algorithm full at
// limits 10, 100 and 1,000, over 10,000 keys (1,000 sliding logs at 1,000),
// each on a fresh server. The page's MEMORY USAGE figures must match
// within 2% and its used_memory figures within 15% (allocator noise), and
// its projections must be its own figures multiplied out.
// FLEETLIMIT_UPDATE_DOCS=1 rewrites the table from the measurement.
func TestCapacityTable(t *testing.T) {
	if testing.Short() {
		t.Skip("measures 60,000 keys")
	}
	// Each algorithm and limit on a fresh server: a keyspace that the last
	// row emptied shrinks its tables when Redis's cron gets to it, which
	// would land in the middle of the next row's measurement. 10,000 keys
	// each, so that used_memory's per-key growth stands out of its noise;
	// 1,000 sliding logs of limit 1,000 (100 MB) are enough.
	var reps []*compare.Report
	for _, limit := range []int64{10, 100, 1000} {
		for _, e := range algorithm.Registry() {
			users := 10_000
			if limit == 1000 && e.Exact {
				users = 1000
			}
			server := redistest.StartServer(t)
			srv, err := compare.Standalone(context.Background(), server.Addr)
			if err != nil {
				t.Fatal(err)
			}
			reps = append(reps, runComparison(t, compare.Config{
				Server: srv, Limit: limit, MemoryLimits: []int64{limit}, Users: users, Algorithms: []string{e.Name},
				Scenarios: []string{compare.ManyUsers}, KeyPrefix: fleetlimit.DefaultKeyPrefix,
			}))
			_ = srv.Close()
			server.Kill()
		}
	}
	measured, err := compare.CapacityRows(reps...)
	if err != nil {
		t.Fatal(err)
	}
	table := compare.CapacityMarkdown(measured)
	t.Logf("measured:\n%s", table)

	const page = "docs/operations.md"
	const begin, end = "<!-- capacity table: begin -->\n", "<!-- capacity table: end -->"
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), begin)
	block, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %q ... %q block", page, begin, end)
	}
	if os.Getenv("FLEETLIMIT_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(page, []byte(before+begin+table+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s updated", page)
		return
	}
	written := parseCapacityTable(t, block)
	for _, m := range measured {
		k := fmt.Sprintf("%s/%d", m.Algorithm, m.Limit)
		d, ok := written[k]
		if !ok {
			t.Errorf("%s: no row for %s", page, k)
			continue
		}
		if d.KeyBytes != m.KeyBytes || math.Abs(d.MemoryUsage-m.MemoryUsage) > 0.02*m.MemoryUsage ||
			math.Abs(d.UsedMemory-m.UsedMemory) > 0.15*m.UsedMemory {
			t.Errorf("%s: %s says key %d B, MEMORY USAGE %.0f B, used_memory %.0f B per key; measured %d B, %.0f B, %.0f B",
				k, page, d.KeyBytes, d.MemoryUsage, d.UsedMemory, m.KeyBytes, m.MemoryUsage, m.UsedMemory)
		}
	}
	// The page's projections are its own per-key figures multiplied out.
	if regenerated := compare.CapacityMarkdown(slices.Collect(maps.Values(written))); !sameLines(regenerated, block) {
		t.Errorf("%s: the projections are not the table's own figures multiplied out; want\n%s", page, regenerated)
	}
}

// parseCapacityTable reads the capacity table's rows back, by
// algorithm/limit.
func parseCapacityTable(t *testing.T, block string) map[string]compare.CapacityRow {
	t.Helper()
	num := func(s string) float64 {
		s = strings.NewReplacer(",", "", " B", "", "`", "").Replace(strings.TrimSpace(s))
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("capacity table: %q is not a number", s)
		}
		return v
	}
	rows := map[string]compare.CapacityRow{}
	for _, line := range strings.Split(block, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 5 || !strings.HasPrefix(cells[0], "`") {
			continue
		}
		used, keys, _ := strings.Cut(cells[4], " (")
		r := compare.CapacityRow{
			Algorithm: strings.Trim(cells[0], "`"), Limit: int64(num(cells[1])), KeyBytes: int(num(cells[2])),
			MemoryUsage: num(cells[3]), UsedMemory: num(used), Keys: int(num(strings.TrimSuffix(keys, ")"))),
		}
		rows[fmt.Sprintf("%s/%d", r.Algorithm, r.Limit)] = r
	}
	return rows
}

// sameLines reports whether a and b hold the same set of lines (the rows of
// a map come in any order).
func sameLines(a, b string) bool {
	la, lb := strings.Split(strings.TrimSpace(a), "\n"), strings.Split(strings.TrimSpace(b), "\n")
	slices.Sort(la)
	slices.Sort(lb)
	return slices.Equal(la, lb)
}
