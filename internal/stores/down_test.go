package stores

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestDownFailsAtOnce: a Down store refuses every call as unavailable
// (connection refused; not a rejection, not a closed store).
func TestDownFailsAtOnce(t *testing.T) {
	s := Down(t)
	for range 3 {
		_, err := s.Decide(context.Background(), store.Request{Strategy: algorithm.TokenBucket(1, time.Second, 1), Prefix: "p:", Key: "k", N: 1, Timeout: time.Second})
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("err = %v, want connection refused", err)
		}
		if errors.Is(err, store.ErrRejected) || errors.Is(err, store.ErrClosed) {
			t.Fatalf("err = %v: classed as a rejection or a closed store", err)
		}
	}
}
