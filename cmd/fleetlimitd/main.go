// Command fleetlimitd is a rate-limit service for every language: it answers
// Envoy's rate limit protocol (envoy.service.ratelimit.v3.RateLimitService)
// from envoyproxy/ratelimit's YAML configuration, with fleetlimit's
// algorithms behind it, over Redis (standalone, Sentinel or Cluster).
//
//	fleetlimitd -config /etc/ratelimit/config -redis redis:6379
//
// By default every rule is a fixed window aligned to its unit, as in
// envoyproxy/ratelimit, so a migration changes no answer until a rule asks
// for another algorithm (rate_limit.algorithm). docs/service.md has the
// configuration, the Envoy side, the migration and the differences.
//
// Every flag can be set from the environment: -redis from
// FLEETLIMITD_REDIS, -cluster from FLEETLIMITD_CLUSTER, and so on (the flag's
// name upper-cased, '-' as '_', prefixed FLEETLIMITD_); a flag given on the
// command line wins. The Redis password is read from FLEETLIMITD_REDIS_PASSWORD
// only, so that it never shows in a process list.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/promobserver"
	"github.com/fleetlimit/fleetlimit/store"
)

// options are fleetlimitd's flags.
type options struct {
	config          string
	grpcAddr        string
	httpAddr        string
	redisAddr       string
	cluster         string
	sentinelMaster  string
	redisUser       string
	redisTLS        bool
	redisCA         string
	memory          bool
	timeout         time.Duration
	failurePolicy   string
	instances       int64
	reloadInterval  time.Duration
	shutdownTimeout time.Duration
	pingTimeout     time.Duration
	headers         bool
	shadow          bool
	logLevel        string
	logFormat       string
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("fleetlimitd", flag.ContinueOnError)
	fs.StringVar(&o.config, "config", "", "configuration: a YAML file, or a directory whose *.yaml and *.yml files are read (one domain each); required")
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":8081", "address the gRPC service (rate limit, health, reflection) listens on")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "address of the HTTP server for /metrics and /healthcheck; empty for none")
	fs.StringVar(&o.redisAddr, "redis", "localhost:6379", "Redis host:port; with -sentinel-master, the Sentinels' host:port, comma-separated")
	fs.StringVar(&o.cluster, "cluster", "", "Redis Cluster: the nodes' host:port, comma-separated (replaces -redis)")
	fs.StringVar(&o.sentinelMaster, "sentinel-master", "", "the Sentinel master's name: Redis is found through the Sentinels at -redis")
	fs.StringVar(&o.redisUser, "redis-username", "", "Redis ACL user name (the password is read from FLEETLIMITD_REDIS_PASSWORD)")
	fs.BoolVar(&o.redisTLS, "redis-tls", false, "connect to Redis over TLS")
	fs.StringVar(&o.redisCA, "redis-tls-ca", "", "PEM file of the CA that signed Redis's certificate (default: the system's roots)")
	fs.BoolVar(&o.memory, "memory", false, "keep counters in this process instead of Redis: for trying fleetlimitd alone, never for a fleet")
	fs.DurationVar(&o.timeout, "timeout", fleetlimit.DefaultTimeout, "longest a decision waits for Redis before the failure policy decides")
	fs.StringVar(&o.failurePolicy, "failure-policy", "local", "what decides while Redis cannot: local (each rule in process, at its limit / -fallback-instances), open (admit) or closed (deny)")
	fs.Int64Var(&o.instances, "fallback-instances", 1, "under -failure-policy local, the fleet's size: each process then admits limit / instances while Redis is down")
	fs.DurationVar(&o.reloadInterval, "reload-interval", time.Second, "how often the configuration is read again and, if changed, reloaded; 0 never")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM or SIGINT, how long in-flight requests have to be answered")
	fs.DurationVar(&o.pingTimeout, "ping-timeout", 5*time.Second, "how long the start-up Ping of Redis may take")
	fs.BoolVar(&o.shadow, "shadow", false, "global shadow mode, as envoyproxy/ratelimit's SHADOW_MODE: every answer's overall_code is OK, the statuses still say which descriptors are over their limit")
	fs.BoolVar(&o.headers, "ratelimit-headers", true, "add the draft RateLimit-Policy, RateLimit and (on OVER_LIMIT) Retry-After headers to answers")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	// Environment first, so that the command line wins.
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := "FLEETLIMITD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.config == "" {
		return nil, errors.New("-config is required")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fleetlimitd:", err)
		os.Exit(2)
	}
	log, err := newLogger(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetlimitd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		// Plain text on stderr, one reason a line, whatever the log format.
		fmt.Fprintln(os.Stderr, "fleetlimitd:", err)
		os.Exit(1)
	}
}

func newLogger(o *options) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	ho := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, ho)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", o.logFormat)
}

// newRedis returns the client -redis, -cluster and -sentinel-master name,
// with context deadlines honoured (the limiter's timeout bounds every call).
func newRedis(o *options) (redis.UniversalClient, error) {
	var tc *tls.Config
	if o.redisTLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.redisCA != "" {
			pem, err := os.ReadFile(o.redisCA)
			if err != nil {
				return nil, fmt.Errorf("-redis-tls-ca: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-redis-tls-ca %s: no PEM certificate", o.redisCA)
			}
		}
	}
	password := os.Getenv("FLEETLIMITD_REDIS_PASSWORD")
	split := func(s string) []string {
		var out []string
		for a := range strings.SplitSeq(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		return out
	}
	switch {
	case o.cluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: split(o.cluster), Username: o.redisUser, Password: password, TLSConfig: tc, ContextTimeoutEnabled: true,
		}), nil
	case o.sentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: o.sentinelMaster, SentinelAddrs: split(o.redisAddr), Username: o.redisUser, Password: password,
			TLSConfig: tc, ContextTimeoutEnabled: true,
		}), nil
	}
	if tc != nil {
		if host, _, err := net.SplitHostPort(o.redisAddr); err == nil {
			tc.ServerName = host
		}
	}
	return redis.NewClient(&redis.Options{
		Addr: o.redisAddr, Username: o.redisUser, Password: password, TLSConfig: tc, ContextTimeoutEnabled: true,
	}), nil
}

func parsePolicy(s string) (fleetlimit.FailurePolicy, error) {
	switch s {
	case "local":
		return fleetlimit.FailLocal, nil
	case "open":
		return fleetlimit.FailOpen, nil
	case "closed":
		return fleetlimit.FailClosed, nil
	}
	return 0, fmt.Errorf("-failure-policy %q: want local, open or closed", s)
}

// run serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context, o *options, log *slog.Logger) error {
	policy, err := parsePolicy(o.failurePolicy)
	if err != nil {
		return err
	}
	// The configuration is checked before anything else starts.
	files, hash, err := readConfig(o.config)
	if err != nil {
		return fmt.Errorf("configuration refused: %w", err)
	}
	cfg, err := parseConfig(files)
	if err != nil {
		return fmt.Errorf("configuration refused:\n%w", err)
	}
	var st store.Store
	if o.memory {
		mem := store.NewMemory()
		defer mem.Close()
		st = mem
		log.Warn("counters are kept in this process (-memory): each fleetlimitd limits on its own")
	} else {
		rdb, err := newRedis(o)
		if err != nil {
			return err
		}
		defer rdb.Close()
		red, err := store.NewRedis(rdb)
		if err != nil {
			return err
		}
		defer red.Close()
		pctx, cancel := context.WithTimeout(ctx, o.pingTimeout)
		err = red.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("redis is not answering (start-up ping of %s): %w", redisTarget(o), err)
		}
		log.Info("redis answers", "redis", redisTarget(o))
		st = red
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := promobserver.New(reg)
	if err != nil {
		return err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return err
	}
	breaker, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{})
	if err != nil {
		return err
	}
	ls := &limiters{
		store:  st,
		opts:   []fleetlimit.Option{fleetlimit.WithBreaker(breaker), fleetlimit.WithObserver(obs), fleetlimit.WithTimeout(o.timeout)},
		policy: policy,
	}
	if o.instances > 1 {
		fallback := store.NewMemory()
		defer fallback.Close()
		ls.fallback = fleetlimit.WithFallback(fallback, o.instances)
	}
	svc := &service{limiters: ls, headers: o.headers, shadow: o.shadow, log: log, metrics: m}

	gen, err := svc.bindGeneration(cfg, hash)
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("configuration refused:\n%w", err)
	}
	svc.install(gen)
	log.Info("configuration loaded", "config", o.config, "rules", len(gen.cfg.rules))

	lis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(srv)
	served := make(chan error, 2)
	go func() { served <- srv.Serve(lis) }()

	var hsrv *http.Server
	httpAddr := ""
	if o.httpAddr != "" {
		hl, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			srv.Stop()
			return err
		}
		httpAddr = hl.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
			resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
			if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
				http.Error(w, "NOT SERVING", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "OK")
		})
		hsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hsrv.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
				served <- err
			}
		}()
	}
	log.Info("serving", "grpc_addr", lis.Addr().String(), "http_addr", httpAddr)

	if o.reloadInterval > 0 {
		go svc.watch(ctx, o.config, o.reloadInterval)
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	log.Info("shutting down: answering in-flight requests", "timeout", o.shutdownTimeout)
	hs.Shutdown() // NOT_SERVING, so that Envoy's health checks move away
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.shutdownTimeout):
		log.Warn("shutdown timeout: closing remaining connections")
		srv.Stop()
	}
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = hsrv.Shutdown(sctx)
		cancel()
	}
	svc.gen.Load().close(log)
	log.Info("stopped")
	return nil
}

func redisTarget(o *options) string {
	if o.cluster != "" {
		return "cluster " + o.cluster
	}
	if o.sentinelMaster != "" {
		return "sentinel master " + o.sentinelMaster + " at " + o.redisAddr
	}
	return o.redisAddr
}

// build parses files and binds their rules.
func (s *service) build(files map[string][]byte, hash [sha256.Size]byte) (*generation, error) {
	cfg, err := parseConfig(files)
	if err != nil {
		return nil, err
	}
	return s.bindGeneration(cfg, hash)
}

// bindGeneration binds cfg's rules.
func (s *service) bindGeneration(cfg *Config, hash [sha256.Size]byte) (*generation, error) {
	bound, err := s.limiters.bindAll(cfg)
	if err != nil {
		return nil, err
	}
	return &generation{cfg: cfg, bound: bound, hash: hash}, nil
}

// install makes gen the configuration in force: requests that already
// loaded the previous one finish with it.
func (s *service) install(gen *generation) {
	s.gen.Store(gen)
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.rules.Set(float64(len(gen.cfg.rules)))
}

// readConfig reads the files at path, with a digest of their names and
// contents.
func readConfig(path string) (map[string][]byte, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	names, err := configFiles(path)
	if err != nil {
		return nil, sum, err
	}
	files := make(map[string][]byte, len(names))
	h := sha256.New()
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, sum, err
		}
		files[name] = b
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(b))
		h.Write(b)
	}
	h.Sum(sum[:0])
	return files, sum, nil
}

// watch reads the configuration every interval and reloads it when its
// files changed. A configuration that is refused leaves the one in force in
// place, and is reported once, until it changes again.
func (s *service) watch(ctx context.Context, path string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		files, hash, err := readConfig(path)
		if err == nil && hash == s.gen.Load().hash {
			lastErr = ""
			continue
		}
		var gen *generation
		if err == nil {
			gen, err = s.build(files, hash)
		}
		if err != nil {
			if err.Error() != lastErr {
				s.log.Error("configuration change refused; the last good configuration stays in force", "config", path, "err", err)
				s.metrics.reloads.WithLabelValues("error").Inc()
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
		old := s.gen.Load()
		s.install(gen)
		old.close(s.log)
		s.log.Info("configuration reloaded", "config", path, "rules", len(gen.cfg.rules))
	}
}
