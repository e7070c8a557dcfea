package main

// The black-box harness: the real fleetlimitd binary, built once, run as a
// process against the real redis-server that ./test.sh starts, and driven
// over gRPC with go-control-plane's generated client.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The fleetlimitd binary under test, built on first use (with -race when
// the tests run with it) into a directory TestMain removes.
var (
	buildDir  string
	buildOnce sync.Once
	built     string
	buildErr  error
)

// fleetlimitd returns the path of the binary under test, building it once.
func fleetlimitd(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		built = filepath.Join(buildDir, "fleetlimitd")
		args := []string{"build", "-o", built}
		if raceEnabled {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	var err error
	if buildDir, err = os.MkdirTemp("", "fleetlimitd-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(buildDir)
	os.Exit(code)
}

// redisAddr is FLEETLIMIT_REDIS_ADDR: the test skips without it, and fails
// when FLEETLIMIT_REQUIRE_REDIS=1 (as ./test.sh sets).
func redisAddr(t testing.TB) string {
	return needEnv(t, "FLEETLIMIT_REDIS_ADDR")
}

func needEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("FLEETLIMIT_REQUIRE_REDIS") == "1" {
			t.Fatalf("%s is not set and FLEETLIMIT_REQUIRE_REDIS=1: run ./test.sh", name)
		}
		t.Skipf("%s is not set: run ./test.sh to start a redis-server", name)
	}
	return v
}

// writeConfig writes the fixture name into dir with its domain replaced by
// a fresh one (so that runs never share counters), and returns the file and
// the domain.
func writeConfig(t testing.TB, dir, name string) (path, domain string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	domain = freshDomain()
	path = filepath.Join(dir, "config.yaml")
	writeFile(t, path, strings.Replace(string(b), "domain: test-domain", "domain: "+domain, 1))
	return path, domain
}

func freshDomain() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "test-" + hex.EncodeToString(b)
}

// writeFile replaces path's content in one rename, as a configuration
// manager does, so that a reload never reads half a file.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// daemon is one running fleetlimitd.
type daemon struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	client   rlspb.RateLimitServiceClient
	conn     *grpc.ClientConn

	mu    sync.Mutex
	logs  []map[string]any // its JSON log records
	exit  chan struct{}
	err   error // cmd.Wait's, once exit is closed
	lines strings.Builder
}

// start runs fleetlimitd with args (after the test's own, which they can
// override: loopback ports, JSON logs, a fast reload, a 5s timeout) and
// waits until it serves; it is stopped, with SIGTERM, when the test ends.
func start(t testing.TB, args ...string) *daemon {
	t.Helper()
	d := runDaemon(t, args...)
	select {
	case <-d.serving():
	case <-d.exit:
		t.Fatalf("fleetlimitd exited before serving: %v\n%s", d.err, d.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("fleetlimitd did not serve within 2 minutes:\n%s", d.output())
	}
	conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	d.conn, d.client = conn, rlspb.NewRateLimitServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		d.stop(t)
	})
	return d
}

// runDaemon starts the process and its log reader, without waiting.
func runDaemon(t testing.TB, args ...string) *daemon {
	t.Helper()
	// A decision timeout of 5s: on the loaded test machine a decision past
	// the default 100ms would be made by the failure policy, and answers
	// would not be the store's. Tests of the timeout give their own.
	all := append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-log-format", "json", "-reload-interval", "50ms", "-timeout", "5s"}, args...)
	d := &daemon{cmd: exec.Command(fleetlimitd(t), all...), exit: make(chan struct{})}
	d.cmd.Env = os.Environ()
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout = io.Discard
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.lines.WriteString(sc.Text() + "\n")
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				d.logs = append(d.logs, rec)
				if rec["msg"] == "serving" {
					d.grpcAddr, _ = rec["grpc_addr"].(string)
					d.httpAddr, _ = rec["http_addr"].(string)
				}
			}
			d.mu.Unlock()
		}
		d.err = d.cmd.Wait()
		close(d.exit)
	}()
	return d
}

// serving is closed once the daemon has logged its addresses.
func (d *daemon) serving() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for d.logged("serving") == 0 {
			select {
			case <-d.exit:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return ch
}

// logged counts the log records with message msg.
func (d *daemon) logged(msg string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, rec := range d.logs {
		if rec["msg"] == msg {
			n++
		}
	}
	return n
}

func (d *daemon) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lines.String()
}

// waitLogged waits (up to a minute) for n records with message msg.
func (d *daemon) waitLogged(t testing.TB, msg string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for d.logged(msg) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fleetlimitd never logged %q %d times:\n%s", msg, n, d.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit (a kill after 30s).
func (d *daemon) stop(t testing.TB) {
	select {
	case <-d.exit:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exit:
		if d.err != nil {
			t.Errorf("fleetlimitd exited with %v after SIGTERM:\n%s", d.err, d.output())
		}
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exit
		t.Errorf("fleetlimitd did not stop within 30s of SIGTERM:\n%s", d.output())
	}
}

// desc is a descriptor of key, value pairs.
func desc(kv ...string) *commonpb.RateLimitDescriptor {
	d := &commonpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one ShouldRateLimit and fails the test on a gRPC error.
func (d *daemon) ask(t testing.TB, domain string, hits uint32, ds ...*commonpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := d.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("ShouldRateLimit(%s): %d statuses for %d descriptors", domain, len(resp.Statuses), len(ds))
	}
	return resp
}

// awayFromHourEdge waits, if the hour turns within the next 30 seconds,
// until it has: tests of hourly fixed windows expect no window to turn
// while they run.
func awayFromHourEdge() {
	now := time.Now()
	if next := now.Truncate(time.Hour).Add(time.Hour); next.Sub(now) < 30*time.Second {
		time.Sleep(next.Sub(now) + time.Second)
	}
}
