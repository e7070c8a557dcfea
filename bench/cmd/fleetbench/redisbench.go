package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// scenario is one load shape: a key set, a profile and a goroutine count.
type scenario struct {
	group  string // table it is reported in
	label  string
	prof   profile
	letter byte // key set: contenders use distinct user keys per set
	users  int
	g      int
	only   []string // contender ids taking part; nil for all
	pass   bool     // warm up with one pass over every key (and check DBSIZE)
	zipf   bool     // walk the keys in a Zipf-distributed order (zipfOrder), not evenly
	// on is the server and its contenders; nil for the bench's Redis
	// (b.srv, b.contenders).
	on *backend
}

// backend is a server with its own set of contenders (own clients).
type backend struct {
	srv        *server
	contenders []*contender
}

// backendOf returns the server and contenders a scenario runs against.
func (b *bench) backendOf(sc scenario) (*server, []*contender) {
	if sc.on != nil {
		return sc.on.srv, sc.on.contenders
	}
	return b.srv, b.contenders
}

type series struct {
	c       *contender
	samples []sample
	alive   int64   // the key set's keys that exist after the last round; -1 when not counted
	members float64 // sliding log: mean members per sampled live key
}

type scenarioResult struct {
	sc     scenario
	series []*series
}

func (r *scenarioResult) get(id string) *series {
	for _, s := range r.series {
		if s.c.id == id {
			return s
		}
	}
	return nil
}

// among returns r's series for ids, in the order of ids, leaving out the
// contenders that did not take part.
func (r *scenarioResult) among(ids []string) []*series {
	var ss []*series
	for _, id := range ids {
		if s := r.get(id); s != nil {
			ss = append(ss, s)
		}
	}
	return ss
}

// bench holds the run's configuration, its server and everything measured.
type bench struct {
	cfg          config
	srv          *server
	contenders   []*contender
	keys         map[string][]string
	scenarios    []*scenarioResult
	memory       []memResult
	logSweeps    []logSweepResult
	inproc       []*inprocResult
	checks       []check
	started      time.Time
	finished     time.Time
	meta         meta
	serverInfo   map[string]string
	serverConfig map[string]string
	clientsPool  int
	valkeyInfo   map[string]string // INFO server of the Valkey rows' server; nil when none ran
	valkeyNote   string            // why there are no Valkey rows; "" when there are
	fleet        []fleetRound
	// fleetBoundStated: docs/guarantees.md states the bound fleetHeld
	// computes (fleetBoundText).
	fleetBoundStated bool
	service          *serviceRun
}

// check is one verification of the set-up; RESULTS.md lists them all.
type check struct {
	what string
	ok   bool
	note string
}

func (b *bench) verify(ok bool, what string, format string, args ...any) {
	b.checks = append(b.checks, check{what: what, ok: ok, note: fmt.Sprintf(format, args...)})
	if !ok {
		log.Printf("CHECK FAILED: %s: %s", what, fmt.Sprintf(format, args...))
	}
}

func (b *bench) keysFor(c *contender, letter byte, n int) []string {
	k := fmt.Sprintf("%s/%c/%d", c.id, letter, n)
	if ks, ok := b.keys[k]; ok {
		return ks
	}
	ks := make([]string, n)
	for i := range ks {
		ks[i] = c.userKey(letter, i)
	}
	b.keys[k] = ks
	return ks
}

func (b *bench) runScenario(ctx context.Context, sc scenario) error {
	res := &scenarioResult{sc: sc}
	type active struct {
		s      *series
		fn     decideFunc
		keys   []string
		cursor []int // where each goroutine's walk over keys continues
	}
	var as []active
	srv, cs := b.backendOf(sc)
	for _, c := range cs {
		if sc.only != nil && !contains(sc.only, c.id) {
			continue
		}
		fn, err := c.decider(sc.prof)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if fn == nil {
			continue
		}
		keys := b.keysFor(c, sc.letter, sc.users)
		if sc.zipf {
			keys = zipfOrder(keys)
		}
		as = append(as, active{s: &series{c: c, alive: -1}, fn: fn, keys: keys, cursor: newCursors(keys, sc.g)})
		res.series = append(res.series, as[len(as)-1].s)
	}
	log.Printf("%s / %s: %d contenders x %d rounds", sc.group, sc.label, len(as), b.cfg.rounds)
	for _, a := range as {
		if sc.pass {
			w := loadPass(ctx, a.fn, a.keys, sc.g, 1)
			n, err := countExisting(ctx, srv, a.s.c, a.keys)
			if err != nil {
				return err
			}
			b.verify(n == int64(sc.users) && w.denied == 0 && w.errs == 0,
				fmt.Sprintf("%s, %s: keys spread", sc.group, a.s.c.name),
				"after one pass over %d users, %d of their Redis keys exist; %d denied, %d errors",
				sc.users, n, w.denied, w.errs)
		} else {
			loadFor(ctx, a.fn, a.keys, sc.g, b.cfg.warm, a.cursor)
		}
		if err := quiesced(a.s.c); err != nil {
			return err
		}
	}
	for r := range b.cfg.rounds {
		for k := range as {
			a := as[(k+r)%len(as)] // rotate the order each round: A B C, B C A, ...
			s, err := measured(ctx, srv, a.s.c, func() sample {
				return loadFor(ctx, a.fn, a.keys, sc.g, b.cfg.dur, a.cursor)
			})
			if err != nil {
				return err
			}
			a.s.samples = append(a.s.samples, s)
			if err := quiesced(a.s.c); err != nil {
				return err
			}
		}
	}
	if sc.group == "10,000 keys" {
		for _, a := range as {
			n, err := countExisting(ctx, srv, a.s.c, a.keys)
			if err != nil {
				return err
			}
			a.s.alive = n
			var calls int64
			for _, x := range a.s.samples {
				calls += x.calls()
			}
			switch a.s.c.id {
			case "incr", "fl-sl":
				if calls < 2*int64(len(a.keys)) {
					break // too short a run (-quick) to have visited every key
				}
				if a.s.c.id == "fl-sl" && walkTime(res.series, a.s, len(a.keys)) > slLogLife {
					break // the walk comes back to a user after its log has expired
				}
				// INCR's keys never expire: all of them existing shows the
				// walk covered every user, not a prefix of the key set. The
				// log's live 10 s after their last decision, and with a dozen
				// contenders interleaved a user the walk reached early may
				// have gone quiet for longer: at least 90% of them existing
				// still rules out a prefix.
				want := int64(len(a.keys))
				if a.s.c.id == "fl-sl" {
					want = want * 9 / 10
				}
				b.verify(n >= want, fmt.Sprintf("%s, %s, %s: every user's key in use", sc.group, sc.label, a.s.c.name),
					"%d of %d users' keys exist after the last round (want at least %d)", n, len(a.keys), want)
			}
			if a.s.c.id == "fl-sl" {
				var total, live int64
				for i := 0; i < len(a.keys) && live < 100; i += 97 {
					m, err := b.srv.admin.ZCard(ctx, a.s.c.fullKey(a.keys[i])).Result()
					if err != nil {
						return err
					}
					if m > 0 {
						total += m
						live++
					}
				}
				a.s.members = float64(total) / float64(max(live, 1))
			}
		}
	}
	for _, a := range as {
		var denied, errs, calls int64
		first := ""
		for _, s := range a.s.samples {
			denied += s.denied
			errs += s.errs
			calls += s.calls()
			if first == "" {
				first = s.firstErr
			}
		}
		what := fmt.Sprintf("%s, %s, %s", sc.group, sc.label, a.s.c.name)
		b.verify(denied == 0, what+": nothing denied", "%d of %d calls denied", denied, calls)
		if a.s.c.id == "throttled" {
			// Its CAS failures are what the hot-key table reports; any count is
			// a result, not a fault of the set-up.
			continue
		}
		b.verify(errs == 0, what+": no errors", "%d errors of %d calls; first: %s", errs, calls, first)
	}
	b.scenarios = append(b.scenarios, res)
	return nil
}

// countExisting returns how many of the users' Redis keys exist, by the
// names the library is expected to use.
func countExisting(ctx context.Context, srv *server, c *contender, keys []string) (int64, error) {
	var n int64
	for i := 0; i < len(keys); i += 500 {
		batch := keys[i:min(i+500, len(keys))]
		full := make([]string, len(batch))
		for j, k := range batch {
			full[j] = c.fullKey(k)
		}
		got, err := srv.admin.Exists(ctx, full...).Result()
		if err != nil {
			return 0, err
		}
		n += got
	}
	return n, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// memResult is one contender's Redis memory at memUsers users.
type memResult struct {
	c            *contender
	users        int
	newKeys      int64
	keyLen       int
	usage        float64 // MEMORY USAGE, median over sampled keys
	growthPerKey float64 // key space growth (MEMORY STATS) / new keys
	usedPerKey   float64 // used_memory growth / new keys
}

const memUsers = 10_000

func (b *bench) memoryPhase(ctx context.Context) error {
	log.Printf("memory: %d users per contender", memUsers)
	for _, c := range b.contenders {
		if c.lease > 0 || c.noMemory {
			continue // its keys are its exact twin's, or it leaves none
		}
		fn, err := c.decider(mem)
		if err != nil || fn == nil {
			return fmt.Errorf("%s: no memory profile: %v", c.name, err)
		}
		if err := b.srv.admin.FlushAll(ctx).Err(); err != nil {
			return err
		}
		if c.id == "fl-fw" {
			waitClear(time.Minute, 10*time.Second) // its keys expire at the minute's end
		}
		// Load the script and open a connection before the baseline, so that
		// only keys are counted. One goroutine: several on few keys make
		// throttled's client-side CAS give up, which is not what is measured
		// here.
		warm := make([]string, 8)
		for i := range warm {
			warm[i] = c.userKey('w', i)
		}
		if w := loadFor(ctx, fn, warm, 1, 50*time.Millisecond, nil); w.errs > 0 {
			return fmt.Errorf("%s: %s", c.name, w.firstErr)
		}
		for _, k := range warm {
			if err := b.srv.admin.Del(ctx, c.fullKey(k)).Err(); err != nil {
				return err
			}
		}
		keys := b.keysFor(c, 'm', memUsers)
		used0, err := b.srv.usedMemory(ctx)
		if err != nil {
			return err
		}
		ks0, err := b.srv.keyspaceBytes(ctx)
		if err != nil {
			return err
		}
		n0, err := b.srv.admin.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		s := loadPass(ctx, fn, keys, 8, 1)
		used1, err := b.srv.usedMemory(ctx)
		if err != nil {
			return err
		}
		ks1, err := b.srv.keyspaceBytes(ctx)
		if err != nil {
			return err
		}
		n1, err := b.srv.admin.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		var usages []float64
		missing := 0
		for i := 0; i < len(keys); i += len(keys) / 100 {
			u, err := b.srv.admin.MemoryUsage(ctx, c.fullKey(keys[i]), 0).Result()
			if err == redis.Nil {
				missing++
				continue
			}
			if err != nil {
				return err
			}
			usages = append(usages, float64(u))
		}
		per := float64(max(n1-n0, 1))
		r := memResult{c: c, users: memUsers, newKeys: n1 - n0, keyLen: len(c.fullKey(keys[0])),
			usage: median(usages), growthPerKey: float64(ks1-ks0) / per, usedPerKey: float64(used1-used0) / per}
		b.memory = append(b.memory, r)
		what := fmt.Sprintf("memory, %s", c.name)
		b.verify(r.newKeys == memUsers && s.denied == 0 && s.errs == 0, what+": one key per user",
			"%d users made %d keys; %d denied, %d errors (%s)", memUsers, r.newKeys, s.denied, s.errs, s.firstErr)
		b.verify(missing == 0 && r.keyLen == keyLen, what+": the keys are where we think",
			"%d of %d sampled keys missing under the library's key name; key length %d (want %d)",
			missing, len(usages)+missing, r.keyLen, keyLen)
	}
	return b.srv.admin.FlushAll(ctx).Err()
}

// waitClear sleeps past the next multiple of window since the Unix epoch if
// it is closer than margin.
func waitClear(window, margin time.Duration) {
	now := time.Now()
	next := now.Truncate(window).Add(window)
	if next.Sub(now) < margin {
		time.Sleep(next.Sub(now) + 50*time.Millisecond)
	}
}

// logSweepResult is the sliding log's memory with every key at its limit.
type logSweepResult struct {
	limit      int64
	keys       int
	usage      float64 // MEMORY USAGE (all members sampled), median
	perRequest float64 // usage / limit
}

func (b *bench) logSweep(ctx context.Context, limits []int64) error {
	c, _ := newClient(b.srv.addr)
	defer c.Close()
	for _, limit := range limits {
		keysN := int(max(20, 20_000/limit))
		if b.cfg.quick {
			keysN = int(max(5, 2_000/limit))
		}
		// A store per limit, and the keys under DefaultKeyPrefix alone: see
		// newContenders.
		st, err := store.NewRedis(c)
		if err != nil {
			return err
		}
		defer st.Close()
		// go-redis's read timeout, as every contender has (newContenders):
		// a stall of this shared machine must not fail the fill.
		lim, err := fleetlimit.New(algorithm.SlidingWindowLog(limit, time.Hour), st, fleetlimit.WithKeyPrefix(fleetlimit.DefaultKeyPrefix),
			fleetlimit.WithTimeout(c.Options().ReadTimeout))
		if err != nil {
			return err
		}
		fn := func(ctx context.Context, key string) (bool, error) {
			res, err := lim.Allow(ctx, key)
			return res.Allowed, err
		}
		if err := b.srv.admin.FlushAll(ctx).Err(); err != nil {
			return err
		}
		if w := loadFor(ctx, fn, []string{"warm1", "warm2", "warm3", "warm4"}, 8, 20*time.Millisecond, nil); w.errs > 0 {
			return fmt.Errorf("sliding log warm-up: %s", w.firstErr)
		}
		if err := b.srv.admin.FlushAll(ctx).Err(); err != nil {
			return err
		}
		tag := lim.Strategy().Script().Tag
		keys := make([]string, keysN)
		full := make([]string, keysN)
		for i := range keys {
			keys[i] = paddedKey("sw", 'L', keyLen-len(store.RedisKey(fleetlimit.DefaultKeyPrefix, "", tag)), i)
			full[i] = store.RedisKey(fleetlimit.DefaultKeyPrefix, keys[i], tag)
		}
		fill := loadPass(ctx, fn, keys, 8, int(limit))
		over := loadPass(ctx, fn, keys, 8, 1) // each key is full: all denied
		var usages []float64
		bad := 0
		for i := 0; i < keysN; i += max(1, keysN/20) {
			u, err := b.srv.admin.MemoryUsage(ctx, full[i], 0).Result()
			if err != nil {
				return fmt.Errorf("MEMORY USAGE %s: %w", full[i], err)
			}
			usages = append(usages, float64(u))
			if n, err := b.srv.admin.ZCard(ctx, full[i]).Result(); err != nil || n != limit {
				bad++
			}
		}
		r := logSweepResult{limit: limit, keys: keysN, usage: median(usages)}
		r.perRequest = r.usage / float64(limit)
		b.logSweeps = append(b.logSweeps, r)
		b.verify(fill.denied == 0 && fill.errs == 0 && over.denied == int64(keysN) && bad == 0,
			fmt.Sprintf("sliding log at limit %d: keys hold exactly the limit", limit),
			"%d keys x %d decisions: %d denied, %d errors; one more each: %d of %d denied; %d sampled keys without %d members",
			keysN, limit, fill.denied, fill.errs, over.denied, keysN, bad, limit)
	}
	return b.srv.admin.FlushAll(ctx).Err()
}

// capacity is the Redis CPU one decision costs, from a sample: seconds of
// Redis CPU per decision.
func (s sample) cpuPerDecision() float64 {
	if s.ok == 0 {
		return math.NaN()
	}
	return s.cpu / float64(s.ok)
}

// cmdBreakdown renders per-decision command counts, most frequent first.
func cmdBreakdown(cmds map[string]int64, decisions int64) string {
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	for k, v := range cmds {
		kvs = append(kvs, kv{k, v})
	}
	for i := range kvs {
		for j := i + 1; j < len(kvs); j++ {
			if kvs[j].v > kvs[i].v || (kvs[j].v == kvs[i].v && kvs[j].k < kvs[i].k) {
				kvs[i], kvs[j] = kvs[j], kvs[i]
			}
		}
	}
	var parts []string
	for _, e := range kvs {
		per := float64(e.v) / float64(decisions)
		if per < 0.005 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(e.k), per))
	}
	return strings.Join(parts, ", ")
}

// quiesced ends c's background work before another contender's cell is
// measured (see contender.quiesce).
func quiesced(c *contender) error {
	if c.quiesce == nil {
		return nil
	}
	if err := c.quiesce(); err != nil {
		return fmt.Errorf("%s: handing back its leases: %w", c.name, err)
	}
	return nil
}

// slLogLife is how long the bench's sliding log keeps a user's key after
// its last decision: its window (contenders.go, "fl-sl" at 10,000 keys).
const slLogLife = 10 * time.Second

// walkTime estimates how long s's walk over n users takes to come back to
// one: the rounds one walk needs (n over s's calls per round) times a
// round of the whole scenario (every contender's mean round, all of
// scenario, since the contenders take turns).
func walkTime(scenario []*series, s *series, n int) time.Duration {
	var cycle time.Duration
	for _, o := range scenario {
		var sum time.Duration
		for _, x := range o.samples {
			sum += x.elapsed
		}
		if len(o.samples) > 0 {
			cycle += sum / time.Duration(len(o.samples))
		}
	}
	var calls int64
	for _, x := range s.samples {
		calls += x.calls()
	}
	if calls == 0 {
		return 0
	}
	perRound := float64(calls) / float64(len(s.samples))
	return time.Duration(float64(n) / perRound * float64(cycle))
}
