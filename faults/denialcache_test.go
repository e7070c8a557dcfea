package faults_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/denial"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// A store that forgot a key under a cached denial: FLUSHALL, or a restart
// without persistence. A fixed window of 1 per hour has admitted its one
// request; its denial, with a wait of up to an hour, is cached. Once the
// store forgets the key it would admit again, and the cache asks it again
// within denial.MaxTrust of its last answer: the first admission comes
// within MaxTrust plus a round trip (asserted with a second's slack for a
// loaded machine; without the cap it would take the rest of the hour).
func TestDenialCacheNoticesAStoreThatForgot(t *testing.T) {
	for _, forget := range []struct {
		name string
		do   func(*redistest.Server)
	}{
		{"FLUSHALL", func(s *redistest.Server) { require.NoError(t, s.Client().FlushAll(bg).Err()) }},
		{"restart", func(s *redistest.Server) { s.Restart() }},
	} {
		t.Run(forget.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			var cached atomic.Int64
			l := newLimiter(t, algorithm.FixedWindow(1, time.Hour), redisStore(t, srv.Client()),
				fleetlimit.WithDenialCache(100), fleetlimit.WithTimeout(time.Second), fleetlimit.WithoutBreaker(),
				fleetlimit.WithObserver(fleetlimit.ObserverFunc(func(e fleetlimit.Event) {
					if e.DecidedBy == fleetlimit.DecidedByCache {
						cached.Add(1)
					}
				})))
			res, err := l.Allow(bg, "u")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			for range 2 { // the store's denial, then the cache's
				res, err = l.Allow(bg, "u")
				require.NoError(t, err)
				require.False(t, res.Allowed)
			}
			require.EqualValues(t, 1, cached.Load(), "the repeat was answered from memory")

			forget.do(srv)
			forgot := time.Now()
			for {
				res, err := l.Allow(bg, "u")
				if err == nil && res.Allowed {
					break
				}
				require.Less(t, time.Since(forgot), denial.MaxTrust+time.Second,
					"still denied (%+v, %v) though the store forgot the key", res, err)
				time.Sleep(20 * time.Millisecond)
			}
			require.Positive(t, cached.Load()-1, "the cache kept answering until its trust ran out")
		})
	}
}
