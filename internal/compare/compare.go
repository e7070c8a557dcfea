// Package compare measures the trade every fleetlimit algorithm makes
// between accuracy, Redis memory and Redis load, by running the same traffic
// through every registered strategy (algorithm.Registry) over a shared Redis
// and over per-process memory stores, and, for every strategy that can lease
// (its Script sets Leases), with fleetlimit.WithLeases over the shared Redis:
// what leases cost in accuracy and save in round trips.
//
// Time is virtual: every limiter reads a simulated clock
// (fleetlimit.WithClock), so ten simulated minutes take seconds. The clock
// starts at the next window edge after the real time and always runs faster
// than real time, so that on a real Redis, which expires keys on its own
// clock, no key expires before the simulation is done with it.
//
// cmd/compare prints the Report; the root package's compare_test.go runs a
// reduced Config and asserts what the table claims.
package compare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Scenario names accepted in Config.Scenarios.
const (
	Boundary  = "boundary"   // limit just before a window edge, limit just after
	Overload  = "overload"   // users at 1.5x and 3x their limit for several windows
	Fleet     = "fleet"      // K instances behind a round-robin load balancer
	ManyUsers = "many-users" // many users at the limit, for memory per key
)

// Scenarios lists every scenario, in report order.
var Scenarios = []string{Boundary, Overload, Fleet, ManyUsers, ConcurrencyScenario}

// Store names in a Row.
const (
	// StoreRedis is one Redis shared by every instance of the fleet.
	StoreRedis = "redis"
	// StoreMemory is a store.NewMemory per instance: what a process-local
	// counter gives a fleet.
	StoreMemory = "memory"
)

// Limits on a Config, so that a typo cannot ask for terabytes.
const (
	MaxUsers     = 1_000_000
	MaxLimit     = 100_000
	MaxInstances = 64
	// MaxUnits bounds users x limit in the many-users scenario: the sliding
	// log keeps one sorted-set member per admitted unit.
	MaxUnits = 200_000_000
)

// Config says what to compare. The zero value of each field means its
// default.
type Config struct {
	// Server is where the "redis" store lives. Required.
	Server *Server
	// Limit is the limit every strategy enforces, per Window. Default 100.
	Limit int64
	// Window is the period of Limit. Default one minute. Between one second
	// (keys on a real Redis must outlive the run) and one day, in whole
	// milliseconds.
	Window time.Duration
	// Scenarios to run, from Scenarios. Default all.
	Scenarios []string
	// Users is the number of users at the limit in the many-users scenario.
	// Default 10,000; at most MaxUsers.
	Users int
	// MemoryLimits are the limits at which the many-users scenario measures
	// memory. Default Limit and 10*Limit, so that memory growing with the
	// limit shows. Above Limit, Users*Limit/limit users take part, at most
	// 1,000 (bytes per key need no more, and a sliding log of 1,000 members
	// is about 100 KB) and at least min(Users, 100).
	MemoryLimits []int64
	// Instances are the fleet sizes. Default 1, 4, 16.
	Instances []int
	// OverloadUsers is the number of users in each overload scenario.
	// Default 2.
	OverloadUsers int
	// OverloadWindows is how many windows the overload lasts. Default 4.
	OverloadWindows int
	// FleetUsers is the number of users in the fleet scenario. Default 1.
	FleetUsers int
	// FleetWindows is how many windows the fleet scenario lasts. Default 3.
	FleetWindows int
	// Algorithms, if set, restricts the run to these registered
	// algorithms (algorithm.Entry.Name). Default every one.
	Algorithms []string
	// KeyPrefix, if set, replaces every job's key prefix (default
	// "fleetlimit-compare:<run id>:<job>:", unique on a shared server), so
	// that the measured keys are as long as production's. Each job removes
	// its keys before the next starts; use it on a server of your own.
	KeyPrefix string
	// Workers is the number of concurrent clients in the many-users
	// scenario. Default 8.
	Workers int
	// LeaseSizes are the lease sizes (fleetlimit.WithLeases) of the extra
	// rows the overload and fleet scenarios get over the shared Redis, for
	// every algorithm whose strategy can lease. nil means the default, 8 and
	// 64; empty (not nil) means no lease rows. Each from 1 to MaxLimit.
	LeaseSizes []int64
	// LeaseMaxAge is the leases' maxAge. Default Window: a lease ends when
	// it is spent rather than when it ages, so that the rows show what the
	// size saves; a shorter maxAge ends leases early and adds round trips.
	LeaseMaxAge time.Duration
	// LeaseFloor is the floor (fleetlimit.WithLeaseFloor) of the adaptive
	// lease rows: beside each fixed-size row of a size above it, a row
	// whose lease sizes follow each instance's traffic from LeaseFloor up
	// to that size. 0 means the default, 2; negative means no adaptive
	// rows. At most MaxLimit.
	LeaseFloor int64
	// Progress, if set, is called as the run advances (from one goroutine
	// at a time, possibly often: throttle before printing).
	Progress func(Progress)
}

// Progress tells how far a run is.
type Progress struct {
	Job, Jobs   int    // the job running (1-based) and the number of jobs
	Label       string // scenario, algorithm, store, instances
	Done, Total int    // decisions made and planned in this job
}

// Report is the outcome of Run.
type Report struct {
	Server   string        `json:"server"`
	Embedded bool          `json:"embedded"`
	Limit    int64         `json:"limit"`
	Window   time.Duration `json:"-"`
	WindowMS int64         `json:"window_ms"`
	// LeaseMaxAge is Config.LeaseMaxAge, the maxAge of the lease rows.
	LeaseMaxAge   time.Duration `json:"-"`
	LeaseMaxAgeMS int64         `json:"lease_max_age_ms"`
	Rows          []Row         `json:"rows"`
	// Series are the admissions of user 0 in the charted jobs (boundary
	// burst and fleet) and in every job with leases, for Chart (which
	// draws the exact limiters only) and for tests of the lease bound.
	Series  []Series      `json:"-"`
	Elapsed time.Duration `json:"-"`
	// Projection is Projections(), for JSON.
	Projection []Projection `json:"projection,omitempty"`
	// Concurrency are the rows of the concurrency scenario (concurrency.go).
	Concurrency []ConcurrencyRow `json:"concurrency,omitempty"`
}

// Row is one (scenario, algorithm, store, instances). Counts are in units
// of cost; every request costs 1 except in the many-users scenario, where
// each user sends its whole limit as one request.
type Row struct {
	Scenario  string `json:"scenario"`
	Algorithm string `json:"algorithm"`
	Store     string `json:"store"`
	// Lease is the lease size each instance's limiter was built with
	// (fleetlimit.WithLeases), or 0 for an exact limiter: a round trip per
	// decision.
	Lease int64 `json:"lease_size,omitempty"`
	// LeaseFloor is, for an adaptive row, the floor of its lease sizes
	// (fleetlimit.WithLeaseFloor; Lease is the largest); 0 for fixed sizes.
	LeaseFloor int64 `json:"lease_floor,omitempty"`
	Instances  int   `json:"instances"`
	Users      int   `json:"users"`
	Limit      int64 `json:"limit"`
	// Decisions is the number of AllowN calls made.
	Decisions int64 `json:"decisions"`
	Sent      int64 `json:"sent"`
	Admitted  int64 `json:"admitted"`
	// Ideal is what one exact limiter of Limit per window, for the whole
	// fleet, admits from the same traffic.
	Ideal int64 `json:"ideal"`
	// OneInstance is what one instance of this algorithm alone admits from
	// the same traffic: a fleet over a shared store must admit exactly this.
	OneInstance int64 `json:"one_instance"`
	// OverAdmission is (Admitted - Ideal) / Ideal, in percent.
	OverAdmission float64 `json:"over_admission_pct"`
	// WorstWindow is the most admitted to one user in any interval of one
	// window's length, divided by Limit.
	WorstWindow float64 `json:"worst_window_ratio"`
	// StoreCalls counts the calls the instances' limiters made to their
	// stores while deciding (store.Store.Decide and store.Leaser.Lease,
	// counted by a wrapper around the real store), for "redis" rows; the
	// hand-backs of Limiter.Close after the traffic are not counted. Each
	// call is one Redis round trip.
	StoreCalls int64 `json:"store_calls,omitempty"`
	// RoundTrips is StoreCalls / Decisions: 1 for an exact limiter, less
	// with leases. nil for "memory" rows.
	RoundTrips *float64 `json:"round_trips_per_decision"`

	// The rest is measured on a real Redis only (MemoryUsage: or
	// estimated), for "redis" rows: nil elsewhere (NotMeasured says why).

	// MemoryUsage is MEMORY USAGE (SAMPLES 0) averaged over sampled keys,
	// in bytes per key: many-users scenario only. On the embedded miniredis
	// it is estimated (MemoryEstimated) from the keys' contents by a model
	// of Redis 7's encodings.
	MemoryUsage *float64 `json:"memory_usage_bytes_per_key"`
	// MemoryEstimated reports that MemoryUsage is the model's estimate, not
	// a measurement.
	MemoryEstimated bool `json:"memory_estimated,omitempty"`
	// KeyBytes is the length of the measured keys' names, with MemoryUsage:
	// a key's name is part of its memory.
	KeyBytes int `json:"key_bytes,omitempty"`
	// UsedMemory is the growth of INFO used_memory, less what MEMORY STATS
	// counts outside the keys (clients' buffers, scripts, replication),
	// divided by the growth of the key count, in bytes per key: many-users
	// scenario only.
	UsedMemory *float64 `json:"used_memory_bytes_per_key"`
	// Commands is the number of Redis commands run per decision (INFO
	// commandstats: the EVALSHA and every command inside the script).
	Commands *float64 `json:"commands_per_decision"`
	// LatencyP50 and LatencyP99 are the decision round trip as the caller
	// of AllowN sees it, in microseconds.
	LatencyP50 *float64 `json:"latency_p50_us"`
	LatencyP99 *float64 `json:"latency_p99_us"`
	// NotMeasured says why the fields above are nil, or is empty.
	NotMeasured string `json:"not_measured,omitempty"`
}

// Series is the admissions to user 0 in one charted job.
type Series struct {
	Scenario  string
	Algorithm string
	Lease     int64 // Row.Lease
	Floor     int64 // Row.LeaseFloor
	Store     string
	Instances int
	Limit     int64
	// Admitted are the admissions, At relative to the scenario's origin.
	Admitted []Event
	// From and To bound the time to draw, relative to the origin (µs).
	From, To int64
}

func (c *Config) setDefaults() {
	if c.Limit == 0 {
		c.Limit = 100
	}
	if c.Window == 0 {
		c.Window = time.Minute
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = Scenarios
	}
	if c.Users == 0 {
		c.Users = 10_000
	}
	if len(c.MemoryLimits) == 0 {
		c.MemoryLimits = []int64{c.Limit, 10 * c.Limit}
	}
	if len(c.Instances) == 0 {
		c.Instances = []int{1, 4, 16}
	}
	if c.OverloadUsers == 0 {
		c.OverloadUsers = 2
	}
	if c.OverloadWindows == 0 {
		c.OverloadWindows = 4
	}
	if c.FleetUsers == 0 {
		c.FleetUsers = 1
	}
	if c.FleetWindows == 0 {
		c.FleetWindows = 3
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.LeaseSizes == nil {
		c.LeaseSizes = []int64{8, 64}
	}
	if c.LeaseFloor == 0 {
		c.LeaseFloor = 2
	}
	if c.LeaseMaxAge == 0 {
		c.LeaseMaxAge = c.Window
	}
}

// ErrConfig is wrapped by every error about a bad Config.
var ErrConfig = errors.New("compare: invalid configuration")

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Server == nil {
		bad("no server")
	}
	if c.Limit < 1 || c.Limit > MaxLimit {
		bad("limit %d, want 1 to %d", c.Limit, MaxLimit)
	}
	if c.Window < time.Second || c.Window > 24*time.Hour || c.Window%time.Millisecond != 0 {
		bad("window %v, want 1s to 24h in whole milliseconds", c.Window)
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) {
			bad("unknown scenario %q, want one of %s", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, a := range c.Algorithms {
		if !slices.ContainsFunc(algorithm.Registry(), func(e algorithm.Entry) bool { return e.Name == a }) {
			bad("unknown algorithm %q", a)
		}
	}
	if c.Users < 1 || c.Users > MaxUsers {
		bad("users %d, want 1 to %d", c.Users, MaxUsers)
	}
	for _, l := range c.MemoryLimits {
		if !slices.Contains(c.Scenarios, ManyUsers) {
			break
		}
		if l < 1 || l > 10*MaxLimit {
			bad("memory limit %d, want 1 to %d", l, 10*MaxLimit)
		} else if units := int64(c.usersAt(l)) * l; units > MaxUnits {
			bad("%d users at a limit of %d would hold %d units (the sliding log keeps one entry per unit), want at most %d: lower the users or the limit", c.usersAt(l), l, units, MaxUnits)
		}
	}
	for _, n := range c.LeaseSizes {
		if n < 1 || n > MaxLimit {
			bad("lease size %d, want 1 to %d", n, MaxLimit)
		}
	}
	if c.LeaseFloor > MaxLimit || c.LeaseFloor == 1 {
		bad("lease floor %d, want 2 to %d, or negative for none", c.LeaseFloor, MaxLimit)
	}
	if c.LeaseMaxAge < algorithm.MinWindow {
		bad("lease max age %v, want at least %v", c.LeaseMaxAge, algorithm.MinWindow)
	}
	for _, k := range c.Instances {
		if k < 1 || k > MaxInstances {
			bad("fleet of %d instances, want 1 to %d", k, MaxInstances)
		}
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"overload users", c.OverloadUsers}, {"overload windows", c.OverloadWindows}, {"fleet users", c.FleetUsers}, {"fleet windows", c.FleetWindows}, {"workers", c.Workers}} {
		if v.n < 1 || v.n > 1000 {
			bad("%s %d, want 1 to 1000", v.name, v.n)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// leases reports whether s can lease (fleetlimit.WithLeases accepts it):
// its Script says so. The lease rows appear for every such strategy.
func leases(s algorithm.Strategy) bool {
	_, ok := s.(algorithm.Leaser)
	sc := s.Script()
	return ok && sc != nil && sc.Leases
}

// usersAt is the number of users in the many-users scenario at limit l.
func (c *Config) usersAt(l int64) int {
	if l <= c.Limit {
		return c.Users
	}
	return max(min(int(int64(c.Users)*c.Limit/l), 1000), min(c.Users, 100))
}

// Run runs every job of cfg against every registered algorithm and returns
// the report. It stops at the first failed decision: a comparison with holes
// would mislead.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	plans, err := cfg.plans()
	if err != nil {
		return nil, err
	}
	entries := algorithm.Registry()
	if len(cfg.Algorithms) > 0 {
		entries = slices.DeleteFunc(entries, func(e algorithm.Entry) bool { return !slices.Contains(cfg.Algorithms, e.Name) })
	}
	var jobs []job
	for _, p := range plans {
		for _, e := range entries {
			for _, st := range p.stores {
				jobs = append(jobs, job{plan: p, entry: e, store: st})
			}
			if !p.leases || !leases(e.New(p.limit, cfg.Window)) {
				continue
			}
			for _, n := range cfg.LeaseSizes {
				jobs = append(jobs, job{plan: p, entry: e, store: StoreRedis, lease: n})
				if f := cfg.LeaseFloor; f > 0 && n > f {
					jobs = append(jobs, job{plan: p, entry: e, store: StoreRedis, lease: n, floor: f})
				}
			}
		}
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	r := &runner{cfg: cfg, srv: cfg.Server, runID: hex.EncodeToString(id)}
	rep := &Report{
		Server: cfg.Server.String(), Embedded: cfg.Server.Embedded(),
		Limit: cfg.Limit, Window: cfg.Window, WindowMS: cfg.Window.Milliseconds(),
		LeaseMaxAge: cfg.LeaseMaxAge, LeaseMaxAgeMS: cfg.LeaseMaxAge.Milliseconds(),
	}
	for i, j := range jobs {
		j.index, j.jobs = i+1, len(jobs)
		row, series, err := r.run(ctx, j)
		if err != nil {
			return nil, fmt.Errorf("compare: %s, %s, %s store, %d instances: %w", j.plan.name, j.entry.Name, j.store, j.plan.instances, err)
		}
		rep.Rows = append(rep.Rows, row)
		if series != nil {
			rep.Series = append(rep.Series, *series)
		}
	}
	if slices.Contains(cfg.Scenarios, ConcurrencyScenario) {
		if rep.Concurrency, err = r.runConcurrency(ctx); err != nil {
			return nil, err
		}
	}
	rep.Projection = rep.Projections()
	rep.Elapsed = time.Since(start)
	return rep, nil
}
