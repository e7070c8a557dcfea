package ctxdone

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestErrDoesNotLagTheDeadline(t *testing.T) {
	if err := Err(context.Background()); err != nil {
		t.Fatalf("a live context: %v", err)
	}
	// A deadline already passed: Err says so even before ctx's timer ran.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := Err(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a passed deadline: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := Err(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
}
