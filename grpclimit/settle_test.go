package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/grpclimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// usageService reports each call's cost in the trailer "x-usage": a unary
// call's is its request's ResponseSize, a stream's 7.
type usageService struct {
	testpb.UnimplementedTestServiceServer
}

func (usageService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-usage", strconv.Itoa(int(req.GetResponseSize())))); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{}, nil
}

func (usageService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	stream.SetTrailer(metadata.Pairs("x-usage", "7"))
	return stream.Send(&testpb.StreamingOutputCallResponse{})
}

// TestInterceptorSettlesFromTrailer: with WithSettledCost(CostFromTrailer)
// a call reserves its estimate (WithCost: 10) before its handler and is
// charged the cost its handler set in trailer metadata once it has
// returned — more past the limit, up to the debt cap, less given back; a
// stream settles when its handler returns. On memory, miniredis and the
// real server.
func TestInterceptorSettlesFromTrailer(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			obs := &spy.Observer{}
			lim, err := fleetlimit.New(algorithm.FixedWindow(100, time.Hour), st,
				fleetlimit.WithClock(func() time.Time { return proptest.Epoch }), fleetlimit.WithKeyPrefix(redistest.Prefix()),
				fleetlimit.WithTimeout(slowMachine), fleetlimit.WithObserver(obs))
			require.NoError(t, err)
			opts := []grpclimit.Option{
				grpclimit.WithCost(func(context.Context, string, any) (int64, error) { return 10, nil }),
				grpclimit.WithSettledCost(grpclimit.CostFromTrailer("x-usage")),
			}
			icpt, err := grpclimit.New(lim, grpclimit.KeyConst("user"), opts...)
			require.NoError(t, err)
			srv := grpc.NewServer(grpc.UnaryInterceptor(icpt.Unary), grpc.StreamInterceptor(icpt.Stream))
			testpb.RegisterTestServiceServer(srv, usageService{})
			client := bufClient(t, srv)
			call := func(usage int32) error {
				_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: usage})
				return err
			}
			remaining := func() int64 {
				t.Helper()
				res, err := lim.Peek(context.Background(), "user", 1)
				require.NoError(t, err)
				return res.Remaining + 1 // what is left before the peeked unit
			}
			require.NoError(t, call(30))
			require.Equal(t, int64(70), remaining(), "10 reserved, 30 settled")
			require.NoError(t, call(3))
			require.Equal(t, int64(67), remaining(), "10 reserved, 3 settled: 7 given back")
			stream, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
			require.NoError(t, err)
			for {
				if _, err := stream.Recv(); err != nil {
					break
				}
			}
			require.Equal(t, int64(60), remaining(), "a stream: 10 reserved, 7 settled")
			// A runaway: 10 reserved (50 counted), 500 settled: 490 more
			// would be 440 past the limit; the cap (the limit) cuts 340.
			obs.Take()
			require.NoError(t, call(500))
			var cut int64
			for _, e := range obs.Take() {
				if e.Settle {
					cut = e.Cut
				}
			}
			require.Equal(t, int64(340), cut)
			err = call(1)
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "in debt: %v", err)
		})
	}
}

// TestSettledCostRefusals: a nil SettleFunc and a concurrency limit are
// refused.
func TestSettledCostRefusals(t *testing.T) {
	lim, err := fleetlimit.New(algorithm.FixedWindow(10, time.Minute), stores.Memory(t))
	require.NoError(t, err)
	_, err = grpclimit.New(lim, grpclimit.KeyConst("user"), grpclimit.WithSettledCost(nil))
	require.True(t, errors.Is(err, fleetlimit.ErrInvalidConfig), "%v", err)
	conc, err := fleetlimit.New(algorithm.Concurrency(2, time.Minute), stores.Memory(t))
	require.NoError(t, err)
	_, err = grpclimit.New(conc, grpclimit.KeyConst("user"), grpclimit.WithSettledCost(grpclimit.CostFromTrailer("x")))
	require.True(t, errors.Is(err, fleetlimit.ErrInvalidConfig), "%v", err)
}

// bufClient serves srv over an in-memory listener (bufconn) and returns a
// real client of the test service connected to it.
func bufClient(t *testing.T, srv *grpc.Server) testpb.TestServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return testpb.NewTestServiceClient(conn)
}
