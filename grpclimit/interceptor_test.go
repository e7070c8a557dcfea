package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// slowMachine is the timeout of tests whose healthy store must answer: far
// above a round trip, so that a loaded CI machine cannot fail them.
const slowMachine = 5 * time.Second

// The full methods of the test service the tests call.
const (
	unaryMethod  = "/grpc.testing.TestService/UnaryCall"
	emptyMethod  = "/grpc.testing.TestService/EmptyCall"
	streamMethod = "/grpc.testing.TestService/StreamingOutputCall"
)

// service is the real grpc-go test service, counting the calls that reach
// its handlers: UnaryCall and EmptyCall answer at once, StreamingOutputCall
// sends two messages.
type service struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int64
}

func (s *service) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.calls.Add(1)
	return &testpb.SimpleResponse{}, nil
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.calls.Add(1)
	return &testpb.Empty{}, nil
}

func (s *service) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	s.calls.Add(1)
	for range 2 {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// serve runs the test service on a real grpc.Server with the interceptors
// over lis, and returns a real client connected through dial.
func serve(t *testing.T, lis net.Listener, dial func(context.Context, string) (net.Conn, error), unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) (*service, testpb.TestServiceClient) {
	t.Helper()
	svc := &service{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	testpb.RegisterTestServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	target := "passthrough:///bufnet"
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
	} else {
		target = lis.Addr().String()
	}
	conn, err := grpc.NewClient(target, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return svc, testpb.NewTestServiceClient(conn)
}

// serveBuf is serve over an in-memory listener (bufconn).
func serveBuf(t *testing.T, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) (*service, testpb.TestServiceClient) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	return serve(t, lis, func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }, unary, stream)
}

// answer is what a call got back: its status, its retry delay (-1 without
// a RetryInfo detail) and its response metadata.
type answer struct {
	code   codes.Code
	retry  time.Duration
	policy []string
	rl     []string
}

func answerOf(t *testing.T, err error, header metadata.MD) answer {
	t.Helper()
	st := status.Convert(err)
	a := answer{code: st.Code(), retry: -1, policy: header.Get(grpclimit.MetadataRateLimitPolicy), rl: header.Get(grpclimit.MetadataRateLimit)}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			a.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return a
}

// unary makes one UnaryCall as user (no x-user metadata when "").
func unary(t *testing.T, c testpb.TestServiceClient, user string) answer {
	t.Helper()
	ctx := context.Background()
	if user != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	}
	var header metadata.MD
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header))
	return answerOf(t, err, header)
}

// streamCall opens a StreamingOutputCall as user and reads it to the end:
// OK only if both messages arrived.
func streamCall(t *testing.T, c testpb.TestServiceClient, user string) answer {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", user)
	s, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	got := 0
	for {
		_, err = s.Recv()
		if err != nil {
			break
		}
		got++
	}
	header, _ := s.Header()
	if errors.Is(err, io.EOF) {
		require.Equal(t, 2, got, "an admitted stream carries all its messages")
		err = nil
	}
	return answerOf(t, err, header)
}

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// newLimiter is a fixed window of 2 per minute named name over st, on a
// clock pinned 15.5s into a minute: a denial waits exactly 44.5s (45s
// in whole seconds).
func newLimiter(t *testing.T, st store.Store, name string, opts ...fleetlimit.Option) *fleetlimit.Limiter {
	t.Helper()
	l, err := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), st, append([]fleetlimit.Option{
		fleetlimit.WithName(name), fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithTimeout(slowMachine),
		fleetlimit.WithClock(fixedClock(proptest.Epoch.Add(15500 * time.Millisecond)))}, opts...)...)
	require.NoError(t, err)
	return l
}

// Unary calls and streams, on every store: two admitted per user with the
// draft metadata, the third ResourceExhausted with RetryInfo holding the
// exact wait; another user has a quota of its own; a stream is charged
// once however many messages it carries; the handler runs only for
// admitted calls; the observer sees the method as the route.
func TestInterceptors(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			rec := &spy.Observer{}
			l := newLimiter(t, st, "api", fleetlimit.WithObserver(rec))
			user := grpclimit.KeyByMetadata("X-User")
			svc, c := serveBuf(t,
				[]grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(l, user)},
				[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(l, grpclimit.KeyJoin(user, grpclimit.KeyByMethod))})
			policy := []string{`"api";q=2;w=60`}
			for _, call := range []func(*testing.T, testpb.TestServiceClient, string) answer{unary, streamCall} {
				require.Equal(t, answer{codes.OK, -1, policy, []string{`"api";r=1;t=45`}}, call(t, c, "alice"))
				require.Equal(t, answer{codes.OK, -1, policy, []string{`"api";r=0;t=45`}}, call(t, c, "alice"))
				require.Equal(t, answer{codes.ResourceExhausted, 44500 * time.Millisecond, policy, []string{`"api";r=0;t=45`}}, call(t, c, "alice"),
					"denied: retry at the next window, 44.5s away; t in whole seconds")
				require.Equal(t, answer{codes.OK, -1, policy, []string{`"api";r=1;t=45`}}, call(t, c, "bob"), "bob's quota is his own")
			}
			require.Equal(t, int64(6), svc.calls.Load(), "the handlers ran for the admitted calls only")
			events := rec.Take()
			require.Len(t, events, 8)
			for i, e := range events {
				method, key := unaryMethod, "alice"
				if i >= 4 {
					method, key = streamMethod, "alice:/grpc.testing.TestService/StreamingOutputCall"
				}
				if i%4 == 3 {
					key = "bob" + key[len("alice"):]
				}
				require.Equal(t, method, e.Route, "event %d", i)
				require.Equal(t, key, e.Key, "event %d", i)
			}
		})
	}
}

// The caller's mistakes and the limiter's: a call without a key is
// InvalidArgument (or passes with WithKeyErrorPassThrough); a cost above
// the limit is ResourceExhausted without RetryInfo (no retry can pass); a
// cost function's error is InvalidArgument and a cost below 1 Internal;
// methods outside ForMethods are not limited.
func TestInterceptorAnswers(t *testing.T) {
	mem := stores.Memory(t)
	l := newLimiter(t, mem, "api")
	cost := grpclimit.WithCost(func(_ context.Context, _ string, req any) (int64, error) {
		switch n := req.(*testpb.SimpleRequest).GetResponseSize(); {
		case n < 0:
			return 0, errors.New("negative size")
		default:
			return int64(n), nil
		}
	})
	user := grpclimit.KeyByMetadata("x-user")
	svc, c := serveBuf(t, []grpc.UnaryServerInterceptor{
		grpclimit.UnaryServerInterceptor(l, user, cost, grpclimit.ForMethods(unaryMethod)),
		grpclimit.UnaryServerInterceptor(newLimiter(t, mem, "empty"), user, grpclimit.ForMethods(emptyMethod), grpclimit.WithKeyErrorPassThrough()),
	}, nil)
	call := func(user string, size int32) answer {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", user)
		var header metadata.MD
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}, grpc.Header(&header))
		return answerOf(t, err, header)
	}
	policy := []string{`"api";q=2;w=60`}
	require.Equal(t, answer{codes.ResourceExhausted, -1, policy, []string{`"api";r=2;t=0`}}, call("alice", 3),
		"3 > the limit of 2: no RetryInfo, t is the reset")
	require.Equal(t, answer{codes.InvalidArgument, -1, nil, nil}, call("alice", -1), "the cost function failed")
	require.Equal(t, answer{codes.Internal, -1, nil, nil}, call("alice", 0), "a cost below 1 is the cost function's bug")
	require.Equal(t, answer{codes.OK, -1, policy, []string{`"api";r=0;t=45`}}, call("alice", 2))
	require.Equal(t, answer{codes.InvalidArgument, -1, nil, nil}, unary(t, c, ""), "no x-user: not identified")
	require.Equal(t, int64(1), svc.calls.Load())

	// EmptyCall has its own limiter, which lets unidentified calls through;
	// UnaryCall's limiter is not applied to it.
	for range 3 {
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := c.EmptyCall(metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice"), &testpb.Empty{})
		require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}[i], status.Code(err), "EmptyCall %d", i)
	}
	require.Equal(t, int64(6), svc.calls.Load())

	_, err := grpclimit.New(nil, nil, grpclimit.WithCost(nil), grpclimit.ForMethods())
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
	for _, want := range []string{"nil limiter", "nil KeyFunc", "nil CostFunc", "ForMethods without methods"} {
		require.ErrorContains(t, err, want)
	}
}

// Stacked interceptors (a global limit around a per-user one) each add
// their member to the ratelimit and ratelimit-policy lists.
func TestInterceptorsStacked(t *testing.T) {
	mem := stores.Memory(t)
	global, perUser := newLimiter(t, mem, "global"), newLimiter(t, mem, "user")
	_, c := serveBuf(t, []grpc.UnaryServerInterceptor{
		grpclimit.UnaryServerInterceptor(global, grpclimit.KeyConst("all")),
		grpclimit.UnaryServerInterceptor(perUser, grpclimit.KeyByMetadata("x-user")),
	}, nil)
	require.Equal(t, answer{codes.OK, -1, []string{`"global";q=2;w=60`, `"user";q=2;w=60`}, []string{`"global";r=1;t=45`, `"user";r=1;t=45`}}, unary(t, c, "alice"))
	require.Equal(t, answer{codes.OK, -1, []string{`"global";q=2;w=60`, `"user";q=2;w=60`}, []string{`"global";r=0;t=45`, `"user";r=1;t=45`}}, unary(t, c, "bob"))
	require.Equal(t, answer{codes.ResourceExhausted, 44500 * time.Millisecond, []string{`"global";q=2;w=60`}, []string{`"global";r=0;t=45`}}, unary(t, c, "carol"),
		"the global limit denies before the per-user one is asked")
}

// While the store is down: a fail-closed limiter answers Unavailable with
// RetryInfo, unary and stream, and only the policy in metadata; a
// fail-open one runs the handler.
func TestInterceptorStoreDown(t *testing.T) {
	closed := stores.Down(t) // refused connections: an outage
	failClosed := newLimiter(t, closed, "login", fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	failOpen := newLimiter(t, closed, "api", fleetlimit.WithFailurePolicy(fleetlimit.FailOpen))
	user := grpclimit.KeyByMetadata("x-user")
	svc, c := serveBuf(t,
		[]grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(failClosed, user, grpclimit.ForMethods(unaryMethod)),
			grpclimit.UnaryServerInterceptor(failOpen, user, grpclimit.ForMethods(emptyMethod))},
		[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(failClosed, user)})
	want := answer{codes.Unavailable, fleetlimit.FailClosedRetryAfter, []string{`"login";q=2;w=60`}, nil}
	require.Equal(t, want, unary(t, c, "alice"))
	require.Equal(t, want, streamCall(t, c, "alice"))
	_, err := c.EmptyCall(metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice"), &testpb.Empty{})
	require.NoError(t, err, "fail-open: the handler runs")
	require.Equal(t, int64(1), svc.calls.Load())
}

// A caller that goes away while its call is being decided is never
// admitted, shadow mode or not, unary or stream: the handler does not run,
// and the limiter records a decision by the caller.
func TestInterceptorCallerGone(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		rec := &spy.Observer{}
		opts := []fleetlimit.Option{fleetlimit.WithObserver(rec)}
		if shadow {
			opts = append(opts, fleetlimit.WithShadow())
		}
		l := newLimiter(t, stores.Memory(t), "api", opts...)
		// The key function holds the decision until the client has given
		// up, as a slow key lookup or store would.
		arrived := make(chan struct{}, 1)
		key := func(ctx context.Context, _ string) (string, error) {
			arrived <- struct{}{}
			<-ctx.Done()
			return "alice", nil
		}
		svc, c := serveBuf(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(l, key)},
			[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(l, key)})
		for _, stream := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-arrived; cancel() }()
			var err error
			if stream {
				var s grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]
				if s, err = c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); err == nil {
					_, err = s.Recv()
				}
			} else {
				_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{})
			}
			require.Equal(t, codes.Canceled, status.Code(err), "shadow=%v stream=%v", shadow, stream)
		}
		// The server sees the cancellation a moment after the client: wait
		// for both decisions to be made.
		var events []fleetlimit.Event
		require.Eventually(t, func() bool { events = append(events, rec.Take()...); return len(events) == 2 }, 10*time.Second, time.Millisecond)
		for _, e := range events {
			require.Equal(t, fleetlimit.DecidedByCaller, e.DecidedBy)
			require.False(t, e.Allowed || e.Shadow)
		}
		require.Equal(t, int64(0), svc.calls.Load(), "shadow=%v: the handler never ran", shadow)
	}
}

// A shadow limiter never denies: every call runs, with no metadata unless
// WithShadowMetadata(true), which sends it as for admissions; the observer
// sees "would deny".
func TestInterceptorShadow(t *testing.T) {
	for _, withMD := range []bool{false, true} {
		rec := &spy.Observer{}
		l := newLimiter(t, stores.Memory(t), "api", fleetlimit.WithShadow(), fleetlimit.WithObserver(rec))
		var opts []grpclimit.Option
		if withMD {
			opts = append(opts, grpclimit.WithShadowMetadata(true))
		}
		user := grpclimit.KeyByMetadata("x-user")
		svc, c := serveBuf(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(l, user, opts...)},
			[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(l, user, opts...)})
		policy := []string{`"api";q=2;w=60`}
		want := []answer{
			{codes.OK, -1, policy, []string{`"api";r=1;t=45`}},
			{codes.OK, -1, policy, []string{`"api";r=0;t=45`}},
			{codes.OK, -1, policy, []string{`"api";r=0;t=45`}}, // a shadow admission
			{codes.OK, -1, policy, []string{`"api";r=0;t=45`}}, // the stream: also a shadow admission
		}
		for i, w := range want {
			if !withMD {
				w.policy, w.rl = nil, nil
			}
			call := unary
			if i == 3 {
				call = streamCall
			}
			require.Equal(t, w, call(t, c, "alice"), "metadata=%v call %d", withMD, i)
		}
		require.Equal(t, int64(4), svc.calls.Load())
		events := rec.Take()
		require.Len(t, events, 4)
		for i, e := range events {
			require.Equal(t, i >= 2, !e.Allowed && e.Shadow, "event %d: would deny", i)
		}
	}
}

// Over TCP, keyed by peer address: without trusted proxies the peer is the
// client, whatever x-forwarded-for a client writes; behind a trusted proxy
// (here the loopback peer), the address the proxy appended is the client.
func TestInterceptorKeyByPeerTCP(t *testing.T) {
	rec := &spy.Observer{}
	mem := stores.Memory(t)
	untrusting, err := grpclimit.KeyByPeer(httplimit.ClientIPConfig{})
	require.NoError(t, err)
	trusting, err := grpclimit.KeyByPeer(httplimit.ClientIPConfig{TrustedProxies: []string{"127.0.0.0/8"}})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, c := serve(t, lis, nil, []grpc.UnaryServerInterceptor{
		grpclimit.UnaryServerInterceptor(newLimiter(t, mem, "direct", fleetlimit.WithObserver(rec)), untrusting, grpclimit.ForMethods(unaryMethod)),
		grpclimit.UnaryServerInterceptor(newLimiter(t, mem, "proxied", fleetlimit.WithObserver(rec)), trusting, grpclimit.ForMethods(emptyMethod)),
	}, nil)
	forged := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "198.51.100.1, 203.0.113.7")
	for i := range 3 {
		_, err := c.UnaryCall(forged, &testpb.SimpleRequest{})
		require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}[i], status.Code(err), "call %d", i)
		_, err = c.EmptyCall(forged, &testpb.Empty{})
		require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}[i], status.Code(err), "call %d", i)
	}
	_, err = c.EmptyCall(metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "203.0.113.8"), &testpb.Empty{})
	require.NoError(t, err, "another client behind the proxy has its own quota")
	keys := map[string][]string{}
	for _, e := range rec.Take() {
		keys[e.Name] = append(keys[e.Name], e.Key)
	}
	require.Equal(t, []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, keys["direct"], "the peer, not the forged metadata")
	require.Equal(t, []string{"203.0.113.7", "203.0.113.7", "203.0.113.7", "203.0.113.8"}, keys["proxied"], "the rightmost untrusted address")

	_, err = grpclimit.KeyByPeer(httplimit.ClientIPConfig{TrustedProxies: []string{"not an address"}})
	require.ErrorIs(t, err, fleetlimit.ErrInvalidConfig)
}

// Over bufconn the peer is not an IP address: KeyByPeer cannot identify
// the caller, and the call is refused rather than let through.
func TestKeyByPeerWithoutAddress(t *testing.T) {
	byPeer, err := grpclimit.KeyByPeer(httplimit.ClientIPConfig{})
	require.NoError(t, err)
	_, c := serveBuf(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(newLimiter(t, stores.Memory(t), "api"), byPeer)}, nil)
	_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "not an IP address")
}
