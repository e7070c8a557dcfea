package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// newTestService serves the configuration yaml in process, over a memory
// store.
func newTestService(t *testing.T, yaml string) *service {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mem := store.NewMemory()
	t.Cleanup(func() { mem.Close() })
	svc := &service{limiters: &limiters{store: mem}, headers: true, log: slog.New(slog.DiscardHandler), metrics: m}
	gen, err := svc.build(map[string][]byte{"config.yaml": []byte(yaml)}, [32]byte{})
	if err != nil {
		t.Fatal(err)
	}
	svc.install(gen)
	return svc
}

// TestCallerGone: a caller whose context is done is answered with its
// context's error, never admitted.
func TestCallerGone(t *testing.T) {
	svc := newTestService(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{desc("k", "v")}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := svc.ShouldRateLimit(ctx, req)
	if status.Code(err) != codes.Canceled || resp != nil {
		t.Errorf("cancelled caller: %v, %v; want Canceled and no answer", resp, err)
	}
	resp, err = svc.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.Statuses[0].LimitRemaining != 4 {
		t.Errorf("next caller: %v, %v; want remaining 4 (the cancelled call charged nothing)", resp, err)
	}
}

// passedCtx is a context whose deadline has passed while its Err is still
// nil, as a context's is until its timer has run.
type passedCtx struct{ context.Context }

func (passedCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Microsecond), true }

// TestCallerPastDeadline: a caller whose deadline has passed is answered
// DeadlineExceeded, even before its context's Err says so (the limiter
// denies it with an error wrapping context.DeadlineExceeded), not
// Internal; nothing is charged.
func TestCallerPastDeadline(t *testing.T) {
	svc := newTestService(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{desc("k", "v")}}
	resp, err := svc.ShouldRateLimit(passedCtx{context.Background()}, req)
	if status.Code(err) != codes.DeadlineExceeded || resp != nil {
		t.Errorf("caller past its deadline: %v, %v; want DeadlineExceeded and no answer", resp, err)
	}
	resp, err = svc.ShouldRateLimit(context.Background(), req)
	if err != nil || resp.Statuses[0].LimitRemaining != 4 {
		t.Errorf("next caller: %v, %v; want remaining 4 (the late call charged nothing)", resp, err)
	}
}

// TestHitsAboveMaxLogCost: hits above algorithm.MaxLogCost on a sliding
// log can never pass, under any limit: OVER_LIMIT with no Retry-After, and
// RateLimit's t the reset, not a retry in 60 s; nothing is charged. Hits at
// the cap pass.
func TestHitsAboveMaxLogCost(t *testing.T) {
	svc := newTestService(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 20000, algorithm: sliding_window_log}\n")
	ask := func(hits uint32) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", HitsAddend: hits,
			Descriptors: []*commonpb.RateLimitDescriptor{desc("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := ask(algorithm.MaxLogCost + 1)
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || headers["Retry-After"] != "" || headers["RateLimit"] != `"d.k";r=20000;t=0` {
		t.Errorf("hits 10001 of 20000 per minute: %v, headers %v; want OVER_LIMIT, no Retry-After, RateLimit t=0 (the reset)", resp.OverallCode, headers)
	}
	if resp := ask(algorithm.MaxLogCost); resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 10000 {
		t.Errorf("hits 10000: %v; want OK with 10000 left (the refused hits charged nothing)", resp)
	}
}

// TestDegradedLog: during an outage the log gets at most one record a
// second, and every degraded decision is either logged or counted in the
// next record's unlogged_since_last.
func TestDegradedLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	var d degradedLog
	began := time.Now()
	const calls = 1000
	for range calls {
		d.log(log, "d.k", true, errors.New("store down"))
	}
	elapsed := time.Since(began)
	records, unlogged := 0, int64(0)
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec struct {
			Unlogged int64 `json:"unlogged_since_last"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		records++
		unlogged += rec.Unlogged
	}
	if max := 1 + int(elapsed/time.Second); records < 1 || records > max {
		t.Errorf("%d records for %d degraded decisions in %v, want 1 to %d", records, calls, elapsed, max)
	}
	if got := int64(records) + unlogged + d.suppressed.Load(); got != calls {
		t.Errorf("logged %d + unlogged %d + pending %d = %d, want %d", records, unlogged, d.suppressed.Load(), got, calls)
	}
}
