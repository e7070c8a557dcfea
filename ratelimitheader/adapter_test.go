package ratelimitheader_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/ratelimitheader"
)

// TestAdapterMaxCost: the most a denied request's key can ever admit at
// once is algorithm.MaxCost of the key's own strategy, read from its
// Result: a sliding log's at most algorithm.MaxLogCost however high its
// limit (alone, in a composite, in a penalty box, as a key's tier or
// override above the limiter's limit), any other strategy's its limit.
func TestAdapterMaxCost(t *testing.T) {
	bigLog := algorithm.SlidingWindowLog(20_000, time.Minute)
	premium := func(_ context.Context, key string) (algorithm.Strategy, error) {
		if key == "premium" {
			return bigLog, nil
		}
		return nil, nil
	}
	cases := map[string]struct {
		s    algorithm.Strategy
		opts []fleetlimit.Option
		key  string
		want algorithm.Strategy // the key's strategy
	}{
		"log above MaxLogCost": {s: bigLog},
		"log below MaxLogCost": {s: algorithm.SlidingWindowLog(100, time.Minute)},
		"fixed window":         {s: algorithm.FixedWindow(20_000, time.Minute)},
		"token bucket":         {s: algorithm.TokenBucket(20_000, time.Second, 20_000)},
		"composite":            {s: algorithm.All(algorithm.TokenBucket(30_000, time.Second, 30_000), bigLog)},
		"penalty box": {s: bigLog, opts: []fleetlimit.Option{fleetlimit.WithPenalty(3, time.Minute, time.Minute, time.Hour)},
			want: algorithm.Penalize(bigLog, algorithm.Penalty{After: 3, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour})},
		"tier above the limiter's": {s: algorithm.SlidingWindowLog(100, time.Minute), opts: []fleetlimit.Option{fleetlimit.WithStrategyFor(premium)},
			key: "premium", want: bigLog},
		"the limiter's own beside a tier": {s: algorithm.SlidingWindowLog(100, time.Minute), opts: []fleetlimit.Option{fleetlimit.WithStrategyFor(premium)}},
		"override above the limiter's":    {s: algorithm.SlidingWindowLog(100, time.Minute), opts: []fleetlimit.Option{fleetlimit.WithOverrides(0)}, key: "premium", want: bigLog},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l, err := fleetlimit.New(c.s, stores.Memory(t), c.opts...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			a, err := ratelimitheader.NewAdapter(ratelimitheader.AdapterConfig{Name: "test", Unit: "request", Limiter: l, HasKey: true})
			require.NoError(t, err)
			key, want := c.key, c.want
			if key == "" {
				key = "k"
			}
			if want == nil {
				want = c.s
			}
			ctx := context.Background()
			if name == "override above the limiter's" {
				require.NoError(t, l.SetOverride(ctx, key, bigLog, time.Hour))
			}
			res, err := l.AllowN(ctx, key, algorithm.MaxLogCost+1)
			require.NoError(t, err)
			require.Equal(t, algorithm.MaxCost(want) > algorithm.MaxLogCost, res.Allowed, "a cost above MaxCost is denied")
			require.Equal(t, want.Limit(), res.Limit, "the Result carries the key's limit")
			require.Equal(t, algorithm.MaxCost(want), a.MaxCost(res))
		})
	}
}
