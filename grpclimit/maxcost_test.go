package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/grpclimit"
	"github.com/fleetlimit/fleetlimit/internal/stores"
)

// A sliding log admits at most algorithm.MaxLogCost in one call, under any
// limit: a cost above it but within the limit can never pass, and is
// answered ResourceExhausted without RetryInfo (no wait helps), not with a
// retry in 60s — for the limiter's own strategy and for a key's tier above
// the limiter's limit. A cost at the cap is admitted.
func TestInterceptorAboveMaxLogCost(t *testing.T) {
	big := algorithm.SlidingWindowLog(20_000, time.Minute)
	premium := fleetlimit.WithStrategyFor(func(_ context.Context, key string) (algorithm.Strategy, error) {
		if key == "premium" {
			return big, nil
		}
		return nil, nil
	})
	cost := grpclimit.WithCost(func(_ context.Context, _ string, req any) (int64, error) {
		return int64(req.(*testpb.SimpleRequest).GetResponseSize()), nil
	})
	for name, c := range map[string]struct {
		s    algorithm.Strategy
		opts []fleetlimit.Option
	}{
		"the limiter's": {s: big},
		"a key's tier":  {s: algorithm.SlidingWindowLog(100, time.Minute), opts: []fleetlimit.Option{premium}},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := fleetlimit.New(c.s, stores.Memory(t), append([]fleetlimit.Option{fleetlimit.WithName("api")}, c.opts...)...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			svc, client := serveBuf(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(l, grpclimit.KeyConst("premium"), cost)}, nil)
			call := func(n int32) (answer, error) {
				var header metadata.MD
				_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: n}, grpc.Header(&header))
				return answerOf(t, err, header), err
			}
			a, err := call(algorithm.MaxLogCost + 1)
			require.Equal(t, codes.ResourceExhausted, a.code, "%v", err)
			require.Equal(t, time.Duration(-1), a.retry, "no RetryInfo: waiting will not help (%v)", err)
			require.Contains(t, status.Convert(err).Message(), "call cost 10001 exceeds 10000, the most the limit 20000 admits at once")
			require.Equal(t, []string{`"api";r=20000;t=0`}, a.rl, "nothing charged; t is the reset, not a retry")
			a, err = call(algorithm.MaxLogCost)
			require.Equal(t, codes.OK, a.code, "10,000 passes: %v", err)
			require.Equal(t, int64(1), svc.calls.Load())
		})
	}
}
