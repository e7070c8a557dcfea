package fleetlimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// A different algorithm per endpoint over one shared Redis: login by IP on an
// exact sliding log, the API by user on a token bucket.
func Example() {
	mr := miniredis.NewMiniRedis() // stands in for your Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	shared, err := store.NewRedis(rdb) // the client must have ContextTimeoutEnabled
	if err != nil {
		panic(err)
	}

	login, err := fleetlimit.New(algorithm.SlidingWindowLog(3, time.Minute), shared,
		fleetlimit.WithName("login"), fleetlimit.WithFailurePolicy(fleetlimit.FailClosed))
	if err != nil {
		panic(err)
	}
	api, err := fleetlimit.New(algorithm.TokenBucket(10, time.Second, 20), shared, fleetlimit.WithName("api"))
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	for i := range 4 {
		res, err := login.Allow(ctx, "203.0.113.7")
		if err != nil && !errors.Is(err, fleetlimit.ErrStoreUnavailable) {
			panic(err)
		}
		fmt.Printf("login %d: allowed=%v remaining=%d\n", i+1, res.Allowed, res.Remaining)
	}
	res, _ := api.AllowN(ctx, "user-42", 5)
	fmt.Printf("api: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// login 1: allowed=true remaining=2
	// login 2: allowed=true remaining=1
	// login 3: allowed=true remaining=0
	// login 4: allowed=false remaining=0
	// api: allowed=true remaining=15
}

// Time is injectable: with WithClock, a test walks a fixed window across its
// edge without sleeping — and sees the boundary burst.
func ExampleWithClock() {
	mem := store.NewMemory()
	defer mem.Close()
	now := time.Date(2026, 1, 1, 0, 0, 59, 0, time.UTC) // 1s before a minute edge
	l, _ := fleetlimit.New(algorithm.FixedWindow(2, time.Minute), mem,
		fleetlimit.WithName("edge"), fleetlimit.WithClock(func() time.Time { return now }))
	admitted := 0
	for range 2 {
		for range 3 {
			if res, _ := l.Allow(context.Background(), "u"); res.Allowed {
				admitted++
			}
		}
		now = now.Add(time.Second) // across the edge
	}
	fmt.Println("admitted within 2 seconds:", admitted)
	// Output: admitted within 2 seconds: 4
}

// A denied request says when to come back.
func ExampleLimiter_AllowN() {
	mem := store.NewMemory()
	defer mem.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, _ := fleetlimit.New(algorithm.TokenBucket(1, time.Second, 5), mem,
		fleetlimit.WithName("upload"), fleetlimit.WithClock(func() time.Time { return t0 }))
	res, _ := l.AllowN(context.Background(), "upload:alice", 4)
	fmt.Println(res.Allowed, res.Remaining)
	res, _ = l.AllowN(context.Background(), "upload:alice", 3)
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter)
	// Output:
	// true 1
	// false 1 2s 4s
}

// Charge only successful calls: spend before calling a partner API, and
// give the unit back when the call fails, so that failures do not eat the
// client's quota.
func ExampleLimiter_Refund() {
	mem := store.NewMemory()
	defer mem.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, _ := fleetlimit.New(algorithm.SlidingWindowLog(3, time.Minute), mem,
		fleetlimit.WithClock(func() time.Time { return t0 }))
	ctx := context.Background()
	callPartner := func(i int) error {
		if i%2 == 1 {
			return errors.New("partner: 503")
		}
		return nil
	}
	for i := range 6 {
		res, err := l.Allow(ctx, "tenant-7")
		if err != nil && !errors.Is(err, fleetlimit.ErrStoreUnavailable) {
			panic(err)
		}
		if !res.Allowed {
			fmt.Printf("call %d: limited\n", i)
			continue
		}
		if err := callPartner(i); err != nil {
			res, _ = l.Refund(ctx, "tenant-7", 1) // it did not count
			fmt.Printf("call %d: failed, refunded: remaining=%d\n", i, res.Remaining)
			continue
		}
		fmt.Printf("call %d: ok: remaining=%d\n", i, res.Remaining)
	}
	// Output:
	// call 0: ok: remaining=2
	// call 1: failed, refunded: remaining=2
	// call 2: ok: remaining=1
	// call 3: failed, refunded: remaining=1
	// call 4: ok: remaining=0
	// call 5: limited
}

// A worker loop: each job waits for its turn under a fleet-wide limit of 2
// per second instead of handling denials; the context bounds the wait.
func ExampleLimiter_Wait() {
	mem := store.NewMemory()
	defer mem.Close()
	l, _ := fleetlimit.New(algorithm.TokenBucket(2, time.Second, 2), mem)
	jobs := []string{"a", "b", "c", "d"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, job := range jobs {
		if _, err := l.Wait(ctx, "partner-api"); err != nil {
			fmt.Println("giving up:", err)
			return
		}
		fmt.Println("run", job) // a, b at once; c, d half a second apart
	}
	// Output:
	// run a
	// run b
	// run c
	// run d
}
