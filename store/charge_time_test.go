package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// A charge that would leave a slow token bucket full again only after
// 2^53 µs (a reservation settled for 300 million tokens of 100 an hour,
// under a debt cap of algorithm.MaxInt) is cut to what the bucket refills
// by then, on every store alike: the key stays one the script reads back
// (the charge used to write an instant of 17 digits, which every later
// decision refused as WRONGTYPE), and it is denied until the debt is
// repaid.
func TestChargeCappedInTime(t *testing.T) {
	ctx := context.Background()
	s := algorithm.TokenBucket(100, time.Hour, 100)
	now := time.UnixMicro(time.Now().UnixMicro())
	var want algorithm.Decision
	first := true
	for name, st := range stores.All(t) {
		req := store.Request{Strategy: s, Prefix: redistest.Prefix(), Key: "k", N: 1, Now: now}
		if _, err := st.Decide(ctx, req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		req.N = 300_000_000
		c, err := st.(store.Charger).Charge(ctx, req, algorithm.MaxInt)
		if err != nil {
			t.Fatalf("%s: charge: %v", name, err)
		}
		if c.Cut() <= 0 || c.Cut() >= req.N {
			t.Fatalf("%s: charge of %d cut %d; want part of it cut: the bucket is full again at most 2^53 µs after the epoch", name, req.N, c.Cut())
		}
		if most := time.Duration(algorithm.MaxInt-now.UnixMicro()) * time.Microsecond; c.ResetAfter > most {
			t.Fatalf("%s: ResetAfter %v past 2^53 µs (%v from now)", name, c.ResetAfter, most)
		}
		req.N = 1
		d, err := st.Decide(ctx, req)
		if err != nil || d.Allowed {
			t.Fatalf("%s: the next decision: %+v, %v; want denied, without an error", name, d, err)
		}
		if d.ResetAfter != c.ResetAfter {
			t.Fatalf("%s: the next decision says full in %v, the charge said %v", name, d.ResetAfter, c.ResetAfter)
		}
		if first {
			want, first = c, false
		} else if c.Cut() != want.Cut() || c.ResetAfter != want.ResetAfter {
			t.Fatalf("%s: the charge cut %d, full in %v; another store cut %d, full in %v", name, c.Cut(), c.ResetAfter, want.Cut(), want.ResetAfter)
		}
	}
}
