package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDifferential sends the same requests to fleetlimitd and to
// envoyproxy/ratelimit itself, on the same Redis with the same
// configuration (the basic fixture without fleetlimit's additions), and
// compares every answer: with the default algorithm, one hit per request
// and a look (hits_addend 0) at a key that has counted, they must be equal.
// It needs envoyproxy/ratelimit's binary (its src/service_cmd) in
// FLEETLIMITD_ENVOY_RATELIMIT and skips without it.
func TestDifferential(t *testing.T) {
	theirs := os.Getenv("FLEETLIMITD_ENVOY_RATELIMIT")
	if theirs == "" {
		t.Skip("FLEETLIMITD_ENVOY_RATELIMIT is not set: the path of envoyproxy/ratelimit's service binary (go install github.com/envoyproxy/ratelimit/src/service_cmd@latest)")
	}
	addr := redisAddr(t)
	b, err := os.ReadFile(filepath.Join("testdata", "basic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// envoyproxy/ratelimit's part of the fixture: up to the first of
	// fleetlimit's additions.
	common, _, _ := strings.Cut(string(b), "  # fleetlimit's additions.")
	domain := freshDomain()
	common = strings.Replace(common, "domain: test-domain", "domain: "+domain, 1)

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "rl", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "rl", "config", "config.yaml"), common)
	ours := start(t, "-config", filepath.Join(root, "rl", "config"), "-redis", addr)
	ref := startEnvoyRatelimit(t, theirs, root, addr)
	awayFromHourEdge()

	ask := func(client rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%v: %v", req, err)
		}
		return resp
	}
	look := func(kv ...string) *commonpb.RateLimitDescriptor {
		d := desc(kv...)
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	steps := [][]*commonpb.RateLimitDescriptor{
		{desc("key1", "value1", "subkey1", "x")},
		{desc("key1", "value1", "subkey1", "subvalue1")},
		{look("key1", "value1", "subkey1", "x")},
		{desc("key2", "a")}, {desc("key2", "value2")}, {desc("key2", "value3")},
		{desc("key2", "value2", "sub", "x")}, {desc("key1", "value1")}, {desc("nokey", "x")},
		{desc("key6", "x")},
		{desc("key7", "x")}, {look("key7", "x")}, {desc("key7", "x")}, {desc("key7", "x")},
		{desc("wild", "foo1")}, {desc("wild", "foo1")}, {desc("wild", "foo1")}, {desc("wild", "foo2")}, {desc("wild", "bar")},
		// No middle wildcard: envoyproxy/ratelimit's repository has them, the
		// version the Go module proxy serves (v1.4.1-0.20260122083618-3fb702589d36)
		// only trailing ones.
		{desc("shared", "files1")}, {desc("shared", "files2")}, {desc("shared", "files3")},
		{desc("named", "a")}, {desc("named", "a")}, {desc("named", "a"), desc("replacer", "a")},
		{desc("shadow", "x")}, {desc("shadow", "x")},
		{desc("blocked", "x")},
		{desc("key2", "multi"), desc("key7", "x"), desc("key6", "y")},
	}
	for i, ds := range steps {
		req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}
		got, want := ask(ours.client, req), ask(ref, req)
		if got.OverallCode != want.OverallCode || len(got.Statuses) != len(want.Statuses) {
			t.Errorf("step %d %v: fleetlimitd %v, envoyproxy/ratelimit %v", i, ds, got, want)
			continue
		}
		for j := range got.Statuses {
			g, w := got.Statuses[j], want.Statuses[j]
			dg, dw := g.GetDurationUntilReset().AsDuration(), w.GetDurationUntilReset().AsDuration()
			// The two answers come a moment apart: a second may turn between them.
			if g.Code != w.Code || g.LimitRemaining != w.LimitRemaining ||
				g.GetCurrentLimit().GetRequestsPerUnit() != w.GetCurrentLimit().GetRequestsPerUnit() ||
				g.GetCurrentLimit().GetUnit() != w.GetCurrentLimit().GetUnit() ||
				g.GetCurrentLimit().GetName() != w.GetCurrentLimit().GetName() ||
				(g.DurationUntilReset == nil) != (w.DurationUntilReset == nil) ||
				dg-dw > time.Second || dw-dg > time.Second {
				t.Errorf("step %d %v, descriptor %d:\n  fleetlimitd           %v\n  envoyproxy/ratelimit  %v", i, ds, j, g, w)
			}
		}
	}

	// The difference docs/service.md states: envoyproxy/ratelimit counts a
	// denied request's hits, fleetlimitd does not. Of 10 per hour, hits of
	// 4, 4 and 4 (denied), then 2: fleetlimitd admits the 2, envoyproxy/ratelimit
	// does not.
	// Then a look (hits_addend 0): OK with 0 left here, OVER_LIMIT there,
	// where the denied hits took the count past the limit.
	var codes [2][]rlspb.RateLimitResponse_Code
	for _, hits := range []uint32{4, 4, 4, 2, 0} {
		d := desc("counted", "d")
		if hits == 0 {
			d = look("counted", "d")
		}
		req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{d}, HitsAddend: hits}
		codes[0] = append(codes[0], ask(ours.client, req).Statuses[0].Code)
		codes[1] = append(codes[1], ask(ref, req).Statuses[0].Code)
	}
	if !slices.Equal(codes[0], []rlspb.RateLimitResponse_Code{ok, ok, over, ok, ok}) || !slices.Equal(codes[1], []rlspb.RateLimitResponse_Code{ok, ok, over, over, over}) {
		t.Errorf("hits 4, 4, 4, 2, then a look, of 10: fleetlimitd %v, envoyproxy/ratelimit %v; want [OK OK OVER OK OK] and [OK OK OVER OVER OVER]", codes[0], codes[1])
	}
}

// startEnvoyRatelimit runs envoyproxy/ratelimit's binary with its
// configuration under root/rl/config, on Redis at addr, and returns a
// client of it; it is stopped when the test ends.
func startEnvoyRatelimit(t testing.TB, binary, root, addr string) rlspb.RateLimitServiceClient {
	t.Helper()
	port := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	httpPort, grpcPort, debugPort := port(), port(), port()
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+addr)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://127.0.0.1:" + httpPort + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit never became healthy:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}
