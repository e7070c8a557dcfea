package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// The simulated fleet of issue 29: fleetProcs Limiters, each with its own
// go-redis client and pool, share one hot key of a token bucket at
// fleetRate per second, with leases of fleetLease, each instance taking
// its next lease ahead (fleetlimit.WithLeaseAhead); fleetGoroutines
// goroutines in all call them flat out, so the fleet asks for more than
// the limit and the bound on over-admission is what is tested.
const (
	fleetProcs      = 4
	fleetGoroutines = 64
	fleetRate       = 1_000_000 // per second
	fleetBurst      = 10_000
	fleetLease      = 64
)

// fleetHeld is H, the most the fleet can hold unspent in leases of one key
// as docs/guarantees.md ("Lease-ahead") states it: K·(size + ⌊size/2⌋), at
// most two leases per key per instance. A token bucket then admits at most burst + rate·d + H in
// any interval d. fleetBoundText is how the doc writes it: a run whose
// docs/guarantees.md no longer holds it says that this bound may be stale.
func fleetHeld() int64 { return fleetProcs * (fleetLease + fleetLease/2) }

const fleetBoundText = "H = K·(size + ⌊size/2⌋)"

// guaranteesPath is docs/guarantees.md from bench/, where run.sh runs.
const guaranteesPath = "../docs/guarantees.md"

// fleetRound is one round of the fleet on a fresh key.
type fleetRound struct {
	elapsed                   time.Duration
	decisions, admitted, errs int64
	rt                        int64   // round trips of every instance's client
	perLimiter                []int64 // admitted by each limiter
	firstErr                  string
	// upper and mid are, per window length, the most admissions found in
	// any window of that length: upper counts every admission whose call
	// overlapped the window (an upper bound on the true count, as the
	// store or the lease admitted it at some instant within the call),
	// mid those whose call's midpoint fell in it (an estimate).
	upper, mid map[time.Duration]int64
}

func (r fleetRound) rate() float64 { return float64(r.decisions) / r.elapsed.Seconds() }

// allowedIn is what the token bucket itself allows in any interval d:
// burst + rate·d.
func allowedIn(d time.Duration) int64 {
	return fleetBurst + int64(float64(fleetRate)*d.Seconds())
}

// fleetWindows are the window lengths over-admission is judged in, those
// no longer than a round.
func (b *bench) fleetWindows() []time.Duration {
	var ws []time.Duration
	for _, w := range []time.Duration{100 * time.Millisecond, time.Second} {
		if w <= b.fleetDur() {
			ws = append(ws, w)
		}
	}
	return ws
}

func (b *bench) fleetDur() time.Duration {
	if b.cfg.quick {
		return 300 * time.Millisecond
	}
	return 1200 * time.Millisecond
}

func (b *bench) fleetPhase(ctx context.Context) error {
	rounds := 3
	if b.cfg.quick {
		rounds = 1
	}
	s := algorithm.TokenBucket(fleetRate, time.Second, fleetBurst)
	var lims []*fleetlimit.Limiter
	var rts []*roundTrips
	for range fleetProcs {
		lim, rt, closeAll, err := ownLimiter(b.srv.addr, s, fleetlimit.WithLeases(fleetLease, leaseMaxAge), fleetlimit.WithLeaseAhead())
		if err != nil {
			return err
		}
		defer closeAll()
		lims = append(lims, lim)
		rts = append(rts, rt)
		// Load the script and open connections before the first round.
		w := loadFor(ctx, func(ctx context.Context, key string) (bool, error) {
			res, err := lim.Allow(ctx, key)
			return res.Allowed, err
		}, []string{"fleet-warm"}, 8, b.cfg.warm/fleetProcs, nil)
		if w.errs > 0 {
			return fmt.Errorf("fleet warm-up: %s", w.firstErr)
		}
		if err := lim.Close(); err != nil {
			return err
		}
	}
	doc, err := os.ReadFile(guaranteesPath)
	b.fleetBoundStated = err == nil && strings.Contains(string(doc), fleetBoundText)
	log.Printf("fleet: %d limiters x %d goroutines on one hot key, %d rounds of %v", fleetProcs, fleetGoroutines/fleetProcs, rounds, b.fleetDur())
	for r := range rounds {
		key := fmt.Sprintf("fleet-%d", r) // a fresh key: the bucket starts full
		if err := b.srv.admin.Del(ctx, store.RedisKey(fleetlimit.DefaultKeyPrefix, key, s.Script().Tag)).Err(); err != nil {
			return err
		}
		var rt0 int64
		for _, rt := range rts {
			rt0 += rt.n.Load()
		}
		fr := runFleet(ctx, lims, key, b.fleetDur(), b.fleetWindows())
		for _, rt := range rts {
			fr.rt += rt.n.Load()
		}
		fr.rt -= rt0
		for _, l := range lims {
			if err := l.Close(); err != nil { // hands back every lease before the next round
				return err
			}
		}
		b.fleet = append(b.fleet, fr)
	}
	var errs int64
	first := ""
	for _, fr := range b.fleet {
		errs += fr.errs
		if first == "" {
			first = fr.firstErr
		}
	}
	b.verify(errs == 0, "fleet of 4 limiters on one hot key: no errors", "%d errors; first: %s", errs, first)
	// The key really is shared: every limiter admitted from it in every
	// round, and took more than one lease of it.
	shared := true
	var per []string
	for _, fr := range b.fleet {
		for _, n := range fr.perLimiter {
			shared = shared && n > fleetLease
		}
		per = append(per, fmt.Sprint(fr.perLimiter))
	}
	b.verify(shared, "fleet of 4 limiters on one hot key: every limiter admits from the key",
		"admitted per limiter, round by round: %s (each must exceed one lease, %d)", strings.Join(per, " "), fleetLease)
	return b.srv.admin.FlushAll(ctx).Err()
}

// runFleet calls the limiters, fleetGoroutines goroutines in all spread over
// them, on key for d, recording when each admitted call began and ended.
func runFleet(ctx context.Context, lims []*fleetlimit.Limiter, key string, d time.Duration, windows []time.Duration) fleetRound {
	type rec struct {
		starts, ends   []int64
		decisions, bad int64
		firstErr       string
	}
	recs := make([]*rec, fleetGoroutines)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for j := range recs {
		r := &rec{}
		recs[j] = r
		lim := lims[j%len(lims)]
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Since(start)
				res, err := lim.Allow(ctx, key)
				t1 := time.Since(start)
				r.decisions++
				switch {
				case err != nil:
					r.bad++
					if r.firstErr == "" {
						r.firstErr = err.Error()
					}
				case res.Allowed:
					r.starts = append(r.starts, int64(t0))
					r.ends = append(r.ends, int64(t1))
				}
			}
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	fr := fleetRound{elapsed: time.Since(start), upper: map[time.Duration]int64{}, mid: map[time.Duration]int64{}}
	fr.perLimiter = make([]int64, len(lims))
	var starts, ends, mids []int64
	for j, r := range recs {
		fr.perLimiter[j%len(lims)] += int64(len(r.starts))
		fr.decisions += r.decisions - r.bad
		fr.errs += r.bad
		if fr.firstErr == "" {
			fr.firstErr = r.firstErr
		}
		starts = append(starts, r.starts...)
		ends = append(ends, r.ends...)
		for i := range r.starts {
			mids = append(mids, (r.starts[i]+r.ends[i])/2)
		}
	}
	fr.admitted = int64(len(starts))
	slices.Sort(starts)
	slices.Sort(ends)
	slices.Sort(mids)
	for _, w := range windows {
		fr.upper[w] = mostOverlapping(starts, ends, int64(w))
		fr.mid[w] = mostWithin(mids, int64(w))
	}
	return fr
}

// mostOverlapping is the most calls that overlap any window [t, t+w]: a call
// [s, e] overlaps it when e ≥ t and s ≤ t+w. starts and ends are sorted.
// The count at t is #{s ≤ t+w} − #{e < t}; it is largest at some t = e_k,
// where #{e < t} is the first index holding e_k.
func mostOverlapping(starts, ends []int64, w int64) int64 {
	best, j := int64(0), 0
	for k := range ends {
		if k > 0 && ends[k] == ends[k-1] {
			continue
		}
		for j < len(starts) && starts[j] <= ends[k]+w {
			j++
		}
		best = max(best, int64(j-k))
	}
	return best
}

// mostWithin is the most of the sorted instants xs in any window [t, t+w].
func mostWithin(xs []int64, w int64) int64 {
	best, j := int64(0), 0
	for i := range xs {
		for j < len(xs) && xs[j] <= xs[i]+w {
			j++
		}
		best = max(best, int64(j-i))
	}
	return best
}
