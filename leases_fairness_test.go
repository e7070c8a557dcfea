package fleetlimit_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// fairnessDemand is each instance's share of the key's traffic, in %.
var fairnessDemand = []int{90, 5, 3, 2}

// fairnessRun is what one configuration of TestLeaseFairness admitted.
type fairnessRun struct {
	name     string
	admitted []int64 // per instance
	offered  []int64
	limit    int64 // what the key could admit over the run
}

func (r fairnessRun) total() (n int64) {
	for _, a := range r.admitted {
		n += a
	}
	return n
}

// share is instance i's share of what the fleet admitted, in %.
func (r fairnessRun) share(i int) float64 {
	return 100 * float64(r.admitted[i]) / float64(r.total())
}

// runFairness sends 4 instances' traffic (fairnessDemand of twice a fixed
// window's limit, each instance's requests evenly spaced, all merged in
// time order) to one key on a virtual clock for windows windows; opts
// configure each instance's leases (none: exact). Every instance sweeps
// its leases every maxAge/8, as its timer does at the least.
func runFairness(t *testing.T, name string, opts ...fleetlimit.Option) fairnessRun {
	const (
		limit   = 1000
		window  = time.Second
		windows = 20
		maxAge  = window / 4
	)
	st := stores.Memory(t)
	clock := &fakeclock.Clock{}
	start := proptest.EdgeAfter(proptest.Epoch, window)
	clock.Set(start)
	p := redistest.Prefix()
	run := fairnessRun{name: name, admitted: make([]int64, len(fairnessDemand)), offered: make([]int64, len(fairnessDemand)), limit: limit * windows}
	type arrival struct {
		at   time.Duration
		inst int
	}
	var arrivals []arrival
	var fleet []*fleetlimit.Limiter
	var sweeps []func(time.Time)
	for i, pct := range fairnessDemand {
		l, err := fleetlimit.New(algorithm.FixedWindow(limit, window), st, append([]fleetlimit.Option{fleetlimit.WithKeyPrefix(p),
			fleetlimit.WithClock(clock.Now), fleetlimit.WithTimeout(proptest.Timeout)}, opts...)...)
		require.NoError(t, err)
		fleet = append(fleet, l)
		if len(opts) > 0 {
			sweeps = append(sweeps, fleetlimit.SweepLeasesByHand(l))
		}
		per := 2 * limit * pct / 100 // requests per window
		for k := range per * windows {
			// Evenly spaced, offset by the instance so that no two coincide.
			arrivals = append(arrivals, arrival{at: time.Duration(k)*window/time.Duration(per) + time.Duration(i)*time.Microsecond, inst: i})
		}
	}
	slices.SortFunc(arrivals, func(a, b arrival) int { return int(a.at - b.at) })
	nextSweep := time.Duration(0)
	for _, a := range arrivals {
		at := start.Add(a.at)
		clock.Set(at)
		for ; nextSweep <= a.at; nextSweep += maxAge / 8 {
			for _, sweep := range sweeps {
				sweep(at)
			}
		}
		res, err := fleet[a.inst].Allow(bg, "shared")
		require.NoError(t, err)
		if len(opts) > 0 {
			fleetlimit.SettleLeases(fleet[a.inst])
		}
		run.offered[a.inst]++
		if res.Allowed {
			run.admitted[a.inst]++
		}
	}
	return run
}

// TestLeaseFairness: four instances of very unequal demand (90/5/3/2 % of
// the traffic, twice the key's limit in all) on one fixed window of 1,000
// per second, 20 windows, on a virtual clock: what each instance admits,
// as a share of what the fleet admitted, against its demand share —
// exact (no leases), leases of 64 with fixed sizes, and adaptive sizes
// (floor 2, up to 64), each with and without lease-ahead. docs/leases.md
// holds its table, row for row (generatedTableIs; FLEETLIMIT_UPDATE_DOCS=1
// rewrites it). It asserts, with adaptive sizes, every instance's
// share within 1.5 percentage points of its demand share, at most half the
// worst deviation of fixed sizes, and the fleet admitting at least 99% of
// the limit.
func TestLeaseFairness(t *testing.T) {
	leases := fleetlimit.WithLeases(64, time.Second/4)
	runs := []fairnessRun{
		runFairness(t, "exact (no leases)"),
		runFairness(t, "leases of 64, fixed", leases),
		runFairness(t, "leases of 64, fixed, ahead", leases, fleetlimit.WithLeaseAhead()),
		runFairness(t, "leases of 2 to 64, adaptive", leases, fleetlimit.WithLeaseFloor(2)),
		runFairness(t, "leases of 2 to 64, adaptive, ahead", leases, fleetlimit.WithLeaseFloor(2), fleetlimit.WithLeaseAhead()),
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| sizes | %s | admitted of the limit |\n| --- |%s --- |\n", strings.Join(func() []string {
		var h []string
		for _, d := range fairnessDemand {
			h = append(h, fmt.Sprintf("instance of %d %% demand", d))
		}
		return h
	}(), " | "), strings.Repeat(" --- |", len(fairnessDemand)))
	for _, r := range runs {
		var cells []string
		for i := range fairnessDemand {
			cells = append(cells, fmt.Sprintf("%.1f %% (%d of %d)", r.share(i), r.admitted[i], r.offered[i]))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f %% |\n", r.name, strings.Join(cells, " | "), 100*float64(r.total())/float64(r.limit))
	}
	t.Log("\n" + b.String())
	generatedTableIs(t, "docs/leases.md", "<!-- generated by TestLeaseFairness -->", b.String())
	// Adaptive sizes: every instance's share within 1.5 percentage points
	// of its demand share, at most half the worst deviation of fixed sizes
	// (with lease-ahead as without), and the fleet admitting at least 99%
	// of the limit.
	worst := func(r fairnessRun) (most float64) {
		for i, d := range fairnessDemand {
			most = max(most, math.Abs(r.share(i)-float64(d)))
		}
		return most
	}
	for _, pair := range [][2]fairnessRun{{runs[1], runs[3]}, {runs[2], runs[4]}} {
		fixed, adaptive := pair[0], pair[1]
		for i, d := range fairnessDemand {
			if got := adaptive.share(i); math.Abs(got-float64(d)) > 1.5 {
				t.Errorf("%s: the instance of %d %% demand admitted %.2f %% of what the fleet admitted", adaptive.name, d, got)
			}
		}
		if worst(adaptive) > worst(fixed)/2 {
			t.Errorf("%s: worst deviation from the demand share %.2f points, %s: %.2f", adaptive.name, worst(adaptive), fixed.name, worst(fixed))
		}
		if adaptive.total()*100 < adaptive.limit*99 {
			t.Errorf("%s: the fleet admitted %d of %d", adaptive.name, adaptive.total(), adaptive.limit)
		}
	}
}
