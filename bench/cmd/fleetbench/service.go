package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// serviceGroup names the scenarios of fleetlimitd (issue 30).
const serviceGroup = "fleetlimitd, 10,000 keys"

// serviceRule is the one rule fleetlimitd serves in the benchmark, in
// envoyproxy/ratelimit's YAML, and serviceLimit its limit per second: a
// fixed window aligned to the second (fleetlimitd's default algorithm) that
// never denies. The in-process contender runs the same rule.
const (
	serviceLimit = 4_000_000_000
	serviceRule  = "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"
)

var serviceContenders = []string{"svc-grpc", "svc-allow"}

// serviceRun is what RESULTS.md says about fleetlimitd's run.
type serviceRun struct {
	note  string // why it was not measured; "" when it was
	build time.Duration
	args  string
}

// servicePhase builds cmd/fleetlimitd, starts it on the bench's Redis, and
// measures ShouldRateLimit over gRPC (one connection, as Envoy keeps few)
// beside Limiter.AllowN of the same rule in this process, on the same
// Redis, at 1, 8 and 64 concurrent callers.
func (b *bench) servicePhase(ctx context.Context) error {
	b.service = &serviceRun{}
	if b.cfg.service == "" {
		b.service.note = "skipped (-service '')"
		return nil
	}
	dir, err := os.MkdirTemp("", "fleetbench-fleetlimitd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "fleetlimitd")
	t0 := time.Now()
	log.Printf("fleetlimitd: go build in %s", b.cfg.service)
	if out, err := exec.CommandContext(ctx, "go", "build", "-C", b.cfg.service, "-o", bin, ".").CombinedOutput(); err != nil {
		return b.serviceFailed(fmt.Sprintf("go build in %s: %v: %s", b.cfg.service, err, strings.TrimSpace(string(out))))
	}
	b.service.build = time.Since(t0)
	cfgPath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(cfgPath, []byte(serviceRule), 0o644); err != nil {
		return err
	}
	timeout := 5 * time.Second // go-redis's read timeout, which every contender has (ownLimiter)
	args := []string{"-config", cfgPath, "-redis", b.srv.addr, "-grpc-addr", "127.0.0.1:0", "-http-addr", "",
		"-timeout", timeout.String(), "-reload-interval", "0", "-log-format", "json"}
	shown := slices.Clone(args) // as RESULTS.md prints them: no temporary path or port
	shown[1], shown[3], shown[7] = "bench.yaml", "<the bench's redis-server>", "''"
	b.service.args = strings.Join(shown, " ")
	d, err := startDaemon(bin, args)
	if err != nil {
		return b.serviceFailed(err.Error())
	}
	defer d.stop()
	conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)

	lim, rt, closeAll, err := ownLimiter(b.srv.addr, algorithm.FixedWindow(serviceLimit, time.Second))
	if err != nil {
		return err
	}
	defer closeAll()
	cs := []*contender{
		{name: "fleetlimitd ShouldRateLimit over gRPC", id: "svc-grpc", code: "sg", rt: &roundTrips{}, pid: d.cmd.Process.Pid,
			userKey: func(letter byte, i int) string { return paddedKey("sg", letter, 20, i) },
			decider: func(profile) (decideFunc, error) {
				return func(ctx context.Context, key string) (bool, error) {
					resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "bench",
						Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: key}}}}})
					if err != nil {
						return false, err
					}
					return resp.OverallCode == rlspb.RateLimitResponse_OK, nil
				}, nil
			}},
		{name: "fleetlimit Limiter.AllowN in process, same rule", id: "svc-allow", code: "sa", rt: rt,
			userKey: func(letter byte, i int) string { return paddedKey("sa", letter, 20, i) },
			decider: func(profile) (decideFunc, error) {
				return func(ctx context.Context, key string) (bool, error) {
					res, err := lim.AllowN(ctx, key, 1)
					return res.Allowed, err
				}, nil
			}},
	}
	on := &backend{srv: b.srv, contenders: cs}
	for _, g := range goroutineCounts {
		sc := scenario{group: serviceGroup, label: fmt.Sprintf("%d goroutines", g), prof: spread,
			letter: 'd', users: 10_000, g: g, on: on}
		if err := b.runScenario(ctx, sc); err != nil {
			return err
		}
	}
	return b.srv.admin.FlushAll(ctx).Err()
}

// serviceFailed records that fleetlimitd could not be built or started:
// RESULTS.md says why in place of its table, and a failed set-up check makes
// the run exit 2, with every other figure still written.
func (b *bench) serviceFailed(why string) error {
	b.service.note = "fleetlimitd failed: " + why
	b.verify(false, "fleetlimitd builds and serves", "%s", why)
	return nil
}

// daemon is a running fleetlimitd.
type daemon struct {
	cmd      *exec.Cmd
	grpcAddr string
	done     chan struct{}
}

// startDaemon starts fleetlimitd and waits (up to a minute) for its
// "serving" log record, which names the gRPC address it listens on.
func startDaemon(bin string, args []string) (*daemon, error) {
	d := &daemon{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	d.cmd.Stdout = io.Discard
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	var lines strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "serving" {
				a, _ := rec["grpc_addr"].(string)
				select {
				case addr <- a:
				default:
				}
				continue
			}
			if lines.Len() < 4096 {
				lines.WriteString(sc.Text() + "\n")
			}
		}
		_ = d.cmd.Wait()
		close(d.done)
	}()
	select {
	case a := <-addr:
		d.grpcAddr = a
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("fleetlimitd exited before serving:\n%s", lines.String())
	case <-time.After(time.Minute):
		d.stop()
		return nil, fmt.Errorf("fleetlimitd did not serve within a minute")
	}
}

// stop ends the daemon (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// pidCPU is the CPU time process pid has used (user + system), from
// /proc/pid/stat at clock-tick resolution; 0 for pid 0.
func pidCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	return time.Duration(procTicks(strconv.Itoa(pid))) * time.Second / clockTicks
}
