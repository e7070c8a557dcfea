package fleetlimit_test

// Shared machinery of the property tests (property_test.go, twin_test.go,
// multiinstance_test.go): the seed, the stores every property runs on, the
// generators of strategies and timelines, and a limiter on a virtual clock.
// docs/guarantees.md says what each property proves.

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

const (
	// propSeedEnv replays a run: every property of the run starts from this
	// seed, which a failure prints.
	propSeedEnv = "FLEETLIMIT_PROP_SEED"
	// propScaleEnv multiplies every property's number of cases (default 1),
	// for longer runs: FLEETLIMIT_PROP_SCALE=10.
	propScaleEnv = "FLEETLIMIT_PROP_SCALE"
	// maxArrivals bounds the arrivals of one generated timeline; each
	// arrival is a burst of 1 to 4 requests.
	maxArrivals = 40
)

// propEnv reads the seed and scale once per run.
var propEnv = sync.OnceValue(func() (e struct {
	seed  int64
	scale float64
	err   error
}) {
	e.seed, e.scale = time.Now().UnixNano(), 1
	if s := os.Getenv(propSeedEnv); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			e.err = fmt.Errorf("%s=%q: %w", propSeedEnv, s, err)
		}
		e.seed = seed
	}
	if s := os.Getenv(propScaleEnv); s != "" {
		scale, err := strconv.ParseFloat(s, 64)
		if err != nil || scale <= 0 {
			e.err = fmt.Errorf("%s=%q: want a number > 0", propScaleEnv, s)
		}
		e.scale = scale
	}
	return e
})

// propParams returns gopter parameters for cases successful cases (scaled by
// FLEETLIMIT_PROP_SCALE), seeded with the run's seed.
func propParams(t testing.TB, cases int) *gopter.TestParameters {
	t.Helper()
	env := propEnv()
	if env.err != nil {
		t.Fatal(env.err)
	}
	p := gopter.DefaultTestParametersWithSeed(env.seed)
	p.MinSuccessfulTests = max(1, int(float64(cases)*env.scale))
	p.MinSize = 1
	p.MaxSize = maxArrivals
	p.MaxShrinkCount = 200
	return p
}

// checkProperty runs prop for cases cases and fails t with gopter's report,
// the seed, and the command that replays the failure.
func checkProperty(t *testing.T, cases int, prop gopter.Prop) {
	t.Helper()
	params := propParams(t, cases)
	res := prop.Check(params)
	if res.Passed() {
		return
	}
	var out strings.Builder
	gopter.NewFormatedReporter(true, 1<<20, &out).ReportTestResult(t.Name(), res)
	t.Errorf("%s\nseed %d; replay with:\n\t%s=%d ./test.sh -run '%s' .",
		out.String(), params.Seed(), propSeedEnv, params.Seed(), runPattern(t.Name()))
}

// runPattern is the -run pattern that selects exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// propBackend is a store every property runs on.
type propBackend struct {
	name string
	// real is the real redis-server, which expires keys in real time while
	// the timelines run on a virtual clock: its timelines are in whole
	// seconds (plus under 10ms of jitter) and its windows are minutes, so
	// that every key's TTL stays near or above a second (see grain).
	real  bool
	redis bool
	store store.Store
	cases int // property cases per strategy
}

// Case counts per property and strategy: hundreds on every store.
// miniredis (Lua interpreted in Go, under -race) is the slowest.
const (
	memoryCases = 300
	miniCases   = 200
	realCases   = 200
)

// propBackends returns the stores to run on: "memory", "miniredis", "redis"
// (the real server that ./test.sh starts), all three when none is named —
// the real one only when the environment names it (redistest.HaveReal).
func propBackends(t *testing.T, names ...string) []propBackend {
	t.Helper()
	if len(names) == 0 {
		names = []string{"memory", "miniredis"}
		if redistest.HaveReal(t) {
			names = append(names, "redis")
		}
	}
	var bs []propBackend
	for _, name := range names {
		switch name {
		case "memory":
			bs = append(bs, propBackend{name: name, store: propMemory(t), cases: memoryCases})
		case "miniredis":
			_, c := redistest.Mini(t)
			bs = append(bs, propBackend{name: name, redis: true, store: stores.Redis(t, c), cases: miniCases})
		case "redis":
			c := redistest.Real(t)
			bs = append(bs, propBackend{name: name, real: true, redis: true, store: stores.Redis(t, c), cases: realCases})
		default:
			t.Fatalf("unknown backend %q", name)
		}
	}
	return bs
}

// propMemory returns a Memory store for the whole test. Its sweeper is
// kept from running: the properties' rigs run different virtual clocks on
// one store, and the sweeper judges every key of a shard by the latest
// decision time seen there, so it could drop a key that is not full on its
// own clock.
func propMemory(t *testing.T) *store.Memory {
	m := store.NewMemory(store.WithSweepInterval(24 * time.Hour))
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// grain is the time step of generated timelines around window edges: a
// microsecond, or on the real server a second (the fixed window's TTL is
// the time to the window's end, so an arrival a microsecond before an edge
// would write a key that expires in a millisecond of real time).
func (b propBackend) grain() time.Duration {
	if b.real {
		return time.Second
	}
	return time.Microsecond
}

// maxJitter is the most sub-grain time added to an arrival, in µs: on the
// real server up to 10ms, so that its Lua still sees microsecond times.
func (b propBackend) maxJitter() int64 {
	if b.real {
		return 10_000
	}
	return 0
}

// window picks a window or period. Large limits get long windows on the
// real server, so that a token bucket's time per token stays >= 1.5s.
func (b propBackend) window(r *rand.Rand, large bool) time.Duration {
	if b.real {
		if large {
			return time.Duration(1800+r.Intn(1801)) * time.Second
		}
		ws := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute}
		if i := r.Intn(len(ws) + 1); i < len(ws) {
			return ws[i]
		}
		return time.Duration(60+r.Intn(541)) * time.Second
	}
	ws := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, time.Minute, time.Hour}
	if i := r.Intn(len(ws) + 1); i < len(ws) {
		return ws[i]
	}
	return time.Duration(1000+r.Int63n(10_000_000)) * time.Microsecond
}

// stratCase is one generated strategy with its parameters.
type stratCase struct {
	Name string // the registry entry it came from
	S    algorithm.Strategy
	Desc string
	// Rate, Per and Burst are set for a token bucket.
	Rate, Burst int64
	Per         time.Duration
}

// entryCase builds a strategy of e through the registry's constructor, with
// a limit of 1 to 10 (1 in 5: 100 to 1100) and a window of the backend.
func entryCase(e algorithm.Entry, b propBackend, r *rand.Rand) stratCase {
	large := r.Intn(5) == 0
	limit := 1 + r.Int63n(10)
	if large {
		limit = 100 + r.Int63n(1001)
	}
	w := b.window(r, large)
	sc := stratCase{Name: e.Name, S: e.New(limit, w), Desc: fmt.Sprintf("registry %q New(%d, %v)", e.Name, limit, w)}
	if e.Name == "token_bucket" {
		// The registry's token bucket refills limit per window into a
		// bucket of limit.
		sc.Rate, sc.Per, sc.Burst = limit, w, limit
	}
	return sc
}

// tokenBucketCase builds a token bucket that golang.org/x/time/rate decides
// identically (see docs/guarantees.md): rate <= 100 per period, so that the
// smallest deficit our integer arithmetic can hold takes at least 10ns to
// refill, above x/time/rate's truncation of waits below 1ns; and at least one
// token per 5 minutes, so that its float64 bookkeeping stays far inside that
// nanosecond. One case in three is the registry's constructor (burst = rate).
func tokenBucketCase(e algorithm.Entry, b propBackend, r *rand.Rand) stratCase {
	rate := 1 + r.Int63n(100)
	var per time.Duration
	if b.real {
		// At most 100 per 2 minutes: a token takes >= 1.2s (the TTL floor).
		pers := []time.Duration{2 * time.Minute, 5 * time.Minute}
		if i := r.Intn(3); i < 2 {
			per = pers[i]
		} else {
			per = time.Duration(120+r.Intn(181)) * time.Second
		}
	} else {
		pers := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second, time.Minute, 5 * time.Minute}
		if i := r.Intn(len(pers) + 1); i < len(pers) {
			per = pers[i]
		} else {
			per = time.Duration(1000+r.Int63n(int64(5*time.Minute/time.Microsecond))) * time.Microsecond
		}
	}
	if r.Intn(3) == 0 {
		rate = 1 + r.Int63n(20)
		return stratCase{Name: e.Name, S: e.New(rate, per), Rate: rate, Per: per, Burst: rate,
			Desc: fmt.Sprintf("registry %q New(%d, %v)", e.Name, rate, per)}
	}
	burst := 1 + r.Int63n(20)
	return stratCase{Name: e.Name, S: algorithm.TokenBucket(rate, per, burst), Rate: rate, Per: per, Burst: burst,
		Desc: fmt.Sprintf("TokenBucket(%d, %v, %d)", rate, per, burst)}
}

// propArrival is a burst of Repeat identical requests at one instant: Offset
// grains (plus Jitter µs) from the Edge-th window edge after the timeline's
// start. Most arrivals sit within 3 grains of an edge.
type propArrival struct {
	Edge   int
	Offset int64
	Jitter int64
	Key    int // index into propKeys
	N      int64
	Repeat int
}

// propKeys are the keys timelines use. "{" and "%7B" would share a Redis
// key if store.RedisKey's escaping were not one-to-one.
var propKeys = []string{"alice", "{", "%7B"}

func arrivalGen(b propBackend, limit int64, w time.Duration) gopter.Gen {
	grains := max(1, int64(w/b.grain()))
	return func(p *gopter.GenParameters) *gopter.GenResult {
		r := p.Rng
		a := propArrival{Edge: 1 + r.Intn(3), Repeat: 1}
		if r.Intn(5) < 3 {
			a.Offset = r.Int63n(7) - 3 // at or around the edge
		} else {
			a.Offset = r.Int63n(2*grains+1) - grains // anywhere in the windows on either side
		}
		if j := b.maxJitter(); j > 0 && r.Intn(2) == 0 {
			a.Jitter = r.Int63n(j)
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
		return gopter.NewGenResult(a, gopter.NoShrinker)
	}
}

// propScenario is a strategy and a timeline of requests to it.
type propScenario struct {
	Strat    stratCase
	Arrivals []propArrival
	Base     time.Time     // the timeline's start, a window edge
	Grain    time.Duration // of Arrival.Offset
	// Unsorted keeps the arrivals in generated order, as clocks skewed
	// between instances would deliver them; otherwise they are sorted by
	// time.
	Unsorted bool
}

// propEvent is one request of a timeline.
type propEvent struct {
	At  time.Time
	Key string
	N   int64
}

// epoch2026 is where timelines start, rounded up to a window edge.
var epoch2026 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// edgeAfter returns the first multiple of w since the Unix epoch at or after t.
func edgeAfter(t time.Time, w time.Duration) time.Time {
	tus, wus := t.UnixMicro(), w.Microseconds()
	return time.UnixMicro((tus + wus - 1) / wus * wus).UTC()
}

// scenarioGen generates scenarios of the strategies newStrat builds. Shrinking
// drops arrivals and keeps the strategy.
func scenarioGen(b propBackend, newStrat func(*rand.Rand) stratCase, unsortedSometimes bool) gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		sc := newStrat(p.Rng)
		w := sc.S.Window()
		base := edgeAfter(epoch2026, w)
		unsorted := unsortedSometimes && p.Rng.Intn(3) == 0
		inner := gen.SliceOf(arrivalGen(b, sc.S.Limit(), w))(p)
		arr, _ := inner.Retrieve()
		wrap := func(a []propArrival) propScenario {
			return propScenario{Strat: sc, Arrivals: a, Base: base, Grain: b.grain(), Unsorted: unsorted}
		}
		shrinker := func(v any) gopter.Shrink {
			return inner.Shrinker(v.(propScenario).Arrivals).Map(wrap)
		}
		return gopter.NewGenResult(wrap(arr.([]propArrival)), shrinker)
	}
}

// Events expands the arrivals into requests, sorted by time unless Unsorted.
func (s propScenario) Events() []propEvent {
	w := s.Strat.S.Window()
	var evs []propEvent
	for _, a := range s.Arrivals {
		at := s.Base.Add(time.Duration(a.Edge)*w + time.Duration(a.Offset)*s.Grain + time.Duration(a.Jitter)*time.Microsecond)
		if at.Before(s.Base) {
			at = s.Base
		}
		for range a.Repeat {
			evs = append(evs, propEvent{At: at, Key: propKeys[a.Key], N: a.N})
		}
	}
	if !s.Unsorted {
		slices.SortStableFunc(evs, func(x, y propEvent) int { return x.At.Compare(y.At) })
	}
	return evs
}

// String is what gopter prints for a failing case: the strategy and the
// timeline relative to its start.
func (s propScenario) String() string {
	var b strings.Builder
	order := "sorted"
	if s.Unsorted {
		order = "unsorted (skewed clocks)"
	}
	fmt.Fprintf(&b, "%s (Limit %d, Window %v); %d requests, %s, from %s:",
		s.Strat.Desc, s.Strat.S.Limit(), s.Strat.S.Window(), len(s.Events()), order, s.Base.Format(time.RFC3339Nano))
	for _, ev := range s.Events() {
		fmt.Fprintf(&b, " [+%v %q n=%d]", ev.At.Sub(s.Base), ev.Key, ev.N)
	}
	return b.String()
}

// propTimeout bounds one decision in the property tests: generous, so that a
// loaded machine under -race is never mistaken for a store failure.
const propTimeout = 10 * time.Second

// propRig is a limiter on a virtual clock over a fresh key prefix of a store.
type propRig struct {
	lim   *fleetlimit.Limiter
	clock *fakeclock.Clock
}

func newPropRig(st store.Store, s algorithm.Strategy) (*propRig, error) {
	c := &fakeclock.Clock{}
	lim, err := fleetlimit.New(s, st,
		fleetlimit.WithClock(c.Now),
		fleetlimit.WithKeyPrefix(redistest.Prefix()),
		fleetlimit.WithTimeout(propTimeout),
		fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	if err != nil {
		return nil, err
	}
	return &propRig{lim: lim, clock: c}, nil
}

// at decides ev at its time.
func (r *propRig) at(ev propEvent) (fleetlimit.Result, error) {
	r.clock.Set(ev.At)
	res, err := r.lim.AllowN(context.Background(), ev.Key, ev.N)
	if err != nil {
		return res, fmt.Errorf("%s %q n=%d: %w", ev.At.Format(time.RFC3339Nano), ev.Key, ev.N, err)
	}
	return res, nil
}

// propOutcome is a decided event.
type propOutcome struct {
	propEvent
	Res fleetlimit.Result
}

// run decides every event in order.
func (r *propRig) run(evs []propEvent) ([]propOutcome, error) {
	outs := make([]propOutcome, 0, len(evs))
	for _, ev := range evs {
		res, err := r.at(ev)
		if err != nil {
			return nil, err
		}
		outs = append(outs, propOutcome{ev, res})
	}
	return outs, nil
}

// runScenario decides the scenario's events on a fresh rig over st.
func runScenario(st store.Store, s propScenario) ([]propOutcome, error) {
	r, err := newPropRig(st, s.Strat.S)
	if err != nil {
		return nil, err
	}
	return r.run(s.Events())
}

// entryCases is entryCase for checkOnBackends.
func entryCases(e algorithm.Entry) func(propBackend, *rand.Rand) stratCase {
	return func(b propBackend, r *rand.Rand) stratCase { return entryCase(e, b, r) }
}

// scenarioProp is the property that check finds nothing wrong (returns "")
// in the outcomes of every sorted scenario of newStrat run on b.
func scenarioProp(b propBackend, newStrat func(propBackend, *rand.Rand) stratCase, check func(propScenario, []propOutcome) string) gopter.Prop {
	g := scenarioGen(b, func(r *rand.Rand) stratCase { return newStrat(b, r) }, false)
	return prop.ForAll(func(s propScenario) (string, error) {
		outs, err := runScenario(b.store, s)
		if err != nil {
			return "", err
		}
		return check(s, outs), nil
	}, g)
}

// checkOnBackends checks scenarioProp on every backend, one subtest each.
func checkOnBackends(t *testing.T, bs []propBackend, newStrat func(propBackend, *rand.Rand) stratCase, check func(propScenario, []propOutcome) string) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			checkProperty(t, b.cases, scenarioProp(b, newStrat, check))
		})
	}
}

// registryEntries returns the registry, failing t if it is empty.
func registryEntries(t *testing.T) []algorithm.Entry {
	t.Helper()
	es := algorithm.Registry()
	if len(es) == 0 {
		t.Fatal("algorithm.Registry() is empty")
	}
	return es
}

// registryEntry returns the registry entry named name, failing t if there is none:
// a guarantee keyed by a name that left the registry must not pass silently.
func registryEntry(t *testing.T, name string) algorithm.Entry {
	t.Helper()
	for _, e := range algorithm.Registry() {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no algorithm %q in algorithm.Registry(): its guarantees in docs/guarantees.md are untested", name)
	return algorithm.Entry{}
}

// outcomesByKey groups outcomes by key, keeping their order.
func outcomesByKey(outs []propOutcome) map[string][]propOutcome {
	m := make(map[string][]propOutcome)
	for _, o := range outs {
		m[o.Key] = append(m[o.Key], o)
	}
	return m
}

// maxAdmittedIn returns the most cost admitted to one key in any half-open
// interval of length w, and the first and last admission of that interval.
// outs must be sorted by time.
func maxAdmittedIn(outs []propOutcome, w time.Duration) (most int64, from, to time.Time) {
	for _, ko := range outcomesByKey(outs) {
		var adm []propOutcome
		for _, o := range ko {
			if o.Res.Allowed {
				adm = append(adm, o)
			}
		}
		for i, a := range adm {
			var sum int64
			last := a.At
			for _, b := range adm[i:] {
				if !b.At.Before(a.At.Add(w)) {
					break
				}
				sum += b.N
				last = b.At
			}
			if sum > most {
				most, from, to = sum, a.At, last
			}
		}
	}
	return most, from, to
}
