// Command fleetbench measures fleetlimit side by side with the Go rate
// limiters people use today, on a redis-server (and, where installed, a
// valkey-server) it starts itself, with fleetlimitd built and started on
// the same Redis, and writes the results to RESULTS.md (and the user guide
// docs/performance.md).
//
//	cd bench && ./run.sh            # full run, about 10 minutes on 2 cores
//	cd bench && ./run.sh -quick     # smoke test, about a minute
//
// Every comparison is made in the same run on the same machine: rounds
// interleave the contenders (A B C, B C A, ...) and the tables report
// medians over rounds and, for ratios, the median of the per-round ratios.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

type config struct {
	quick       bool
	rounds      int
	dur         time.Duration // one measured cell
	warm        time.Duration // untimed, per contender and scenario
	sweepRounds int
	sweepDur    time.Duration
	inprocDur   time.Duration
	out, docs   string
	redisServer string
	// valkeyServer is the valkey-server binary the Valkey rows run on; ""
	// (or a binary not found) leaves them out, and RESULTS.md says so.
	valkeyServer string
	// service is the fleetlimitd module to build and measure ("" to skip).
	service    string
	skipInproc bool
	skipRedis  bool
}

func main() {
	var cfg config
	flag.BoolVar(&cfg.quick, "quick", false, "smoke test: one short round of everything")
	flag.IntVar(&cfg.rounds, "rounds", 0, "rounds per scenario (default 19; 1 with -quick)")
	flag.DurationVar(&cfg.dur, "dur", 0, "length of one measured cell (default 120ms; 60ms with -quick)")
	flag.StringVar(&cfg.out, "out", "RESULTS.md", "results file")
	flag.StringVar(&cfg.docs, "docs", "../docs/performance.md", "user guide to write from the results ('' to skip)")
	flag.StringVar(&cfg.redisServer, "redis-server", "redis-server", "redis-server binary to start")
	flag.StringVar(&cfg.valkeyServer, "valkey-server", "valkey-server", "valkey-server binary for the Valkey rows ('' to skip them)")
	flag.StringVar(&cfg.service, "service", "../cmd/fleetlimitd", "fleetlimitd's module, built with go build and measured over gRPC ('' to skip)")
	flag.BoolVar(&cfg.skipInproc, "skip-inproc", false, "skip the in-process benchmarks (for development)")
	flag.BoolVar(&cfg.skipRedis, "skip-redis", false, "skip the Redis benchmarks (for development)")
	walk := flag.Bool("walk-order", false, "only measure the in-process walk's order against a shuffled one (see walkOrder), and print it")
	flag.Parse()
	defaults(&cfg)
	log.SetFlags(log.Ltime)
	if *walk {
		os.Exit(walkOrder(os.Stdout, cfg.rounds, cfg.inprocDur))
	}
	os.Exit(run(cfg))
}

func defaults(cfg *config) {
	set := func(d *time.Duration, full, quick time.Duration) {
		if *d == 0 {
			*d = full
			if cfg.quick {
				*d = quick
			}
		}
	}
	if cfg.rounds == 0 {
		cfg.rounds = 19
		if cfg.quick {
			cfg.rounds = 1
		}
	}
	set(&cfg.dur, 120*time.Millisecond, 60*time.Millisecond)
	set(&cfg.warm, 100*time.Millisecond, 50*time.Millisecond)
	set(&cfg.sweepDur, 120*time.Millisecond, 50*time.Millisecond)
	set(&cfg.inprocDur, 80*time.Millisecond, 40*time.Millisecond)
	cfg.sweepRounds = 9
	if cfg.quick {
		cfg.sweepRounds = 1
	}
}

func run(cfg config) int {
	b := &bench{cfg: cfg, keys: map[string][]string{}, started: time.Now()}
	b.meta = collectMeta()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if !cfg.skipRedis {
		srv, err := startServer(cfg.redisServer)
		if err != nil {
			log.Print(err)
			return 1
		}
		defer srv.stop()
		b.srv = srv
		log.Printf("redis-server on %s", srv.addr)
		if err := b.redisPhases(ctx); err != nil {
			log.Print(err)
			return 1
		}
		if err := b.valkeyPhase(ctx); err != nil {
			log.Print(err)
			return 1
		}
	}
	if !cfg.skipInproc {
		if err := b.inprocPhase(ctx); err != nil {
			log.Print(err)
			return 1
		}
	}
	b.finished = time.Now()
	b.meta.loadEnd = loadAvg()

	if err := writeDoc(cfg.out, b.results); err != nil {
		log.Print(err)
		return 1
	}
	if cfg.docs != "" && !cfg.skipRedis && !cfg.skipInproc {
		if err := os.MkdirAll(filepath.Dir(cfg.docs), 0o755); err != nil {
			log.Print(err)
			return 1
		}
		if err := writeDoc(cfg.docs, b.performanceDoc); err != nil {
			log.Print(err)
			return 1
		}
	}
	failed := 0
	for _, c := range b.checks {
		if !c.ok {
			failed++
		}
	}
	if failed > 0 {
		log.Printf("%d of %d set-up checks failed: see %s", failed, len(b.checks), cfg.out)
		return 2
	}
	log.Printf("all %d set-up checks passed in %v", len(b.checks), b.finished.Sub(b.started).Round(time.Second))
	return 0
}

// writeDoc renders a document and writes it to path.
func writeDoc(path string, render func() (string, error)) error {
	text, err := render()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err
	}
	log.Printf("wrote %s", path)
	return nil
}

var goroutineCounts = []int{1, 8, 64}

// zipfGroup names the scenarios over 10,000 keys in Zipf-distributed order.
const zipfGroup = "10,000 keys, Zipf"

func (b *bench) redisPhases(ctx context.Context) error {
	info, err := b.srv.info(ctx, "server", "memory")
	if err != nil {
		return err
	}
	b.serverInfo = info
	if b.serverConfig, err = b.srv.admin.ConfigGet(ctx, "zset-max-listpack-*").Result(); err != nil {
		return err
	}
	cs, err := newContenders(b.srv.addr)
	if err != nil {
		return err
	}
	b.contenders = cs
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	b.clientsPool = cs[0].client.Options().PoolSize

	for _, set := range []struct {
		group  string
		prof   profile
		letter byte
		users  int
		zipf   bool
		only   []string
	}{{"10,000 keys", spread, 's', 10_000, false, nil}, {zipfGroup, hot, 'z', 10_000, true, nil}, {"one hot key", hot, 'h', 1, false, nil},
		{pairsGroup, permits, 'p', 10_000, false, pairContenders}} {
		for _, g := range goroutineCounts {
			sc := scenario{group: set.group, label: fmt.Sprintf("%d goroutines", g), prof: set.prof,
				letter: set.letter, users: set.users, g: g, zipf: set.zipf, only: set.only}
			if err := b.runScenario(ctx, sc); err != nil {
				return err
			}
		}
	}
	if err := b.memoryPhase(ctx); err != nil {
		return err
	}
	if err := b.fleetPhase(ctx); err != nil {
		return err
	}
	if err := b.servicePhase(ctx); err != nil {
		return err
	}
	if err := b.logSweep(ctx, []int64{10, 100, 1000}); err != nil {
		return err
	}
	saved := b.cfg
	b.cfg.rounds, b.cfg.dur = b.cfg.sweepRounds, b.cfg.sweepDur
	defer func() { b.cfg = saved }()
	for _, g := range sweepGoroutines {
		sc := scenario{group: "goroutine sweep", label: fmt.Sprintf("%d goroutines", g), prof: spread,
			letter: 's', users: 10_000, g: g, only: sweepContenders}
		if err := b.runScenario(ctx, sc); err != nil {
			return err
		}
	}
	for i, n := range sweepUsers {
		if b.cfg.quick && n > 10_000 {
			continue
		}
		sc := scenario{group: "users sweep", label: fmt.Sprintf("%d users", n), prof: users,
			letter: byte('a' + i), users: n, g: 8, only: usersContenders, pass: true}
		if err := b.runScenario(ctx, sc); err != nil {
			return err
		}
	}
	return b.srv.admin.FlushAll(ctx).Err()
}

// pairsGroup names the scenarios of Acquire+Release pairs (issue 26).
const pairsGroup = "Acquire+Release, 10,000 keys"

// valkeyGroup names the exact-path scenarios run on valkey-server.
const valkeyGroup = "Valkey, 10,000 keys"

// valkeyPhase runs the 10,000-key scenarios of the exact path again on a
// throwaway valkey-server, each contender with clients of its own; without
// the binary it records why there are no Valkey rows.
func (b *bench) valkeyPhase(ctx context.Context) error {
	if b.cfg.valkeyServer == "" {
		b.valkeyNote = "skipped (-valkey-server '')"
		return nil
	}
	if _, err := exec.LookPath(b.cfg.valkeyServer); err != nil {
		b.valkeyNote = fmt.Sprintf("skipped: %s not found on this machine", b.cfg.valkeyServer)
		log.Printf("Valkey rows %s", b.valkeyNote)
		return nil
	}
	srv, err := startServer(b.cfg.valkeyServer)
	if err != nil {
		// The Redis figures stand without it: RESULTS.md says why there
		// are no Valkey rows, and the failed check makes the run exit 2.
		b.valkeyNote = "valkey-server did not start: " + err.Error()
		b.verify(false, "valkey-server starts", "%v", err)
		return nil
	}
	defer srv.stop()
	log.Printf("valkey-server on %s", srv.addr)
	if b.valkeyInfo, err = srv.info(ctx, "server", "memory"); err != nil {
		return err
	}
	cs, err := newContenders(srv.addr)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	on := &backend{srv: srv, contenders: cs}
	for _, g := range goroutineCounts {
		sc := scenario{group: valkeyGroup, label: fmt.Sprintf("%d goroutines", g), prof: spread,
			letter: 's', users: 10_000, g: g, only: valkeyContenders, on: on}
		if err := b.runScenario(ctx, sc); err != nil {
			return err
		}
	}
	return srv.admin.FlushAll(ctx).Err()
}

var (
	pairContenders   = []string{"fl-pair", "fl-tb", "incr"}
	valkeyContenders = []string{"fl-sl", "fl-tb", "fl-fw", "fl-swc", "redis_rate", "ulule", "incr"}
	sweepGoroutines  = []int{1, 2, 4, 8, 16, 32, 64, 128}
	sweepContenders  = []string{"fl-tb", "redis_rate", "incr"}
	sweepUsers       = []int{1, 100, 10_000, 100_000}
	usersContenders  = []string{"fl-tb", "fl-fw", "redis_rate", "ulule", "incr"}
)
