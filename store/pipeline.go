package store

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// combiner pipelines concurrent decisions automatically.
//
// At most maxInFlight round trips to Redis run at once. A caller that finds a
// free slot runs its own decision at once, alone: a lone goroutine pays
// nothing for pipelining. Callers that arrive while every slot is busy queue
// up; whoever finishes a round trip hands the whole queue, as one pipeline of
// EVALSHAs, to a sender goroutine that keeps the slot (sending each new queue
// in turn) until the queue is empty. Under load, then, decisions that arrive
// within one round trip of each other share the next one, which is what lets
// one Redis core make roughly twice as many decisions per second.
//
// A queued caller waits only for its own outcome or its own context, so it
// returns within its deadline whatever the others in its batch allow.
//
// All fields but maxInFlight are guarded by mu.
type combiner struct {
	r           *Redis
	maxInFlight int

	mu       sync.Mutex
	inFlight int
	pending  []*call
	// spare holds emptied slices of sent batches, for the next queues: at
	// most one per slice in use, so at most maxInFlight+1.
	spare [][]*call
}

// call is one queued decision.
type call struct {
	ctx    context.Context
	script *algorithm.Script
	argv   []any // its EVALSHA (evalArgv)

	// cmd is the call's command in its batch's pipeline: written and read
	// by the batch's sender alone, while the call is batched.
	cmd *redis.Cmd

	// Guarded by combiner.mu.
	state callState
	reply any
	err   error
	done  chan struct{} // signalled once, when state becomes finished
}

type callState uint8

const (
	queued    callState = iota // in combiner.pending
	batched                    // in a batch being sent
	finished                   // reply and err are set
	abandoned                  // its caller gave up (ctx done)
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// do runs one decision's script, sharing a round trip with concurrent ones.
func (b *combiner) do(ctx context.Context, s *algorithm.Script, argv []any) (any, error) {
	b.mu.Lock()
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		reply, err := runArgv(ctx, b.r.client, s, argv)
		b.release()
		return reply, err
	}
	c := callPool.Get().(*call)
	c.ctx, c.script, c.argv, c.state = ctx, s, argv, queued
	b.pending = append(b.pending, c)
	b.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
	}
	b.mu.Lock()
	switch c.state {
	case finished:
		b.mu.Unlock()
		reply, err := c.reply, c.err
		*c = call{done: c.done}
		select { // finished after ctx.Done was chosen: drain the signal
		case <-c.done:
		default:
		}
		callPool.Put(c)
		return reply, err
	case queued:
		b.pending = slices.DeleteFunc(b.pending, func(p *call) bool { return p == c })
	}
	c.state = abandoned // never reused: a batch may still hold it
	b.mu.Unlock()
	return nil, ctx.Err()
}

// release ends a round trip: it frees the slot, or, when callers are
// queued, keeps it for a sender goroutine that sends their batch.
func (b *combiner) release() {
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	batch := b.take()
	b.mu.Unlock()
	go b.sendAll(batch)
}

// take empties the queue into a batch, and starts the next queue in a
// spare slice (nil when there is none: append makes one). It requires
// that b.mu is held.
func (b *combiner) take() []*call {
	batch := b.pending
	b.pending = nil
	if n := len(b.spare); n > 0 {
		b.pending, b.spare[n-1] = b.spare[n-1], nil
		b.spare = b.spare[:n-1]
	}
	for _, c := range batch {
		c.state = batched
	}
	return batch
}

// sendAll sends batch, then each queue that formed meanwhile, and frees
// the slot once the queue is empty. Each sent batch's slice, emptied, is
// kept in b.spare for a later queue.
func (b *combiner) sendAll(batch []*call) {
	for {
		b.send(batch)
		clear(batch)
		b.mu.Lock()
		b.spare = append(b.spare, batch[:0])
		if len(b.pending) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// send runs a batch as one pipeline (EVAL for any script the server lacks)
// and hands each caller its outcome. A batch of several callers is bounded
// by the latest deadline among them, or only by the client's own timeouts
// if one of them has no deadline. A batch of one caller runs under that
// caller's own context, as the caller's own round trip would: it ends when
// its only caller gives up, and costs no context of its own (four
// allocations). Each caller stops waiting at its own context.
func (b *combiner) send(batch []*call) {
	if len(batch) == 1 {
		b.r.runBatch(batch[0].ctx, batch)
		b.answer(batch)
		return
	}
	ctx := context.Background()
	var deadline time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			deadline = time.Time{}
			break
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	b.r.runBatch(ctx, batch)
	b.answer(batch)
}

// answer hands each caller of a sent batch that still waits its outcome.
func (b *combiner) answer(batch []*call) {
	b.mu.Lock()
	for _, c := range batch {
		if c.state == batched {
			c.reply, c.err = c.cmd.Result()
			c.state = finished
			c.done <- struct{}{}
		}
		c.cmd = nil
	}
	b.mu.Unlock()
}

// runBatch sends the batch's EVALSHAs in one pipeline, then the scripts of
// any that met NOSCRIPT with EVAL in a second one; each call's cmd holds
// its outcome. Pipelines are reused (r.pipes): one made for each batch
// would cost allocations per batch.
func (r *Redis) runBatch(ctx context.Context, batch []*call) {
	buf := cmdBufs.Get().(*[]redis.Cmder)
	cmds := (*buf)[:0]
	for _, c := range batch {
		c.cmd = evalshaCmd(ctx, c.argv)
		cmds = append(cmds, once{c.cmd})
	}
	pipe := r.pipeline()
	// Queued at once: the pipeline's own slice, which Exec gives away,
	// is then made once per batch, not grown command by command.
	_ = pipe.BatchProcess(ctx, cmds...)
	_, _ = pipe.Exec(ctx) // errors are per command
	r.pipes.Put(pipe)
	cmds = cmds[:0]
	for _, c := range batch {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			c.cmd = evalshaCmd(ctx, asEval(c.script, c.argv))
			cmds = append(cmds, once{c.cmd})
		}
	}
	if len(cmds) > 0 {
		retry := r.pipeline()
		_ = retry.BatchProcess(ctx, cmds...)
		_, _ = retry.Exec(ctx)
		r.pipes.Put(retry)
	}
	clear(cmds[:cap(cmds)])
	*buf = cmds[:0]
	cmdBufs.Put(buf)
}

// cmdBufs recycles runBatch's slices of commands (*[]redis.Cmder).
var cmdBufs = sync.Pool{New: func() any { return new([]redis.Cmder) }}

// pipeline returns an empty pipeline on the store's client: one that an
// earlier batch sent (Exec empties it), or a new one.
func (r *Redis) pipeline() redis.Pipeliner {
	if p, ok := r.pipes.Get().(redis.Pipeliner); ok {
		return p
	}
	return r.client.Pipeline()
}
