package compare

import (
	"slices"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Event is a request of cost N by user User at At, in microseconds: relative
// to the scenario's origin in a traffic plan, on the Unix epoch once run.
type Event struct {
	At   int64
	User int
	N    int64
}

// idealAdmitted is what one exact limiter of limit units per window (µs)
// admits from traffic (sorted by time), for the whole fleet together: per
// user, a request passes iff the units admitted in the last window (a unit
// admitted at t counts in [t, t+window)) plus its cost are at most limit.
// This is the promise "limit per window" read literally.
func idealAdmitted(traffic []Event, limit, window int64) int64 {
	type log struct {
		live  []Event
		count int64
	}
	logs := map[int]*log{}
	var admitted int64
	for _, ev := range traffic {
		l := logs[ev.User]
		if l == nil {
			l = &log{}
			logs[ev.User] = l
		}
		for len(l.live) > 0 && l.live[0].At <= ev.At-window {
			l.count -= l.live[0].N
			l.live = l.live[1:]
		}
		if l.count+ev.N <= limit {
			l.live = append(l.live, ev)
			l.count += ev.N
			admitted += ev.N
		}
	}
	return admitted
}

// oneInstance is what a single instance of s admits from traffic: its Go
// rule run in order, one fresh state per user. A fleet on a shared store must
// admit exactly this.
func oneInstance(s algorithm.Strategy, traffic []Event, origin int64) (int64, error) {
	states := map[int]algorithm.State{}
	var admitted int64
	for _, ev := range traffic {
		st := states[ev.User]
		if st == nil {
			st = s.NewState()
			states[ev.User] = st
		}
		d, err := s.Decide(st, time.UnixMicro(origin+ev.At), ev.N)
		if err != nil {
			return 0, err
		}
		if d.Allowed {
			admitted += ev.N
		}
	}
	return admitted, nil
}

// worstWindow is the most units admitted to one user in any interval of
// length window (µs): the largest sum over admissions i..j of one user with
// At[j] - At[i] < window. admitted is sorted by time.
func worstWindow(admitted []Event, window int64) int64 {
	byUser := map[int][]Event{}
	for _, ev := range admitted {
		byUser[ev.User] = append(byUser[ev.User], ev)
	}
	var worst int64
	for _, evs := range byUser {
		var sum int64
		i := 0
		for j := range evs {
			sum += evs[j].N
			for evs[j].At-evs[i].At >= window {
				sum -= evs[i].N
				i++
			}
			worst = max(worst, sum)
		}
	}
	return worst
}

// percentile returns the p-th percentile (0 < p <= 1, nearest rank) of
// sorted, or 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// ofUser returns the events of user u, in order.
func ofUser(evs []Event, u int) []Event {
	return slices.DeleteFunc(slices.Clone(evs), func(e Event) bool { return e.User != u })
}
