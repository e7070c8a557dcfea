package fleetlimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/fakeclock"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// limitersOf returns a constructor of limiters of s over st on clock, all
// under one fresh key prefix, each with opts and then its own options.
func limitersOf(t *testing.T, s algorithm.Strategy, st store.Store, clock *fakeclock.Clock, opts ...fleetlimit.Option) func(...fleetlimit.Option) *fleetlimit.Limiter {
	base := append([]fleetlimit.Option{fleetlimit.WithKeyPrefix(redistest.Prefix()), fleetlimit.WithClock(clock.Now),
		fleetlimit.WithTimeout(proptest.Timeout)}, opts...)
	return func(own ...fleetlimit.Option) *fleetlimit.Limiter {
		l, err := fleetlimit.New(s, st, append(append([]fleetlimit.Option(nil), base...), own...)...)
		require.NoError(t, err)
		return l
	}
}

// A composite's lease, step by step on a virtual clock: every member is
// charged the fair share of the tightest member's units, every member gets
// a lease's unspent units back at the next round trip and at Close, and a
// lease the composite denies charges no member.
func TestLeaseCompositeSteps(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			// 10 an hour, and a bucket of 20 refilling 1 an hour.
			newLim := limitersOf(t, algorithm.All(algorithm.FixedWindow(10, time.Hour), algorithm.TokenBucket(1, time.Hour, 20)), st, clock)
			l, exact := fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(4, time.Minute))), newLim()
			avail := func(key string) []int64 {
				res, err := exact.Peek(bg, key, 1)
				require.NoError(t, err)
				return partsAvailable(res)
			}
			// min(10, 20) = 10 available: a lease of min(4, max(1, 5)) = 4
			// from every member.
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, int64(9), res.Remaining, "the window's 6 and the lease's 3")
			require.Equal(t, []int64{6, 16}, avail("u"))
			res, err = l.Allow(bg, "u") // from the lease: 2 left
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, []int64{6, 16}, avail("u"), "a request from the lease charges no member")
			// A minute later the lease has aged out: the next request hands
			// its 2 units back to both members (8 and 18: the bucket's
			// minute of refill is a 60th of a token), then leases
			// min(4, max(1, 8/2)) = 4 from both.
			clock.Set(proptest.Epoch.Add(time.Minute))
			res, err = l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, []int64{4, 14}, avail("u"))
			// Close hands back the 3 unspent to both: each member is short
			// of exactly the 3 admitted.
			require.NoError(t, l.Close())
			require.Equal(t, []int64{7, 17}, avail("u"))

			// The tightest member bounds the share: with 2 left in the
			// window and 12 in the bucket, a lease of max(1, ⌊2/2⌋) = 1,
			// then 1 again; the third lease is denied by the window and
			// charges the bucket nothing.
			l = fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(64, time.Minute)))
			_, err = exact.AllowN(bg, "v", 8)
			require.NoError(t, err)
			for want := int64(1); want >= 0; want-- {
				res, err = l.Allow(bg, "v")
				require.NoError(t, err)
				require.True(t, res.Allowed)
				require.Equal(t, []int64{want, 10 + want}, avail("v"))
			}
			res, err = l.Allow(bg, "v")
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.Equal(t, []int64{0, 10}, avail("v"), "a denied lease charged a member")
			require.Equal(t, time.Hour-time.Minute, res.RetryAfter, "the window's wait: the composite's denial of the request")
		})
	}
}

// A penalty box with leases: a lease round trip the strategy denies counts
// toward a ban exactly as a denied decision does; a banned round trip
// takes nothing but still hands back the unspent units of the instance's
// lease.
func TestLeasePenaltySteps(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			// Two denials within an hour: banned for an hour.
			newLim := limitersOf(t, algorithm.FixedWindow(4, time.Minute), st, clock, fleetlimit.WithPenalty(2, time.Hour, time.Hour, 2*time.Hour))
			a, b := fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(8, time.Second))), fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(8, time.Second)))
			// a leases max(1, 4/2) = 2 and holds 1.
			res, err := a.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			// b asks for 3 of the 2 left: its lease round trip is denied,
			// the first denial.
			res, err = b.AllowN(bg, "u", 3)
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.LessOrEqual(t, res.RetryAfter, time.Minute, "the window's wait, no ban yet")
			// a's request is served from its lease: an admission, not
			// counted.
			res, err = a.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			// The second denied lease round trip starts the ban.
			res, err = b.AllowN(bg, "u", 3)
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.Equal(t, time.Hour, res.RetryAfter, "the second denied lease round trip started the ban")
			// Two minutes on, the window has 4 again, but the key is banned:
			// nothing is leased.
			clock.Set(proptest.Epoch.Add(2 * time.Minute))
			res, err = b.Allow(bg, "u")
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.Equal(t, time.Hour-2*time.Minute, res.RetryAfter)
			require.Equal(t, int64(0), res.Remaining)
		})
	}
}

// A banned lease round trip still hands back the instance's unspent
// units: the inner strategy holds them again once the ban ends.
func TestLeasePenaltyHandBackWhileBanned(t *testing.T) {
	for name, st := range stores.All(t) {
		t.Run(name, func(t *testing.T) {
			clock := &fakeclock.Clock{}
			clock.Set(proptest.Epoch)
			// One denial: banned for a minute.
			newLim := limitersOf(t, algorithm.FixedWindow(10, time.Hour), st, clock, fleetlimit.WithPenalty(1, time.Hour, time.Minute, time.Hour))
			a, b, exact := fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(4, time.Second))), fleetlimit.LeaseFromTheFirst(newLim(fleetlimit.WithLeases(4, time.Second))), newLim()
			res, err := a.Allow(bg, "u") // a lease of 4: a holds 3, the window 6
			require.NoError(t, err)
			require.True(t, res.Allowed)
			res, err = b.AllowN(bg, "u", 7) // denied: banned for a minute
			require.NoError(t, err)
			require.False(t, res.Allowed)
			require.Equal(t, time.Hour, res.RetryAfter, "the window's wait, longer than the ban")
			clock.Set(proptest.Epoch.Add(30 * time.Second))
			res, err = a.Allow(bg, "u") // a's lease has aged out: banned, and hands back 3
			require.NoError(t, err)
			require.False(t, res.Allowed)
			clock.Set(proptest.Epoch.Add(2 * time.Minute))
			peek, err := exact.Peek(bg, "u", 1)
			require.NoError(t, err)
			require.Equal(t, int64(9), available(peek), "the 3 handed back while banned, less the 1 admitted")
		})
	}
}

// noLease is a strategy without a lease rule.
type noLease struct{ algorithm.Strategy }
