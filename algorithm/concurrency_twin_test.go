package algorithm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// holdStep is one call of a concurrency twin timeline: a permit operation
// (Op.Kind != 0) or a plain decision of cost N, at At.
type holdStep struct {
	At  time.Time
	Key string
	Op  algorithm.PermitOp
	N   int64
}

func (s holdStep) String() string {
	if s.Op.Kind != 0 {
		return fmt.Sprintf("%s %s of %s", s.Op.Kind, s.Op.ID, s.Key)
	}
	return fmt.Sprintf("decide n=%d on %s", s.N, s.Key)
}

type holdCase struct {
	S     algorithm.Strategy
	Desc  string
	Base  time.Time
	Steps []holdStep
}

func (c holdCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", c.Desc)
	for i, s := range c.Steps {
		fmt.Fprintf(&b, "\n  %d +%v %s", i, s.At.Sub(c.Base), s)
	}
	return b.String()
}

// holdGen generates timelines of acquires, releases and renews of a small
// pool of permit identities (so that a permit is acquired again, released
// twice, renewed after it expired) and plain decisions over two keys, with
// the clock stepping forward by up to 1.5 ttl and, one step in ten, back.
// On the real server the ttl is minutes and the steps whole seconds (keys
// expire there in real time).
func holdGen(b proptest.Backend) gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		r := p.Rng
		limit := 1 + r.Int63n(5)
		ttl := time.Duration(1+r.Int63n(10_000)) * time.Millisecond
		grain := time.Microsecond
		if b.Real {
			ttl, grain = time.Duration(60+r.Intn(240))*time.Second, time.Second
		}
		c := holdCase{S: algorithm.Concurrency(limit, ttl), Desc: fmt.Sprintf("Concurrency(%d, %v)", limit, ttl),
			Base: time.UnixMicro(1_700_000_000_000_000 + r.Int63n(1e12))}
		switch r.Intn(4) {
		case 3:
			lim, w := 1+r.Int63n(8), 2*ttl
			c.S = algorithm.All(algorithm.SlidingWindowLog(lim, w), c.S)
			c.Desc = fmt.Sprintf("All(SlidingWindowLog(%d, %v), %s)", lim, w, c.Desc)
		case 1:
			// A rate member beside it: a token bucket of 1 to 6 per ttl.
			rate, burst := 1+r.Int63n(6), 1+r.Int63n(6)
			c.S = algorithm.All(algorithm.TokenBucket(rate, ttl, burst), c.S)
			c.Desc = fmt.Sprintf("All(TokenBucket(%d, %v, %d), %s)", rate, ttl, burst, c.Desc)
		case 2:
			w := 2 * ttl
			c.S = algorithm.All(c.S, algorithm.FixedWindow(1+r.Int63n(8), w))
			c.Desc = fmt.Sprintf("All(%s, FixedWindow(_, %v))", c.Desc, w)
		}
		at := c.Base
		for range 10 + r.Intn(50) {
			switch {
			case r.Intn(10) == 0:
				at = at.Add(-time.Duration(r.Int63n(int64(ttl/grain)+1)) * grain / 4)
			case r.Intn(2) == 0:
				at = at.Add(time.Duration(r.Int63n(int64(ttl/grain)*3/2+1)) * grain)
			}
			s := holdStep{At: at, Key: fmt.Sprintf("k%d", r.Intn(2))}
			switch r.Intn(8) {
			case 0:
				s.N = 1 + r.Int63n(limit+1)
			case 1, 2:
				s.Op = algorithm.PermitOp{Kind: algorithm.ReleasePermit}
			case 3, 4:
				s.Op = algorithm.PermitOp{Kind: algorithm.RenewPermit}
			default:
				s.Op = algorithm.PermitOp{Kind: algorithm.AcquirePermit}
			}
			if s.Op.Kind != 0 {
				s.Op.ID = fmt.Sprintf("p%d", r.Intn(int(limit)+3))
			}
			c.Steps = append(c.Steps, s)
		}
		return gopter.NewGenResult(c, gopter.NoShrinker)
	}
}

// TestPropertyConcurrencyTwinAgreement: algorithm.Concurrency's Go rule,
// alone and in a composite beside a token bucket, a fixed window or a
// sliding log (algorithm.All),
// run by store.Memory, and its Lua twin (store.Redis, on miniredis, the
// real server and the Cluster) return identical decisions (each member's
// too) — Allowed, Remaining,
// RetryAfter, ResetAfter — for every acquire, release, renew and plain
// decision of a generated timeline, including clocks that step back; each
// call is also peeked at (a plain decision) on both before it is made.
func TestPropertyConcurrencyTwinAgreement(t *testing.T) {
	mem := proptest.Memory(t)
	names := []string{"miniredis"}
	if redistest.HaveReal(t) {
		names = append(names, "redis")
	}
	if redistest.HaveCluster(t) {
		names = append(names, "cluster")
	}
	for _, b := range proptest.Backends(t, names...) {
		t.Run(b.Name, func(t *testing.T) {
			proptest.Check(t, b.Cases, prop.ForAll(func(c holdCase) (string, error) {
				return checkHoldTwins(mem, b.Store, c)
			}, holdGen(b)))
		})
	}
}

func checkHoldTwins(mem store.Store, lua store.Store, c holdCase) (string, error) {
	ctx := context.Background()
	prefix := redistest.Prefix()
	for i, s := range c.Steps {
		req := store.Request{Strategy: c.S, Prefix: prefix, Key: s.Key, N: max(1, s.N), Now: s.At, Timeout: proptest.Timeout}
		var calls []string
		var g, l []algorithm.Decision
		peek := req
		peek.N = c.S.Limit()
		for _, st := range []store.Store{mem, lua} {
			d, err := st.(store.Peeker).Peek(ctx, peek)
			if err != nil {
				return "", fmt.Errorf("step %d peek: %w", i, err)
			}
			g = append(g, d)
		}
		calls = append(calls, "peek before")
		for _, st := range []store.Store{mem, lua} {
			var d algorithm.Decision
			var err error
			if s.Op.Kind != 0 {
				r := req
				op := s.Op
				r.Permit = &op
				d, err = st.(store.Holder).Hold(ctx, r)
			} else {
				d, err = st.Decide(ctx, req)
			}
			if err != nil {
				return "", fmt.Errorf("step %d %s: %w", i, s, err)
			}
			l = append(l, d)
		}
		calls = append(calls, s.String())
		for j, pair := range [][]algorithm.Decision{g, l} {
			if !sameDecision(pair[0], pair[1]) {
				return fmt.Sprintf("step %d (+%v) %s: Go rule %+v, Lua script %+v", i, s.At.Sub(c.Base), calls[j], pair[0], pair[1]), nil
			}
		}
	}
	return "", nil
}

// sameDecision compares two decisions' figures and, for a composite's,
// each member's.
func sameDecision(a, b algorithm.Decision) bool {
	figures := func(d algorithm.Decision) [5]int64 {
		return [5]int64{map[bool]int64{true: 1}[d.Allowed], d.Limit, d.Remaining, int64(d.RetryAfter), int64(d.ResetAfter)}
	}
	am, bm := a.Members(), b.Members()
	if figures(a) != figures(b) || len(am) != len(bm) {
		return false
	}
	for i := range am {
		if figures(am[i]) != figures(bm[i]) {
			return false
		}
	}
	return true
}
