package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/grpclimit"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// holdingService makes an EmptyCall of its own, as the same user, while
// each UnaryCall and StreamingOutputCall runs, and keeps its answer.
type holdingService struct {
	testpb.UnimplementedTestServiceServer
	client testpb.TestServiceClient
	t      *testing.T
	inner  chan answer
}

func (s *holdingService) nested(ctx context.Context) {
	var header metadata.MD
	_, err := s.client.EmptyCall(metadata.AppendToOutgoingContext(ctx, "x-user", "u"), &testpb.Empty{}, grpc.Header(&header))
	s.inner <- answerOf(s.t, err, header)
}

func (s *holdingService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.nested(context.WithoutCancel(ctx))
	return &testpb.SimpleResponse{}, nil
}

func (s *holdingService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (s *holdingService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	s.nested(context.WithoutCancel(stream.Context()))
	return stream.Send(&testpb.StreamingOutputCallResponse{})
}

// TestInterceptorHoldsAPermit: with a concurrency limit of 1, a unary
// call holds its permit while its handler runs and a stream for its whole
// life — a call meanwhile is ResourceExhausted with RetryInfo — and each
// gives it back when its handler returns, and when it panics.
func TestInterceptorHoldsAPermit(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			lim, err := fleetlimit.New(algorithm.Concurrency(1, time.Minute), st,
				fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine))
			require.NoError(t, err)
			ic, err := grpclimit.New(lim, grpclimit.KeyByMetadata("x-user"))
			require.NoError(t, err)
			svc := &holdingService{t: t, inner: make(chan answer, 1)}
			srv := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary), grpc.StreamInterceptor(ic.Stream))
			testpb.RegisterTestServiceServer(srv, svc)
			svc.client = bufClient(t, srv)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "u")
			free := func(after string) {
				t.Helper()
				_, err := svc.client.EmptyCall(ctx, &testpb.Empty{})
				require.NoError(t, err, "after %s: the permit is given back", after)
			}

			_, err = svc.client.UnaryCall(ctx, &testpb.SimpleRequest{})
			require.NoError(t, err)
			in := <-svc.inner
			require.Equal(t, codes.ResourceExhausted, in.code, "a call while a unary call runs")
			require.Greater(t, in.retry, time.Duration(0), "its RetryInfo")
			free("the unary call")

			s, err := svc.client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
			require.NoError(t, err)
			for err == nil {
				_, err = s.Recv()
			}
			require.ErrorIs(t, err, io.EOF)
			require.Equal(t, codes.ResourceExhausted, (<-svc.inner).code, "a call while a stream is open")
			free("the stream")

			// A panicking handler, through the interceptor itself (a
			// grpc.Server does not recover handlers' panics).
			info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
			incoming := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "u"))
			func() {
				defer func() { require.NotNil(t, recover()) }()
				_, _ = ic.Unary(incoming, nil, info, func(context.Context, any) (any, error) { panic("handler") })
			}()
			free("a panicking unary handler")
			func() {
				defer func() { require.NotNil(t, recover()) }()
				_ = ic.Stream(nil, fakeStream{incoming}, &grpc.StreamServerInfo{FullMethod: streamMethod},
					func(any, grpc.ServerStream) error { panic("handler") })
			}()
			free("a panicking stream handler")

			_, err = grpclimit.New(lim, grpclimit.KeyByMetadata("x-user"), grpclimit.WithCost(func(context.Context, string, any) (int64, error) { return 1, nil }))
			require.True(t, errors.Is(err, fleetlimit.ErrInvalidConfig), "WithCost on a concurrency limit: %v", err)
		})
	}
}

// fakeStream is a grpc.ServerStream over ctx that sends nothing, for a
// stream handler called without a server.
type fakeStream struct{ ctx context.Context }

func (s fakeStream) Context() context.Context   { return s.ctx }
func (fakeStream) SetHeader(metadata.MD) error  { return nil }
func (fakeStream) SendHeader(metadata.MD) error { return nil }
func (fakeStream) SetTrailer(metadata.MD)       {}
func (fakeStream) SendMsg(any) error            { return nil }
func (fakeStream) RecvMsg(any) error            { return io.EOF }
