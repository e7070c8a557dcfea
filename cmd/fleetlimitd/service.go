package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/ratelimitheader"
	"github.com/fleetlimit/fleetlimit/store"
)

// keyPrefix starts every Redis key fleetlimitd writes.
const keyPrefix = "fleetlimitd:"

// maxParallel bounds the decisions one request has in flight at once, so
// that a request of many descriptors cannot start a goroutine for each.
const maxParallel = 16

// maxOverrides bounds the limiters made for the limit overrides requests
// carry (one per domain, descriptor keys and limit): Envoy's overrides come
// from its route configuration, a bounded set.
const maxOverrides = 1024

// bound is a rule with what serves it: its limiter (nil for an unlimited
// rule, and for requests_per_unit 0, which denies everything), the fields of
// its RateLimit headers and the current_limit it reports.
type bound struct {
	*rule
	limiter *fleetlimit.Limiter
	// maxCost is the most the rule admits in one request
	// (algorithm.MaxCost: its limit, at most algorithm.MaxLogCost for a
	// sliding log): more hits can never pass, and get no Retry-After. A
	// rule's limiter has no tiers, so it is every key's.
	maxCost int64
	policy  ratelimitheader.Policy
	current *rlspb.RateLimitResponse_RateLimit
	members []*rlspb.RateLimitResponse_RateLimit // current_limit of each also
}

// tightest is the current_limit and reset of a decision: for a rule with
// also, those of the member whose figures the Result carries (the tightest,
// see algorithm.All), else the rule's.
func (b *bound) tightest(res fleetlimit.Result) (*rlspb.RateLimitResponse_RateLimit, time.Duration) {
	for i, m := range res.Limits() {
		if m.Limit == res.Limit && m.Remaining == res.Remaining {
			if i > 0 {
				return b.members[i-1], m.ResetAfter
			}
			return b.current, m.ResetAfter
		}
	}
	return b.current, res.ResetAfter
}

// generation is one loaded configuration with its rules bound: what a
// request reads, through one atomic load, from start to answer.
type generation struct {
	cfg   *Config
	bound map[*rule]*bound
	hash  [sha256.Size]byte // of the files' names and contents
}

// limiters builds the Limiters of rules, all over one store with the same
// options (one circuit breaker, one observer, one timeout), and by default
// the same failure policy.
type limiters struct {
	store  store.Store
	opts   []fleetlimit.Option
	policy fleetlimit.FailurePolicy
	// fallback, if not nil, is the WithFallback of rules whose policy is
	// FailLocal.
	fallback fleetlimit.Option
}

// escape makes s safe inside a key prefix: '%', ':', '{' and '}' are
// percent-encoded (one-to-one), so that components cannot run into each
// other and no brace moves a key's Redis Cluster slot.
func escape(s string) string {
	if !strings.ContainsAny(s, "%:{}") {
		return s
	}
	return strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D").Replace(s)
}

// signature names what a rule decides (for each of its limits the
// algorithm, limit, window and burst), as part of its key prefix: a rule
// whose parameters change on reload starts on keys of its own, and one that
// does not keeps its keys and counts.
func signature(r *rule) string {
	var sig strings.Builder
	for i, l := range append([]limitSpec{r.limitSpec}, r.also...) {
		if i > 0 {
			sig.WriteByte('+')
		}
		fmt.Fprintf(&sig, "%s:%d:%ds", l.algorithm, l.requestsPerUnit, int64(l.window()/time.Second))
		if l.algorithm == algoTokenBucket {
			fmt.Fprintf(&sig, ":%d", max(l.burst, int64(l.requestsPerUnit)))
		}
	}
	return sig.String()
}

// currentLimit is what a status reports of a limit.
func currentLimit(name string, l limitSpec) *rlspb.RateLimitResponse_RateLimit {
	c := &rlspb.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: l.requestsPerUnit, Unit: l.unit}
	if l.multiplier > 0 {
		c.UnitMultiplier = wrapperspb.UInt32(l.multiplier)
	}
	return c
}

// bind builds the limiter of r. Its name is the domain and the rule's path
// (as envoyproxy/ratelimit names its stats), the same in every fleetlimitd
// of a fleet, so that they share the rule's counters.
func (ls *limiters) bind(r *rule) (*bound, error) {
	b := &bound{rule: r}
	if r.unlimited {
		return b, nil
	}
	b.current = currentLimit(r.name, r.limitSpec)
	for _, a := range r.also {
		b.members = append(b.members, currentLimit(r.name, a))
	}
	s := r.strategy()
	if s == nil {
		return b, nil
	}
	name := r.domain + "." + r.path
	prefix := keyPrefix + escape(r.domain) + ":" + escape(r.path) + ":" + signature(r) + ":"
	opts := append([]fleetlimit.Option{fleetlimit.WithName(name), fleetlimit.WithKeyPrefix(prefix)}, ls.opts...)
	policy := ls.policy
	if r.failurePolicy != "" {
		policy, _ = parsePolicy(r.failurePolicy) // checked by the parser
	}
	opts = append(opts, fleetlimit.WithFailurePolicy(policy))
	if policy == fleetlimit.FailLocal && ls.fallback != nil {
		opts = append(opts, ls.fallback)
	}
	if r.shadow {
		opts = append(opts, fleetlimit.WithShadow())
	}
	if r.denialCache > 0 {
		opts = append(opts, fleetlimit.WithDenialCache(r.denialCache))
	}
	if r.leaseSize > 0 {
		opts = append(opts, fleetlimit.WithLeases(r.leaseSize, r.leaseMaxAge))
	}
	l, err := fleetlimit.New(s, ls.store, opts...)
	if err != nil {
		return nil, &ConfigError{File: r.file, Line: r.line, Reason: err.Error()}
	}
	b.limiter, b.maxCost = l, algorithm.MaxCost(s)
	policyName := r.name
	if policyName == "" {
		policyName = name
	}
	b.policy = ratelimitheader.NewPolicy(policyName, s.Limit(), s.Window())
	if len(r.also) > 0 {
		b.policy = ratelimitheader.ForLimiter(l) // one policy per member
	}
	return b, nil
}

// bindAll binds every rule of cfg.
func (ls *limiters) bindAll(cfg *Config) (map[*rule]*bound, error) {
	m := make(map[*rule]*bound, len(cfg.rules))
	var errs []error
	for _, r := range cfg.rules {
		b, err := ls.bind(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m[r] = b
	}
	return m, errors.Join(errs...)
}

// close hands back the leases of gen's limiters (see fleetlimit.Limiter.Close),
// once a newer generation replaced it or the service stops; a request still
// answered with gen takes a new lease if it needs one.
func (gen *generation) close(log *slog.Logger) {
	for _, b := range gen.bound {
		if b.limiter != nil && b.leaseSize > 0 {
			if err := b.limiter.Close(); err != nil {
				log.Warn("leases not handed back; their units return as the keys refill", "rule", b.domain+"."+b.path, "err", err)
			}
		}
	}
}

// service answers envoy.service.ratelimit.v3.RateLimitService. It is safe for
// concurrent use; a reload swaps its generation while requests are answered.
type service struct {
	rlspb.UnimplementedRateLimitServiceServer

	gen      atomic.Pointer[generation]
	limiters *limiters
	headers  bool // add the draft RateLimit headers to answers
	shadow   bool // global shadow mode: overall_code is always OK
	log      *slog.Logger
	metrics  *metrics
	degraded degradedLog

	mu        sync.Mutex
	overrides map[overrideKey]*bound
}

// overrideKey identifies the limiter of a request's limit override.
type overrideKey struct {
	domain, keys    string
	requestsPerUnit uint32
	unit            rlspb.RateLimitResponse_RateLimit_Unit
	multiplier      uint32
}

// override returns the limiter of a request descriptor's limit override: a
// fixed window of the override's limit and unit, as envoyproxy/ratelimit
// applies it (never in shadow mode, and replacing nothing).
func (s *service) override(domain string, keys []string, o *commonpb.RateLimitDescriptor_RateLimitOverride) (*bound, error) {
	unit, ok := parseUnit(typepb.RateLimitUnit_name[int32(o.GetUnit())])
	if !ok {
		return nil, fmt.Errorf("limit override has unit %v", o.GetUnit())
	}
	k := overrideKey{domain: domain, keys: strings.Join(keys, "."), requestsPerUnit: o.GetRequestsPerUnit(), unit: unit, multiplier: o.GetUnitMultiplier().GetValue()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.overrides[k]; b != nil {
		return b, nil
	}
	if len(s.overrides) >= maxOverrides {
		return nil, fmt.Errorf("more than %d distinct limit overrides", maxOverrides)
	}
	r := &rule{
		domain: domain, path: "override." + k.keys, file: "request",
		limitSpec: limitSpec{algorithm: algoFixedWindow, requestsPerUnit: k.requestsPerUnit, unit: unit, multiplier: k.multiplier},
	}
	if w := r.window(); w > algorithm.MaxWindow || w/time.Duration(max(1, r.multiplier)) != unitDuration(unit) {
		return nil, fmt.Errorf("limit override's window is longer than %v", algorithm.MaxWindow)
	}
	b, err := s.limiters.bind(r)
	if err != nil {
		return nil, err
	}
	if s.overrides == nil {
		s.overrides = map[overrideKey]*bound{}
	}
	s.overrides[k] = b
	return b, nil
}

// item is one request descriptor on its way to an answer.
type item struct {
	b      *bound
	key    string
	hits   uint64
	refund bool // is_negative_hits: give hits back
	st     *rlspb.RateLimitResponse_DescriptorStatus
	res    fleetlimit.Result
	err    error
}

// ShouldRateLimit decides every descriptor of req, as envoyproxy/ratelimit
// does: each descriptor's rule is found in the configuration (or is its
// limit override), rules named in another matched rule's replaces are
// dropped, and each remaining rule's limiter charges the descriptor's hits
// (its hits_addend, else the request's, where 0 means 1) to the key made of
// the descriptor's values. The answer is OVER_LIMIT when any descriptor is.
func (s *service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	s.metrics.inFlight.Inc()
	defer s.metrics.inFlight.Dec()
	resp, err := s.shouldRateLimit(ctx, req)
	s.metrics.answered(resp, err)
	return resp, err
}

func (s *service) shouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	gen := s.gen.Load()
	items := make([]item, len(req.Descriptors))
	replacing := map[string]bool{}
	for i, d := range req.Descriptors {
		it := &items[i]
		keys := make([]string, len(d.GetEntries()))
		values := make([]string, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			keys[j], values[j] = e.GetKey(), e.GetValue()
		}
		var shared []string
		if d.GetLimit() != nil {
			b, err := s.override(req.Domain, keys, d.GetLimit())
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			it.b = b
		} else if r, sh := gen.cfg.match(req.Domain, keys, values); r != nil {
			it.b, shared = gen.bound[r], sh
			for _, name := range r.replaces {
				replacing[name] = true
			}
		}
		it.key = counterKey(values, shared)
		it.hits = uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			it.hits = h.GetValue()
		}
		it.refund = d.GetIsNegativeHits()
	}
	for i := range items {
		if b := items[i].b; b != nil && b.name != "" && replacing[b.name] {
			items[i].b = nil
		}
	}

	// Decide: one store round trip per limited descriptor; several run
	// concurrently, up to maxParallel at a time (the Redis store pipelines
	// them), and a single one on this goroutine.
	var limited []*item
	for i := range items {
		it := &items[i]
		switch {
		case it.b == nil:
			it.st = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		case it.b.unlimited:
			it.st = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case it.b.limiter == nil:
			it.st = denyAll(it.b, it.hits, time.Now())
		default:
			limited = append(limited, it)
		}
	}
	if len(limited) == 1 {
		limited[0].res, limited[0].err = s.decide(ctx, limited[0])
	} else if len(limited) > 1 {
		var wg sync.WaitGroup
		sem := make(chan struct{}, maxParallel)
		for _, it := range limited {
			sem <- struct{}{}
			wg.Go(func() {
				it.res, it.err = s.decide(ctx, it)
				<-sem
			})
		}
		wg.Wait()
	}
	// A caller gone (or past its deadline, even while ctx.Err still lags
	// it: the limiters denied it with an error wrapping
	// context.DeadlineExceeded) is answered with its context's error.
	if err := ctxdone.Err(ctx); err != nil {
		return nil, status.FromContextError(err).Err()
	}

	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items))}
	var policies, limits []string
	retryAfter, canRetry := int64(0), true
	for i := range items {
		it := &items[i]
		if it.st == nil {
			if err := s.judge(it); err != nil {
				return nil, err
			}
			if s.headers && !it.b.shadow {
				if it.err != nil {
					policies = append(policies, it.b.policy.String())
				} else {
					f := it.b.policy.Fields(it.res, it.res.Allowed || int64(min(it.hits, algorithm.MaxInt)) <= it.b.maxCost)
					policies, limits = append(policies, f.Policy), append(limits, f.RateLimit)
					if !it.res.Allowed {
						retryAfter = max(retryAfter, f.RetryAfter)
						canRetry = canRetry && f.RetryAfter > 0
					}
				}
			}
		}
		resp.Statuses[i] = it.st
		if it.st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if len(policies) > 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: "RateLimit-Policy", Value: strings.Join(policies, ", ")})
	}
	if len(limits) > 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: "RateLimit", Value: strings.Join(limits, ", ")})
	}
	if s.shadow {
		resp.OverallCode = rlspb.RateLimitResponse_OK
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && canRetry && retryAfter > 0 {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corepb.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(retryAfter, 10)})
	}
	return resp, nil
}

// decide asks the limiter of it: a refund gives hits back, hits 0 only looks
// (Peek, recording nothing, as envoyproxy/ratelimit's hits_addend 0 adds
// nothing), and any other hits are charged. A cost beyond what AllowN
// accepts cannot pass any limit: the most it accepts is asked instead.
func (s *service) decide(ctx context.Context, it *item) (fleetlimit.Result, error) {
	l := it.b.limiter
	n := int64(min(it.hits, algorithm.MaxInt))
	switch {
	case it.refund && n > 0:
		return l.Refund(ctx, it.key, n)
	case n == 0 || it.refund:
		return l.Peek(ctx, it.key, 1) // judge reads it as a look
	default:
		return l.AllowN(ctx, it.key, n)
	}
}

// judge turns the decision of it into its status, or returns the error to answer
// the whole request with. A store that could not decide is not an error:
// the failure policy decided (by default in process, at the rule's limit),
// and that is logged.
func (s *service) judge(it *item) error {
	res, err := it.res, it.err
	switch {
	case err == nil:
	case errors.Is(err, fleetlimit.ErrStoreUnavailable):
		s.degraded.log(s.log, it.b.domain+"."+it.b.path, res.Allowed, err)
	case errors.Is(err, errors.ErrUnsupported):
		return status.Errorf(codes.Unimplemented, "%s.%s: %v", it.b.domain, it.b.path, err)
	default:
		return status.Errorf(codes.Internal, "%s.%s: %v", it.b.domain, it.b.path, err)
	}
	current, reset := it.b.tightest(res)
	if it.refund {
		res.Allowed = true // a refund is never over the limit, even one lost
	}
	if it.hits == 0 {
		// A look is never over the limit. Peek reported what admitting 1
		// would leave: looking leaves 1 more.
		if res.Allowed {
			res.Remaining++
		}
		res.Allowed = true
	}
	code := rlspb.RateLimitResponse_OK
	if !res.Allowed {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	it.st = &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       current,
		LimitRemaining:     uint32(min(res.Remaining, math.MaxUint32)),
		DurationUntilReset: durationpb.New(time.Duration(ratelimitheader.Seconds(reset)) * time.Second),
	}
	return nil
}

// denyAll answers a rule of requests_per_unit 0, which admits nothing (as in
// envoyproxy/ratelimit): OVER_LIMIT for any hits above 0 (OK in shadow
// mode), with the time to the end of the aligned window on this host's
// clock.
func denyAll(b *bound, hits uint64, now time.Time) *rlspb.RateLimitResponse_DescriptorStatus {
	w := int64(b.window() / time.Second)
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               rlspb.RateLimitResponse_OK,
		CurrentLimit:       b.current,
		DurationUntilReset: durationpb.New(time.Duration(w-now.Unix()%w) * time.Second),
	}
	if hits > 0 && !b.shadow {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return st
}

// counterKey is the key a descriptor is counted under within its rule: its
// entries' values (or, for an entry matched by a share_threshold wildcard,
// the pattern), escaped and joined by '|', one-to-one for the rule's fixed
// number of entries. A key longer than store.MaxKeyLen is counted under its
// SHA-256 instead.
func counterKey(values, shared []string) string {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte('|')
		}
		if i < len(shared) && shared[i] != "" {
			v = shared[i]
		}
		b.WriteString(strings.NewReplacer("%", "%25", "|", "%7C").Replace(v))
	}
	key := b.String()
	switch {
	case key == "":
		return "%00" // one empty value; no escaped value is "%00"
	case len(key) > store.MaxKeyLen:
		sum := sha256.Sum256([]byte(key))
		return "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return key
}

// degradedLog logs decisions the store could not make at most once a
// second, with how many went unlogged since: an outage must show in the log
// without flooding it (promobserver counts every one). It is safe for
// concurrent use; its zero value is ready.
type degradedLog struct {
	next       atomic.Int64 // Unix ns before which nothing is logged
	suppressed atomic.Int64
}

func (d *degradedLog) log(log *slog.Logger, rule string, allowed bool, err error) {
	now := time.Now().UnixNano()
	next := d.next.Load()
	if now < next || !d.next.CompareAndSwap(next, now+int64(time.Second)) {
		d.suppressed.Add(1)
		return
	}
	log.Warn("store could not decide; the failure policy did", "rule", rule, "allowed", allowed, "err", err,
		"unlogged_since_last", d.suppressed.Swap(0))
}
