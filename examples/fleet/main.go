// Command fleet shows the failure fleetlimit exists to fix: four instances
// behind a round-robin load balancer, each limiting "100 requests per minute
// per user" in its own memory, let a user through at 4x the limit; the same
// four instances over one shared Redis hold the limit exactly.
//
//	go run ./examples/fleet                 # an embedded Redis (miniredis)
//	go run ./examples/fleet -redis ADDR     # a real Redis
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

func main() {
	addr := flag.String("redis", "", "address of a real Redis (default: an embedded miniredis)")
	instances := flag.Int("instances", 4, "instances behind the load balancer")
	limit := flag.Int64("limit", 100, "requests per minute per user")
	flag.Parse()
	if err := run(*addr, *instances, *limit); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, instances int, limit int64) error {
	if instances < 1 || limit < 1 {
		return fmt.Errorf("need -instances >= 1 and -limit >= 1")
	}
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr = mr.Addr()
		fmt.Println("Redis: embedded miniredis (pass -redis ADDR for a real one)")
	} else {
		fmt.Println("Redis:", addr)
	}
	// Every instance reads the same virtual clock: one simulated minute of
	// traffic takes milliseconds, and no request straddles a window.
	now := time.Now().Truncate(time.Minute).Add(time.Second)
	clock := func() time.Time { return now }
	prefix := fmt.Sprintf("fleet-demo:%d:", time.Now().UnixNano())

	fmt.Printf("%d instances, round-robin, one user sending %d requests within a minute; limit %d/min\n\n",
		instances, 10*limit, limit)
	fmt.Printf("%-20s %-24s %9s %8s\n", "algorithm", "store", "admitted", "x limit")
	for _, e := range algorithm.Registry() {
		for _, shared := range []bool{false, true} {
			var limiters []*fleetlimit.Limiter
			for i := 0; i < instances; i++ {
				var st store.Store
				if shared {
					rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
					defer rdb.Close()
					var err error
					if st, err = store.NewRedis(rdb); err != nil {
						return err
					}
				} else {
					st = store.NewMemory()
				}
				defer st.Close()
				l, err := fleetlimit.New(e.New(limit, time.Minute), st, fleetlimit.WithClock(clock), fleetlimit.WithKeyPrefix(prefix))
				if err != nil {
					return err
				}
				limiters = append(limiters, l)
			}
			admitted := int64(0)
			for i := int64(0); i < 10*limit; i++ {
				res, err := limiters[i%int64(instances)].Allow(context.Background(), "user-42")
				if err != nil {
					return err
				}
				if res.Allowed {
					admitted++
				}
			}
			kind := "memory per instance"
			if shared {
				kind = "shared Redis"
			}
			fmt.Printf("%-20s %-24s %9d %7.1fx\n", e.Name, kind, admitted, float64(admitted)/float64(limit))
		}
	}
	fmt.Fprintln(os.Stdout, "\nPer-process state multiplies the limit by the number of instances; shared state holds it.")
	return nil
}
