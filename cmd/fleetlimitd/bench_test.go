package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/store"
)

// BenchmarkService measures what the service costs over a plain
// Limiter.AllowN in process, side by side on the same Redis
// (FLEETLIMIT_REDIS_ADDR) with the same rule (a fixed window that never
// denies, over 1000 keys): "grpc" is ShouldRateLimit through a gRPC server
// and client on loopback in this process (one connection, as Envoy keeps
// few), "allow" is the rule's Limiter called directly. Each is run with 1, 8
// and 64 concurrent clients; ns/op is the wall time per call over all
// clients (its inverse is calls per second), p50 and p99 each call's latency.
//
//	NORACE=1 ./test.sh -run '^$' -bench BenchmarkService ./cmd/fleetlimitd/
func BenchmarkService(b *testing.B) {
	addr := os.Getenv("FLEETLIMIT_REDIS_ADDR")
	if addr == "" {
		b.Skip("FLEETLIMIT_REDIS_ADDR is not set: run through ./test.sh")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	st, err := store.NewRedis(rdb)
	if err != nil {
		b.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	// A timeout of a second: a decision degraded by the shared machine's
	// stalls would end the run.
	ls := &limiters{store: st, opts: []fleetlimit.Option{fleetlimit.WithTimeout(time.Second)}}
	svc := &service{limiters: ls, headers: true, log: slog.New(slog.DiscardHandler), metrics: m}
	gen, err := svc.build(map[string][]byte{"bench.yaml": []byte(
		"domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n")}, [32]byte{})
	if err != nil {
		b.Fatal(err)
	}
	svc.install(gen)
	var limiter = gen.bound[gen.cfg.rules[0]].limiter

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)

	keys := make([]string, 1000)
	reqs := make([]*rlspb.RateLimitRequest, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*commonpb.RateLimitDescriptor{desc("user", keys[i])}}
	}
	ctx := context.Background()
	calls := map[string]func(i int) error{
		"grpc": func(i int) error {
			resp, err := client.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err == nil && resp.OverallCode != rlspb.RateLimitResponse_OK {
				err = fmt.Errorf("denied: %v", resp)
			}
			return err
		},
		"allow": func(i int) error {
			res, err := limiter.AllowN(ctx, keys[i%len(keys)], 1)
			if err == nil && !res.Allowed {
				err = fmt.Errorf("denied: %+v", res)
			}
			return err
		},
	}
	for _, clients := range []int{1, 8, 64} {
		for _, name := range []string{"allow", "grpc"} {
			b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
				measure(b, clients, calls[name])
			})
		}
	}
}

// BenchmarkProcesses measures fleetlimitd as Envoy meets it, a process of
// its own, and envoyproxy/ratelimit beside it when FLEETLIMITD_ENVOY_RATELIMIT
// names its binary: the same configuration (a fixed window that never
// denies), the same Redis, the same 1000 keys, one gRPC connection each,
// 1, 8 and 64 concurrent clients.
//
//	FLEETLIMITD_ENVOY_RATELIMIT=$(go env GOPATH)/bin/service_cmd \
//	NORACE=1 ./test.sh -run '^$' -bench BenchmarkProcesses ./cmd/fleetlimitd/
func BenchmarkProcesses(b *testing.B) {
	addr := redisAddr(b)
	root := b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "rl", "config"), 0o755); err != nil {
		b.Fatal(err)
	}
	writeFile(b, filepath.Join(root, "rl", "config", "config.yaml"),
		"domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n")
	services := map[string]rlspb.RateLimitServiceClient{
		"fleetlimitd": start(b, "-config", filepath.Join(root, "rl", "config"), "-redis", addr, "-timeout", "1s").client,
	}
	names := []string{"fleetlimitd"}
	if theirs := os.Getenv("FLEETLIMITD_ENVOY_RATELIMIT"); theirs != "" {
		services["envoyproxy"] = startEnvoyRatelimit(b, theirs, root, addr)
		names = append(names, "envoyproxy")
	}
	reqs := make([]*rlspb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*commonpb.RateLimitDescriptor{desc("user", fmt.Sprintf("user-%d", i))}}
	}
	for _, clients := range []int{1, 8, 64} {
		for _, name := range names {
			client := services[name]
			b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
				measure(b, clients, func(i int) error {
					resp, err := client.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
					if err == nil && resp.OverallCode != rlspb.RateLimitResponse_OK {
						err = fmt.Errorf("denied: %v", resp)
					}
					return err
				})
			})
		}
	}
}

// measure runs b.N calls of call, spread over clients goroutines, after one
// warm-up call, and reports each call's p50 and p99 latency beside ns/op
// (the wall time per call over all clients).
func measure(b *testing.B, clients int, call func(i int) error) {
	if err := call(0); err != nil { // connections and scripts ready
		b.Fatal(err)
	}
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	for c := range clients {
		wg.Go(func() {
			for i := c; i < b.N; i += clients {
				t0 := time.Now()
				if err := call(i); err != nil {
					errs <- err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}
