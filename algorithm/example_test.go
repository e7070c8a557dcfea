package algorithm_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// cooldown is a user-defined strategy: at most one request per interval, a
// minimum spacing between requests. It plugs into every store without
// changing them: a Go rule for store.Memory and its Lua twin for store.Redis.
type cooldown struct{ interval time.Duration }

// cooldownScript follows the calling convention of package scripts.
var cooldownScript = algorithm.NewScript("cd", `
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n, interval = tonumber(ARGV[2]), tonumber(ARGV[3])
local last = tonumber(redis.call('GET', KEYS[1]))
local wait = 0
if last and now - last < interval then wait = last + interval - now end
if n == 1 and wait == 0 then
  redis.call('SET', KEYS[1], string.format('%d', now), 'PX', math.ceil(interval / 1000))
  return {1, 0, 0, interval}
end
local remaining, retry = 0, wait
if wait == 0 then remaining = 1; retry = interval end
return {0, remaining, retry, wait}
`)

type cooldownState struct{ last, interval int64 }

func (st *cooldownState) FullAt() int64 { return st.last + st.interval }

func (c cooldown) Name() string          { return "cooldown" }
func (c cooldown) Limit() int64          { return 1 }
func (c cooldown) Window() time.Duration { return c.interval }
func (c cooldown) Script() *algorithm.Script {
	return cooldownScript
}
func (c cooldown) ScriptArgs() []any {
	return []any{strconv.FormatInt(c.interval.Microseconds(), 10)}
}
func (c cooldown) NewState() algorithm.State { return &cooldownState{last: -1 << 62} }
func (c cooldown) Validate() error {
	if c.interval < algorithm.MinWindow {
		return fmt.Errorf("cooldown: interval %v: %w", c.interval, algorithm.ErrInvalidStrategy)
	}
	return nil
}

// Decide is the Go twin of cooldownScript.
func (c cooldown) Decide(state algorithm.State, now time.Time, n int64) (algorithm.Decision, error) {
	st, ok := state.(*cooldownState)
	if !ok {
		return algorithm.Decision{}, algorithm.ErrStateType
	}
	t, interval := now.UnixMicro(), c.interval.Microseconds()
	var wait int64
	if t-st.last < interval {
		wait = st.last + interval - t
	}
	d := algorithm.Decision{Limit: 1}
	if n == 1 && wait == 0 {
		st.last, st.interval = t, interval
		d.Allowed, d.ResetAfter = true, c.interval
		return d, nil
	}
	d.RetryAfter, d.ResetAfter = time.Duration(wait)*time.Microsecond, time.Duration(wait)*time.Microsecond
	if wait == 0 {
		d.Remaining, d.RetryAfter = 1, c.interval
	}
	return d, nil
}

// A user-defined Strategy runs on every store, unchanged: here a cooldown of
// one request per 10 seconds, on the in-process store and on Redis.
func Example_customStrategy() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	shared, err := store.NewRedis(rdb)
	if err != nil {
		panic(err)
	}

	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, st := range []store.Store{store.NewMemory(), shared} {
		l, err := fleetlimit.New(cooldown{interval: 10 * time.Second}, st, fleetlimit.WithClock(clock))
		if err != nil {
			panic(err)
		}
		now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		for _, step := range []time.Duration{0, 4 * time.Second, 6 * time.Second} {
			now = now.Add(step)
			res, _ := l.Allow(context.Background(), "alice")
			fmt.Printf("%T +%v allowed=%v retry=%v\n", st, step, res.Allowed, res.RetryAfter)
		}
		st.Close()
	}
	// Output:
	// *store.Memory +0s allowed=true retry=0s
	// *store.Memory +4s allowed=false retry=6s
	// *store.Memory +6s allowed=true retry=0s
	// *store.Redis +0s allowed=true retry=0s
	// *store.Redis +4s allowed=false retry=6s
	// *store.Redis +6s allowed=true retry=0s
}

// Every registered algorithm, built from the same "limit per window".
func ExampleRegistry() {
	for _, e := range algorithm.Registry() {
		s := e.New(100, time.Minute)
		fmt.Printf("%-18s limit=%d window=%v exact=%v\n", e.Name, s.Limit(), s.Window(), e.Exact)
	}
	// Output:
	// sliding_window_log limit=100 window=1m0s exact=true
	// token_bucket       limit=100 window=1m0s exact=false
	// fixed_window       limit=100 window=1m0s exact=false
	// sliding_window_counter limit=100 window=1m0s exact=false
}

// The Go rule is usable on its own, with time as an argument: here a token
// bucket of 2 per second, burst 2.
func ExampleTokenBucket() {
	s := algorithm.TokenBucket(2, time.Second, 2)
	st := s.NewState()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		d, _ := s.Decide(st, t0.Add(at), 1)
		fmt.Printf("t=%v allowed=%v remaining=%d retry=%v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// t=0s allowed=true remaining=1 retry=0s
	// t=0s allowed=true remaining=0 retry=0s
	// t=0s allowed=false remaining=0 retry=500ms
	// t=500ms allowed=true remaining=0 retry=0s
}
