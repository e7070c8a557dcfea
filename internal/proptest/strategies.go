package proptest

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// StratCase is one generated strategy with its parameters.
type StratCase struct {
	Name string // the registry entry it came from
	S    algorithm.Strategy
	Desc string
	// Rate, Per and Burst are set for a token bucket.
	Rate, Burst int64
	Per         time.Duration
	// Members are a composite's (AllCase) members; Inner is the strategy
	// in a penalty box (PenaltyCase).
	Members []StratCase
	Inner   *StratCase
}

// EntryCase builds a strategy of e through the registry's constructor, with
// a limit of 1 to 10 (1 in 5: 100 to 1100) and a window of the backend.
func EntryCase(e algorithm.Entry, b Backend, r *rand.Rand) StratCase {
	large := r.Intn(5) == 0
	limit := 1 + r.Int63n(10)
	if large {
		limit = 100 + r.Int63n(1001)
	}
	w := b.Window(r, large)
	sc := StratCase{Name: e.Name, S: e.New(limit, w), Desc: fmt.Sprintf("registry %q New(%d, %v)", e.Name, limit, w)}
	if e.Name == "token_bucket" {
		// The registry's token bucket refills limit per window into a
		// bucket of limit.
		sc.Rate, sc.Per, sc.Burst = limit, w, limit
	}
	return sc
}

// EntryCases is EntryCase for CheckOnBackends.
func EntryCases(e algorithm.Entry) func(Backend, *rand.Rand) StratCase {
	return func(b Backend, r *rand.Rand) StratCase { return EntryCase(e, b, r) }
}

// TokenBucketCase builds a token bucket that golang.org/x/time/rate decides
// identically (see docs/guarantees.md): rate <= 100 per period, so that the
// smallest deficit our integer arithmetic can hold takes at least 10ns to
// refill, above x/time/rate's truncation of waits below 1ns; and at least one
// token per 5 minutes, so that its float64 bookkeeping stays far inside that
// nanosecond. One case in three is the registry's constructor (burst = rate).
func TokenBucketCase(e algorithm.Entry, b Backend, r *rand.Rand) StratCase {
	rate := 1 + r.Int63n(100)
	var per time.Duration
	if b.Real {
		// At most 100 per 2 minutes: a token takes >= 1.2s (the TTL floor).
		pers := []time.Duration{2 * time.Minute, 5 * time.Minute}
		if i := r.Intn(3); i < 2 {
			per = pers[i]
		} else {
			per = time.Duration(120+r.Intn(181)) * time.Second
		}
	} else {
		pers := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second, time.Minute, 5 * time.Minute}
		if i := r.Intn(len(pers) + 1); i < len(pers) {
			per = pers[i]
		} else {
			per = time.Duration(1000+r.Int63n(int64(5*time.Minute/time.Microsecond))) * time.Microsecond
		}
	}
	if r.Intn(3) == 0 {
		rate = 1 + r.Int63n(20)
		return StratCase{Name: e.Name, S: e.New(rate, per), Rate: rate, Per: per, Burst: rate,
			Desc: fmt.Sprintf("registry %q New(%d, %v)", e.Name, rate, per)}
	}
	burst := 1 + r.Int63n(20)
	return StratCase{Name: e.Name, S: algorithm.TokenBucket(rate, per, burst), Rate: rate, Per: per, Burst: burst,
		Desc: fmt.Sprintf("TokenBucket(%d, %v, %d)", rate, per, burst)}
}

// RegistryEntries returns the registry, failing t if it is empty.
func RegistryEntries(t *testing.T) []algorithm.Entry {
	t.Helper()
	es := algorithm.Registry()
	if len(es) == 0 {
		t.Fatal("algorithm.Registry() is empty")
	}
	return es
}

// RegistryEntry returns the registry entry named name, failing t if there is
// none: a guarantee keyed by a name that left the registry must not pass
// silently.
func RegistryEntry(t *testing.T, name string) algorithm.Entry {
	t.Helper()
	for _, e := range algorithm.Registry() {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no algorithm %q in algorithm.Registry(): its guarantees in docs/guarantees.md are untested", name)
	return algorithm.Entry{}
}
