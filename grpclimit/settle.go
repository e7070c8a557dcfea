package grpclimit

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fleetlimit/fleetlimit"
)

// SettleFunc says what a call really cost, once its handler has returned:
// from the call's context and method, the trailer metadata the handler set
// (grpc.SetTrailer, ServerStream.SetTrailer) and the handler's error. It
// must return at least 0; a negative cost means "unknown", and the
// estimate then stands.
type SettleFunc func(ctx context.Context, fullMethod string, trailer metadata.MD, err error) int64

// WithSettledCost charges each call a cost known only once its handler
// has returned: the interceptor reserves the estimate before the handler
// runs (fleetlimit.Limiter.Reserve, of 1 or WithCost's cost) and settles
// the reservation at settle's cost when it returns or panics
// (Reservation.Settle): more is charged past the limit, up to the
// limiter's debt cap (fleetlimit.WithMaxDebt), less is given back. A call
// is admitted or denied on its estimate, with the same answers as without
// this option, and its response metadata describe the key after the
// estimate (they go out before the handler's result). CostFromTrailer
// reads the cost from a trailer the handler sets. A stream settles once,
// when its handler returns. The settle runs with the call's context
// without its cancellation: a caller that hangs up after its handler ran
// still pays; a settle that fails is reported to the limiter's Observer,
// and the estimate stays charged. A concurrency limit refuses this option.
func WithSettledCost(settle SettleFunc) Option {
	return option(func(i *Interceptor, errs *[]error) {
		if settle == nil {
			*errs = append(*errs, errors.New("nil SettleFunc"))
		}
		i.settle = settle
	})
}

// CostFromTrailer settles a call at the integer the handler set as the
// trailer metadata name (its first value), e.g. a completion's token count
// in "x-usage-tokens". A trailer absent or not an integer >= 0 leaves the
// estimate standing.
func CostFromTrailer(name string) SettleFunc {
	return func(_ context.Context, _ string, trailer metadata.MD, _ error) int64 {
		vs := trailer.Get(name)
		if len(vs) == 0 {
			return -1
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil || n < 0 {
			return -1
		}
		return n
	}
}

// settleCall settles rv at the cost settle finds in the trailer the
// handler of method set and its error herr.
func (i *Interceptor) settleCall(ctx context.Context, method string, rv fleetlimit.Reservation, trailer metadata.MD, herr error) {
	actual := i.settle(ctx, method, trailer, herr)
	if actual < 0 {
		actual = rv.Estimate()
	}
	_, _ = rv.Settle(context.WithoutCancel(ctx), actual)
}

// trailerStream is the call's grpc.ServerTransportStream, recording the
// trailer metadata a unary handler sets (grpc.SetTrailer) as it passes it
// on.
type trailerStream struct {
	grpc.ServerTransportStream
	trailer metadata.MD
}

func (s *trailerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return s.ServerTransportStream.SetTrailer(md)
}

// trailerServerStream is a stream recording the trailer metadata its
// handler sets as it passes it on.
type trailerServerStream struct {
	grpc.ServerStream
	trailer metadata.MD
}

func (s *trailerServerStream) SetTrailer(md metadata.MD) {
	s.trailer = metadata.Join(s.trailer, md)
	s.ServerStream.SetTrailer(md)
}
