package algorithm_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// A token bucket in debt past its capacity (a charge: a reservation settled
// for more than the bucket holds) says when it passes again, exactly: a
// denied request is admitted at RetryAfter and not a microsecond before,
// and the bucket is full at ResetAfter and not a microsecond before — from
// the charge's time, and from a clock behind it. On random buckets,
// charges and debt caps; the Lua twin is held to the Go rule by
// TestPropertyChargeTwinAgreement.
func TestTokenBucketTimesInDebt(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	t0 := time.Unix(1_800_000_000, 0)
	checked := 0
	for i := range 3000 {
		rate := 1 + r.Int63n(50)
		per := time.Duration(1+r.Int63n(5000)) * time.Millisecond
		burst := 1 + r.Int63n(100)
		s := algorithm.TokenBucket(rate, per, burst)
		if s.Validate() != nil {
			continue
		}
		st := s.NewState()
		if _, err := s.Decide(st, t0, 1+r.Int63n(burst)); err != nil {
			t.Fatal(err)
		}
		maxDebt := []int64{-1, 0, burst, 10 * burst, algorithm.MaxInt}[r.Intn(5)]
		if _, err := s.(algorithm.Charger).Charge(st, t0, 1+r.Int63n(20*burst), maxDebt); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Duration(r.Int63n(int64(per))) - per/4) // a clock behind the charge's, at times
		n := 1 + r.Int63n(burst)
		look := func(at time.Time, n int64) algorithm.Decision {
			d, err := s.Decide(st.(algorithm.Cloner).Clone(), at, n)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		d := look(at, n)
		if d.Allowed {
			continue
		}
		desc := func() string {
			return fmt.Sprintf("TokenBucket(%d, %v, %d) after a charge, at %v", rate, per, burst, at.Sub(t0))
		}
		checked++
		if d.RetryAfter <= 0 || d.ResetAfter < d.RetryAfter {
			t.Fatalf("case %d, %s: denied n=%d with RetryAfter %v, ResetAfter %v", i, desc(), n, d.RetryAfter, d.ResetAfter)
		}
		if !look(at.Add(d.RetryAfter), n).Allowed {
			t.Fatalf("case %d, %s: n=%d denied with RetryAfter %v, and denied again then", i, desc(), n, d.RetryAfter)
		}
		if look(at.Add(d.RetryAfter-time.Microsecond), n).Allowed {
			t.Fatalf("case %d, %s: n=%d denied with RetryAfter %v, but admitted 1µs before", i, desc(), n, d.RetryAfter)
		}
		if got := look(at.Add(d.ResetAfter), 1); got.Remaining != burst-1 {
			t.Fatalf("case %d, %s: ResetAfter %v, but then the bucket is not full: %+v", i, desc(), d.ResetAfter, got)
		}
		if got := look(at.Add(d.ResetAfter-time.Microsecond), burst); got.Allowed {
			t.Fatalf("case %d, %s: ResetAfter %v, but the bucket is full 1µs before", i, desc(), d.ResetAfter)
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d of 3000 cases were denied: the test checks too little", checked)
	}
	t.Logf("%d denials checked", checked)
}
