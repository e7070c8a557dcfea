package faults_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/spy"
)

// The circuit breaker judged on real processes, with default options: it
// must measure the store, not the crowd of callers waiting on it. Figures
// are logged (go test -v) for docs/reliability.md; durations are asserted
// only loosely, as everywhere in this suite.

// timed is one decision, on which key and when it started.
type timed struct {
	outcome
	key string
	at  time.Time
}

// offer runs workers goroutines that together offer rate decisions per
// second on keys (round robin) until stop is closed, and returns every
// outcome. Each worker keeps its own schedule, as an open-loop client does:
// one that falls behind (during a stall) makes its late decisions at once,
// which is how a backlog queued during a stall reaches the limiter.
func offer(l *fleetlimit.Limiter, keys []string, workers int, rate float64, stop <-chan struct{}) []timed {
	interval := time.Duration(float64(workers) / rate * float64(time.Second))
	start := time.Now()
	var mu sync.Mutex
	var all []timed
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []timed
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			next := start.Add(time.Duration(w) * interval / time.Duration(workers))
			for i := w; ; i++ {
				wait := time.After(time.Until(next)) // at once when behind
				select {
				case <-stop:
					return
				case <-wait:
				}
				at, key := time.Now(), keys[i%len(keys)]
				mine = append(mine, timed{call(l, bg, key), key, at})
				next = next.Add(interval)
			}
		})
	}
	wg.Wait()
	return all
}

// tally counts outcomes: admitted (by anyone), decided by the store, by
// the policy after calling the store, and by the policy with the circuit
// open.
type tally struct{ admitted, store, failed, open int }

func count3(outs []timed) tally {
	var n tally
	for _, o := range outs {
		if o.res.Allowed {
			n.admitted++
		}
		switch {
		case o.err == nil:
			n.store++
		case errors.Is(o.err, fleetlimit.ErrCircuitOpen):
			n.open++
		default:
			n.failed++
		}
	}
	return n
}

// A single 150 ms stall of Redis (DEBUG SLEEP 0.15) under 64 workers
// offering ten times a 1,000/s token bucket on one key: the decisions
// waiting on Redis past the timeout (those in flight when it began, and any
// a worker sends again while it lasts: more than 64 in some runs) time out
// and FailOpen admits them; over the whole run the admissions exceed what
// the bucket allows by at most the 64 workers, nothing is short-circuited,
// and the breaker does not open. One stall seen by 64 waiting callers is
// one event, not 64 failures.
func TestBreakerStallIsNotAnOutage(t *testing.T) {
	const (
		workers = 64
		rate    = 1000 // per second
		burst   = 100
		offered = 10 * rate
	)
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	st := redisStore(t, srv.Client())
	l := newLimiter(t, algorithm.TokenBucket(rate, time.Second, burst), st, fleetlimit.WithTimeout(fleetlimit.DefaultTimeout))
	admin := srv.Client()

	stop := make(chan struct{})
	var outs []timed
	done := make(chan struct{})
	start := time.Now()
	go func() { outs = offer(l, []string{"k"}, workers, offered, stop); close(done) }()
	time.Sleep(time.Second) // warm pools, a steady state
	stallAt := time.Now()
	require.NoError(t, admin.Do(bg, "DEBUG", "SLEEP", "0.15").Err())
	stallEnd := time.Now()
	time.Sleep(time.Second)
	close(stop)
	<-done
	elapsed := time.Since(start)

	n := count3(outs)
	// The bucket cannot hand out more than its burst plus what it refilled
	// over the whole run (Redis's clock, the same machine's): anything
	// admitted beyond that was admitted without the store.
	bound := burst + int(float64(rate)*elapsed.Seconds()) + 1
	over := n.admitted - bound
	t.Logf("%d decisions in %v (stall of %v at +%v): %d admitted, bound %d, over-admission %d; "+
		"by the store %d, by the policy after a failed call %d, with the circuit open %d; breaker %s",
		len(outs), elapsed.Round(time.Millisecond), stallEnd.Sub(stallAt).Round(time.Millisecond),
		stallAt.Sub(start).Round(time.Millisecond), n.admitted, bound, over, n.store, n.failed, n.open, l.Breaker().State())
	require.Zero(t, n.open, "the breaker opened on one stall")
	require.LessOrEqual(t, over, workers, "over-admission beyond the decisions in flight")
	require.Equal(t, fleetlimit.BreakerClosed, l.Breaker().State())
	record(t, "faults/"+t.Name(), fmt.Sprintf("closed: %d decisions decided by the policy after a failed call, %d short-circuited; %s admitted of %s the bucket allows (stall measured at %s)",
		n.failed, n.open, thousands(n.admitted), thousands(bound), ms(stallEnd.Sub(stallAt))))
}

// captureDefaultLog routes slog.Default to a spy.Log until the test ends.
// Tests that use it must not run in parallel.
func captureDefaultLog(t *testing.T) *spy.Log {
	log := &spy.Log{}
	old := slog.Default()
	slog.SetDefault(slog.New(log))
	t.Cleanup(func() { slog.SetDefault(old) })
	return log
}

// breakerRecords are the circuit breaker's records among records.
func breakerRecords(records []slog.Record) []slog.Record {
	var mine []slog.Record
	for _, r := range records {
		if strings.Contains(r.Message, "circuit breaker") {
			mine = append(mine, r)
		}
	}
	return mine
}

// A 3 s outage, by kill (connections refused) and by black hole (nothing
// answered), under 16 workers with default options: the breaker opens within
// a few timeouts, says so once on slog.Default with the cause, keeps the
// store uncalled, and closes within one probe interval of Redis answering
// again, saying so once with the outage's length.
func TestBreakerOutageIsDetectedAndReported(t *testing.T) {
	const outage = 3 * time.Second
	for _, fault := range []string{"kill", "black hole"} {
		t.Run(fault, func(t *testing.T) {
			logs := captureDefaultLog(t)
			srv := redistest.StartServer(t)
			p := redistest.NewProxy(t, srv.Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			l := newLimiter(t, algorithm.TokenBucket(1_000_000, time.Second, 1_000_000), redisStore(t, c),
				fleetlimit.WithTimeout(fleetlimit.DefaultTimeout))

			stop := make(chan struct{})
			var outs []timed
			done := make(chan struct{})
			go func() { outs = offer(l, []string{"a", "b", "c", "d"}, 16, 1000, stop); close(done) }()
			time.Sleep(time.Second)
			require.Empty(t, breakerRecords(logs.Take()), "nothing to report while Redis is up")
			down := time.Now()
			if fault == "kill" {
				srv.Kill()
			} else {
				p.SetBlackHole(true)
			}
			time.Sleep(outage)
			if fault == "kill" {
				srv.Start()
			} else {
				p.SetBlackHole(false)
			}
			up := time.Now()
			// Wait for the store to decide again, then a little more.
			deadline := up.Add(3 * hangGuard)
			for l.Breaker().State() != fleetlimit.BreakerClosed && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			close(stop)
			<-done

			var opened, recovered time.Time
			var during tally
			for _, o := range outs {
				if errors.Is(o.err, fleetlimit.ErrCircuitOpen) && o.at.After(down) && opened.IsZero() {
					opened = o.at
				}
				if o.err == nil && o.at.After(up) && (recovered.IsZero() || o.at.Before(recovered)) {
					recovered = o.at
				}
				if o.at.After(down) && o.at.Before(up) {
					if errors.Is(o.err, fleetlimit.ErrCircuitOpen) {
						during.open++
					} else if o.err != nil {
						during.failed++
					} else {
						during.store++
					}
				}
			}
			records := breakerRecords(logs.Take())
			for _, r := range records {
				t.Logf("log: %s %s %v", r.Level, r.Message, spy.Attrs(r))
			}
			require.False(t, opened.IsZero(), "the breaker never opened")
			require.False(t, recovered.IsZero(), "the store never decided again")
			t.Logf("%s for %v: opened after %v (%d calls failed, %d short-circuited, %d decided by the store meanwhile); "+
				"decided by the store again %v after Redis was back",
				fault, outage, opened.Sub(down).Round(time.Millisecond), during.failed, during.open, during.store,
				recovered.Sub(up).Round(time.Millisecond))
			require.Less(t, opened.Sub(down), 2*time.Second, "detection")
			require.Less(t, recovered.Sub(up), 2*time.Second+fleetlimit.DefaultTimeout, "recovery")

			require.Len(t, records, 2, "one record when it opened, one when it closed")
			require.Equal(t, slog.LevelError, records[0].Level)
			require.Contains(t, records[0].Message, "opened")
			require.NotEmpty(t, spy.Attrs(records[0])["cause"].String(), "the record says why")
			require.Contains(t, records[1].Message, "closed")
			require.Greater(t, spy.Attrs(records[1])["outage"].Duration(), outage/2, "the record says how long")
			opening, closing := spy.Attrs(records[0]), spy.Attrs(records[1])
			record(t, "faults/"+t.Name(), fmt.Sprintf("opened after %s (%s calls failed, %s decided by Redis meanwhile); one Error record with the cause (%d failures over %s), one Info record (outage %.2f s, %d failed probes); decided by Redis again %s after its return",
				ms(opened.Sub(down)), thousands(during.failed), thousands(during.store), opening["failures"].Int64(), ms(opening["over"].Duration()),
				closing["outage"].Duration().Seconds(), closing["failed_probes"].Int64(), ms(recovered.Sub(up))))
		})
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// One master of a 3-master Cluster killed while 32 workers decide on 18 keys,
// 6 per master, with default options and the clock pinned: decisions on the
// live masters' keys are the store's, never short-circuited, and each such
// key admits exactly its limit; decisions on the dead master's keys are
// degraded, and its circuit opens. A sick shard lifts no limit elsewhere.
//
// A live master can miss the 100ms timeout now and then — on a loaded
// machine, and in bursts around the cluster node timeout, when the live
// masters mark the dead one failed: such a decision is degraded, not
// short-circuited (and may have been recorded, so its key admits at most its
// limit); up to 1 in 50 is tolerated.
func TestBreakerClusterMasterKilled(t *testing.T) {
	const limit = 100
	nodes, _ := startCluster(t, 0, 2*time.Second, false)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l := newLimiter(t, algorithm.FixedWindow(limit, time.Hour), redisStore(t, c),
		fleetlimit.WithTimeout(fleetlimit.DefaultTimeout), fleetlimit.WithClock(fixedClock(t0)))

	// Six keys per master; the victim is the first master.
	keys, owner := keysPerMaster(t, nodes[1].Client(), 6)
	for _, k := range keys {
		o := call(l, bg, k)
		require.NoError(t, o.err, "warm-up %q", k)
	}
	victim := nodes[0].Addr
	nodes[0].Kill()

	stop := make(chan struct{})
	var outs []timed
	done := make(chan struct{})
	go func() { outs = offer(l, keys, 32, 4000, stop); close(done) }()
	time.Sleep(3 * time.Second)
	close(stop)
	<-done

	var healthy, dead tally
	admitted := map[string]int{}
	degradedKeys := map[string]bool{}
	for _, o := range outs {
		if owner[o.key] == victim {
			require.ErrorIs(t, o.err, fleetlimit.ErrStoreUnavailable, "%q lives on the dead master", o.key)
			if errors.Is(o.err, fleetlimit.ErrCircuitOpen) {
				dead.open++
			} else {
				dead.failed++
			}
			continue
		}
		if o.err != nil {
			if errors.Is(o.err, fleetlimit.ErrCircuitOpen) {
				healthy.open++
			} else {
				healthy.failed++
			}
			degradedKeys[o.key] = true
			if healthy.open+healthy.failed <= 3 {
				t.Logf("%q lives on a live master (%s) but was not decided by it: %v", o.key, owner[o.key], o.err)
			}
			continue
		}
		healthy.store++
		if o.res.Allowed {
			admitted[o.key]++
		}
	}
	t.Logf("%d decisions: live masters' keys %d by the store, %d failed calls, %d short-circuited; "+
		"dead master's keys %d failed calls, %d short-circuited",
		len(outs), healthy.store, healthy.failed, healthy.open, dead.failed, dead.open)
	require.Zero(t, healthy.open, "decisions on live masters' keys short-circuited")
	require.LessOrEqual(t, 50*healthy.failed, healthy.store+healthy.failed, "decisions on live masters' keys that the store did not make")
	require.Positive(t, dead.open, "the dead master's circuit opened")
	for _, k := range keys {
		if owner[k] != victim {
			// One admitted at warm-up.
			if degradedKeys[k] {
				require.LessOrEqual(t, admitted[k], limit-1, "%q on a live master: at most its limit", k)
			} else {
				require.Equal(t, limit-1, admitted[k], "%q on a live master: exactly its limit", k)
			}
		}
	}
	record(t, "faults/"+t.Name(), fmt.Sprintf("%s decisions on live masters' keys decided by Redis, %d failed, %d short-circuited; the dead master's keys: %s failed calls, then %s short-circuited (a breaker circuit and a pipeline per master)",
		thousands(healthy.store), healthy.failed, healthy.open, thousands(dead.failed), thousands(dead.open)))
}

// A wrong Redis address (a port nothing listens on) under 4 workers with
// default options: every decision fails, so the circuit opens — and says
// so, once, at Error, naming the server and the cause — instead of the
// limits vanishing without a word.
func TestBreakerWrongAddressIsLoud(t *testing.T) {
	logs := captureDefaultLog(t)
	addr := fmt.Sprint("127.0.0.1:", freePort(t))
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l := newLimiter(t, algorithm.TokenBucket(100, time.Second, 100), redisStore(t, c),
		fleetlimit.WithTimeout(fleetlimit.DefaultTimeout))
	stop := make(chan struct{})
	time.AfterFunc(1500*time.Millisecond, func() { close(stop) })
	n := count3(offer(l, []string{"a"}, 4, 200, stop))
	records := breakerRecords(logs.Take())
	for _, r := range records {
		t.Logf("log: %s %s %v", r.Level, r.Message, spy.Attrs(r))
	}
	t.Logf("%d decisions failed, %d short-circuited", n.failed, n.open)
	require.Zero(t, n.store)
	require.Positive(t, n.open, "the circuit opened")
	require.Len(t, records, 1, "one record: it opened")
	require.Equal(t, slog.LevelError, records[0].Level)
	require.Equal(t, addr, spy.Attrs(records[0])["shard"].String(), "the record names the server")
	require.NotEmpty(t, spy.Attrs(records[0])["cause"].String(), "and says why (go-redis retries a refused dial until the deadline)")
	opening := spy.Attrs(records[0])
	record(t, "faults/"+t.Name(), fmt.Sprintf("one Error record naming the server (`shard=127.0.0.1:…`) and the cause, %d failures over %s; %s decisions failed, %s short-circuited",
		opening["failures"].Int64(), ms(opening["over"].Duration()), thousands(n.failed), thousands(n.open)))
}
