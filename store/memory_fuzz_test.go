package store_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

// FuzzMemoryMatchesModel decodes (strategy, parameters, timeline, costs)
// from the input, runs the timeline through store.Memory, and compares every
// decision with a plain reference model written here from the documented
// semantics, independently of package algorithm's code: a list of admitted
// units for the sliding log, rational arithmetic (math/big) for the token
// bucket, a window index and count for the fixed window. Timelines may step
// backwards (skewed client clocks). go test runs the seed corpus; fuzz longer
// with
//
//	go test -run '^$' -fuzz FuzzMemoryMatchesModel -fuzztime 10m ./store/
//
// (./test.sh fuzzes it for FLEETLIMIT_FUZZTIME, 5s by default).
func FuzzMemoryMatchesModel(f *testing.F) {
	f.Add([]byte{0, 3, 3, 0, 0, 0, 1, 1, 1, 2, 16, 0, 17, 4})
	f.Add([]byte{1, 4, 2, 5, 0, 3, 8, 1, 8, 2, 200, 0, 3, 5, 16, 3})
	f.Add([]byte{2, 2, 3, 0, 15, 1, 1, 1, 1, 1, 240, 0, 17, 2, 33, 4})
	f.Add([]byte{1, 1, 0, 6, 1, 0, 1, 0, 1, 0, 255, 0, 1, 0})
	f.Add([]byte{0, 5, 1, 0, 4, 5, 200, 2, 100, 1, 4, 6, 4, 3})
	f.Add([]byte{2, 7, 4, 0, 16, 2, 16, 2, 128, 1, 1, 8, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		windows := []time.Duration{time.Millisecond, 3 * time.Millisecond, time.Second, time.Minute, time.Hour}
		limit := int64(data[1]%8) + 1
		window := windows[int(data[2])%len(windows)]
		var strat algorithm.Strategy
		var model refModel
		switch data[0] % 3 {
		case 0:
			strat, model = algorithm.SlidingWindowLog(limit, window), &refLog{limit: limit, w: us(window)}
		case 1:
			rate := int64(data[3]%7) + 1
			strat, model = algorithm.TokenBucket(rate, window, limit), newRefBucket(rate, window, limit)
		default:
			strat, model = algorithm.FixedWindow(limit, window), &refWindow{limit: limit, w: us(window)}
		}
		if err := strat.Validate(); err != nil {
			t.Fatalf("%s: %v", strat.Name(), err)
		}
		m := store.NewMemory(store.WithSweepInterval(time.Hour)) // no sweep mid-run
		defer m.Close()
		unit := max(us(window)/16, 1)
		now := us(storetest.T0.Sub(time.Unix(0, 0)))
		for i := 4; i+1 < len(data); i += 2 {
			now += int64(int8(data[i]))*unit + int64(data[i+1]>>4)
			n := int64(data[i+1]%byte(limit+2)) + 1
			got, err := m.Decide(ctx, store.Request{Strategy: strat, Prefix: "p:", Key: "k", N: n, Now: time.UnixMicro(now)})
			if err != nil {
				t.Fatal(err)
			}
			want := model.decide(now, n)
			want.Limit = limit
			if got != want {
				t.Fatalf("%s limit %d window %v, step %d at %dµs n=%d:\n got %+v\nwant %+v", strat.Name(), limit, window, (i-4)/2, now, n, got, want)
			}
		}
	})
}

func us(d time.Duration) int64 { return int64(d / time.Microsecond) }

func dur(µs int64) time.Duration { return time.Duration(µs) * time.Microsecond }

// refModel is a reference for one key of one strategy; times are µs.
type refModel interface {
	decide(now, n int64) algorithm.Decision
}

// refLog: admitted units with their admission times; a unit admitted at a
// counts in [a, a+w) and is forgotten by the first decision at or after
// a+w, admitted or not; a clock behind the newest unit still held is judged
// at it. (Once a later clock has made a unit forgotten, a clock more than a
// window behind is not held back by it: the documented skew bound, a window
// up to 2δ shorter, is then void anyway.)
type refLog struct {
	limit, w int64
	units    []int64 // admission times, non-decreasing
}

func (r *refLog) decide(now, n int64) algorithm.Decision {
	if k := len(r.units); k > 0 && r.units[k-1] > now {
		now = r.units[k-1]
	}
	var live []int64
	for _, a := range r.units {
		if a > now-r.w {
			live = append(live, a)
		}
	}
	r.units = live
	count := int64(len(live))
	if n <= r.limit-count {
		for range n {
			r.units = append(r.units, now)
		}
		return algorithm.Decision{Allowed: true, Remaining: r.limit - count - n, ResetAfter: dur(r.w)}
	}
	d := algorithm.Decision{Remaining: r.limit - count}
	if count > 0 {
		d.ResetAfter = dur(live[count-1] + r.w - now)
	}
	switch {
	case n > r.limit && d.ResetAfter > 0:
		d.RetryAfter = d.ResetAfter
	case n > r.limit:
		d.RetryAfter = dur(r.w)
	default: // wait until the (count+n-limit)-th oldest live unit leaves
		d.RetryAfter = dur(live[count+n-r.limit-1] + r.w - now)
	}
	return d
}

// refBucket: the level is exact rational tokens, refilled at rate/per per
// µs up to burst; the state is the instant the bucket is full again (tat).
// A clock behind tat sees the level tat implies (no refill for time that
// has not passed for it), at worst empty; a denial's times are counted
// from tat itself.
type refBucket struct {
	burst *big.Rat
	r     *big.Rat // tokens per µs
	tat   *big.Rat // nil: full
	b     int64
}

func newRefBucket(rate int64, per time.Duration, burst int64) *refBucket {
	return &refBucket{burst: big.NewRat(burst, 1), r: big.NewRat(rate, us(per)), b: burst}
}

func (r *refBucket) decide(now, n int64) algorithm.Decision {
	t := new(big.Rat).SetInt64(now)
	wait := new(big.Rat) // µs until full, ≥ 0
	if r.tat != nil && r.tat.Cmp(t) > 0 {
		wait.Sub(r.tat, t)
	}
	fill := new(big.Rat).Quo(r.burst, r.r)
	owed := new(big.Rat).Set(wait) // unclamped: the times a denial reports
	if wait.Cmp(fill) > 0 {
		wait.Set(fill) // at worst empty
	}
	level := new(big.Rat).Sub(r.burst, new(big.Rat).Mul(wait, r.r))
	nr := big.NewRat(n, 1)
	if n <= r.b && level.Cmp(nr) >= 0 {
		wait.Add(wait, new(big.Rat).Quo(nr, r.r))
		r.tat = new(big.Rat).Add(t, wait)
		return algorithm.Decision{Allowed: true, Remaining: floor(new(big.Rat).Sub(level, nr)), ResetAfter: dur(ceil(wait))}
	}
	// A denial says when the bucket is full again, and when n passes, on
	// the caller's clock: from tat, so a clock behind tat by more than a
	// fill waits out its lag too.
	d := algorithm.Decision{Remaining: floor(level), ResetAfter: dur(ceil(owed))}
	switch {
	case n > r.b && d.ResetAfter > 0:
		d.RetryAfter = d.ResetAfter
	case n > r.b:
		d.RetryAfter = dur(ceil(fill))
	default: // owed - (burst - n)/r
		d.RetryAfter = dur(ceil(new(big.Rat).Sub(owed, new(big.Rat).Quo(new(big.Rat).Sub(r.burst, nr), r.r))))
	}
	return d
}

func floor(x *big.Rat) int64 { return new(big.Int).Quo(x.Num(), x.Denom()).Int64() } // x ≥ 0

func ceil(x *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// refWindow: windows [i*w, (i+1)*w) since the epoch, one counter for the
// newest window counted; a clock behind it is judged at that window's start.
type refWindow struct {
	limit, w   int64
	idx, count int64
	used       bool
}

func (r *refWindow) decide(now, n int64) algorithm.Decision {
	i := now / r.w // now > 0
	if r.used && r.idx > i {
		i, now = r.idx, r.idx*r.w
	}
	var count int64
	if r.used && r.idx == i {
		count = r.count
	}
	end := (i + 1) * r.w
	if n <= r.limit-count {
		r.idx, r.count, r.used = i, count+n, true
		return algorithm.Decision{Allowed: true, Remaining: r.limit - count - n, ResetAfter: dur(end - now)}
	}
	d := algorithm.Decision{Remaining: r.limit - count, RetryAfter: dur(end - now)}
	if count > 0 {
		d.ResetAfter = dur(end - now)
	}
	if n > r.limit {
		d.RetryAfter = d.ResetAfter
		if count == 0 {
			d.RetryAfter = dur(r.w)
		}
	}
	return d
}
