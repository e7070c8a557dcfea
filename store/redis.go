package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

var _ Store = (*Redis)(nil)

// Redis is a store shared by every process that points at the same Redis:
// each decision is one EVALSHA of the strategy's Lua twin, which reads and
// writes one key atomically inside Redis. Decisions from a whole fleet on one
// key are therefore serialized by Redis and the limit holds across the fleet.
//
// Keys are RedisKey(prefix, key, tag): the user's key is a hash tag, so any
// Redis Cluster routes every decision to one slot. Every key carries a TTL no
// longer than the time until it is back at full capacity, so a quiet client
// leaves nothing behind. When the server's script cache is empty (after
// SCRIPT FLUSH, a restart or a failover) the store falls back to EVAL, which
// reloads the script; callers see no error.
//
// Time: a Request without Now is judged at the Redis server's TIME, read
// inside the script, so clock skew between app servers cannot bend a limit.
//
// Timeouts: go-redis ignores context deadlines unless the client was built
// with ContextTimeoutEnabled. So that Request.Timeout bounds every decision
// whatever client is passed in, NewRedis uses a *redis.Client,
// *redis.ClusterClient or *redis.Ring that lacks it through a twin client
// built from the same options with it enabled (its own connection pool,
// closed by Close); other UniversalClient implementations are called on a
// goroutine that the deadline abandons. The twin has its own pool, does not
// run hooks added to your client with AddHook (tracing, metrics), and, for a
// Sentinel client (redis.NewFailoverClient), is not among the pools go-redis
// drops on failover, so it may keep connections to a demoted primary until
// they fail (Sentinel's CLIENT KILL ends them). Build your client with
// ContextTimeoutEnabled: true to share its pool and hooks and avoid all of
// this.
//
// Redis is safe for concurrent use.
type Redis struct {
	client   redis.UniversalClient
	owned    bool // client is our twin; Close closes it
	bounded  bool // client honours context deadlines
	closed   atomic.Bool
	evalOnly bool
	combine  *combiner // nil: every decision its own round trip
}

// RedisOption configures NewRedis.
type RedisOption interface{ applyRedis(*Redis) }

type redisOption func(*Redis)

func (f redisOption) applyRedis(r *Redis) { f(r) }

// WithEvalOnly sends the whole script with EVAL on every decision instead of
// EVALSHA. It exists to measure what EVALSHA saves; leave it off.
func WithEvalOnly() RedisOption {
	return redisOption(func(r *Redis) { r.evalOnly = true })
}

// DefaultMaxInFlight is the number of round trips a Redis store runs at once
// before it pipelines further decisions; see WithMaxInFlight.
const DefaultMaxInFlight = 4

// WithMaxInFlight sets how many round trips to Redis the store runs at once
// before it pipelines: decisions arriving while n round trips are in flight
// queue up and ride the next one together, as one pipeline of EVALSHAs.
// A lone caller never waits for another. n <= 0 turns pipelining off: every
// decision is its own round trip on its own pooled connection. Default:
// DefaultMaxInFlight. Pipelining needs a client that honours deadlines (see
// Redis); with any other it is off.
func WithMaxInFlight(n int) RedisOption {
	return redisOption(func(r *Redis) {
		r.combine = nil
		if n > 0 {
			r.combine = &combiner{r: r, maxInFlight: n}
		}
	})
}

// NewRedis returns a store over client (standalone, Sentinel-backed via
// redis.NewFailoverClient, or Cluster). The caller keeps ownership of client:
// Close does not close it.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) *Redis {
	r := &Redis{client: client}
	r.client, r.owned, r.bounded = deadlineTwin(client)
	r.combine = &combiner{r: r, maxInFlight: DefaultMaxInFlight}
	for _, o := range opts {
		o.applyRedis(r)
	}
	if !r.bounded {
		r.combine = nil
	}
	return r
}

// deadlineTwin returns a client that honours context deadlines: client itself
// if it already does, a twin built from its options if it is a go-redis type
// that does not (owned: the store must close it), or client with bounded
// false when its type is unknown.
//
// The twin gets its own push-notification processor and no client-side
// cache: go-redis writes the client's processor into its options, and
// sharing it (or a cache) between two clients is not supported.
func deadlineTwin(client redis.UniversalClient) (c redis.UniversalClient, owned, bounded bool) {
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		if o.ContextTimeoutEnabled {
			return client, false, true
		}
		cp := *o
		cp.ContextTimeoutEnabled = true
		cp.PushNotificationProcessor = nil
		cp.ClientSideCache, cp.ClientSideCacheConfig = nil, nil
		if o.MaintNotificationsConfig != nil {
			mc := *o.MaintNotificationsConfig
			cp.MaintNotificationsConfig = &mc
		}
		return redis.NewClient(&cp), true, true
	case *redis.ClusterClient:
		o := c.Options()
		if o.ContextTimeoutEnabled {
			return client, false, true
		}
		cp := *o
		cp.ContextTimeoutEnabled = true
		cp.PushNotificationProcessor = nil
		if o.MaintNotificationsConfig != nil {
			mc := *o.MaintNotificationsConfig
			cp.MaintNotificationsConfig = &mc
		}
		return redis.NewClusterClient(&cp), true, true
	case *redis.Ring:
		o := c.Options()
		if o.ContextTimeoutEnabled {
			return client, false, true
		}
		cp := *o
		cp.ContextTimeoutEnabled = true
		return redis.NewRing(&cp), true, true
	}
	return client, false, false
}

// Decide runs the strategy's script on its key with one EVALSHA (EVAL when the
// script is not cached), bounded by req.Timeout and ctx.
func (r *Redis) Decide(ctx context.Context, req Request) (algorithm.Decision, error) {
	if r.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	script := req.Strategy.Script()
	if script == nil {
		return algorithm.Decision{}, fmt.Errorf("store: strategy %s has no Lua script: %w", req.Strategy.Name(), algorithm.ErrInvalidStrategy)
	}
	keys := []string{RedisKey(req.Prefix, req.Key, script.Tag)}
	static := req.Strategy.ScriptArgs()
	args := make([]any, 2, 2+len(static))
	if !req.Now.IsZero() {
		args[0] = strconv.FormatInt(req.Now.UnixMicro(), 10)
	} else {
		args[0] = ""
	}
	args[1] = req.N
	args = append(args, static...)

	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	var reply any
	var err error
	switch {
	case r.combine != nil:
		reply, err = r.combine.do(ctx, script, keys, args)
	case r.bounded:
		reply, err = r.run(ctx, script, keys, args)
	default:
		reply, err = r.runAbandonable(ctx, script, keys, args)
	}
	if err != nil {
		if ctxErr := contextErr(ctx); ctxErr != nil && !errors.Is(err, ctxErr) {
			// go-redis reports a deadline that struck inside a socket read as
			// the socket's i/o timeout; say which deadline it was.
			err = fmt.Errorf("%w: %w", ctxErr, err)
		}
		return algorithm.Decision{}, redisError(keys[0], err)
	}
	return parseReply(reply, req.Strategy.Limit())
}

// contextErr is ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed: Err lags the deadline until the context's timer has run, while
// a socket deadline set to the same instant may already have fired.
func contextErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// run is EVALSHA, then EVAL if the server does not have the script.
func (r *Redis) run(ctx context.Context, s *algorithm.Script, keys []string, args []any) (any, error) {
	if !r.evalOnly {
		reply, err := r.client.EvalSha(ctx, s.SHA1, keys, args...).Result()
		if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return reply, err
		}
	}
	return r.client.Eval(ctx, s.Source, keys, args...).Result()
}

// runAbandonable runs the call on a goroutine so that ctx can end the wait
// even when the client ignores deadlines. The goroutine finishes on its own
// when the client gives up.
func (r *Redis) runAbandonable(ctx context.Context, s *algorithm.Script, keys []string, args []any) (any, error) {
	type result struct {
		reply any
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		reply, err := r.run(ctx, s, keys, args)
		ch <- result{reply, err}
	}()
	select {
	case res := <-ch:
		return res.reply, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// redisError gives a failed call context, and a sentinel where one applies.
func redisError(key string, err error) error {
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("store: script on %q returned nil: %w", key, ErrBadReply)
	}
	// By text, not by redis.Error's prefix: an error raised inside a script
	// arrives wrapped ("ERR Error running script ...: WRONGTYPE ...") on
	// some Redis versions, and our scripts raise WRONGTYPE themselves.
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("store: redis key %q: %w: %w", key, ErrWrongType, err)
	}
	return fmt.Errorf("store: redis decision on %q: %w", key, err)
}

// parseReply reads the calling convention's {allowed, remaining,
// retry_after_us, reset_after_us}.
func parseReply(reply any, limit int64) (algorithm.Decision, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 4 {
		return algorithm.Decision{}, fmt.Errorf("%w: %v", ErrBadReply, reply)
	}
	var ints [4]int64
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return algorithm.Decision{}, fmt.Errorf("%w: element %d is %T", ErrBadReply, i, v)
		}
		ints[i] = n
	}
	return algorithm.Decision{
		Allowed:    ints[0] == 1,
		Limit:      limit,
		Remaining:  ints[1],
		RetryAfter: durationMicros(ints[2]),
		ResetAfter: durationMicros(ints[3]),
	}, nil
}

func durationMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Close closes the twin client NewRedis made, if any; the caller's client is
// left open. Later calls return ErrClosed.
func (r *Redis) Close() error {
	if r.closed.Swap(true) {
		return ErrClosed
	}
	if r.owned {
		return r.client.Close()
	}
	return nil
}
