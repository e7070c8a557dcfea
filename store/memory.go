package store

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// memoryShards is the number of independently locked maps, 1<<memoryShardBits.
const (
	memoryShardBits = 8
	memoryShards    = 1 << memoryShardBits
)

// Memory is an in-process store: the state of each key lives in this
// process's memory and every decision runs the strategy's Go rule under that
// key's shard lock. It is exact for one process and knows nothing of any
// other: N instances, each with its own Memory, admit N times the limit.
//
// Keys are spread over 256 shards by a seeded hash, each with its own mutex,
// so decisions on different keys rarely contend. A background sweeper drops
// keys that are back at full capacity (their Strategy State's FullAt has
// passed), one shard at a time, so an idle client costs nothing after its
// reset time. It sweeps up to a horizon that never passes the store's own
// clock: one caller's clock reading far ahead cannot make it drop everyone
// else's state (see Sweep).
//
// The zero Memory is not usable; call NewMemory. Memory is safe for
// concurrent use. Close stops the sweeper.
type Memory struct {
	shards     [memoryShards]memoryShard
	seed       maphash.Seed
	clock      func() time.Time // WithMemoryClock's, or m.monotonic
	mono       bool             // clock is m.monotonic, which apply reads inline
	base       time.Time        // monotonic's wall clock reading, with its monotonic one
	baseNs     int64            // base in Unix ns
	sweepEvery time.Duration

	callerTime atomic.Bool  // a Request carried its own Now
	horizon    atomic.Int64 // µs; see Sweep. Only Sweep moves it, forward.
	sweeping   sync.Mutex   // one Sweep at a time
	closed     atomic.Bool
	overrides  memoryOverrides // see Overrider
	registry   memoryRegistry  // see Registrar
	stop       chan struct{}
	done       chan struct{}
}

// memoryShard is one lock's share of the keys: a chained hash table of
// their entries by hash (the maphash of the key with the namespace mixed
// in, see locate). An entry of hash h is in the chain that starts at
// table[h*fibonacci>>shift]: the table's length is a power of two,
// 1<<(64-shift), doubled whenever the entries outnumber it, so that a chain
// holds about one entry and a lookup hashes nothing more, and halved by
// Sweep while they fill less than a quarter of it (see shrink). A shard fills a
// cache line of its own, so that decisions on different shards write no
// common line.
type memoryShard struct {
	memoryShardFields
	_ [64 - unsafe.Sizeof(memoryShardFields{})]byte
}

// memoryShardFields are a shard's fields, padded to 64 bytes by
// memoryShard on every platform: 56 bytes where ints and pointers are 8
// bytes, 36 where they are 4.
type memoryShardFields struct {
	mu     sync.Mutex
	table  []*memoryEntry
	shift  uint  // 64 - log2(len(table))
	n      int   // entries
	latest int64 // latest decision time seen here, µs
}

// A shard is 64 bytes: with Memory 64-byte aligned (its size class, past
// 16 KiB, is a multiple of 64), each shard fills one cache line.
var _ [64 - unsafe.Sizeof(memoryShard{})]struct{}
var _ [unsafe.Sizeof(memoryShard{}) - 64]struct{}

// fibonacci is 2^64 divided by the golden ratio: multiplied by it, a hash's
// top bits depend on all of its bits (Fibonacci hashing).
const fibonacci = 0x9e3779b97f4a7c15

// memoryTableMin is the length of a shard's table when it is made.
const memoryTableMin = 8

// slot is where the chain of hash h starts.
func (sh *memoryShard) slot(h uint64) uint64 { return h * fibonacci >> sh.shift }

// find returns the entry of req's key under tag, of hash h, or nil, and the
// slot of its chain.
func (sh *memoryShard) find(req *Request, tag string, h uint64) (*memoryEntry, uint64) {
	i := sh.slot(h)
	e := sh.table[i]
	for e != nil && (e.h != h || !e.is(req, tag)) {
		e = e.next
	}
	return e, i
}

// insert adds e at the head of the chain at slot i (sh.slot(e.h)), then
// doubles the table if the entries now outnumber it.
func (sh *memoryShard) insert(e *memoryEntry, i uint64) {
	e.next, sh.table[i] = sh.table[i], e
	sh.n++
	if sh.n > len(sh.table) {
		sh.resize(2 * len(sh.table))
	}
}

// resize rehashes every entry into a table of n chains, n a power of two.
func (sh *memoryShard) resize(n int) {
	old := sh.table
	sh.table = make([]*memoryEntry, n)
	sh.shift = uint(64 - bits.TrailingZeros(uint(n)))
	for _, e := range old {
		for e != nil {
			next := e.next
			i := sh.slot(e.h)
			e.next, sh.table[i] = sh.table[i], e
			e = next
		}
	}
}

// memoryEntry is one key's state; prefix, tag and key identify it, h is
// its hash (see locate).
type memoryEntry struct {
	prefix, tag, key string
	state            algorithm.State
	next             *memoryEntry
	h                uint64
}

// MemoryOption configures NewMemory.
type MemoryOption interface{ applyMemory(*Memory) }

type memoryOption func(*Memory)

func (f memoryOption) applyMemory(m *Memory) { f(m) }

// WithMemoryClock sets the clock used for decisions that carry no time of
// their own and for sweeping, which never runs ahead of it (see
// Memory.Sweep): when fleetlimit.WithClock is a virtual clock, give the
// store the same one. Default: the wall clock read once at NewMemory,
// advanced by the monotonic clock since — about half the cost of time.Now,
// and immune to steps of the system clock (which would otherwise refill a
// token bucket or empty a window at once). A reading before the Unix epoch
// or after algorithm.MaxTimeMicros (an unset fake clock reads the year 1)
// fails the decision with ErrClockOutOfRange, and nothing is recorded.
func WithMemoryClock(now func() time.Time) MemoryOption {
	return memoryOption(func(m *Memory) {
		if now != nil {
			m.clock = now
		}
	})
}

// WithSweepInterval sets how often idle keys are swept. Default: one minute;
// values <= 0 keep the default.
func WithSweepInterval(d time.Duration) MemoryOption {
	return memoryOption(func(m *Memory) {
		if d > 0 {
			m.sweepEvery = d
		}
	})
}

// NewMemory returns an in-process store and starts its sweeper.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		seed:       maphash.MakeSeed(),
		sweepEvery: time.Minute,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	for _, o := range opts {
		o.applyMemory(m)
	}
	if m.clock == nil {
		m.base = time.Now()
		m.baseNs = m.base.UnixNano()
		m.clock, m.mono = m.monotonic, true
	}
	m.horizon.Store(math.MinInt64)
	for i := range m.shards {
		m.shards[i].resize(memoryTableMin)
		m.shards[i].latest = math.MinInt64
	}
	go m.sweepLoop()
	return m
}

// monotonic is the default clock: the wall clock read at NewMemory,
// advanced by the monotonic clock since (time.Since reads one clock,
// time.Now two). Its times carry no monotonic reading of their own
// (time.Unix is cheaper than Time.Add, which keeps one).
func (m *Memory) monotonic() time.Time {
	return time.Unix(0, m.baseNs+int64(time.Since(m.base)))
}

// Decide runs req.Strategy's Go rule on req.Key's state under its shard lock.
// It never blocks on I/O, so ctx and req.Timeout are not consulted. A time
// behind the sweep horizon is judged at the horizon (see Sweep).
func (m *Memory) Decide(ctx context.Context, req Request) (algorithm.Decision, error) {
	var d algorithm.Decision
	err := m.DecideTo(ctx, &req, &d)
	return d, err
}

// DecideTo is Decide with its request and decision passed by pointer: it
// reads *req (and does not keep it) and leaves the decision in *d. It is
// for a caller on the hot path that holds both in place, as the Limiter
// does: passed by value, the freshly written Request is copied for the
// call and the Decision back, and those copies cost about as much as the
// Limiter's own work (BenchmarkOverhead).
func (m *Memory) DecideTo(_ context.Context, req *Request, d *algorithm.Decision) error {
	if m.closed.Load() {
		*d = algorithm.Decision{}
		return ErrClosed
	}
	return m.apply(req, decideMode, nil, d)
}

// Peek runs req.Strategy's Go rule, under the key's shard lock, on a copy
// of the key's state (algorithm.Cloner), or on a fresh state for a key it
// does not hold, and drops the copy: the decision Decide would make now,
// with nothing recorded. The sweep's record of decision times is not moved
// either.
func (m *Memory) Peek(_ context.Context, req Request) (algorithm.Decision, error) {
	if m.closed.Load() {
		return algorithm.Decision{}, ErrClosed
	}
	var d algorithm.Decision
	err := m.apply(&req, peekMode, nil, &d)
	return d, err
}

// Refund runs req.Strategy's refund rule (algorithm.Refunder) on req.Key's
// state under its shard lock. A key it does not hold is full: the rule runs
// on a fresh state, which is dropped.
func (m *Memory) Refund(_ context.Context, req Request) (algorithm.Decision, error) {
	r, err := memoryRule[algorithm.Refunder](m, req.Strategy, notRefundable)
	if err != nil {
		return algorithm.Decision{}, err
	}
	var d algorithm.Decision
	err = m.apply(&req, refundMode, r.Refund, &d)
	return d, err
}

// mode is what a script run, or its Go rule, is asked to do: decide, peek
// at a decision, or refund (see package scripts).
type mode uint8

const (
	decideMode mode = iota
	peekMode
	refundMode
	leaseMode
	holdMode
	chargeMode
	atMostMode
)

// rule is a Go rule that apply runs on a key's state.
type rule = func(algorithm.State, time.Time, int64) (algorithm.Decision, error)

// memoryRule returns s as R, the rule interface of s (algorithm.Refunder,
// Granter, ...) that an operation of m runs; ErrClosed once m is closed,
// and cannot's error for a strategy that is not an R.
func memoryRule[R any](m *Memory, s algorithm.Strategy, cannot func(algorithm.Strategy) error) (R, error) {
	var r R
	if m.closed.Load() {
		return r, ErrClosed
	}
	r, ok := s.(R)
	if !ok {
		return r, cannot(s)
	}
	return r, nil
}

// run applies rule, for mode, to req.Key's state (a copy of it for a peek)
// under its shard lock, at req.Now or the store's clock (see apply).
func (m *Memory) run(req Request, mode mode, rule rule) (algorithm.Decision, error) {
	var d algorithm.Decision
	err := m.apply(&req, mode, rule, &d)
	return d, err
}

// apply is run, leaving the decision in *d; a nil rule is req.Strategy's
// Decide, called directly (the path of every Decide and Peek). It takes
// req and d by pointer and keeps neither: a Request is too large to copy
// at each call on the hot path, and each copy of a Decision returned by
// value waits on the stores that wrote it (BenchmarkOverhead).
func (m *Memory) apply(req *Request, mode mode, rule rule, d *algorithm.Decision) error {
	peek := mode == peekMode
	now := req.Now
	if !peek && !now.IsZero() && !m.callerTime.Load() {
		m.callerTime.Store(true)
	}
	tag, sh, h := m.locate(req)

	sh.mu.Lock()
	var us int64
	switch {
	case !now.IsZero():
		us = now.UnixMicro()
	case m.mono:
		// Read the clock under the lock, as Redis reads TIME inside the
		// script: decisions on a key then see time in the order they are
		// made. Read before it, a request preempted between the two would
		// be decided after later ones with an earlier time, and a token
		// bucket charges a clock behind its last writer for the difference.
		// This is m.monotonic(), with the µs taken from its ns.
		ns := m.baseNs + int64(time.Since(m.base))
		now, us = time.Unix(0, ns), ns/1000
		if ns%1000 < 0 {
			us-- // now.UnixMicro() rounds down
		}
	default:
		now = m.clock()
		us = now.UnixMicro()
		if us < 0 || us > algorithm.MaxTimeMicros {
			sh.mu.Unlock()
			*d = algorithm.Decision{}
			return fmt.Errorf("store: the memory store's clock reads %v: %w", now, ErrClockOutOfRange)
		}
	}
	// Read the horizon under the lock too: Sweep moves it before it locks
	// any shard, so a key this shard no longer holds was dropped at a
	// horizon no later than this one.
	if hz := m.horizon.Load(); us < hz {
		now, us = time.UnixMicro(hz), hz
	}
	e, slot := sh.find(req, tag, h)
	var st algorithm.State
	switch {
	case e == nil:
		st = req.Strategy.NewState()
	case !peek:
		st = e.state
	default:
		c, ok := e.state.(algorithm.Cloner)
		if !ok {
			sh.mu.Unlock()
			*d = algorithm.Decision{}
			return fmt.Errorf("store: %s state %T cannot be copied for a peek: %w: %w",
				req.Strategy.Name(), e.state, ErrRejected, errors.ErrUnsupported)
		}
		st = c.Clone()
	}
	var err error
	if rule == nil {
		*d, err = req.Strategy.Decide(st, now, req.N)
	} else {
		*d, err = rule(st, now, req.N)
	}
	if peek {
		sh.mu.Unlock()
		return err
	}
	if err == nil && e == nil && records(mode, d.Allowed, st, us) {
		sh.insert(&memoryEntry{prefix: req.Prefix, tag: tag, key: req.Key, state: st, h: h}, slot)
	}
	if us > sh.latest {
		sh.latest = us
	}
	sh.mu.Unlock()
	return err
}

// records reports whether the state st of a key the store did not hold
// is to be kept after rule's decision in mode (allowed: it admitted) at
// now (µs). A denied
// request on a fresh key records nothing, unless the strategy keeps
// something of it (a penalty box counts denials); nor does a refund to a
// fresh key; a permit operation keeps the state only while it holds a
// permit.
func records(mode mode, allowed bool, st algorithm.State, now int64) bool {
	switch mode {
	case decideMode, leaseMode, atMostMode:
		return allowed || st.FullAt() > now
	case holdMode, chargeMode:
		return st.FullAt() > now
	}
	return false
}

// locate returns req's algorithm tag, the shard that holds req.Key, and the
// key's hash within it.
func (m *Memory) locate(req *Request) (tag string, sh *memoryShard, h uint64) {
	tag = tagOf(req.Strategy)
	h = maphash.String(m.seed, req.Key)
	sh = &m.shards[h&(memoryShards-1)]
	// Mix the namespace in above the shard bits, so that one user key under
	// several prefixes or algorithms stays in one shard. Cheaply: an app has
	// a handful of namespaces, so the few that agree on these bits share a
	// hash, told apart by the string comparison in memoryEntry.is; hashing
	// the whole prefix on every decision would cost more than it saves.
	h ^= namespaceBits(req.Prefix, tag) << namespaceShift
	return tag, sh, h
}

// is reports whether e holds the state of req's key under tag.
func (e *memoryEntry) is(req *Request, tag string) bool {
	return e.key == req.Key && e.prefix == req.Prefix && e.tag == tag
}

// Reset drops req.Key's state for req.Strategy's algorithm under its shard
// lock: the next decision on it sees a fresh key. It never blocks on I/O, so
// ctx and req.Timeout are not consulted.
func (m *Memory) Reset(_ context.Context, req Request) error {
	if m.closed.Load() {
		return ErrClosed
	}
	tag, sh, h := m.locate(&req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.slot(h)
	for p := &sh.table[i]; *p != nil; p = &(*p).next {
		if e := *p; e.h == h && e.is(&req, tag) {
			*p = e.next
			sh.n--
			return nil
		}
	}
	return nil
}

// tagOf is the strategy's script tag, or its name if it has no script (a
// strategy for in-process use only).
func tagOf(s algorithm.Strategy) string {
	if sc := s.Script(); sc != nil {
		return sc.Tag
	}
	return s.Name()
}

// namespaceShift is where locate mixes namespaceBits into a key's hash:
// just above the shard bits, so that all of namespaceBits' 56 bits stay in
// the 64 of the hash (at most 8 shard bits).
const namespaceShift = memoryShardBits

var _ [8 - namespaceShift]struct{} // namespaceBits' 56 bits fit above the shard bits

// namespaceBits condenses a prefix and a tag into 56 bits to mix into a
// key's hash: their lengths and a few of their bytes.
func namespaceBits(prefix, tag string) uint64 {
	b := uint64(len(prefix))<<16 | uint64(len(tag))<<24
	if len(prefix) > 0 {
		b |= uint64(prefix[len(prefix)-1]) | uint64(prefix[len(prefix)/2])<<8
	}
	if len(tag) > 0 {
		b ^= uint64(tag[0])<<32 | uint64(tag[len(tag)-1])<<40 | uint64(tag[len(tag)/2])<<48
	}
	return b
}

// Len returns the number of keys held, for tests and metrics.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Sweep moves the sweep horizon forward and drops every key that is back at
// full capacity at it. The sweeper calls it periodically; tests may call it
// directly.
//
// The horizon is the store's clock, or, once callers pass their own time
// (Request.Now, as fleetlimit.WithClock does), the earlier of the store's
// clock and the latest time any caller has passed. It only moves forward,
// and a decision whose time is behind it is judged at it. That rule is what
// makes dropping safe: a key is dropped only when its state equals a fresh
// one at every time a later decision can be judged at.
//
// Why both bounds. Callers' times may be virtual and run behind the store's
// clock: following the callers keeps their state until it is full on their
// own time axis. But callers' times are not trusted beyond the
// store's own clock: one reading a century ahead (a clock glitch) would
// otherwise become "now" for every key, and every sweep would drop every
// other key's state, giving spent quotas back for good. A reading ahead of
// the store's clock moves the horizon no further than that clock, so it
// affects only its own key, as it would on Redis. Rejecting or clamping such
// readings instead would make this store decide differently from Redis,
// which takes any WithClock time, and would refuse virtual clocks that
// legitimately run ahead of the wall clock (simulations).
//
// So, with one clock shared by every caller (the normal case), no decision
// is ever behind the horizon and nothing changes. Give a virtual clock to
// the store too (WithMemoryClock), not only to the limiter: callers on a
// virtual clock behind the store's clock are otherwise lifted to the store's
// clock as soon as one caller passes a time up to it. When callers' traffic
// stops altogether, the last keys wait for the next decision (their number
// is bounded by the keys already made).
func (m *Memory) Sweep() {
	m.sweeping.Lock()
	defer m.sweeping.Unlock()
	hz := m.clock().UnixMicro()
	if m.callerTime.Load() {
		latest := int64(math.MinInt64)
		for i := range m.shards {
			sh := &m.shards[i]
			sh.mu.Lock()
			latest = max(latest, sh.latest)
			sh.mu.Unlock()
		}
		hz = min(hz, latest)
	}
	if hz < m.horizon.Load() {
		hz = m.horizon.Load() // a store clock set back: never move back
	}
	m.horizon.Store(hz)
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for i, e := range sh.table {
			// Rebuild the chain without the entries that are full.
			var keep *memoryEntry
			for e != nil {
				next := e.next
				if e.state.FullAt() > hz {
					e.next, keep = keep, e
				} else {
					sh.n--
				}
				e = next
			}
			sh.table[i] = keep
		}
		sh.shrink()
		sh.mu.Unlock()
	}
}

// shrink halves the table while its entries fill less than a quarter of
// it, down to memoryTableMin: a shard gives back what a burst of keys made
// it grow to once Sweep has dropped them. After it the entries fill at
// least a quarter of the table (or it is at its least), and insert doubles
// it only past one entry per chain, so the two never take turns.
func (sh *memoryShard) shrink() {
	n := len(sh.table)
	for n > memoryTableMin && 4*sh.n < n {
		n /= 2
	}
	if n < len(sh.table) {
		sh.resize(n)
	}
}

func (m *Memory) sweepLoop() {
	defer close(m.done)
	t := time.NewTicker(m.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Sweep()
		}
	}
}

// Close stops the sweeper and drops all state. It returns ErrClosed when
// called again.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return ErrClosed
	}
	close(m.stop)
	<-m.done
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		clear(sh.table)
		sh.n = 0
		sh.mu.Unlock()
	}
	return nil
}

// notRefundable is the error for a strategy that has no refund rule.
func notRefundable(s algorithm.Strategy) error {
	return fmt.Errorf("store: strategy %s cannot be refunded: %w: %w", s.Name(), ErrRejected, errors.ErrUnsupported)
}
