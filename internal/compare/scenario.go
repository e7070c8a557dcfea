package compare

import (
	"fmt"
	"math/bits"
)

// plan is one scenario instance: the traffic, and how to run it.
type plan struct {
	name      string // Row.Scenario
	limit     int64
	users     int
	instances int
	stores    []string
	// traffic is sorted by time; At is relative to the origin, a window edge.
	traffic []Event
	// parallel runs the traffic on Config.Workers clients, each user's
	// requests on one of them; otherwise requests go in order, round robin
	// over the instances.
	parallel bool
	// chart keeps user 0's admissions, to draw [from, to).
	chart    bool
	from, to int64
	// leases adds rows with fleetlimit.WithLeases over the shared Redis
	// (Config.LeaseSizes) for every strategy that can lease.
	leases bool
}

// maxEvents bounds the decisions a run plans, so that a typo in a flag
// cannot exhaust memory.
const maxEvents = 50_000_000

// plans lays out the traffic of every scenario in cfg. Windows are in µs.
func (c *Config) plans() ([]plan, error) {
	w := c.Window.Microseconds()
	both := []string{StoreRedis, StoreMemory}
	var ps []plan
	for _, s := range c.Scenarios {
		switch s {
		case Boundary:
			ps = append(ps, boundaryPlan(c.Limit, w, both))
		case Overload:
			for _, r := range []struct{ num, den int64 }{{3, 2}, {3, 1}} {
				p, err := overloadPlan(c.Limit, w, r.num, r.den, c.OverloadUsers, c.OverloadWindows, both)
				if err != nil {
					return nil, err
				}
				ps = append(ps, p)
			}
		case Fleet:
			for _, k := range c.Instances {
				p, err := fleetPlan(c.Limit, w, k, c.FleetUsers, c.FleetWindows, both)
				if err != nil {
					return nil, err
				}
				ps = append(ps, p)
			}
		case ManyUsers:
			for _, l := range c.MemoryLimits {
				ps = append(ps, manyUsersPlan(l, w, c.usersAt(l)))
			}
		}
	}
	return ps, nil
}

// boundaryPlan is one user sending limit requests, evenly, in the last
// sixtieth of a window (the last second of a minute) before an edge of the
// fixed window's epoch-aligned grid and limit more in the first sixtieth
// after it. An exact limiter admits limit; a fixed window admits 2*limit.
func boundaryPlan(limit, w int64, stores []string) plan {
	b := w / 60
	var evs []Event
	for _, base := range []int64{-b, 0} {
		for i := range limit {
			evs = append(evs, Event{At: base + mulDiv(i, b, limit), N: 1})
		}
	}
	return plan{
		name: "boundary burst", limit: limit, users: 1, instances: 1, stores: stores,
		traffic: evs, chart: true, from: -w / 4, to: w + w/4,
	}
}

// overloadPlan is users each sending evenly at num/den times the limit for
// windows windows, their phases spread over one request interval, starting
// a third of a window past an edge (so that no algorithm is favoured by the
// grid).
func overloadPlan(limit, w, num, den int64, users, windows int, stores []string) (plan, error) {
	start := w / 3
	end := start + int64(windows)*w
	name := fmt.Sprintf("overload %gx", float64(num)/float64(den))
	// request k (user k mod users) is at start + k*w*den / (num*limit*users)
	evs, err := steady(name, start, end, w*den, num*limit*int64(users), users)
	return plan{
		name: name, limit: limit, users: users, instances: 1, stores: stores,
		traffic: evs, leases: true,
	}, err
}

// fleetPlan is users each sending evenly at 1.25*k times the limit for
// windows windows, through k instances in round robin, so that every
// instance sees 1.25 times the limit: k per-process counters admit k times
// the limit, a shared store the limit.
func fleetPlan(limit, w int64, k, users, windows int, stores []string) (plan, error) {
	start := w / 3
	end := start + int64(windows)*w
	evs, err := steady("fleet", start, end, 4*w, 5*int64(k)*limit*int64(users), users)
	return plan{
		name: "fleet", limit: limit, users: users, instances: k, stores: stores,
		traffic: evs, chart: true, from: start - w/6, to: end, leases: true,
	}, err
}

// manyUsersName is the many-users scenario's name in a Row.
const manyUsersName = "many users"

// manyUsersPlan is users each sending its whole limit as one request, spread
// over the first tenth of a window: every key ends up full, which is what the
// many-users memory measurement needs. It runs on Redis only.
func manyUsersPlan(limit, w int64, users int) plan {
	evs := make([]Event, users)
	for u := range users {
		evs[u] = Event{At: mulDiv(int64(u), w/10, int64(users)), User: u, N: limit}
	}
	return plan{
		name: manyUsersName, limit: limit, users: users, instances: 1,
		stores: []string{StoreRedis}, traffic: evs, parallel: true,
	}
}

// steady returns requests k = 0, 1, ... at start + k*num/den until end,
// request k from user k mod users, all of cost 1. More than maxEvents is a
// configuration error, found before anything is allocated.
func steady(name string, start, end, num, den int64, users int) ([]Event, error) {
	// k*num/den < end-start  <=>  k < (end-start)*den/num
	if n := mulDiv(end-start, den, num) + 1; n > maxEvents {
		return nil, fmt.Errorf("%w: the %s scenario would make more than %d decisions; lower the limit, users or windows", ErrConfig, name, maxEvents)
	}
	var evs []Event
	for k := int64(0); ; k++ {
		at := start + mulDiv(k, num, den)
		if at >= end {
			return evs, nil
		}
		evs = append(evs, Event{At: at, User: int(k % int64(users)), N: 1})
	}
}

// mulDiv returns ⌊a*b/c⌋ for a, b >= 0 and c > 0 without overflow, provided
// the quotient fits.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}
