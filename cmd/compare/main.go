// Command compare measures what every fleetlimit algorithm costs and how
// accurate it is: it runs the same traffic through every registered
// algorithm, over one Redis shared by the fleet and over a memory store per
// instance, and prints a table.
//
// Usage:
//
//	go run ./cmd/compare                          a throwaway redis-server, or miniredis
//	go run ./cmd/compare -redis 127.0.0.1:6379    a redis-server of yours
//	go run ./cmd/compare -cluster host1:7000,host2:7001
//	go run ./cmd/compare -format markdown -svg docs/compare.svg
//
// -redis and -cluster take Valkey as well: the report names the server it
// measured, Redis or Valkey, with the version the server reports.
//
// With no -redis or -cluster, compare starts a throwaway redis-server (the
// binary on the PATH) on a free loopback port and stops it at the end, so
// that memory, Redis commands and latency are measured; with no redis-server
// installed (or -embedded) it runs on an embedded miniredis and estimates
// bytes per key with a model of Redis's encodings, labelled as estimated.
//
// Scenarios: boundary (limit requests just before a window edge and limit
// just after), overload (users at 1.5x and 3x their limit), fleet (1, 4 and 16
// instances behind a round-robin load balancer) and many-users (10,000 users
// at the limit, for Redis memory per key). Overload and fleet also run every
// strategy that can lease with fleetlimit.WithLeases (-leases, default
// sizes 8 and 64), and beside each the same with adaptive sizes from
// -lease-floor (default 2, fleetlimit.WithLeaseFloor) up to it, over the
// shared Redis, one Limiter per instance, and count the round trips per
// decision. Concurrency (its own table) compares an
// in-flight limit, algorithm.Concurrency(10, 30s) with Acquire and Release,
// against rate limits set to what its slots serve, on jobs of random length
// (fixed seed) through 4 instances, one of which crashes with the permits it
// holds: what each admits, the most in flight at once, and the slots lost
// to the crash until their ttl (text, markdown and json; csv has the main
// table only). Time is virtual, so minutes of
// traffic take seconds. Against a real Redis, the run writes keys under
// "fleetlimit-compare:" and removes them after each row (an interrupted run
// leaves them to expire within a window); INFO deltas assume that nothing
// else is busy on that server.
//
// See docs/choosing.md for how to read the output.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/compare"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr))
	stop()
	os.Exit(code)
}

// run is the command; it returns the exit code: 0, 1 for a failed run, 2 for
// bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, stderrIsTTY bool) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		redisAddr = fs.String("redis", "", "address (host:port) of a real redis-server or valkey-server to measure, instead of the embedded miniredis")
		clusterTo = fs.String("cluster", "", "comma-separated seed addresses of a Redis (or Valkey) Cluster to measure")
		embedded  = fs.Bool("embedded", false, "run on an embedded miniredis even when redis-server is installed (memory estimated, no commands or latency)")
		format    = fs.String("format", "text", "output format: "+strings.Join(compare.Formats, ", "))
		svgFile   = fs.String("svg", "", "also write a chart of admissions over time (boundary burst and fleet) to this SVG file")
		users     = fs.Int("users", 10_000, fmt.Sprintf("users at the limit in the many-users scenario (1 to %d)", compare.MaxUsers))
		limit     = fs.Int64("limit", 100, "limit per window for every algorithm")
		window    = fs.Duration("window", time.Minute, "window of the limit (1s to 24h)")
		instances = fs.String("instances", "1,4,16", "fleet sizes, comma-separated")
		leaseList = fs.String("leases", "8,64", "lease sizes (WithLeases) of the extra overload and fleet rows for every strategy that can lease, comma-separated, or none")
		leaseAge  = fs.Duration("lease-max-age", 0, "maxAge of those leases (default: the window)")
		leaseLow  = fs.Int64("lease-floor", 2, "floor (WithLeaseFloor) of the adaptive lease rows beside each larger lease size, or 0 for none")
		scenarios = fs.String("scenarios", strings.Join(compare.Scenarios, ","), "scenarios to run, comma-separated")
		progress  = fs.String("progress", "auto", "progress line on stderr: auto (when stderr is a terminal), on, off")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: compare [flags]\n\nCompares every registered fleetlimit algorithm on accuracy, Redis memory and Redis load.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "compare: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if !slices.Contains(compare.Formats, *format) {
		return usage("-format %q, want one of %s", *format, strings.Join(compare.Formats, ", "))
	}
	if n := countTrue(*redisAddr != "", *clusterTo != "", *embedded); n > 1 {
		return usage("-redis, -cluster and -embedded are exclusive")
	}
	// Config takes zero for "the default"; on the command line a zero was
	// typed, so it is refused here.
	if *users < 1 || *users > compare.MaxUsers {
		return usage("-users %d, want 1 to %d", *users, compare.MaxUsers)
	}
	if *limit < 1 || *limit > compare.MaxLimit {
		return usage("-limit %d, want 1 to %d", *limit, compare.MaxLimit)
	}
	if *window <= 0 {
		return usage("-window %v, want 1s to 24h", *window)
	}
	names := splitList(*scenarios)
	if len(names) == 0 {
		return usage("-scenarios is empty, want some of %s", strings.Join(compare.Scenarios, ","))
	}
	sizes, err := parseInts(*instances)
	if err != nil {
		return usage("-instances: %v", err)
	}
	leaseSizes := []int64{} // none
	if strings.TrimSpace(*leaseList) != "none" {
		ns, err := parseInts(*leaseList)
		if err != nil {
			return usage("-leases: %v (or none)", err)
		}
		for _, n := range ns {
			leaseSizes = append(leaseSizes, int64(n))
		}
	}
	showProgress := false
	switch *progress {
	case "auto":
		showProgress = stderrIsTTY
	case "on":
		showProgress = true
	case "off":
	default:
		return usage("-progress %q, want auto, on or off", *progress)
	}

	// go-redis logs its pool's dial failures on its own; the errors below
	// say what happened, once.
	redis.SetLogger(silent{})
	var srv *compare.Server
	switch {
	case *redisAddr != "":
		srv, err = compare.Standalone(ctx, *redisAddr)
	case *clusterTo != "":
		srv, err = compare.Cluster(ctx, strings.Split(*clusterTo, ","))
	case *embedded:
		srv, err = compare.Embedded()
	default:
		srv, err = compare.Local(ctx)
		if errors.Is(err, compare.ErrNoRedisServer) {
			srv, err = compare.Embedded()
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer func() { _ = srv.Close() }()

	cfg := compare.Config{
		Server:    srv,
		Limit:     *limit,
		Window:    *window,
		Users:     *users,
		Instances: sizes,
		Scenarios: names,
		// Run refuses a lease size below 1 and a max age below the
		// shortest window; a max age of 0 is the default.
		LeaseSizes:  leaseSizes,
		LeaseMaxAge: *leaseAge,
		LeaseFloor:  *leaseLow,
	}
	if *leaseLow == 0 {
		cfg.LeaseFloor = -1
	}
	var line progressLine
	if showProgress {
		line.w = stderr
		cfg.Progress = line.show
	}
	rep, err := compare.Run(ctx, cfg)
	line.clear()
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, compare.ErrConfig) {
			return 2
		}
		return 1
	}
	if err := rep.Write(stdout, *format); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *svgFile != "" {
		if err := os.WriteFile(*svgFile, rep.Chart(), 0o644); err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 1
		}
	}
	if showProgress {
		fmt.Fprintf(stderr, "compare: %d rows in %.1fs\n", len(rep.Rows), rep.Elapsed.Seconds())
	}
	return 0
}

// silent is a go-redis logger that drops everything.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// countTrue counts the true values.
func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// progressLine rewrites one line on a terminal, at most ten times a second.
type progressLine struct {
	w     io.Writer
	last  time.Time
	shown bool
}

func (p *progressLine) show(pr compare.Progress) {
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.shown = true
	fmt.Fprintf(p.w, "\r\033[K[%d/%d] %s: %d/%d decisions", pr.Job, pr.Jobs, pr.Label, pr.Done, pr.Total)
}

func (p *progressLine) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// parseInts parses a comma-separated list of integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, item := range splitList(s) {
		n, err := strconv.Atoi(item)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", item)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}
