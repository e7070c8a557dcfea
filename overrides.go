package fleetlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
	"github.com/fleetlimit/fleetlimit/store"
)

// DefaultOverrideRefresh is WithOverrides' refresh interval when given 0.
const DefaultOverrideRefresh = 500 * time.Millisecond

// ErrNoOverrides is returned by SetOverride, ClearOverride, Block, Unblock
// and Overrides of a limiter built without WithOverrides.
var ErrNoOverrides = errors.New("fleetlimit: overrides are off (WithOverrides)")

// The values of an override table that are not rules.
const (
	textBlock  = "block"
	textExempt = "unlimited"
)

// WithOverrides lets the fleet change one key's rule at run time, through
// the store: SetOverride (another limit, or algorithm.Unlimited to exempt
// the key), Block, and their undoing, by any instance or by the
// command-line tool (cmd/fleetlimit). Give it to every instance of the
// limiter: an instance without it ignores the overrides.
//
// The model: the overrides live in the store, in one table per limiter
// (named after the key prefix: prefix + "overrides"; store.Overrider),
// each with its own expiry, so they survive an instance's restart. Each
// instance keeps a copy in memory, consulted in the decision's first
// stage as a tier is (WithStrategyFor): an overridden key is decided by
// its override's rule, in the same store call as ever; an exempt key is
// admitted and a blocked one denied in process, without the store. So a
// An override takes the place of the key's tier (WithStrategyFor) while it
// lasts, and is put in the limiter's penalty box (WithPenalty) as a tier
// is. Peek and Refund see overrides too: a peek of an exempt or blocked key
// answers as AllowN would, and a refund of one gives nothing back (its
// requests charged nothing). A
// decision costs no extra round trip: the copy is refreshed by one small
// read (a few bytes while the table is unchanged) when a decision finds it
// older than refresh, in the background; only a decision that finds it
// older than twice refresh (after an idle spell) waits for the read, once,
// bounded by the limiter's timeout. The bound: a write (SetOverride,
// ClearOverride, Block, Unblock) applies on the instance that made it from
// its next decision, and on every other instance to every decision that
// starts 2×refresh after the write returned (1s by default), while the
// store answers (TestOverrideReachesEveryInstance). An expiry applies at
// once everywhere: each copy knows its entries' deadlines.
//
// When a refresh fails, the instance keeps its last good copy, logs it
// once at Warn through slog.Default (and once at Info when a refresh
// succeeds again), and retries on the next decision a refresh later.
//
// refresh must be between 10ms and one hour; 0 means
// DefaultOverrideRefresh (500ms). The store must implement
// store.Overrider (Memory, for one process; Redis).
func WithOverrides(refresh time.Duration) Option {
	return option(func(c *config) {
		c.overrides = c.period("override refresh", refresh, DefaultOverrideRefresh, 10*time.Millisecond, time.Hour)
	})
}

// overrideKind says what an override does to a decision.
type overrideKind uint8

const (
	overrideRule   overrideKind = iota // decided by the override's rule
	overrideExempt                     // admitted in process, nothing recorded
	overrideBlock                      // denied in process until the deadline
)

// overrideEntry is one key's override in an instance's copy.
type overrideEntry struct {
	kind     overrideKind
	rule     algorithm.Strategy // overrideRule: as applied to the keys (in the penalty box, if any)
	deadline time.Time          // on the limiter's clock
}

// overrideSet is one instance's copy of the table; never modified once
// published (overrideTable.set): a write publishes a new one.
type overrideSet struct {
	version string    // the store's, at the read
	fetched time.Time // when the read began, on the limiter's clock; zero: never read
	entries map[string]overrideEntry
}

// overrideTable is a limiter's copy of its overrides and how it refreshes
// it. set is read without a lock; everything else is guarded by mu.
type overrideTable struct {
	l     *Limiter
	store store.Overrider
	name  string // the store's table
	every time.Duration

	set atomic.Pointer[overrideSet]

	mu      sync.Mutex
	gen     uint64        // bumped by each of the instance's own writes: a read begun before one is stale
	flight  chan struct{} // closed when the read in flight ends; nil: none
	lastTry time.Time     // when the last read began
	failing bool          // the last read failed (and was logged)
}

// newOverrideTable is WithOverrides' table for l, or nil without it.
func newOverrideTable(l *Limiter) (*overrideTable, error) {
	if l.cfg.overrides == 0 {
		return nil, nil
	}
	o, err := storeCan[store.Overrider](l.store, "WithOverrides", "keeps no override tables")
	if err != nil {
		return nil, err
	}
	t := &overrideTable{l: l, store: o, name: l.cfg.prefix + "overrides", every: l.cfg.overrides}
	t.set.Store(&overrideSet{})
	return t, nil
}

// now reads the limiter's clock (WithClock, else the wall clock).
func (t *overrideTable) now() time.Time {
	if c := t.l.cfg.clock; c != nil {
		return c()
	}
	return time.Now()
}

// storeNow is the time sent with a store call: the limiter's clock with
// WithClock, else zero (the store's own).
func (t *overrideTable) storeNow(now time.Time) time.Time {
	if t.l.cfg.clock != nil {
		return now
	}
	return time.Time{}
}

// overridden is the decision's override (stage 1, after start): a rule
// override becomes the call's strategy (and the decision goes on, ok
// false); an exempt key is admitted and a blocked one denied with
// RetryAfter the block's time left (ok true), without the store and
// without recording anything.
func (l *Limiter) overridden(ctx context.Context, c *call) (Result, outcome, bool) {
	now := c.req.Now
	if now.IsZero() {
		now = time.Now()
	}
	e, ok := l.ov.lookup(ctx, c.req.Key, now)
	if !ok {
		return Result{}, 0, false
	}
	limit := l.strategy.Limit()
	switch e.kind {
	case overrideRule:
		c.req.Strategy = e.rule
		return Result{}, 0, false
	case overrideExempt:
		return Result{Allowed: true, Limit: limit, Remaining: limit}, outcome(DecidedByOverride), true
	}
	left := e.deadline.Sub(now)
	return Result{Limit: limit, RetryAfter: left, ResetAfter: left}, outcome(DecidedByOverride), true
}

// overrideStage is decide's override stage (see stages): a call with a
// rule of its own (call.rule, a settle's) is decided by it, whatever the
// key's override; any other is decided in process by the key's exemption
// or block (ok true), or goes on under its override's rule, if any. A
// partial grant's cost is checked here against the rule that decides it
// (checkGrant), a refused one ending the call (ok true) as bad input.
func (l *Limiter) overrideStage(ctx context.Context, c *call) (outcome, bool, error) {
	if c.rule != nil {
		c.req.Strategy = c.rule
		return 0, false, nil
	}
	if res, o, ok := l.overridden(ctx, c); ok {
		c.res = res
		return o, true, nil
	}
	if c.m.grants {
		if err := checkGrant(c.req); err != nil {
			c.res = l.none()
			return outcomeInvalid, true, err
		}
	}
	return 0, false, nil
}

// lookup returns key's live override at now, from a copy no older than
// the bound (see WithOverrides).
func (t *overrideTable) lookup(ctx context.Context, key string, now time.Time) (overrideEntry, bool) {
	set := t.current(ctx, now)
	if len(set.entries) == 0 {
		return overrideEntry{}, false
	}
	e, ok := set.entries[key]
	if !ok || !now.Before(e.deadline) {
		return overrideEntry{}, false
	}
	return e, true
}

// current is the copy to decide by at now: as it is while younger than
// every; older, a read starts in the background; older than twice every
// (or never read), the decision waits for the read in flight, if any,
// until ctx ends.
func (t *overrideTable) current(ctx context.Context, now time.Time) *overrideSet {
	set := t.set.Load()
	age := now.Sub(set.fetched)
	if !set.fetched.IsZero() && age <= t.every {
		return set
	}
	done := t.refresh(now)
	if done == nil || (!set.fetched.IsZero() && age <= 2*t.every) {
		return set
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	return t.set.Load()
}

// refresh starts a read of the table at now unless one is in flight
// (whose end it returns) or the last began less than every ago (nil).
func (t *overrideTable) refresh(now time.Time) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flight != nil {
		return t.flight
	}
	if since := now.Sub(t.lastTry); !t.lastTry.IsZero() && since >= 0 && since < t.every {
		return nil
	}
	t.lastTry = now
	done := make(chan struct{})
	t.flight = done
	go t.read(now, t.gen, t.set.Load().version, done)
	return done
}

// read reads the table (begun at now, after the instance's write gen, its
// copy at version known) and publishes the copy, unless an own write came
// in between; it closes done at the end. A failed read keeps the last
// copy.
func (t *overrideTable) read(now time.Time, gen uint64, known string, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), t.l.cfg.timeout)
	tab, err := t.store.Overrides(ctx, t.name, known, t.storeNow(now))
	cancel()
	var entries map[string]overrideEntry
	if err == nil && tab.Changed {
		entries = t.decode(tab, now)
	}
	t.mu.Lock()
	defer func() {
		t.flight = nil
		t.mu.Unlock()
		close(done)
	}()
	if err != nil {
		if !t.failing {
			t.failing = true
			slog.Warn("fleetlimit: reading the override table failed; deciding by the last copy read", "limiter", t.l.cfg.name, "table", t.name, "copy_read_at", t.set.Load().fetched, "err", err)
		}
		return
	}
	if t.failing {
		t.failing = false
		slog.Info("fleetlimit: reading the override table works again", "limiter", t.l.cfg.name, "table", t.name)
	}
	if t.gen != gen {
		return // an own write since; the next read sees it
	}
	next := &overrideSet{version: tab.Version, fetched: now, entries: entries}
	if !tab.Changed {
		next.entries = t.set.Load().entries
	}
	t.set.Store(next)
}

// decode is the copy of a table read at now. An entry this limiter cannot
// apply (written for another rule) is left out and logged.
func (t *overrideTable) decode(tab store.OverrideTable, now time.Time) map[string]overrideEntry {
	entries := make(map[string]overrideEntry, len(tab.Entries))
	for _, e := range tab.Entries {
		o, err := t.l.parseOverride(e.Value)
		if err != nil {
			slog.Warn("fleetlimit: an override this limiter cannot apply is ignored", "limiter", t.l.cfg.name, "key", e.Key, "override", e.Value, "err", err)
			continue
		}
		o.deadline = now.Add(e.TTL)
		entries[e.Key] = o
	}
	return entries
}

// parseOverride reads a table's value: a block, an exemption, or a rule of
// the limiter's shape.
func (l *Limiter) parseOverride(value string) (overrideEntry, error) {
	if value == textBlock {
		return overrideEntry{kind: overrideBlock}, nil
	}
	s, err := algorithm.Parse(value)
	if err != nil {
		return overrideEntry{}, err
	}
	_, o, err := l.overrideOf(s)
	return o, err
}

// overrideOf checks that s can override the limiter's rule and returns
// its text form and entry: an exemption (algorithm.Unlimited), or a rule
// of the limiter's shape (rule.SameShape), in its penalty box if the
// limiter has one.
func (l *Limiter) overrideOf(s algorithm.Strategy) (string, overrideEntry, error) {
	if isNil(s) {
		return "", overrideEntry{}, fmt.Errorf("%w: nil strategy", ErrInvalidConfig)
	}
	if algorithm.IsUnlimited(s) {
		return textExempt, overrideEntry{kind: overrideExempt}, nil
	}
	if err := s.Validate(); err != nil {
		return "", overrideEntry{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := rule.SameShape(l.strategy, s); err != nil {
		return "", overrideEntry{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	text, err := algorithm.Format(s)
	if err != nil {
		return "", overrideEntry{}, fmt.Errorf("%w: an override is written in the text form: %w", ErrInvalidConfig, err)
	}
	applied := s
	if p := l.cfg.penalty; p != nil {
		applied = algorithm.Penalize(s, *p)
	}
	return text, overrideEntry{kind: overrideRule, rule: applied}, nil
}

// SetOverride makes s key's rule for ttl, on every instance of the
// limiter (see WithOverrides for when each applies), replacing any
// override or block of the key. s must be the limiter's algorithm over
// the same window (rule.SameShape: only the limit may differ, as for a
// tier, so the key's state carries over both ways and switching never
// grants a fresh allowance), or algorithm.Unlimited to exempt the key: an
// exempt key is admitted in process and its counters are left as they
// were. Its Result then has Limit and Remaining the limiter's Limit;
// Event.DecidedBy is DecidedByOverride. A reservation admitted before the
// override settles under the rule that admitted it (see
// Reservation.Settle), and AllowAtMost asks at most the override's own
// maximum (algorithm.MaxCost).
//
// A bad key (ErrInvalidKey), a ttl not between 1ms and
// algorithm.MaxWindow, a nil or invalid strategy, one of another shape,
// or one without a text form (algorithm.Format) is an error
// (ErrInvalidConfig) and nothing is written. The write is one store call,
// bounded by ctx and the limiter's timeout; a store error is returned
// wrapped, and then the override may or may not be in place.
func (l *Limiter) SetOverride(ctx context.Context, key string, s algorithm.Strategy, ttl time.Duration) error {
	if l.ov == nil {
		return ErrNoOverrides
	}
	text, e, err := l.overrideOf(s)
	if err != nil {
		return fmt.Errorf("fleetlimit: override of %q: %w", key, err)
	}
	return l.ov.write(ctx, key, text, e, ttl)
}

// Block denies every request of key for d, on every instance (see
// WithOverrides), with RetryAfter the time the block has left and
// Event.DecidedBy DecidedByOverride, recording nothing; then the key
// decides as before the block. It replaces any override of the key.
// Errors are SetOverride's.
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) error {
	if l.ov == nil {
		return ErrNoOverrides
	}
	return l.ov.write(ctx, key, textBlock, overrideEntry{kind: overrideBlock}, d)
}

// ClearOverride gives key back to the limiter's own rule (or its tier),
// removing its override, exemption or block, on every instance (see
// WithOverrides). Clearing a key without one succeeds.
func (l *Limiter) ClearOverride(ctx context.Context, key string) error {
	if l.ov == nil {
		return ErrNoOverrides
	}
	return l.ov.clear(ctx, key, "")
}

// Unblock removes key's block, if it has one, on every instance (see
// WithOverrides); an override that is not a block stays.
func (l *Limiter) Unblock(ctx context.Context, key string) error {
	if l.ov == nil {
		return ErrNoOverrides
	}
	return l.ov.clear(ctx, key, textBlock)
}

// Override is one key's entry in the limiter's override table.
type Override struct {
	Key string
	// Strategy is the key's rule: an override of the limiter's shape, or
	// algorithm.Unlimited for an exemption; nil for a block.
	Strategy algorithm.Strategy
	// Blocked reports a block (Block).
	Blocked bool
	// TTL is the time the entry had left when it was read.
	TTL time.Duration
	// Text is the entry as the table holds it: the rule's text form
	// (algorithm.Format), "unlimited" or "block".
	Text string
}

// Overrides reads the limiter's override table from the store (one call,
// bounded by ctx and the limiter's timeout): every live entry, sorted by
// key. An entry this limiter cannot apply is listed with a nil Strategy,
// and Blocked false.
func (l *Limiter) Overrides(ctx context.Context) ([]Override, error) {
	if l.ov == nil {
		return nil, ErrNoOverrides
	}
	t := l.ov
	ctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	tab, err := t.store.Overrides(ctx, t.name, "", t.storeNow(t.now()))
	if err != nil {
		return nil, fmt.Errorf("fleetlimit: reading overrides: %w", err)
	}
	out := make([]Override, 0, len(tab.Entries))
	for _, e := range tab.Entries {
		o := Override{Key: e.Key, TTL: e.TTL, Text: e.Value, Blocked: e.Value == textBlock}
		if s, err := algorithm.Parse(e.Value); err == nil {
			o.Strategy = s
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Override) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// write stores key's entry e (text in the table) for ttl, and on success
// puts it in the instance's copy at once.
func (t *overrideTable) write(ctx context.Context, key, text string, e overrideEntry, ttl time.Duration) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("fleetlimit: override of %q: %w", key, err)
	}
	if ttl < time.Millisecond || ttl > algorithm.MaxWindow {
		return fmt.Errorf("fleetlimit: override of %q: %w: ttl %v is not between 1ms and %v", key, ErrInvalidConfig, ttl, algorithm.MaxWindow)
	}
	now := t.now()
	ctx, cancel := context.WithTimeout(ctx, t.l.cfg.timeout)
	defer cancel()
	err := t.store.SetOverride(ctx, store.OverrideWrite{Table: t.name, Key: key, Value: text, TTL: ttl, Now: t.storeNow(now)})
	if err != nil {
		return fmt.Errorf("fleetlimit: override of %q: %w", key, err)
	}
	e.deadline = now.Add(ttl)
	t.publish(func(m map[string]overrideEntry) { m[key] = e })
	return nil
}

// clear removes key's entry when its text starts with prefix, in the
// store and then in the instance's copy.
func (t *overrideTable) clear(ctx context.Context, key, prefix string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("fleetlimit: override of %q: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, t.l.cfg.timeout)
	defer cancel()
	if _, err := t.store.ClearOverride(ctx, t.name, key, prefix, t.storeNow(t.now())); err != nil {
		return fmt.Errorf("fleetlimit: clearing the override of %q: %w", key, err)
	}
	t.publish(func(m map[string]overrideEntry) {
		if prefix == "" || m[key].kind == overrideBlock {
			delete(m, key)
		}
	})
	return nil
}

// publish applies change to a copy of the instance's set and publishes
// it; a read in flight, begun before, is then not published.
func (t *overrideTable) publish(change func(map[string]overrideEntry)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	old := t.set.Load()
	next := *old
	next.entries = make(map[string]overrideEntry, len(old.entries)+1)
	for k, v := range old.entries {
		next.entries[k] = v
	}
	change(next.entries)
	t.set.Store(&next)
}
