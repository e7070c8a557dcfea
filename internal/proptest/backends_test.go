package proptest

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestRealServerKeysOutliveRealTime: on the real servers, a fixed window
// of 1 a minute admits a request 50 ms of virtual time before its window
// ends (the script sets the key's TTL to 50 ms); after 150 ms of real
// time, a request 1 ms of virtual time later, in the same window, is
// denied on Backends' store, whose client kept the key, as the Go rule on
// the virtual clock says. On ExpiringBackends' store the key expired in
// real time in between and the second request is admitted: the disagreement
// with the twin that Backends removes.
func TestRealServerKeysOutliveRealTime(t *testing.T) {
	names := RealNames(t)
	if len(names) == 0 {
		t.Skip("no real server: run under ./test.sh")
	}
	ctx := context.Background()
	s := algorithm.FixedWindow(1, time.Minute)
	at := EdgeAfter(Epoch, time.Minute).Add(-50 * time.Millisecond)
	second := func(b Backend) bool {
		t.Helper()
		req := store.Request{Strategy: s, Prefix: redistest.Prefix(), Key: "k", N: 1, Now: at}
		d, err := b.Store.Decide(ctx, req)
		if err != nil || !d.Allowed {
			t.Fatalf("%s: the first request: %+v, %v", b.Name, d, err)
		}
		time.Sleep(150 * time.Millisecond)
		req.Now = at.Add(time.Millisecond)
		d, err = b.Store.Decide(ctx, req)
		if err != nil {
			t.Fatalf("%s: the second request: %v", b.Name, err)
		}
		return d.Allowed
	}
	for _, b := range Backends(t, names...) {
		if second(b) {
			t.Errorf("%s (Backends): the second request in the window of 1 was admitted: its key expired in real time", b.Name)
		}
	}
	for _, b := range ExpiringBackends(t, names...) {
		if !second(b) {
			t.Errorf("%s (ExpiringBackends): the second request was denied: the key did not expire in real time, so this test shows nothing", b.Name)
		}
	}
}
