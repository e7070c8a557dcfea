package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/grpclimit"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// passedCtx is a context whose deadline has passed while its Err is still
// nil, as a context's is until its timer has run.
type passedCtx struct{ context.Context }

func (passedCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Microsecond), true }

// passedStream is a server stream whose context is a passedCtx.
type passedStream struct{ grpc.ServerStream }

func (s passedStream) Context() context.Context { return passedCtx{s.ServerStream.Context()} }

// A call whose deadline has passed is answered DeadlineExceeded and its
// handler never runs, unary or stream, even before its context's Err says
// so (the Limiter denies it with an error wrapping
// context.DeadlineExceeded): not Unavailable with a retry in 0s, whatever
// the failure policy.
func TestInterceptorDeadlinePassed(t *testing.T) {
	l := newLimiter(t, stores.Memory(t), "api", fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	// The outer interceptors hand the limiter's a context past its deadline
	// whose Err is still nil.
	lag := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(passedCtx{ctx}, req)
	}
	lagStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, passedStream{ss})
	}
	svc, c := serveBuf(t,
		[]grpc.UnaryServerInterceptor{lag, grpclimit.UnaryServerInterceptor(l, grpclimit.KeyConst("k"))},
		[]grpc.StreamServerInterceptor{lagStream, grpclimit.StreamServerInterceptor(l, grpclimit.KeyConst("k"))})
	_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "unary: %v", err)
	s, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "stream: %v", err)
	require.Equal(t, int64(0), svc.calls.Load(), "the handlers never ran")
}
