// Command grpcserver is a gRPC server with a different rate limit per
// method, both in one shared Redis, serving the standard health service
// (grpc.health.v1.Health):
//
//	Check  (unary)   by client IP, 5 per minute, exact (sliding-window log),
//	                 fail-closed: while Redis is down it answers Unavailable
//	Watch  (stream)  by the x-user metadata, bursts of 2 then 1 per second
//	                 (token bucket); a stream is charged once, when it opens
//
// Denials are ResourceExhausted with a google.rpc.RetryInfo detail; every
// limited response carries the ratelimit-policy and ratelimit metadata.
// At start it runs a client against itself and prints what each call got,
// then serves until interrupted (with -demo=false it only serves).
//
//	go run .                        # from examples/grpcserver: an embedded Redis (miniredis)
//	go run . -redis 127.0.0.1:6379  # a real Redis
//
// It is a module of its own, so that the core module never requires
// grpc-go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/grpclimit"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "listen address")
	redisAddr := flag.String("redis", "", "address of a real Redis (default: an embedded miniredis)")
	demo := flag.Bool("demo", true, "run a client against the server at start and print what it got")
	flag.Parse()
	if err := run(*addr, *redisAddr, *demo); err != nil {
		log.Fatal(err)
	}
}

func run(addr, redisAddr string, demo bool) error {
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
		fmt.Println("Redis: embedded miniredis (pass -redis ADDR for a real one)")
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	shared, err := store.NewRedis(rdb)
	if err != nil {
		return err
	}
	defer shared.Close()
	srv, err := newServer(shared)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Println("Listening on", ln.Addr())
	if demo {
		if err := runDemo(os.Stdout, ln.Addr().String()); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.GracefulStop()
	return nil
}

// newServer serves the health service with one limiter per method: Check
// by peer address, Watch by the x-user metadata. Both limiters share one
// store and one circuit breaker.
func newServer(shared store.Store, extra ...fleetlimit.Option) (*grpc.Server, error) {
	breaker, err := fleetlimit.NewBreaker(fleetlimit.BreakerConfig{})
	if err != nil {
		return nil, err
	}
	with := func(more ...fleetlimit.Option) []fleetlimit.Option {
		return append(append([]fleetlimit.Option{fleetlimit.WithBreaker(breaker)}, extra...), more...)
	}
	check, err := fleetlimit.New(algorithm.SlidingWindowLog(5, time.Minute), shared, with(
		fleetlimit.WithName("check"), fleetlimit.WithKeyPrefix("example:check:"), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))...)
	if err != nil {
		return nil, err
	}
	watch, err := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 2), shared, with(
		fleetlimit.WithName("watch"), fleetlimit.WithKeyPrefix("example:watch:"))...)
	if err != nil {
		return nil, err
	}
	// No trusted proxies: the peer's address is the client, whatever
	// x-forwarded-for it sends.
	peerIP, err := grpclimit.KeyByPeer(httplimit.ClientIPConfig{})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(check, peerIP,
			grpclimit.ForMethods(healthpb.Health_Check_FullMethodName))),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(watch, grpclimit.KeyByMetadata("x-user"),
			grpclimit.ForMethods(healthpb.Health_Watch_FullMethodName))),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv, nil
}

// runDemo calls the server at addr as a client would, and prints each
// call's status, retry delay and rate-limit metadata.
func runDemo(w io.Writer, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Fprintln(w, "\nCheck, 6 times (5 per minute per client IP):")
	for range 6 {
		var header metadata.MD
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		fmt.Fprintln(w, " ", describe(err, header))
	}
	fmt.Fprintln(w, "\nWatch as alice, 3 streams (bursts of 2, then 1 per second):")
	alice := metadata.AppendToOutgoingContext(ctx, "x-user", "alice")
	for range 3 {
		s, err := c.Watch(alice, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		// An admitted Watch sends the current status and then waits for
		// changes: one message is enough.
		_, err = s.Recv()
		header, _ := s.Header()
		fmt.Fprintln(w, " ", describe(err, header))
	}
	fmt.Fprintln(w)
	return nil
}

// describe is one line for a call's outcome.
func describe(err error, header metadata.MD) string {
	st := status.Convert(err)
	line := st.Code().String()
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			line += fmt.Sprintf(" retry in %v", ri.GetRetryDelay().AsDuration().Round(time.Millisecond))
		}
	}
	if errors.Is(err, io.EOF) {
		line = "OK"
	}
	return fmt.Sprintf("%-34s ratelimit: %s", line, strings.Join(header.Get(grpclimit.MetadataRateLimit), ", "))
}
