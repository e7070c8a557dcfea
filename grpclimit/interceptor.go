package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
	"github.com/fleetlimit/fleetlimit/ratelimitheader"
	"github.com/fleetlimit/fleetlimit/store"
)

// Response metadata keys the interceptors send: the IETF draft's RateLimit
// and RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-10),
// lower case as gRPC metadata keys are. Their values are those
// httplimit sends (see package ratelimitheader).
const (
	MetadataRateLimitPolicy = "ratelimit-policy"
	MetadataRateLimit       = "ratelimit"
)

// CostFunc says how much a call costs: AllowN's n. req is the request
// message of a unary call, and nil for a stream (charged when it opens,
// before any message). It must return at least 1; an error answers
// codes.InvalidArgument.
type CostFunc func(ctx context.Context, fullMethod string, req any) (int64, error)

// Option configures the interceptors.
type Option interface {
	apply(i *Interceptor, errs *[]error)
}

type option func(*Interceptor, *[]error)

func (f option) apply(i *Interceptor, errs *[]error) { f(i, errs) }

// ForMethods limits only the calls of the given full methods
// ("/package.Service/Method"); other calls pass through this interceptor
// unlimited. Default: every method. Per-method limits are one interceptor
// per limiter, chained, each with its methods.
func ForMethods(fullMethods ...string) Option {
	return option(func(i *Interceptor, errs *[]error) {
		if len(fullMethods) == 0 {
			*errs = append(*errs, errors.New("ForMethods without methods"))
		}
		i.methods = make(map[string]bool, len(fullMethods))
		for _, m := range fullMethods {
			i.methods[m] = true
		}
	})
}

// WithCost charges each call cost(...) instead of 1. A call costing more
// than the limit, or than algorithm.MaxLogCost for a sliding log
// (algorithm.MaxCost of the key's strategy), can never pass:
// codes.ResourceExhausted without RetryInfo. A cost below 1 is the cost function's bug: codes.Internal.
func WithCost(cost CostFunc) Option {
	return option(func(i *Interceptor, errs *[]error) {
		if cost == nil {
			*errs = append(*errs, errors.New("nil CostFunc"))
		}
		i.cost = cost
	})
}

// WithKeyErrorPassThrough lets a call whose key cannot be found through to
// the handler, unlimited and without rate-limit metadata, instead of
// answering codes.InvalidArgument (the default). Use it only where every
// client can be identified in practice: otherwise leaving the key out is a
// way around the limit.
func WithKeyErrorPassThrough() Option {
	return option(func(i *Interceptor, _ *[]error) { i.passOnKeyError = true })
}

// WithShadowMetadata sends the rate-limit metadata of a shadow limiter
// (fleetlimit.WithShadow) as if it enforced its limit: a shadow admission
// as an admission, with the denial's remaining quota. Default: off, so that
// clients are not told of a limit that is not in force. Limiters that are
// not in shadow mode always send it.
func WithShadowMetadata(on bool) Option {
	return option(func(i *Interceptor, _ *[]error) { i.shadowMetadata = on })
}

// Interceptor limits the calls of a gRPC server through one limiter: its
// Unary and Stream methods are grpc.UnaryServerInterceptor and
// grpc.StreamServerInterceptor. It is safe for concurrent use.
type Interceptor struct {
	l              *fleetlimit.Limiter
	key            KeyFunc
	cost           CostFunc
	methods        map[string]bool // nil: every method
	passOnKeyError bool
	shadowMetadata bool
	settle         SettleFunc // WithSettledCost: Reserve, and settle once the handler returns (settle.go)
	// adapter is what New derived from l: its policy, whether to send
	// rate-limit metadata (Headers: not a shadow limiter, or
	// shadowMetadata), and whether l is a concurrency limit (Holds:
	// Acquire, and hold the permit while the handler runs).
	adapter ratelimitheader.Adapter
}

// New returns the interceptors that charge every call to the client key
// names, through l, before the handler runs. It returns an error wrapping
// fleetlimit.ErrInvalidConfig for a nil limiter or KeyFunc or an invalid
// option.
//
// Answers:
//   - admitted (a shadow admission included): the handler runs; the
//     response metadata carries ratelimit-policy and ratelimit;
//   - denied: codes.ResourceExhausted, with a google.rpc.RetryInfo detail
//     whose retry_delay is the Result's RetryAfter, exactly, and the same
//     metadata (ratelimit's t in whole seconds, rounded up);
//   - cost above the limit, or above algorithm.MaxLogCost for a sliding
//     log (WithCost): codes.ResourceExhausted with no RetryInfo: waiting
//     will not help;
//   - store unavailable: the decision is degraded (see Limiter.AllowN). If
//     it admits (FailOpen, or the fallback), the handler runs; if it denies
//     (FailClosed, or the fallback), codes.Unavailable with RetryInfo: the
//     client did nothing wrong. Only ratelimit-policy is sent: the
//     remaining quota is unknown;
//   - the caller is gone (the call's context is done: cancelled by the
//     client, or its deadline passed, even before ctx.Err says so):
//     codes.Canceled or codes.DeadlineExceeded, and the handler does not
//     run, shadow mode or not;
//   - the key cannot be found (a KeyFunc error, or an empty key):
//     codes.InvalidArgument, or the handler runs with
//     WithKeyErrorPassThrough. A key longer than store.MaxKeyLen is limited
//     under its SHA-256, as in httplimit;
//   - the cost cannot be found (a CostFunc error): codes.InvalidArgument;
//     a cost below 1, or a limiter misconfigured: codes.Internal.
//
// A stream is charged once, when it opens, before the handler runs: the
// messages it carries are not charged.
//
// When l's strategy is a concurrency limit (algorithm.Concurrency, alone
// or in algorithm.All), each call instead holds a permit
// (Limiter.Acquire) for its handler's whole run — a unary call's, or a
// stream's whole life — given back when the handler returns or panics; a
// denial is the same ResourceExhausted with RetryInfo (the time until the
// earliest held permit expires, an upper bound), and WithCost is refused.
func New(l *fleetlimit.Limiter, key KeyFunc, opts ...Option) (*Interceptor, error) {
	i := &Interceptor{l: l, key: key}
	errs := ratelimitheader.Apply(i, opts, Option.apply)
	var err error
	i.adapter, err = ratelimitheader.NewAdapter(ratelimitheader.AdapterConfig{Name: "grpclimit", Unit: "call", Limiter: l, HasKey: key != nil,
		ShadowHeaders: i.shadowMetadata, HasCost: i.cost != nil, HasSettledCost: i.settle != nil, Errs: errs})
	if err != nil {
		return nil, err
	}
	return i, nil
}

// UnaryServerInterceptor is New(l, key, opts...).Unary. It panics if l or
// key is nil or an option is invalid: a programming mistake found at
// start-up. Use New to get the error instead.
func UnaryServerInterceptor(l *fleetlimit.Limiter, key KeyFunc, opts ...Option) grpc.UnaryServerInterceptor {
	return mustNew(l, key, opts).Unary
}

// StreamServerInterceptor is New(l, key, opts...).Stream. It panics as
// UnaryServerInterceptor does.
func StreamServerInterceptor(l *fleetlimit.Limiter, key KeyFunc, opts ...Option) grpc.StreamServerInterceptor {
	return mustNew(l, key, opts).Stream
}

func mustNew(l *fleetlimit.Limiter, key KeyFunc, opts []Option) *Interceptor {
	i, err := New(l, key, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// Unary is a grpc.UnaryServerInterceptor: it decides the call, then runs
// handler if admitted.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	var h held
	defer release(ctx, &h.permit) // after the handler returns or panics
	if err := i.admit(ctx, info.FullMethod, req, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }, &h); err != nil {
		return nil, err
	}
	if i.settle == nil {
		return handler(ctx, req)
	}
	ts := &trailerStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	if ts.ServerTransportStream != nil {
		ctx = grpc.NewContextWithServerTransportStream(ctx, ts)
	}
	defer func() { i.settleCall(ctx, info.FullMethod, h.reservation, ts.trailer, err) }()
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor: it decides the stream when it
// opens, then runs handler if admitted.
func (i *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	var h held
	defer release(ss.Context(), &h.permit) // when the stream's handler returns or panics
	if err := i.admit(ss.Context(), info.FullMethod, nil, ss.SetHeader, &h); err != nil {
		return err
	}
	if i.settle == nil {
		return handler(srv, ss)
	}
	ts := &trailerServerStream{ServerStream: ss}
	defer func() { i.settleCall(ss.Context(), info.FullMethod, h.reservation, ts.trailer, err) }()
	return handler(srv, ts)
}

// held is what a call holds while its handler runs: a concurrency limit's
// permit, or the reservation WithSettledCost settles afterwards (each the
// zero value otherwise).
type held struct {
	permit      fleetlimit.Permit
	reservation fleetlimit.Reservation
}

// release gives back the permit a concurrency limit's call held (the zero
// Permit, for any other limit, does nothing), even when the caller has
// gone: the call's context without its cancellation. A release that cannot
// reach the store is retried within the limiter's timeout and otherwise
// left to the permit's ttl (fleetlimit.Permit.Release); the call has
// ended, so there is no one to tell.
func release(ctx context.Context, p *fleetlimit.Permit) {
	_ = p.Release(context.WithoutCancel(ctx))
}

// admit decides the call of method (req nil for a stream), sets its
// metadata with setHeader, and returns nil to run the handler or the
// status error to answer. For a concurrency limit it takes a permit for
// the call into h, which the caller releases when the handler ends; with
// WithSettledCost it reserves the estimate into h, which the caller
// settles.
func (i *Interceptor) admit(ctx context.Context, method string, req any, setHeader func(metadata.MD) error, h *held) error {
	if i.methods != nil && !i.methods[method] {
		return nil
	}
	key, err := i.key(ctx, method)
	if err == nil && key == "" {
		err = fmt.Errorf("%w: empty key", ErrNoKey)
	}
	if err != nil {
		return i.keyError(err)
	}
	if len(key) > store.MaxKeyLen {
		key = hashedKey(key)
	}
	n := int64(1)
	if i.cost != nil {
		if n, err = i.cost(ctx, method, req); err != nil {
			return status.Errorf(codes.InvalidArgument, "grpclimit: cost of the call: %v", err)
		}
	}
	// A concurrency limit holds a permit for the handler's whole run.
	// Otherwise a cost beyond what AllowN accepts cannot pass any limit
	// either: charge the most it accepts, so that the answer is
	// ResourceExhausted.
	var res fleetlimit.Result
	switch {
	case i.adapter.Holds:
		h.permit, res, err = i.l.Acquire(fleetlimit.ContextWithRoute(ctx, method), key)
	case i.settle != nil:
		h.reservation, res, err = i.l.Reserve(fleetlimit.ContextWithRoute(ctx, method), key, min(n, algorithm.MaxInt))
	default:
		res, err = i.l.AllowN(fleetlimit.ContextWithRoute(ctx, method), key, min(n, algorithm.MaxInt))
	}
	gone := ctxdone.Err(ctx)
	switch {
	case gone != nil:
		// The caller is gone (or its deadline passed, even while ctx.Err
		// still lags it: the Limiter denied it with an error wrapping
		// context.DeadlineExceeded): never admitted.
		return status.FromContextError(gone).Err()
	case err == nil:
		// A call costing more than the key's strategy ever admits at once
		// (its limit; at most algorithm.MaxLogCost for a sliding log) can
		// never pass.
		most := i.adapter.MaxCost(res)
		canPass := res.Allowed || n <= most
		if i.adapter.Headers {
			f := i.adapter.Policy.Fields(res, canPass)
			_ = setHeader(metadata.Pairs(MetadataRateLimitPolicy, f.Policy, MetadataRateLimit, f.RateLimit))
		}
		switch {
		case res.Allowed:
			return nil
		case !canPass:
			if most < res.Limit {
				return status.Errorf(codes.ResourceExhausted, "grpclimit: %s: call cost %d exceeds %d, the most the limit %d admits at once", i.l.Name(), n, most, res.Limit)
			}
			return status.Errorf(codes.ResourceExhausted, "grpclimit: %s: call cost %d exceeds the limit %d", i.l.Name(), n, res.Limit)
		default:
			return withRetry(codes.ResourceExhausted, res.RetryAfter,
				fmt.Sprintf("grpclimit: %s: rate limit exceeded: retry in %v", i.l.Name(), res.RetryAfter))
		}
	case errors.Is(err, fleetlimit.ErrInvalidKey):
		return i.keyError(err)
	case errors.Is(err, fleetlimit.ErrInvalidCost), errors.Is(err, fleetlimit.ErrClockOutOfRange):
		return status.Errorf(codes.Internal, "grpclimit: %s: rate limiter misconfigured", i.l.Name())
	default:
		// Degraded: the store did not decide.
		if i.adapter.Headers {
			_ = setHeader(metadata.Pairs(MetadataRateLimitPolicy, i.adapter.Policy.String()))
		}
		if res.Allowed {
			return nil
		}
		return withRetry(codes.Unavailable, res.RetryAfter,
			fmt.Sprintf("grpclimit: %s: rate limiter unavailable: retry in %v", i.l.Name(), res.RetryAfter))
	}
}

// keyError answers a call whose client cannot be identified: nil (run the
// handler) with WithKeyErrorPassThrough, else InvalidArgument.
func (i *Interceptor) keyError(err error) error {
	if i.passOnKeyError {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "grpclimit: %v", err)
}

// withRetry is a status error of code with msg and a google.rpc.RetryInfo
// detail asking the client to wait d.
func withRetry(code codes.Code, d time.Duration, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		return status.Error(code, msg) // a RetryInfo always marshals
	}
	return st.Err()
}

// hashedKey is the key under which a key longer than store.MaxKeyLen is
// limited: "sha256:" and the digest in unpadded base64url, as in httplimit.
func hashedKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
}
