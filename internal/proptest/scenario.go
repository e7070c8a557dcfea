package proptest

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
)

// Arrival is a burst of Repeat identical requests at one instant: Offset
// grains (plus the scenario's Jitter) from the Edge-th window edge after the
// timeline's start. Most arrivals sit within 3 grains of an edge.
type Arrival struct {
	Edge   int
	Offset int64
	Key    int // index into Keys
	N      int64
	Repeat int
	// Refund makes the arrival a refund of N (Limiter.Refund) in a
	// scenario with Refunds set, or a partial grant of up to N
	// (Limiter.AllowAtMost) in one with AtMosts set; elsewhere it is
	// ignored.
	Refund bool
}

// Keys are the keys timelines use. "{" and "%7B" would share a Redis key if
// store.RedisKey's escaping were not one-to-one.
var Keys = []string{"alice", "{", "%7B"}

func arrivalGen(b Backend, limit int64, w time.Duration) gopter.Gen {
	grains := max(1, int64(w/b.Grain()))
	return func(p *gopter.GenParameters) *gopter.GenResult {
		r := p.Rng
		a := Arrival{Edge: 1 + r.Intn(3), Repeat: 1}
		if r.Intn(5) < 3 {
			a.Offset = r.Int63n(7) - 3 // at or around the edge
		} else {
			a.Offset = r.Int63n(2*grains+1) - grains // anywhere in the windows on either side
		}
		switch k := r.Intn(10); {
		case k < 6:
			a.Key = 0
		case k < 8:
			a.Key = 1
		default:
			a.Key = 2
		}
		switch k := r.Intn(10); {
		case k < 6:
			a.N = 1
		case k < 9:
			a.N = 1 + r.Int63n(min(limit, 5))
		default:
			a.N = 1 + r.Int63n(limit+1) // up to limit+1: never passable
		}
		if r.Intn(10) < 3 {
			a.Repeat = 2 + r.Intn(3)
		}
		a.Refund = r.Intn(4) == 0
		return gopter.NewGenResult(a, gopter.NoShrinker)
	}
}

// Scenario is a strategy and a timeline of requests to it.
type Scenario struct {
	Strat    StratCase
	Arrivals []Arrival
	Base     time.Time     // the timeline's start, a window edge
	Grain    time.Duration // of Arrival.Offset
	// Jitter is added to every arrival: on the real server a sub-grain
	// time, so that its Lua sees microsecond times, and the same for all,
	// so that any two requests are whole grains apart (or at one instant).
	// A gap of a few milliseconds would let a key written with a TTL of
	// a few milliseconds expire in real time before the next request,
	// which the virtual clock says comes first.
	Jitter time.Duration
	// Unsorted keeps the arrivals in generated order, as clocks skewed
	// between instances would deliver them; otherwise they are sorted by
	// time.
	Unsorted bool
	// Refunds makes the arrivals marked Refund refunds (see WithRefunds).
	Refunds bool
	// AtMosts makes the arrivals marked Refund partial grants (see
	// WithAtMosts).
	AtMosts bool
}

// Event is one request of a timeline: a decision of cost N, or a refund of
// N units.
type Event struct {
	At     time.Time
	Key    string
	N      int64
	Refund bool
	// AtMost makes the event a partial grant of up to N
	// (Limiter.AllowAtMost).
	AtMost bool
}

// ScenarioGen generates scenarios of the strategies newStrat builds,
// starting at the first window edge at or after Epoch. Shrinking drops
// arrivals and keeps the strategy.
func ScenarioGen(b Backend, newStrat func(*rand.Rand) StratCase, unsortedSometimes bool) gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		sc := newStrat(p.Rng)
		w := sc.S.Window()
		base := EdgeAfter(Epoch, w)
		unsorted := unsortedSometimes && p.Rng.Intn(3) == 0
		var jitter time.Duration
		if j := b.maxJitter(); j > 0 && p.Rng.Intn(2) == 0 {
			jitter = time.Duration(p.Rng.Int63n(j)) * time.Microsecond
		}
		inner := gen.SliceOf(arrivalGen(b, sc.S.Limit(), w))(p)
		arr, _ := inner.Retrieve()
		wrap := func(a []Arrival) Scenario {
			return Scenario{Strat: sc, Arrivals: a, Base: base, Grain: b.Grain(), Jitter: jitter, Unsorted: unsorted}
		}
		shrinker := func(v any) gopter.Shrink {
			return inner.Shrinker(v.(Scenario).Arrivals).Map(wrap)
		}
		return gopter.NewGenResult(wrap(arr.([]Arrival)), shrinker)
	}
}

// Events expands the arrivals into requests, sorted by time unless Unsorted.
func (s Scenario) Events() []Event {
	w := s.Strat.S.Window()
	var evs []Event
	for _, a := range s.Arrivals {
		at := s.Base.Add(time.Duration(a.Edge)*w + time.Duration(a.Offset)*s.Grain + s.Jitter)
		if at.Before(s.Base) {
			at = s.Base
		}
		for range a.Repeat {
			evs = append(evs, Event{At: at, Key: Keys[a.Key], N: a.N, Refund: s.Refunds && a.Refund, AtMost: s.AtMosts && a.Refund})
		}
	}
	if !s.Unsorted {
		slices.SortStableFunc(evs, func(x, y Event) int { return x.At.Compare(y.At) })
	}
	return evs
}

// String is what gopter prints for a failing case: the strategy and the
// timeline relative to its start.
func (s Scenario) String() string {
	var b strings.Builder
	order := "sorted"
	if s.Unsorted {
		order = "unsorted (skewed clocks)"
	}
	fmt.Fprintf(&b, "%s (Limit %d, Window %v); %d requests, %s, from %s:",
		s.Strat.Desc, s.Strat.S.Limit(), s.Strat.S.Window(), len(s.Events()), order, s.Base.Format(time.RFC3339Nano))
	for _, ev := range s.Events() {
		fmt.Fprintf(&b, " [+%v %s]", ev.At.Sub(s.Base), ev)
	}
	return b.String()
}

// String is the event without its time: `"alice" n=2`, or `refund "alice"
// n=2`.
func (ev Event) String() string {
	if ev.Refund {
		return fmt.Sprintf("refund %q n=%d", ev.Key, ev.N)
	}
	if ev.AtMost {
		return fmt.Sprintf("at most %q n=%d", ev.Key, ev.N)
	}
	return fmt.Sprintf("%q n=%d", ev.Key, ev.N)
}

// WithRefunds makes the scenarios of g timelines of decisions and refunds:
// one arrival in four is a refund of its cost, which may be more than the
// key was charged.
func WithRefunds(g gopter.Gen) gopter.Gen {
	return mapScenarios(g, func(s *Scenario) { s.Refunds = true })
}

// WithAtMosts makes the scenarios of g timelines of decisions and partial
// grants: one arrival in four is a Limiter.AllowAtMost of up to its cost,
// which may be above what the strategy can ever admit at once.
func WithAtMosts(g gopter.Gen) gopter.Gen {
	return mapScenarios(g, func(s *Scenario) { s.AtMosts = true })
}

// mapScenarios is g with f applied to each scenario it generates or
// shrinks to.
func mapScenarios(g gopter.Gen, f func(*Scenario)) gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		res := g(p)
		v, _ := res.Retrieve()
		set := func(v any) any {
			s := v.(Scenario)
			f(&s)
			return s
		}
		return gopter.NewGenResult(set(v), func(v any) gopter.Shrink { return res.Shrinker(v).Map(set) })
	}
}
