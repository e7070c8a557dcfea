package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/ctxdone"
)

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
// Timeouts: every decision is bounded by Request.Timeout and its context.
// go-redis honours context deadlines only with ContextTimeoutEnabled, so
// NewRedis refuses a *redis.Client, *redis.ClusterClient or *redis.Ring
// built without it; the store then uses your client's one pool and its hooks
// (tracing, metrics). A type of your own that embeds a go-redis client is
// judged by the client it embeds, and is pipelined the same way. Other
// UniversalClient implementations are called on a goroutine that the
// deadline abandons, and without pipelining.
//
// Redis is safe for concurrent use.
type Redis struct {
	client  redis.UniversalClient
	bounded bool // client honours context deadlines
	closed  atomic.Bool
	combine *combiner   // nil: every decision its own round trip
	pipes   sync.Pool   // the combiners' empty pipelines (redis.Pipeliner), for reuse
	shards  shards      // per Cluster master or Ring shard: see shard.go
	dials   *dialErrors // the client's failing dials; nil for a client of another kind
}

// RedisOption configures NewRedis.
type RedisOption interface{ applyRedis(*Redis) }

type redisOption func(*Redis)

func (f redisOption) applyRedis(r *Redis) { f(r) }

// DefaultMaxInFlight is the number of round trips a Redis store runs at once
// before it pipelines further decisions; see WithMaxInFlight. At 8
// concurrent callers it made 1.25x the decisions/s that 4 did, and about as
// many as with pipelining off; from 32 callers up, pipelining makes more
// (store's BenchmarkMaxInFlight; docs/performance.md).
const DefaultMaxInFlight = 8

// WithMaxInFlight sets how many round trips to Redis the store runs at once
// before it pipelines: decisions arriving while n round trips are in flight
// queue up and ride the next one together, as one pipeline of EVALSHAs.
// A lone caller never waits for another. With a Cluster or Ring client the
// n round trips are per server, and a pipeline goes to one server: a slow
// server holds up no other's decisions. n is capped at the client's
// PoolSize (per server), so that a decision that could run at once never
// waits for a connection of the main pool instead of joining a pipeline
// (pipelines have a pool of their own). n <= 0 turns pipelining off: every
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
//
// It returns an error wrapping ErrInvalidClient for a nil client, and for a
// go-redis *redis.Client, *redis.ClusterClient or *redis.Ring built without
// ContextTimeoutEnabled: such a client ignores context deadlines, so a hung
// Redis would hold every caller for its socket timeouts (3s by default)
// instead of the limiter's timeout.
//
// On a go-redis client NewRedis installs a hook (redis.Hook) that watches
// dials and nothing else: it remembers the error of each address's last
// failed dial, so that a decision that times out while no connection can be
// opened wraps the cause ("connection refused", "no such host", a TLS
// handshake's error) instead of only the deadline. On a Cluster or Ring
// client it reaches the node clients created after NewRedis, which is every
// node when the store is built before the client's first command. Each
// NewRedis adds one hook: build one store per client.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	bounded, err := honoursDeadlines(client)
	if err != nil {
		return nil, err
	}
	r := &Redis{client: client, bounded: bounded, dials: watchDials(client)}
	r.combine = &combiner{r: r, maxInFlight: DefaultMaxInFlight}
	for _, o := range opts {
		o.applyRedis(r)
	}
	if !r.bounded {
		r.combine = nil
	}
	if _, p, _ := clientOptions(client); r.combine != nil && p > 0 {
		r.combine.maxInFlight = min(r.combine.maxInFlight, p)
	}
	return r, nil
}

// ErrInvalidClient is wrapped by NewRedis's errors.
var ErrInvalidClient = errors.New("store: invalid redis client")

// honoursDeadlines reports whether client honours context deadlines, and an
// error for a nil client or a go-redis client built without
// ContextTimeoutEnabled. A client is recognised by its Options method, so a
// type that embeds *redis.Client (or a ClusterClient or Ring) is judged by
// the client it embeds; a client with no such method reports false.
func honoursDeadlines(client redis.UniversalClient) (bool, error) {
	if client == nil {
		return false, fmt.Errorf("%w: nil client", ErrInvalidClient)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return false, fmt.Errorf("%w: nil %T", ErrInvalidClient, client)
	}
	enabled, _, known := clientOptions(client)
	if !known {
		return false, nil
	}
	if !enabled {
		return false, fmt.Errorf("%w: build the go-redis client with ContextTimeoutEnabled: true, "+
			"or it ignores the limiter's deadlines and a hung Redis holds every caller for its socket timeouts", ErrInvalidClient)
	}
	return true, nil
}

// clientOptions reads what the store needs of a go-redis client's options:
// ContextTimeoutEnabled and the main pool's size (per server of a Cluster
// or Ring); known is false for a client of another kind. A client is
// recognised by its Options method, so a type that embeds one is read as
// the client it embeds.
func clientOptions(client redis.UniversalClient) (contextTimeout bool, poolSize int, known bool) {
	switch c := client.(type) {
	case interface{ Options() *redis.Options }:
		return c.Options().ContextTimeoutEnabled, c.Options().PoolSize, true
	case interface{ Options() *redis.ClusterOptions }:
		return c.Options().ContextTimeoutEnabled, c.Options().PoolSize, true
	case interface{ Options() *redis.RingOptions }:
		return c.Options().ContextTimeoutEnabled, c.Options().PoolSize, true
	}
	return false, 0, false
}

// Decide runs the strategy's script on its key with one EVALSHA (EVAL when the
// script is not cached), bounded by req.Timeout and ctx.
func (r *Redis) Decide(ctx context.Context, req Request) (algorithm.Decision, error) {
	return r.decide(ctx, req, decideMode)
}

// Peek runs the strategy's script as Decide does, with the calling
// convention's peek flag: the script decides and writes nothing, so the
// key's value and TTL are unchanged, and it runs on a read-only replica
// too. It refuses a script that does not set algorithm.Script.Peeks.
func (r *Redis) Peek(ctx context.Context, req Request) (algorithm.Decision, error) {
	return r.decide(ctx, req, peekMode)
}

// Refund runs the strategy's script as Decide does, in the calling
// convention's refund mode: one EVALSHA gives req.N units back. It refuses
// a strategy that is not an algorithm.Refunder or whose script does not set
// algorithm.Script.Refunds.
func (r *Redis) Refund(ctx context.Context, req Request) (algorithm.Decision, error) {
	return r.decide(ctx, req, refundMode)
}

// decide is Decide, Peek or Refund, by mode.
func (r *Redis) decide(ctx context.Context, req Request, mode mode) (algorithm.Decision, error) {
	if r.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	script := req.Strategy.Script()
	if script == nil {
		return algorithm.Decision{}, fmt.Errorf("store: strategy %s has no Lua script: %w", req.Strategy.Name(), algorithm.ErrInvalidStrategy)
	}
	switch mode {
	case peekMode:
		if !script.Peeks {
			return algorithm.Decision{}, fmt.Errorf("store: the script of strategy %s does not honour the peek flag: %w: %w", req.Strategy.Name(), ErrRejected, errors.ErrUnsupported)
		}
	case refundMode:
		if _, ok := req.Strategy.(algorithm.Refunder); !ok || !script.Refunds {
			return algorithm.Decision{}, notRefundable(req.Strategy)
		}
	}
	var tail []any
	switch mode {
	case peekMode:
		tail = []any{"peek"}
	case refundMode:
		tail = []any{"refund"}
	}
	reply, err := r.eval(ctx, req, script, tail)
	if err != nil {
		return algorithm.Decision{}, err
	}
	if rp, ok := req.Strategy.(algorithm.Replier); ok {
		return parseLongReply(reply, rp, req.N)
	}
	return parseReply(reply, req.Strategy.Limit())
}

// eval runs script for req with the calling convention's arguments and
// then tail, bounded by req.Timeout and ctx, and returns its reply or the
// classed error.
func (r *Redis) eval(ctx context.Context, req Request, script *algorithm.Script, tail []any) (any, error) {
	argv, key := evalArgv(req, script, tail)
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	var reply any
	var err error
	switch {
	case r.combine != nil:
		reply, err = r.combinerFor(req.Key).do(ctx, script, argv)
	case r.bounded:
		reply, err = runArgv(ctx, r.client, script, argv)
	default:
		reply, err = abandonable(ctx, func(ctx context.Context) (any, error) { return runArgv(ctx, r.client, script, argv) })
	}
	if err != nil {
		return nil, r.failed(ctx, key, err)
	}
	r.noteRouted()
	return reply, nil
}

// evalArgv returns the command line of req's EVALSHA of script, with the
// calling convention's arguments and then tail: "evalsha", the script's
// SHA-1, the number of keys, the keys (redisKeys), now ("" for the server's
// TIME), n, the strategy's ScriptArgs and tail; and the name of its first
// key. Its first key is at index 3 (redis.Cmd.SetFirstKeyPos). It is one
// slice, which go-redis sends as it is, where its own EvalSha would take a
// slice of keys and a slice of arguments and copy both into a third.
func evalArgv(req Request, script *algorithm.Script, tail []any) ([]any, string) {
	static := req.Strategy.ScriptArgs()
	var now any = ""
	if !req.Now.IsZero() {
		now = req.Now.UnixMicro() // written in decimal, as ARGV[1] is read
	}
	argv := make([]any, 0, 6+len(script.Keys)+len(static)+len(tail))
	var first string
	if len(script.Keys) == 0 {
		first = RedisKey(req.Prefix, req.Key, script.Tag)
		argv = append(argv, "evalsha", shaOf(script), 1, first)
	} else {
		argv = append(argv, "evalsha", shaOf(script), len(script.Keys))
		for i, suffix := range script.Keys {
			k := RedisKey(req.Prefix, req.Key, suffix)
			if i == 0 {
				first = k
			}
			argv = append(argv, k)
		}
	}
	argv = append(argv, now, req.N)
	argv = append(argv, static...)
	return append(argv, tail...), first
}

// shas holds each script's SHA-1 as an interface value, made once per
// script source: boxed at each call, it would cost an allocation per
// decision. Keyed by the digest, not the *Script, so that strategies built
// again and again (a composite's script is its own) share one entry. The
// map is replaced, never changed: a look-up is one atomic load.
var (
	shas   atomic.Pointer[map[string]any]
	shasMu sync.Mutex // serializes replacing shas
)

// shaOf is s.SHA1 as an interface value (see shas).
func shaOf(s *algorithm.Script) any {
	if m := shas.Load(); m != nil {
		if v, ok := (*m)[s.SHA1]; ok {
			return v
		}
	}
	shasMu.Lock()
	defer shasMu.Unlock()
	m := map[string]any{}
	if old := shas.Load(); old != nil {
		if v, ok := (*old)[s.SHA1]; ok {
			return v
		}
		m = maps.Clone(*old)
	}
	v := any(s.SHA1)
	m[s.SHA1] = v
	shas.Store(&m)
	return v
}

// runArgv runs argv, an EVALSHA of s built by evalArgv, on c; then, if the
// server does not have the script, the same line as EVAL of its source.
func runArgv(ctx context.Context, c redis.UniversalClient, s *algorithm.Script, argv []any) (any, error) {
	cmd := evalshaCmd(ctx, argv)
	_ = c.Process(ctx, once{cmd})
	reply, err := cmd.Result()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return reply, err
	}
	cmd = evalshaCmd(ctx, asEval(s, argv))
	_ = c.Process(ctx, once{cmd})
	return cmd.Result()
}

// evalshaCmd is the command of argv (evalArgv's, or asEval's), routed by
// its first key.
func evalshaCmd(ctx context.Context, argv []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, argv...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// once is a script's command as it is handed to go-redis, which must never
// send it twice: go-redis resends a command whose connection failed (up to
// the client's MaxRetries, 3 by default), and a script that did run before
// the connection failed would run again, charging its request twice (a
// decision, a refund, a lease's hand-back, a settle). A command go-redis
// knows it never wrote is still sent again (its first send); one that may
// have reached Redis fails, and the failure policy decides.
type once struct{ *redis.Cmd }

// NoRetry tells go-redis not to resend the command (redis.Cmder).
func (once) NoRetry() bool { return true }

// asEval is argv, an EVALSHA of s, as an EVAL of s's source.
func asEval(s *algorithm.Script, argv []any) []any {
	eval := slices.Clone(argv)
	eval[0], eval[1] = "eval", s.Source
	return eval
}

// redisKeys returns the keys of req's script: one per Script.Keys suffix, or
// the one of its Tag.
func redisKeys(req Request, script *algorithm.Script) []string {
	if len(script.Keys) == 0 {
		return []string{RedisKey(req.Prefix, req.Key, script.Tag)}
	}
	keys := make([]string, len(script.Keys))
	for i, suffix := range script.Keys {
		keys[i] = RedisKey(req.Prefix, req.Key, suffix)
	}
	return keys
}

// failed is the error of a call on key that failed with err: err classed by
// redisError, and named as the deadline's when ctx is done. When the
// deadline struck while dials are failing, it wraps their errors too
// (dialErrors), so that errors.Is(err, syscall.ECONNREFUSED) holds for a
// server that refuses connections. An error that is not a rejection of
// this request asks a Cluster client to reload its slot map
// (followTopology).
func (r *Redis) failed(ctx context.Context, key string, err error) error {
	err = r.classed(ctx, key, err)
	if !errors.Is(err, ErrRejected) {
		r.followTopology()
	}
	return err
}

// classed is failed's error, without the reload.
func (r *Redis) classed(ctx context.Context, key string, err error) error {
	if ctxErr := ctxdone.Err(ctx); ctxErr != nil {
		if !errors.Is(err, ctxErr) {
			// go-redis reports a deadline that struck inside a socket
			// read as the socket's i/o timeout; say which deadline it was.
			err = fmt.Errorf("%w: %w", ctxErr, err)
		}
		// go-redis retries a failing dial until the deadline, which then
		// hides the cause: give the dial's own error when one is known.
		if dialErr := r.dials.failing(); dialErr != nil {
			err = fmt.Errorf("%w (dialing Redis fails: %w)", err, dialErr)
		} else if r.client.PoolStats().TotalConns == 0 {
			err = fmt.Errorf("%w (no connection to Redis is open: wrong address or server down? Redis.Ping names the cause)", err)
		}
	}
	return redisError(key, err)
}

// Reset deletes the keys that hold req.Key's state for req.Strategy's
// algorithm (RedisKey(req.Prefix, req.Key, tag), or one per Script.Keys
// suffix for a composite) with one DEL, which Redis
// applies atomically between scripts. It is bounded by req.Timeout and ctx,
// as Decide is, and is never pipelined.
func (r *Redis) Reset(ctx context.Context, req Request) error {
	if r.closed.Load() {
		return ErrClosed
	}
	script := req.Strategy.Script()
	if script == nil {
		return fmt.Errorf("store: strategy %s has no Lua script: %w", req.Strategy.Name(), algorithm.ErrInvalidStrategy)
	}
	keys := redisKeys(req, script)
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	_, err := r.within(ctx, func(ctx context.Context) (any, error) { return r.client.Del(ctx, keys...).Result() })
	if err != nil {
		return r.failed(ctx, keys[0], err)
	}
	return nil
}

// run is runScript on the store's client.
func (r *Redis) run(ctx context.Context, s *algorithm.Script, keys []string, args []any) (any, error) {
	return runScript(ctx, r.client, s, keys, args)
}

// runScript is EVALSHA on c, then EVAL if the server does not have the
// script.
func runScript(ctx context.Context, c redis.Scripter, s *algorithm.Script, keys []string, args []any) (any, error) {
	reply, err := c.EvalSha(ctx, s.SHA1, keys, args...).Result()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return reply, err
	}
	return c.Eval(ctx, s.Source, keys, args...).Result()
}

// abandonable runs call on a goroutine so that ctx can end the wait even
// when the client ignores deadlines. The goroutine finishes on its own when
// the client gives up.
func abandonable(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
	type result struct {
		reply any
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		reply, err := call(ctx)
		ch <- result{reply, err}
	}()
	select {
	case res := <-ch:
		return res.reply, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// within runs call bounded by ctx: directly when the client ends a call at
// its context's deadline (bounded), else abandonable. The decision path
// (eval) writes the same choice out, to make no closure when bounded.
func (r *Redis) within(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
	if r.bounded {
		return call(ctx)
	}
	return abandonable(ctx, call)
}

// redisError gives a failed call context and its class: ErrWrongType or
// ErrBadReply where one applies, ErrClosed for a closed go-redis client,
// ErrCommandRefused for a command the server does not run, ErrRejected for
// any other error reply about this request, ErrUnavailable for the rest.
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
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("store: redis decision on %q: %w: %w", key, ErrClosed, err)
	}
	if cmd, ok := refusedCommand(err); ok {
		return fmt.Errorf("store: redis decision on %q: %w: %s: %w", key, ErrCommandRefused, cmd, err)
	}
	var reply redis.Error
	if errors.As(err, &reply) && !unavailableReply(reply) {
		return fmt.Errorf("store: redis decision on %q: %w: %w", key, ErrRejected, err)
	}
	return fmt.Errorf("store: redis decision on %q: %w: %w", key, ErrUnavailable, err)
}

// refusedCommand reports whether err says that the server does not run a
// command the store sends, or one a script calls, and names it: EVALSHA or
// EVAL renamed away (rename-command EVALSHA ""), a proxy or managed service
// that does not offer scripting, a script command renamed away. Such a
// server cannot decide anyone's request, so the error is an outage's. The
// replies are matched by text, as Redis words them: "ERR unknown command
// 'evalsha', with args beginning with: ...", "ERR unknown command `evalsha`"
// (Redis 6), "ERR Unknown Redis command called from script" (Redis 7; "from
// Lua script" in 6), and "ERR unsupported command" (proxies). The name is
// the command upper-cased, or "a command called by a script" when the reply
// does not say.
func refusedCommand(err error) (string, bool) {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return "", false
	}
	msg := reply.Error()
	lower := strings.ToLower(msg)
	if strings.Contains(lower, "unknown redis command called from") {
		return "a command called by a script", true
	}
	for _, what := range []string{"unknown command ", "unsupported command "} {
		i := strings.Index(lower, what)
		if i < 0 {
			continue
		}
		rest := msg[i+len(what):]
		if len(rest) > 0 && (rest[0] == '\'' || rest[0] == '`') {
			if j := strings.IndexAny(rest[1:], "'`"); j >= 0 {
				return strings.ToUpper(rest[1 : 1+j]), true
			}
		}
		return "a command", true
	}
	return "", false
}

// unavailableReplies are the prefixes of Redis error replies that mean the
// server cannot serve anyone right now, as opposed to an error of one key.
var unavailableReplies = []string{
	"LOADING", "OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
	"NOREPLICAS", "BUSY", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM",
	"max number of clients",
}

// unavailableReply reports whether an error reply is one of
// unavailableReplies.
func unavailableReply(reply redis.Error) bool {
	for _, prefix := range unavailableReplies {
		if redis.HasErrorPrefix(reply, prefix) {
			return true
		}
	}
	return false
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

// parseLongReply reads the reply of a strategy whose script returns more
// than the calling convention's four integers (algorithm.Replier).
func parseLongReply(reply any, rp algorithm.Replier, n int64) (algorithm.Decision, error) {
	return readReply(reply, rp.Reply, n)
}

// readReply is a reply of integers as the strategy's read reads them, for
// a request of cost n; what read refuses is ErrBadReply.
func readReply[T any](reply any, read func([]int64, int64) (T, error), n int64) (T, error) {
	var zero T
	ints, err := replyInts(reply)
	if err != nil {
		return zero, err
	}
	v, err := read(ints, n)
	if err != nil {
		return zero, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	return v, nil
}

// replyInts reads a script's reply as a list of integers.
func replyInts(reply any) ([]int64, error) {
	vals, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrBadReply, reply)
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		if ints[i], ok = v.(int64); !ok {
			return nil, fmt.Errorf("%w: element %d is %T", ErrBadReply, i, v)
		}
	}
	return ints, nil
}

func durationMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Close marks the store closed: later decisions, and later calls of Close,
// return ErrClosed. The caller's client is left open.
func (r *Redis) Close() error {
	if r.closed.Swap(true) {
		return ErrClosed
	}
	return nil
}
