package store

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// pipelineCounter is a go-redis hook that records the size of every
// pipeline, to see that decisions really share round trips.
type pipelineCounter struct {
	mu    sync.Mutex
	sizes []int
}

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.mu.Lock()
		p.sizes = append(p.sizes, len(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (p *pipelineCounter) max() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := 0
	for _, s := range p.sizes {
		m = max(m, s)
	}
	return m
}

// idle reports whether the combiner has no round trip in flight and nothing
// queued, as it must once all callers have returned.
func (b *combiner) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight == 0 && len(b.pending) == 0
}

// Many goroutines share round trips, get exactly the decisions one at a time
// would give (the limit, exactly), and leave the combiner idle.
func TestPipelineBatchesAndStaysExact(t *testing.T) {
	c := redistest.Real(t)
	hook := &pipelineCounter{}
	c.AddHook(hook)
	r := newRedis(t, c, WithMaxInFlight(1))
	s := algorithm.SlidingWindowLog(500, time.Hour)
	prefix := redistest.Prefix()
	require.Equal(t, int64(4*320), hammer(t, r, s, prefix), "64*20 requests on 4 keys of limit 500: all 1280 admitted")
	require.Greater(t, hook.max(), 1, "concurrent decisions shared a pipeline")
	require.Eventually(t, r.combine.idle, 5*time.Second, time.Millisecond, "the combiner ends idle once its last sender has released its slot")

	// Now past the limit: 4 keys x 500 admitted in total, exactly.
	require.Equal(t, int64(4*(500-320)), hammer(t, r, s, prefix))
}

// A client type of the user's own that embeds *redis.Client is judged by
// the client it embeds: it honours deadlines, so its decisions are pipelined
// and stay exact.
func TestPipelineThroughAWrapperType(t *testing.T) {
	c := redistest.Real(t)
	hook := &pipelineCounter{}
	c.AddHook(hook)
	r := newRedis(t, struct{ *redis.Client }{c}, WithMaxInFlight(1))
	require.NotNil(t, r.combine, "pipelining is on")
	require.Equal(t, int64(4*320), hammer(t, r, algorithm.SlidingWindowLog(500, time.Hour), redistest.Prefix()))
	require.Greater(t, hook.max(), 1, "concurrent decisions shared a pipeline")
}

// hammer makes 64 goroutines x 20 decisions on 4 keys and returns how many
// were admitted.
func hammer(t *testing.T, r *Redis, s algorithm.Strategy, prefix string) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 20 {
				d, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: prefix, Key: "k" + strconv.Itoa((g+i)%4), N: 1, Timeout: 10 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// A script flushed from the server is reloaded inside pipelines too: no
// caller sees NOSCRIPT.
func TestPipelineNoScript(t *testing.T) {
	c := redistest.Real(t)
	r := newRedis(t, c, WithMaxInFlight(1))
	prefix := redistest.Prefix()
	for round := range 3 {
		require.NoError(t, c.ScriptFlush(context.Background()).Err())
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for _, s := range []algorithm.Strategy{algorithm.SlidingWindowLog(1000, time.Hour), algorithm.TokenBucket(1000, time.Hour, 1000), algorithm.FixedWindow(1000, time.Hour)} {
					_, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: prefix, Key: strconv.Itoa(g), N: 1, Timeout: 10 * time.Second})
					if err != nil {
						t.Errorf("round %d: %v", round, err)
					}
				}
			})
		}
		wg.Wait()
	}
	require.Eventually(t, r.combine.idle, 5*time.Second, time.Millisecond, "the combiner ends idle once its last sender has released its slot")
}

// Callers whose deadline passes while Redis is blocked (DEBUG SLEEP) return
// with context.DeadlineExceeded — whether queued, batched or chosen to lead —
// and the combiner recovers: later decisions succeed and it ends idle.
func TestPipelineAbandonment(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	c := srv.Client()
	r := newRedis(t, c, WithMaxInFlight(1))
	s := algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)
	sleeper := srv.Client()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(context.Background(), "DEBUG", "SLEEP", "0.5").Err() }()
	require.Eventually(t, func() bool {
		// The server is asleep once a PING cannot get through in 50ms.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err() != nil
	}, 5*time.Second, 5*time.Millisecond)

	var timedOut atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			_, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: "p:", Key: strconv.Itoa(g), N: 1, Timeout: 30 * time.Millisecond})
			if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
				timedOut.Add(1)
			} else if err != nil {
				t.Errorf("unexpected error: %v", err)
			}
		})
	}
	wg.Wait()
	require.Positive(t, timedOut.Load(), "the blocked server made callers time out")
	require.NoError(t, <-slept)

	for g := range 32 {
		wg.Go(func() {
			_, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: "p:", Key: strconv.Itoa(g), N: 1, Timeout: 10 * time.Second})
			if err != nil {
				t.Errorf("after recovery: %v", err)
			}
		})
	}
	wg.Wait()
	require.Eventually(t, r.combine.idle, 10*time.Second, 5*time.Millisecond, "abandoned leaders finished their batches")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Each queued caller is bounded by its own deadline, not by the latest in its
// batch, and a caller without a deadline is not cut off by another's. Redis
// sleeps for 1.5s; the one slot's holder gives up at 100ms, which hands the
// queue — "short" (400ms), "long" (5s), "none" (no deadline) — to be sent
// as one batch. "short" must return at its own deadline, not when Redis
// wakes; "none" must get its decision once Redis wakes: a batch sent by its
// first queued caller and bounded by the latest deadline in it would fail
// both.
func TestPipelineCallersKeepTheirOwnDeadlines(t *testing.T) {
	r, slept := asleep(t, "1.5")
	s := algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)

	type result struct {
		took time.Duration
		err  error
	}
	decide := func(key string, timeout time.Duration) chan result {
		out := make(chan result, 1)
		go func() {
			start := time.Now()
			_, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: "p:", Key: key, N: 1, Timeout: timeout})
			out <- result{time.Since(start), err}
		}()
		return out
	}
	queued := func(n int) func() bool { return func() bool { return queuedBehindOne(r, n) } }
	holder := decide("holder", 100*time.Millisecond)
	require.Eventually(t, queued(0), time.Second, time.Millisecond)
	short := decide("short", 400*time.Millisecond)
	require.Eventually(t, queued(1), time.Second, time.Millisecond)
	long, none := decide("long", 5*time.Second), decide("none", 0)
	require.Eventually(t, queued(3), time.Second, time.Millisecond)

	require.ErrorIs(t, (<-holder).err, context.DeadlineExceeded)
	got := <-short
	require.ErrorIs(t, got.err, context.DeadlineExceeded)
	require.Less(t, got.took, time.Second, "returned at its own 400ms deadline (hang guard: the sleep lasts 1.5s)")
	require.NoError(t, (<-long).err)
	require.NoError(t, (<-none).err, "no deadline of its own: not cut off by another caller's")
	require.NoError(t, <-slept)
	require.Eventually(t, r.combine.idle, 5*time.Second, time.Millisecond)
}

// newRedis is NewRedis, failing the test on error.
func newRedis(t *testing.T, c redis.UniversalClient, opts ...RedisOption) *Redis {
	t.Helper()
	r, err := NewRedis(c, opts...)
	require.NoError(t, err)
	return r
}

// A batch's round trip ends at the latest deadline of its callers, not when
// a stalled server answers: Redis sleeps 2s; the slot's holder (100ms) and
// the batch it hands over, "a" (200ms) and "b" (300ms), all time out, and
// the combiner is idle again well before the server wakes. A batch sent
// without its deadline would hold the slot until then.
func TestPipelineBatchEndsAtItsLatestDeadline(t *testing.T) {
	r, slept := asleep(t, "2")
	s := algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)
	start := time.Now()
	errs := make(chan error, 3)
	decide := func(key string, timeout time.Duration) {
		go func() {
			_, err := r.Decide(context.Background(), Request{Strategy: s, Prefix: "p:", Key: key, N: 1, Timeout: timeout})
			errs <- err
		}()
	}
	queued := func(n int) func() bool { return func() bool { return queuedBehindOne(r, n) } }
	decide("holder", 100*time.Millisecond)
	require.Eventually(t, queued(0), time.Second, time.Millisecond)
	decide("a", 200*time.Millisecond)
	decide("b", 300*time.Millisecond)
	require.Eventually(t, queued(2), time.Second, time.Millisecond)
	for range 3 {
		require.Error(t, <-errs)
	}
	require.Eventually(t, r.combine.idle, 5*time.Second, time.Millisecond)
	require.Less(t, time.Since(start), 1500*time.Millisecond, "the batch gave up at its 300ms deadline, not when the 2s sleep ended")
	require.NoError(t, <-slept)
}

// asleep returns a store with one round trip in flight at most, over a
// throwaway redis-server that sleeps (DEBUG SLEEP) for seconds from now;
// slept receives the sleep's outcome once it ends.
func asleep(t *testing.T, seconds string) (r *Redis, slept chan error) {
	t.Helper()
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	c := srv.Client()
	r = newRedis(t, c, WithMaxInFlight(1))
	slept = make(chan error, 1)
	go func() { slept <- srv.Client().Do(context.Background(), "DEBUG", "SLEEP", seconds).Err() }()
	require.Eventually(t, func() bool {
		// The server is asleep once a PING cannot get through in 50ms.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err() != nil
	}, 5*time.Second, 5*time.Millisecond)
	return r, slept
}

// queuedBehindOne reports whether r's one slot is taken and n callers
// queue behind it.
func queuedBehindOne(r *Redis, n int) bool {
	r.combine.mu.Lock()
	defer r.combine.mu.Unlock()
	return r.combine.inFlight == 1 && len(r.combine.pending) == n
}

// Round trips run at once are capped at the client's PoolSize: with a pool
// of 2 and the default DefaultMaxInFlight (8), 16 concurrent callers never
// wait for a connection of the main pool, because the decisions past the
// second queue for a pipeline (which has a pool of its own) instead.
func TestMaxInFlightIsCappedAtThePoolSize(t *testing.T) {
	const pool = 2
	require.Greater(t, DefaultMaxInFlight, pool)
	c := redistest.Real(t, func(o *redis.Options) { o.PoolSize = pool })
	r := newRedis(t, c)
	s := algorithm.TokenBucket(1_000_000, time.Second, 1_000_000)
	prefix := redistest.Prefix()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				req := Request{Strategy: s, Prefix: prefix, Key: strconv.Itoa(g*50 + i), N: 1, Timeout: 5 * time.Second}
				if _, err := r.Decide(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := c.PoolStats()
	require.Zero(t, st.WaitCount, "no decision waited for a connection of the main pool: %+v", st)
	require.LessOrEqual(t, st.TotalConns, uint32(pool))
	require.NotNil(t, st.PipelineStats)
	require.NotZero(t, st.PipelineStats.Hits+st.PipelineStats.Misses, "decisions past the pool's size were pipelined")
}
