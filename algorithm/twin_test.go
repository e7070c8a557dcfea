package algorithm_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/leanovate/gopter/prop"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/proptest"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestPropertyTwinAgreement: for every registered algorithm, its Go rule (run
// by store.Memory) and its Lua script (run by store.Redis, on miniredis and
// on the real redis-server) return identical Results — Allowed, Limit,
// Remaining, RetryAfter, ResetAfter — on the same generated timeline over
// several keys. One timeline in three is unsorted, as instances with skewed
// clocks deliver it, so the "time never runs backwards" clamps are compared
// too. One arrival in four is a refund (Limiter.Refund) of its cost, which
// may be more than the key holds, and the refunds' Results must agree too.
// Each request is peeked at (Limiter.Peek) on both before it is decided (or
// refunded), and the peeks must agree too. A change to one twin that is not
// made in the other fails here.
func TestPropertyTwinAgreement(t *testing.T) {
	mem := proptest.Memory(t)
	bs := luaBackends(t)
	for _, e := range proptest.RegistryEntries(t) {
		t.Run(e.Name, func(t *testing.T) {
			for _, b := range bs {
				t.Run(b.Name, func(t *testing.T) {
					g := proptest.WithRefunds(proptest.ScenarioGen(b, func(r *rand.Rand) proptest.StratCase { return twinCase(e, b, r) }, true))
					proptest.Check(t, b.Cases, prop.ForAll(func(s proptest.Scenario) (string, error) { return checkTwins(mem, b, s) }, g))
				})
			}
		})
	}
}

// luaBackends are the stores the twin tests run the Lua scripts on:
// miniredis, the real redis-server and, when the environment names one,
// valkey-server.
func luaBackends(t *testing.T) []proptest.Backend {
	names := []string{"miniredis", "redis"}
	if redistest.HaveValkey(t) {
		names = append(names, "valkey")
	}
	return proptest.Backends(t, names...)
}

// checkTwins runs s on the Go rule (mem) and on the Lua script (b), peeking
// at each request and then deciding it, and reports the first Result that
// differs.
func checkTwins(mem *store.Memory, b proptest.Backend, s proptest.Scenario) (string, error) {
	return checkTwinsWith(mem, b, s, nil)
}

// checkTwinsWith is checkTwins with before, if not nil, run on both twins'
// rigs ahead of each request's peek, reporting how they differ ("" when
// they do not).
func checkTwinsWith(mem *store.Memory, b proptest.Backend, s proptest.Scenario, before func(goRule, lua *proptest.Rig, i int, ev proptest.Event) (string, error)) (string, error) {
	if err := s.Strat.S.Validate(); err != nil {
		return "", err
	}
	goRule, err := proptest.NewRig(mem, s.Strat.S)
	if err != nil {
		return "", err
	}
	lua, err := proptest.NewRig(b.Store, s.Strat.S)
	if err != nil {
		return "", err
	}
	for i, ev := range s.Events() {
		if before != nil {
			if msg, err := before(goRule, lua, i, ev); msg != "" || err != nil {
				return msg, err
			}
		}
		// Each request is peeked at, then decided.
		for _, op := range []struct {
			what string
			run  func(*proptest.Rig, proptest.Event) (fleetlimit.Result, error)
		}{{"peek at", (*proptest.Rig).Peek}, {"decision or refund of", (*proptest.Rig).At}} {
			g, err := op.run(goRule, ev)
			if err != nil {
				return "", err
			}
			l, err := op.run(lua, ev)
			if err != nil {
				return "", err
			}
			if !proptest.SameResult(g, l) {
				return fmt.Sprintf("%s request %d (%s at +%v): Go rule %+v %+v, Lua script %+v %+v",
					op.what, i, ev, ev.At.Sub(s.Base), g, g.Limits(), l, l.Limits()), nil
			}
		}
	}
	return "", nil
}

// twinCase is proptest.EntryCase, and for the token bucket half the time any
// rate, period and burst, so that rates that do not divide the period (the
// "<tat>:<e>:<R>" encoding) and large unit counts are compared too. On the real
// server a token still takes at least a second.
func twinCase(e algorithm.Entry, b proptest.Backend, r *rand.Rand) proptest.StratCase {
	if e.Name != "token_bucket" || r.Intn(2) == 0 {
		return proptest.EntryCase(e, b, r)
	}
	var per time.Duration
	var rate int64
	if b.Real {
		secs := 60 + r.Int63n(3541)
		per, rate = time.Duration(secs)*time.Second, 1+r.Int63n(secs)
	} else {
		per = time.Duration(1000+r.Int63n(int64(time.Hour/time.Microsecond))) * time.Microsecond
		switch r.Intn(3) {
		case 0:
			rate = 1 + r.Int63n(100)
		case 1:
			rate = 1 + r.Int63n(1_000_000)
		default:
			rate = 1 + r.Int63n(1_000_000_000)
		}
	}
	burst := 1 + r.Int63n(1000)
	s := algorithm.TokenBucket(rate, per, burst)
	return proptest.StratCase{Name: e.Name, S: s, Rate: rate, Per: per, Burst: burst,
		Desc: fmt.Sprintf("TokenBucket(%d, %v, %d)", rate, per, burst)}
}
