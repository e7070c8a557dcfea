package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// redisTargets are the stores the behaviour tests run on: the standalone
// redis-server and the 3-master Cluster.
func redisTargets() []struct{ name, flag, env string } {
	return []struct{ name, flag, env string }{
		{"standalone", "-redis", "FLEETLIMIT_REDIS_ADDR"},
		{"cluster", "-cluster", "FLEETLIMIT_REDIS_CLUSTER_ADDRS"},
	}
}

// TestEnvoyBehaviours drives the basic fixture through the real binary:
// envoyproxy/ratelimit's answers for each configuration feature, over Redis
// standalone and Cluster.
func TestEnvoyBehaviours(t *testing.T) {
	for _, target := range redisTargets() {
		t.Run(target.name, func(t *testing.T) {
			addr := needEnv(t, target.env)
			cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
			d := start(t, "-config", cfg, target.flag, addr)
			awayFromHourEdge()
			envoyBehaviours(t, d, domain)
		})
	}
}

func envoyBehaviours(t *testing.T, d *daemon, domain string) {
	// expect checks one descriptor's status.
	expect := func(t *testing.T, what string, st *rlspb.RateLimitResponse_DescriptorStatus, code rlspb.RateLimitResponse_Code, limit uint32, remaining uint32) {
		t.Helper()
		if st.Code != code || st.GetCurrentLimit().GetRequestsPerUnit() != limit || st.LimitRemaining != remaining {
			t.Errorf("%s: code %v, limit %d, remaining %d; want %v, %d, %d", what, st.Code, st.GetCurrentLimit().GetRequestsPerUnit(), st.LimitRemaining, code, limit, remaining)
		}
	}

	t.Run("nested default and specific value", func(t *testing.T) {
		st := d.ask(t, domain, 0, desc("key1", "value1", "subkey1", "x")).Statuses[0]
		expect(t, "key1=value1,subkey1=x", st, ok, 5, 4)
		if st.CurrentLimit.Unit != rlspb.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("unit %v, want HOUR", st.CurrentLimit.Unit)
		}
		// hits_addend 0 (unset) charges 1.
		expect(t, "key1=value1,subkey1=x again", d.ask(t, domain, 0, desc("key1", "value1", "subkey1", "x")).Statuses[0], ok, 5, 3)
		expect(t, "key1=value1,subkey1=subvalue1", d.ask(t, domain, 0, desc("key1", "value1", "subkey1", "subvalue1")).Statuses[0], ok, 10, 9)
		expect(t, "key2=anything", d.ask(t, domain, 0, desc("key2", "anything")).Statuses[0], ok, 20, 19)
		expect(t, "key2=value2", d.ask(t, domain, 0, desc("key2", "value2")).Statuses[0], ok, 30, 29)
		// Each value of a key-only default counts on its own.
		expect(t, "key2=other", d.ask(t, domain, 0, desc("key2", "other")).Statuses[0], ok, 20, 19)
	})

	t.Run("no limit", func(t *testing.T) {
		for _, tc := range []struct {
			what   string
			domain string
			d      *commonpb.RateLimitDescriptor
		}{
			{"value listed without a limit", domain, desc("key2", "value3")},
			{"deeper than the configuration", domain, desc("key2", "value2", "sub", "x")},
			{"level without a limit", domain, desc("key1", "value1")},
			{"unknown key", domain, desc("nokey", "x")},
			{"unknown domain", freshDomain(), desc("key2", "x")},
			{"no entries", domain, desc()},
		} {
			resp := d.ask(t, tc.domain, 0, tc.d)
			if st := resp.Statuses[0]; resp.OverallCode != ok || st.Code != ok || st.CurrentLimit != nil {
				t.Errorf("%s: %v, want OK with no current_limit", tc.what, resp)
			}
		}
	})

	t.Run("unlimited", func(t *testing.T) {
		for range 3 {
			st := d.ask(t, domain, 0, desc("key6", "x")).Statuses[0]
			if st.Code != ok || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
				t.Fatalf("key6 (unlimited): %v, want OK, remaining MaxUint32, no current_limit", st)
			}
		}
	})

	t.Run("exhausted", func(t *testing.T) {
		dd := desc("key7", "x")
		expect(t, "1st", d.ask(t, domain, 0, dd).Statuses[0], ok, 2, 1)
		expect(t, "2nd", d.ask(t, domain, 0, dd).Statuses[0], ok, 2, 0)
		resp := d.ask(t, domain, 0, dd)
		st := resp.Statuses[0]
		expect(t, "3rd", st, over, 2, 0)
		if resp.OverallCode != over {
			t.Errorf("overall %v, want OVER_LIMIT", resp.OverallCode)
		}
		// The window is the hour, aligned: it ends within the hour.
		if r := st.DurationUntilReset.AsDuration(); r <= 0 || r > time.Hour || r%time.Second != 0 {
			t.Errorf("duration_until_reset %v, want whole seconds in (0, 1h]", r)
		}
		headers := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			headers[h.Key] = h.Value
		}
		if !strings.Contains(headers["RateLimit-Policy"], `"`+domain+`.key7";q=2;w=3600`) || !strings.Contains(headers["RateLimit"], ";r=0;t=") || headers["Retry-After"] == "" {
			t.Errorf("headers %v, want RateLimit-Policy q=2;w=3600, RateLimit r=0 and Retry-After", headers)
		}
	})

	t.Run("wildcard", func(t *testing.T) {
		expect(t, "wild=foo1", d.ask(t, domain, 0, desc("wild", "foo1")).Statuses[0], ok, 2, 1)
		expect(t, "wild=foo1 again", d.ask(t, domain, 0, desc("wild", "foo1")).Statuses[0], ok, 2, 0)
		expect(t, "wild=foo1 a third time", d.ask(t, domain, 0, desc("wild", "foo1")).Statuses[0], over, 2, 0)
		// Every value matched has a counter of its own.
		expect(t, "wild=foo2", d.ask(t, domain, 0, desc("wild", "foo2")).Statuses[0], ok, 2, 1)
		expect(t, "midwild=barxb", d.ask(t, domain, 0, desc("midwild", "barxb")).Statuses[0], ok, 2, 1)
		if st := d.ask(t, domain, 0, desc("wild", "bar")).Statuses[0]; st.CurrentLimit != nil {
			t.Errorf("wild=bar: %v, want no limit", st)
		}
		// share_threshold: every value the pattern matches shares one counter.
		expect(t, "shared=files1", d.ask(t, domain, 0, desc("shared", "files1")).Statuses[0], ok, 2, 1)
		expect(t, "shared=files2", d.ask(t, domain, 0, desc("shared", "files2")).Statuses[0], ok, 2, 0)
	})

	t.Run("replaces", func(t *testing.T) {
		// Alone, the rule named base applies (1 per hour).
		expect(t, "named alone", d.ask(t, domain, 0, desc("named", "a")).Statuses[0], ok, 1, 0)
		expect(t, "named alone again", d.ask(t, domain, 0, desc("named", "a")).Statuses[0], over, 1, 0)
		// With a descriptor whose rule replaces base, base is not applied.
		resp := d.ask(t, domain, 0, desc("named", "a"), desc("replacer", "a"))
		if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil || resp.Statuses[0].Code != ok {
			t.Errorf("named beside replacer: %v, want base replaced (OK, no current_limit)", resp)
		}
		expect(t, "replacer", resp.Statuses[1], ok, 3, 2)
		if resp.Statuses[1].CurrentLimit.Name != "special" {
			t.Errorf("current_limit name %q, want special", resp.Statuses[1].CurrentLimit.Name)
		}
	})

	t.Run("shadow mode", func(t *testing.T) {
		expect(t, "1st", d.ask(t, domain, 0, desc("shadow", "x")).Statuses[0], ok, 1, 0)
		// Over the limit, but in shadow mode: OK, with the denial's figures.
		resp := d.ask(t, domain, 0, desc("shadow", "x"))
		expect(t, "2nd", resp.Statuses[0], ok, 1, 0)
		if resp.OverallCode != ok || len(resp.ResponseHeadersToAdd) != 0 {
			t.Errorf("shadow: overall %v, headers %v; want OK and no headers", resp.OverallCode, resp.ResponseHeadersToAdd)
		}
	})

	t.Run("requests_per_unit 0", func(t *testing.T) {
		expect(t, "blocked", d.ask(t, domain, 0, desc("blocked", "x")).Statuses[0], over, 0, 0)
	})

	t.Run("limit override", func(t *testing.T) {
		o := desc("nokey", "x")
		o.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR}
		expect(t, "1st", d.ask(t, domain, 0, o).Statuses[0], ok, 2, 1)
		expect(t, "2nd", d.ask(t, domain, 0, o).Statuses[0], ok, 2, 0)
		expect(t, "3rd", d.ask(t, domain, 0, o).Statuses[0], over, 2, 0)
		o.Limit.Unit = typepb.RateLimitUnit_UNKNOWN
		_, err := d.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{o}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("override of unit UNKNOWN: %v, want InvalidArgument", err)
		}
	})

	t.Run("hits_addend", func(t *testing.T) {
		dd := desc("counted", "hits")
		// The request's hits_addend charges n.
		expect(t, "hits 4", d.ask(t, domain, 4, dd).Statuses[0], ok, 10, 6)
		expect(t, "hits 4 again", d.ask(t, domain, 4, dd).Statuses[0], ok, 10, 2)
		// Denied, and not counted (envoyproxy/ratelimit would count it).
		expect(t, "hits 4 denied", d.ask(t, domain, 4, dd).Statuses[0], over, 10, 2)
		expect(t, "hits 2 still fits", d.ask(t, domain, 2, dd).Statuses[0], ok, 10, 0)
		// A descriptor's own hits_addend wins over the request's; 0 only looks.
		look := desc("counted", "hits")
		look.HitsAddend = wrapperspb.UInt64(0)
		for range 2 {
			expect(t, "descriptor hits_addend 0", d.ask(t, domain, 5, look).Statuses[0], ok, 10, 0)
		}
		other := desc("counted", "other")
		other.HitsAddend = wrapperspb.UInt64(3)
		expect(t, "descriptor hits_addend 3", d.ask(t, domain, 9, other).Statuses[0], ok, 10, 7)
		lookOther := desc("counted", "other")
		lookOther.HitsAddend = wrapperspb.UInt64(0)
		expect(t, "descriptor hits_addend 0 with room", d.ask(t, domain, 9, lookOther).Statuses[0], ok, 10, 7)
		// is_negative_hits gives hits back.
		back := desc("counted", "other")
		back.HitsAddend, back.IsNegativeHits = wrapperspb.UInt64(2), true
		expect(t, "negative hits 2", d.ask(t, domain, 0, back).Statuses[0], ok, 10, 9)
	})

	t.Run("several descriptors", func(t *testing.T) {
		resp := d.ask(t, domain, 0, desc("key2", "multi"), desc("key7", "x"))
		if resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[1].Code != over {
			t.Errorf("one descriptor over: %v, want OVER_LIMIT overall, statuses OK and OVER_LIMIT", resp)
		}
	})

	t.Run("token bucket", func(t *testing.T) {
		// 1 token per hour, burst 5: a fresh key passes 5 at once, then
		// nothing for an hour (the Go rule's answer for this timeline).
		var got []uint32
		for range 7 {
			st := d.ask(t, domain, 0, desc("bucket", "b")).Statuses[0]
			if st.Code == ok {
				got = append(got, st.LimitRemaining)
			}
		}
		if !slices.Equal(got, []uint32{4, 3, 2, 1, 0}) {
			t.Errorf("token bucket admitted with remaining %v, want [4 3 2 1 0]", got)
		}
	})

	t.Run("unit_multiplier", func(t *testing.T) {
		st := d.ask(t, domain, 0, desc("multi", "m")).Statuses[0]
		expect(t, "multi", st, ok, 2, 1)
		if st.CurrentLimit.GetUnitMultiplier().GetValue() != 90 {
			t.Errorf("current_limit %v, want unit_multiplier 90", st.CurrentLimit)
		}
		// Windows of 90 minutes, aligned to multiples of 90 minutes.
		if r := st.DurationUntilReset.AsDuration(); r <= 0 || r > 90*time.Minute {
			t.Errorf("duration_until_reset %v, want in (0, 90m]", r)
		}
	})

	t.Run("also", func(t *testing.T) {
		// 5 per hour and 3 per day: the day's is the tightest.
		for i, want := range []struct {
			code      rlspb.RateLimitResponse_Code
			remaining uint32
		}{{ok, 2}, {ok, 1}, {ok, 0}, {over, 0}} {
			resp := d.ask(t, domain, 0, desc("combo", "c"))
			st := resp.Statuses[0]
			expect(t, fmt.Sprintf("combo #%d", i+1), st, want.code, 3, want.remaining)
			if st.CurrentLimit.Unit != rlspb.RateLimitResponse_RateLimit_DAY || st.DurationUntilReset.AsDuration() <= time.Hour {
				t.Errorf("combo #%d: %v, want the day's limit and reset", i+1, st)
			}
			if i == 0 && !strings.Contains(fmt.Sprint(resp.ResponseHeadersToAdd), `q=5;w=3600`) {
				t.Errorf("headers %v, want every member's policy", resp.ResponseHeadersToAdd)
			}
		}
		// is_negative_hits gives back to both limits: the day's has 1 again.
		back := desc("combo", "c")
		back.HitsAddend, back.IsNegativeHits = wrapperspb.UInt64(1), true
		expect(t, "combo refund", d.ask(t, domain, 0, back).Statuses[0], ok, 3, 1)
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []*rlspb.RateLimitRequest{
			{Descriptors: []*commonpb.RateLimitDescriptor{desc("key2", "x")}},
			{Domain: domain},
		} {
			if _, err := d.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.InvalidArgument {
				t.Errorf("ShouldRateLimit(%v): %v, want InvalidArgument", req, err)
			}
		}
	})
}

// TestSlidingLogNeverOverLimit: a sliding_window_log rule of 5 per second
// never admits more than 5 in any second, through the real service. The
// admissions' instants are only known to lie between a call's send and its
// answer, so the check counts, after each admission i, the admissions j
// surely within a second of it (answered-at_i <= sent_j and answered_j <
// sent_i + 1s). Bursts are sent at the end of one second and the start of
// the next, where a fixed window admits twice its limit.
func TestSlidingLogNeverOverLimit(t *testing.T) {
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	d := start(t, "-config", cfg, "-redis", redisAddr(t))
	type call struct{ sent, answered time.Time }
	var (
		mu       sync.Mutex
		admitted []call
	)
	fire := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				sent := time.Now()
				resp := d.ask(t, domain, 0, desc("slide", "user"))
				if resp.Statuses[0].Code == ok {
					mu.Lock()
					admitted = append(admitted, call{sent, time.Now()})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	for range 3 {
		// Late in a second, then early in the next.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1800 * time.Millisecond)))
		fire(8)
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
		fire(8)
	}
	if len(admitted) == 0 {
		t.Fatal("nothing admitted")
	}
	for _, a := range admitted {
		within := 0
		for _, b := range admitted {
			if !a.answered.After(b.sent) && b.answered.Before(a.sent.Add(time.Second)) {
				within++
			}
		}
		if 1+within > 5 {
			t.Fatalf("%d admissions within one second of the one sent at %v; the limit is 5", 1+within, a.sent)
		}
	}
	t.Logf("%d admitted", len(admitted))
}

// TestFleet: three fleetlimitd processes on one Redis enforce one limit:
// 30 per hour, hammered through all three at once, admits exactly 30.
func TestFleet(t *testing.T) {
	for _, target := range redisTargets() {
		t.Run(target.name, func(t *testing.T) {
			addr := needEnv(t, target.env)
			cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
			// A generous timeout: on a loaded machine a decision that times
			// out is made by the failure policy in each process (by design,
			// TestRedisDown), which is not what this test measures.
			var fleet []*daemon
			for range 3 {
				fleet = append(fleet, start(t, "-config", cfg, target.flag, addr, "-timeout", "5s"))
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for _, d := range fleet {
				for range 4 {
					wg.Go(func() {
						for range 10 {
							if d.ask(t, domain, 0, desc("fleet", "shared-user")).Statuses[0].Code == ok {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if got := admitted.Load(); got != 30 {
				t.Errorf("3 processes admitted %d of 120 for a limit of 30", got)
			}
			for i, d := range fleet {
				if n := d.logged("store could not decide; the failure policy did"); n > 0 {
					t.Errorf("process %d: the failure policy made decisions:\n%s", i, d.output())
				}
			}
		})
	}
}

// TestReload: a changed configuration is reloaded while requests keep
// being answered (none fails), and a bad one keeps the last good one.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	domain := freshDomain()
	cfg := filepath.Join(dir, "config.yaml")
	version := func(limit string) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + limit + "\n" +
			"  - key: steady\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n"
	}
	writeFile(t, cfg, version("1000"))
	d := start(t, "-config", cfg, "-redis", redisAddr(t))
	awayFromHourEdge()

	// Requests run throughout; every one must be answered.
	stop := make(chan struct{})
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := d.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{desc("user", "background")}})
				if err != nil {
					failed.Add(1)
				}
			}
		})
	}
	limitOf := func() uint32 {
		return d.ask(t, domain, 0, desc("user", "probe")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	waitLimit := func(want uint32) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for limitOf() != want {
			if time.Now().After(deadline) {
				t.Fatalf("limit never became %d:\n%s", want, d.output())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	remaining := func(kv ...string) uint32 { return d.ask(t, domain, 0, desc(kv...)).Statuses[0].LimitRemaining }
	remaining("steady", "s")
	remaining("user", "moved")
	remaining("user", "moved")

	writeFile(t, cfg, version("2000"))
	waitLimit(2000)
	d.waitLogged(t, "configuration reloaded", 1)
	// The unchanged rule kept its count; the changed one started afresh.
	if got := remaining("steady", "s"); got != 8 {
		t.Errorf("unchanged rule after a reload: remaining %d, want 8 (its count kept)", got)
	}
	if got := remaining("user", "moved"); got != 1999 {
		t.Errorf("changed rule after a reload: remaining %d, want 1999 (a fresh count)", got)
	}

	writeFile(t, cfg, version("-5")) // refused
	d.waitLogged(t, "configuration change refused; the last good configuration stays in force", 1)
	if got := limitOf(); got != 2000 {
		t.Errorf("after a refused reload the limit is %d, want the last good 2000", got)
	}
	if !strings.Contains(d.output(), "config.yaml:6: requests_per_unit must be an integer") {
		t.Errorf("the refusal does not name file and line:\n%s", d.output())
	}

	writeFile(t, cfg, version("3000"))
	waitLimit(3000)
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed during reloads", n)
	}
}

// TestStartRefused: fleetlimitd does not start on a bad configuration
// (naming file, line and reason) nor without Redis (start-up Ping).
func TestStartRefused(t *testing.T) {
	bad := filepath.Join("testdata", "bad", "bad_unit.yaml")
	out, err := exec.Command(fleetlimitd(t), "-config", bad, "-redis", "127.0.0.1:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad+":6: invalid rate limit unit 'foo'") {
		t.Errorf("bad config: %v\n%s\nwant a failure naming %s:6", err, out, bad)
	}
	// A port nothing listens on: the start-up Ping fails loudly.
	good := filepath.Join("testdata", "basic.yaml")
	out, err = exec.Command(fleetlimitd(t), "-config", good, "-redis", "127.0.0.1:1", "-ping-timeout", "2s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "redis is not answering (start-up ping of 127.0.0.1:1)") {
		t.Errorf("no Redis: %v\n%s\nwant a failed start-up ping", err, out)
	}
}

// TestOperations: gRPC health and reflection, /metrics with bounded
// labels, /healthcheck, and a graceful stop.
func TestOperations(t *testing.T) {
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	d := start(t, "-config", cfg, "-redis", redisAddr(t))
	ctx := context.Background()

	hc, err := healthpb.NewHealthClient(d.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v; want SERVING", hc, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(d.conn).ServerReflectionInfo(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	if !slices.Contains(services, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %v, want the rate limit service", services)
	}
	cancel() // an open stream would hold the graceful stop below

	d.ask(t, domain, 0, desc("key2", "secret-value-1"))
	d.ask(t, domain, 0, desc("key2", "secret-value-2"))
	body := get(t, "http://"+d.httpAddr+"/metrics")
	want := `fleetlimit_decisions_total{limiter="` + domain + `.key2",outcome="allowed"} 2`
	if !strings.Contains(body, want) || !regexp.MustCompile(`fleetlimitd_requests_total\{code="ok"\} [1-9]`).MatchString(body) {
		t.Errorf("/metrics lacks %s or fleetlimitd_requests_total:\n%s", want, body)
	}
	if strings.Contains(body, "secret-value") {
		t.Errorf("/metrics carries a descriptor's value")
	}
	// denial_cache: the first denial is the store's, the repeats the cache's.
	awayFromHourEdge()
	for range 5 {
		d.ask(t, domain, 0, desc("cached", "c"))
	}
	// leases of 10: of 20 requests, the key's first is decided exactly
	// (leases take hold on repeat traffic), the next two round trips take
	// leases of 10, and the 17 others spend from them.
	for range 20 {
		if st := d.ask(t, domain, 0, desc("leased", "l")).Statuses[0]; st.Code != ok {
			t.Fatalf("leased: %v, want OK", st)
		}
	}
	body = get(t, "http://"+d.httpAddr+"/metrics")
	for _, want := range []string{
		`fleetlimit_local_decisions_total{by="cache",limiter="` + domain + `.cached"} 3`,
		`fleetlimit_local_decisions_total{by="lease",limiter="` + domain + `.leased"} 17`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if got := get(t, "http://"+d.httpAddr+"/healthcheck"); got != "OK\n" {
		t.Errorf("/healthcheck %q, want OK", got)
	}

	d.stop(t)
	if d.logged("stopped") != 1 {
		t.Errorf("no clean stop:\n%s", d.output())
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRedisDown: while Redis cannot answer, every request is still answered,
// by the failure policy: local applies the rule in process (a fresh key
// passes its limit, then is OVER_LIMIT), closed denies.
func TestRedisDown(t *testing.T) {
	redisAddr(t) // the test needs a redis-server binary, as ./test.sh has
	addr, stopRedis := ownRedis(t)
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	local := start(t, "-config", cfg, "-redis", addr, "-timeout", "50ms")
	closed := start(t, "-config", cfg, "-redis", addr, "-timeout", "50ms", "-failure-policy", "closed")
	awayFromHourEdge()
	if st := local.ask(t, domain, 0, desc("key7", "before")).Statuses[0]; st.Code != ok {
		t.Fatalf("with Redis up: %v", st)
	}
	stopRedis()
	var got []rlspb.RateLimitResponse_Code
	for range 3 {
		got = append(got, local.ask(t, domain, 0, desc("key7", "during")).Statuses[0].Code)
	}
	if !slices.Equal(got, []rlspb.RateLimitResponse_Code{ok, ok, over}) {
		t.Errorf("failure policy local, limit 2: %v, want [OK OK OVER_LIMIT]", got)
	}
	if st := closed.ask(t, domain, 0, desc("key7", "during")).Statuses[0]; st.Code != over {
		t.Errorf("failure policy closed: %v, want OVER_LIMIT", st)
	}
	// A rule's own failure_policy (open) wins over -failure-policy.
	for _, d := range []*daemon{local, closed, local, closed} {
		if st := d.ask(t, domain, 0, desc("failopen", "during")).Statuses[0]; st.Code != ok {
			t.Errorf("rule with failure_policy open: %v, want OK", st)
		}
	}
	if local.logged("store could not decide; the failure policy did") == 0 {
		t.Errorf("degraded decisions were not logged:\n%s", local.output())
	}
}

// ownRedis starts a redis-server of the test's own on a free loopback port,
// and returns its address and a function that stops it (also called when the
// test ends).
func ownRedis(t *testing.T) (string, func()) {
	t.Helper()
	addr, p := ownRedisProcess(t)
	return addr, func() { _ = p.Kill() }
}

// ownRedisProcess is ownRedis, returning the server's process; args are
// added to redis-server's, "TLS" as the first makes the port a TLS one, and
// a first ending in ".conf" is the configuration file (a Sentinel's).
func ownRedisProcess(t *testing.T, args ...string) (string, *os.Process) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	ports := []string{"--port", port}
	if len(args) > 0 && args[0] == "TLS" {
		ports, args = []string{"--port", "0", "--tls-port", port}, args[1:]
	}
	var file []string
	if len(args) > 0 && strings.HasSuffix(args[0], ".conf") {
		file, args = args[:1], args[1:]
	}
	cmd := exec.Command("redis-server", slices.Concat(file, ports, []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args)...)
	if err := cmd.Start(); err != nil {
		t.Skipf("redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	})
	addr := "127.0.0.1:" + port
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if i == 500 {
			t.Fatalf("redis-server on %s never listened", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return addr, cmd.Process
}

// TestGracefulStop: a request in flight when SIGTERM arrives is answered
// before the process exits. Redis is paused (SIGSTOP), so the request waits
// in fleetlimitd for its -timeout; the test sends SIGTERM once
// fleetlimitd_requests_in_flight says it is there.
func TestGracefulStop(t *testing.T) {
	redisAddr(t)
	addr, redisProc := ownRedisProcess(t)
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	d := start(t, "-config", cfg, "-redis", addr, "-timeout", "3s")
	d.ask(t, domain, 0, desc("key2", "warm")) // connections made, scripts loaded
	if err := redisProc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer redisProc.Signal(syscall.SIGCONT)
	answered := make(chan error, 1)
	go func() {
		_, err := d.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{desc("key2", "in-flight")}})
		answered <- err
	}()
	for !strings.Contains(get(t, "http://"+d.httpAddr+"/metrics"), "fleetlimitd_requests_in_flight 1") {
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Errorf("the request in flight at SIGTERM: %v, want an answer", err)
	}
	<-d.exit
	if d.err != nil || d.logged("stopped") != 1 {
		t.Errorf("exit %v; want a clean stop:\n%s", d.err, d.output())
	}
}

// TestMemoryStore: with -memory, fleetlimitd needs no Redis and limits on
// its own.
func TestMemoryStore(t *testing.T) {
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	d := start(t, "-config", cfg, "-memory")
	awayFromHourEdge()
	var got []rlspb.RateLimitResponse_Code
	for range 3 {
		got = append(got, d.ask(t, domain, 0, desc("key7", "m")).Statuses[0].Code)
	}
	if !slices.Equal(got, []rlspb.RateLimitResponse_Code{ok, ok, over}) {
		t.Errorf("-memory, limit 2: %v, want [OK OK OVER_LIMIT]", got)
	}
}

// TestGlobalShadow: with -shadow every answer is OK overall, and the
// statuses still say which descriptor is over its limit.
func TestGlobalShadow(t *testing.T) {
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	d := start(t, "-config", cfg, "-redis", redisAddr(t), "-shadow")
	awayFromHourEdge()
	var overall, statuses []rlspb.RateLimitResponse_Code
	for range 3 {
		resp := d.ask(t, domain, 0, desc("key7", "g"))
		overall, statuses = append(overall, resp.OverallCode), append(statuses, resp.Statuses[0].Code)
	}
	if !slices.Equal(overall, []rlspb.RateLimitResponse_Code{ok, ok, ok}) || !slices.Equal(statuses, []rlspb.RateLimitResponse_Code{ok, ok, over}) {
		t.Errorf("-shadow, limit 2: overall %v, statuses %v; want all OK overall, statuses [OK OK OVER_LIMIT]", overall, statuses)
	}
}

// TestRedisTLSAndPassword: fleetlimitd reaches a redis-server that takes
// only TLS and a password, with -redis-tls, -redis-tls-ca and
// FLEETLIMITD_REDIS_PASSWORD; without TLS, or with a wrong password, the
// start-up Ping fails.
func TestRedisTLSAndPassword(t *testing.T) {
	redisAddr(t)
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	addr, _ := ownRedisProcess(t, "TLS", "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca,
		"--tls-auth-clients", "no", "--requirepass", "s3cret")
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")

	t.Setenv("FLEETLIMITD_REDIS_PASSWORD", "s3cret")
	for _, args := range [][]string{
		{"-redis", addr},               // no TLS
		{"-redis", addr, "-redis-tls"}, // TLS, but the CA is not trusted
	} {
		out, err := exec.Command(fleetlimitd(t), append([]string{"-config", cfg, "-ping-timeout", "2s"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "redis is not answering") {
			t.Errorf("%v: %v\n%s\nwant a failed start-up ping", args, err, out)
		}
	}
	t.Setenv("FLEETLIMITD_REDIS_PASSWORD", "wrong")
	out, err := exec.Command(fleetlimitd(t), "-config", cfg, "-ping-timeout", "2s", "-redis", addr, "-redis-tls", "-redis-tls-ca", ca).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "redis is not answering") {
		t.Errorf("wrong password: %v\n%s\nwant a failed start-up ping", err, out)
	}

	t.Setenv("FLEETLIMITD_REDIS_PASSWORD", "s3cret")
	d := start(t, "-config", cfg, "-redis", addr, "-redis-tls", "-redis-tls-ca", ca)
	awayFromHourEdge()
	if st := d.ask(t, domain, 0, desc("key7", "tls")).Statuses[0]; st.Code != ok || st.LimitRemaining != 1 {
		t.Errorf("over TLS: %v, want OK with remaining 1", st)
	}
	if d.logged("store could not decide; the failure policy did") > 0 {
		t.Errorf("decisions over TLS were degraded:\n%s", d.output())
	}
}

// writeCerts writes a CA and a certificate for 127.0.0.1 it signed, as PEM
// files in dir.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleetlimitd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", srvDER), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// TestSentinel: with -sentinel-master, fleetlimitd finds Redis through a
// Sentinel.
func TestSentinel(t *testing.T) {
	redisAddr(t)
	master, _ := ownRedisProcess(t)
	host, port, _ := net.SplitHostPort(master)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte("sentinel monitor fleet "+host+" "+port+" 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel, _ := ownRedisProcess(t, conf, "--sentinel")
	cfg, domain := writeConfig(t, t.TempDir(), "basic.yaml")
	d := start(t, "-config", cfg, "-sentinel-master", "fleet", "-redis", sentinel)
	awayFromHourEdge()
	if st := d.ask(t, domain, 0, desc("key7", "sentinel")).Statuses[0]; st.Code != ok || st.LimitRemaining != 1 {
		t.Errorf("through a Sentinel: %v, want OK with remaining 1", st)
	}
	if d.logged("store could not decide; the failure policy did") > 0 {
		t.Errorf("decisions through the Sentinel were degraded:\n%s", d.output())
	}
}
