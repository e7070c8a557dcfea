package compare

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// runConcurrencyScenario runs only the concurrency scenario on srv.
func runConcurrencyScenario(t *testing.T, srv *Server) []ConcurrencyRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Server: srv, Scenarios: []string{ConcurrencyScenario}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 0 {
		t.Errorf("%d rows of other scenarios", len(rep.Rows))
	}
	return rep.Concurrency
}

// The concurrency scenario's rows say what a user reads in them: the
// in-flight limit over the shared store never has more than its limit
// running and loses slots to a crashed holder until their ttl (denials
// with a slot free in truth); a memory store per instance runs up to
// instances × the limit; rate limits set to what the slots serve still run
// more than the limit at once, and deny with slots idle. On virtual time
// from a fixed seed, the real redis-server gives the embedded one's rows.
func TestConcurrencyScenario(t *testing.T) {
	srv, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rows := runConcurrencyScenario(t, srv)
	type id struct{ algorithm, store string }
	var ids []id
	for _, r := range rows {
		ids = append(ids, id{r.Algorithm, r.Store})
	}
	want := []id{{"concurrency", StoreRedis}, {"concurrency", StoreMemory}, {"token_bucket", StoreRedis}, {"sliding_window_log", StoreRedis}}
	if !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v", ids, want)
	}
	for _, r := range rows {
		if r.Offered < 1000 || r.Admitted > r.Offered || r.Ideal >= r.Offered || r.Limit != concSlots || r.Instances != concInstances {
			t.Errorf("%+v: offered, admitted, ideal, limit or instances out of place", r)
		}
		if r.Algorithm == "concurrency" && r.Store == StoreRedis {
			if r.MaxInFlight > r.Limit || r.OverLimit != 0 {
				t.Errorf("%+v: the in-flight limit over the shared store ran more than its limit", r)
			}
			if r.LostSlotSeconds <= 0 || r.DeniedWithSlotFree == 0 {
				t.Errorf("%+v: the crashed holder's permits held no slot", r)
			}
			continue
		}
		if r.MaxInFlight <= r.Limit || r.OverLimit <= 0 || r.MaxInFlight > int64(r.Instances)*r.Limit && r.Store == StoreMemory {
			t.Errorf("%+v: more than the limit in flight expected (at most instances × the limit per memory store)", r)
		}
		if r.LostSlotSeconds != 0 {
			t.Errorf("%+v: nothing holds a slot for a dead process here", r)
		}
		if r.Store == StoreMemory && r.DeniedWithSlotFree != 0 || r.Store == StoreRedis && r.DeniedWithSlotFree == 0 {
			t.Errorf("%+v: denials with a slot free: none per memory store, some for a rate limit", r)
		}
	}

	t.Run("real redis-server", func(t *testing.T) {
		real, err := Standalone(context.Background(), redistest.RealAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		defer real.Close()
		if got := runConcurrencyScenario(t, real); !slices.Equal(got, rows) {
			t.Errorf("the real server's rows\n%+v\ndiffer from the embedded one's\n%+v", got, rows)
		}
	})
}
