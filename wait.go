package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Result, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n by key is admitted, or ctx is
// done, and returns the admitting decision: for a worker, a crawler or a
// batch job that would rather wait for its turn than handle denials.
//
// Waiters queue per key, in this Limiter: only the waiter at the head of
// the queue asks the store (with AllowN); the others sleep until the head
// is admitted or gives up, and then the next one asks at once. A denied
// head sleeps for the decision's RetryAfter and asks again. So:
//
//   - Order: waiters of one Limiter on one key are admitted in the order
//     their WaitN calls joined its queue (first in, first out, after
//     validating their arguments; a large n at the head holds up smaller
//     ones behind it), with or without other traffic on the key
//     (TestWaitOrderWithOtherTraffic). Nothing orders them against other
//     Limiters — other processes of the fleet, or another Limiter value
//     here — nor against AllowN callers: those compete with the queue's
//     head for the key's capacity as any two decisions do.
//   - Round trips: one per admission, plus one per denial of a head. With
//     no other traffic on the key, a head retried RetryAfter later is
//     admitted (RetryAfter is exact), so the store sees at most two calls
//     per admission however many wait: O(admitted), not O(waiters ×
//     retries). With P Limiters (processes) waiting on one key, each slot
//     costs at most about P calls. A head denied again after sleeping its
//     RetryAfter — so someone else took the slot — sleeps a random extra
//     of up to an eighth of the new RetryAfter (at most 50ms), so that the
//     heads of several processes do not keep asking at the same instant.
//
// WaitN returns at once, without waiting, with an error and a Result that
// has only Limit set: for bad input, as AllowN (ErrInvalidKey,
// ErrInvalidCost, ErrClockOutOfRange); for n above the most the key's
// strategy admits in one request (algorithm.MaxCost: its limit, at most
// algorithm.MaxLogCost for a sliding log) — its tier's under
// WithStrategyFor, else the limiter's — which can never pass
// (ErrInvalidCost, with the key's Limit); for an error from
// WithStrategyFor's function, as AllowN returns it; when ctx's deadline comes before the head's
// next retry — the waiter's own RetryAfter, or for a waiter joining behind
// a sleeping head that head's wake-up — with an error wrapping
// context.DeadlineExceeded (as golang.org/x/time/rate's Wait). A waiter
// already queued when its deadline passes returns then. A ctx done while
// waiting returns an error wrapping ctx's error, and the waiter leaves the
// queue; nothing was charged for it.
//
// Each attempt is an AllowN, with its timeout, circuit breaker, failure
// policy and Observer: when the store cannot answer, the fallback or the
// policy decides as for AllowN. An attempt the policy admits ends the wait
// with that Result and the error wrapping ErrStoreUnavailable, as AllowN
// returns them; one it denies is retried after its RetryAfter
// (FailClosedRetryAfter under FailClosed).
//
// Time: waits are measured on the real clock; with WithClock, decisions
// read the given clock and the waits are its RetryAfters, slept in real
// time.
//
// WaitN is safe for concurrent use.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Result, error) {
	return l.waitN(ctx, key, n, sleepReal)
}

// waitN is WaitN, sleeping with sleep (tests give a virtual clock's).
func (l *Limiter) waitN(ctx context.Context, key string, n int64, sleep func(context.Context, time.Duration) error) (Result, error) {
	none, err := l.waitable(ctx, key, n)
	if err != nil {
		return none, err
	}
	w, err := l.waits.join(ctx, key)
	if err != nil {
		return none, fmt.Errorf("fleetlimit: wait for %q: %w", key, err)
	}
	defer l.waits.leave(key, w)
	contended := false
	for {
		res, err := l.AllowN(ctx, key, n)
		if res.Allowed {
			return res, err
		}
		if err != nil && !errors.Is(err, ErrStoreUnavailable) {
			return none, err // the caller gave up, or the clock left its range
		}
		d := res.RetryAfter
		if d <= 0 {
			d = FailClosedRetryAfter
		}
		nap := d
		if contended {
			nap += jitter(d)
		}
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left < d {
				return none, fmt.Errorf("fleetlimit: wait for %q: the next try is %v away, past the deadline: %w", key, d, context.DeadlineExceeded)
			}
			nap = min(nap, left)
		}
		l.waits.sleeping(key, w, nap)
		if err := sleep(ctx, nap); err != nil {
			return none, fmt.Errorf("fleetlimit: wait for %q: %w", key, err)
		}
		contended = true // a retry after RetryAfter that fails: someone took the slot
	}
}

// waitable checks that a wait for n by key can end: valid input, and n
// within the key's own rule (its tier) — AllowN would only deny a larger
// n, and the wait retry for ever. It returns the Result of no decision,
// with the key's Limit.
func (l *Limiter) waitable(ctx context.Context, key string, n int64) (Result, error) {
	none := l.none()
	if _, err := l.request(key, n); err != nil {
		return none, err
	}
	s, err := l.tierFor(ctx, key)
	if err != nil {
		return none, err
	}
	none.Limit = s.Limit()
	if most := algorithm.MaxCost(s); n > most {
		return none, fmt.Errorf("fleetlimit: wait for %q: %w: %d is above the most the key's strategy admits at once, %d, and can never pass", key, ErrInvalidCost, n, most)
	}
	return none, nil
}

// jitter is a random extra wait of up to an eighth of d, at most 50ms.
func jitter(d time.Duration) time.Duration {
	most := min(d/8, 50*time.Millisecond)
	if most <= 0 {
		return 0
	}
	return rand.N(most + 1)
}

// sleepReal sleeps for d, or until ctx is done (then returns ctx's error).
func sleepReal(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitQueues holds a Limiter's queues of waiters, one per key with
// waiters; a key's queue goes when its last waiter leaves. All fields are
// guarded by mu.
type waitQueues struct {
	mu   sync.Mutex
	keys map[string]*waitQueue
}

// waitQueue is one key's waiters, the head first.
type waitQueue struct {
	waiters []*waiter
	wake    time.Time // when a sleeping head asks again; zero while it asks
}

// waiter is one WaitN call in a queue. turn is closed when it becomes the
// head.
type waiter struct{ turn chan struct{} }

// join queues a waiter on key and returns once it is the head, or with an
// error (and out of the queue) when ctx is done first, or at once when
// ctx's deadline comes before the sleeping head's wake-up.
func (q *waitQueues) join(ctx context.Context, key string) (*waiter, error) {
	w := &waiter{turn: make(chan struct{})}
	q.mu.Lock()
	if q.keys == nil {
		q.keys = make(map[string]*waitQueue)
	}
	kq := q.keys[key]
	if kq == nil {
		kq = &waitQueue{}
		q.keys[key] = kq
	}
	if dl, ok := ctx.Deadline(); ok && len(kq.waiters) > 0 && dl.Before(kq.wake) {
		wake := kq.wake
		q.mu.Unlock()
		return nil, fmt.Errorf("the waiter ahead retries at %v, past the deadline: %w", wake.Format(time.RFC3339Nano), context.DeadlineExceeded)
	}
	kq.waiters = append(kq.waiters, w)
	if len(kq.waiters) == 1 {
		close(w.turn)
	}
	q.mu.Unlock()
	select {
	case <-w.turn:
		return w, nil
	case <-ctx.Done():
		q.leave(key, w)
		return nil, ctx.Err()
	}
}

// sleeping records that w, the head of key's queue, sleeps for d.
func (q *waitQueues) sleeping(key string, w *waiter, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kq := q.keys[key]; kq != nil && len(kq.waiters) > 0 && kq.waiters[0] == w {
		kq.wake = time.Now().Add(d)
	}
}

// leave takes w out of key's queue; if w was the head, the next waiter
// becomes the head.
func (q *waitQueues) leave(key string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq := q.keys[key]
	if kq == nil {
		return
	}
	for i, x := range kq.waiters {
		if x != w {
			continue
		}
		kq.waiters = append(kq.waiters[:i], kq.waiters[i+1:]...)
		if i == 0 {
			kq.wake = time.Time{}
			if len(kq.waiters) > 0 {
				close(kq.waiters[0].turn)
			}
		}
		break
	}
	if len(kq.waiters) == 0 {
		delete(q.keys, key)
	}
}
