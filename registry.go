package fleetlimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/internal/rule"
	"github.com/fleetlimit/fleetlimit/store"
)

// DefaultRegistryTTL is WithRegistry's TTL when given 0.
const DefaultRegistryTTL = 30 * time.Second

var (
	// ErrRuleConflict is wrapped (with ErrInvalidConfig) by New's error
	// under WithStrictRegistry when a live instance of the fleet runs the
	// limiter's name and key prefix under another rule.
	ErrRuleConflict = errors.New("fleetlimit: the limiter's name is registered under another rule")
	// ErrRegistryTruncated is returned by Registered, with the listing of
	// the first store.MaxRegistryNames names, when the registry holds more.
	ErrRegistryTruncated = errors.New("fleetlimit: the registry holds more names than one listing returns")
)

// WithRegistry records the limiter in the fleet's registry, in the store:
// its name, key prefix and rule (the text form, algorithm.Format, of the
// rule its keys are decided by: in its penalty box, if any; a strategy
// without a text form is recorded by its identity, rule.ID), under an
// instance id of its own (host name, process id and a random suffix).
// Registered lists what the fleet runs; so does the command-line tool
// (cmd/fleetlimit limiters).
//
// The model: New writes the entry (one script on Redis, bounded by the
// limiter's timeout), a goroutine of the limiter's writes it again every
// ttl/3, and it lives ttl from its last write, so an instance that stops
// (crashed, or dropped without Close) expires from the registry within
// ttl; Close removes it at once and stops the goroutine. A limiter
// garbage-collected without Close stops it too. Each write also reads the
// name's live entries: when a live instance runs the same name and key
// prefix under another rule (a rolling deploy that changed a limit: old
// and new instances decide one key under two rules), the limiter reports
// it, once per other rule in its life — at New, or at the refresh that
// first sees it — to slog.Default at Error and to its observer if that is
// a ConflictObserver (a SlogObserver logs it through its own logger
// instead of slog.Default). Tiers (WithStrategyFor) and overrides are not
// recorded: they are per key. With WithStrictRegistry, a conflict seen at
// New is New's error.
//
// A registry write never fails or delays a decision: a write that fails
// (the store down) is logged once at Warn (and once at Info when a write
// works again), New then returns the limiter all the same, after at most
// the limiter's timeout, and the next refresh writes again.
//
// Entries are timed by the store's clock (Redis TIME), never WithClock's:
// the registry tells live processes from dead ones, in real time.
//
// It is off by default: it costs New a round trip and a goroutine that
// lives until Close, which a limiter without it never needs (and which
// would change what New costs, and what Close must be called for, in
// every program written before it).
//
// ttl must be between 30ms and one hour; 0 means DefaultRegistryTTL
// (30s). The store must implement store.Registrar (Memory, for one
// process; Redis).
func WithRegistry(ttl time.Duration) Option {
	return option(func(c *config) {
		c.registryTTL = c.period("registry ttl", ttl, DefaultRegistryTTL, 30*time.Millisecond, time.Hour)
	})
}

// WithStrictRegistry is WithRegistry (with DefaultRegistryTTL unless
// WithRegistry sets another) where a conflict is an error: New returns an
// error wrapping ErrRuleConflict and ErrInvalidConfig, and removes its
// entry, when a live instance runs the limiter's name and key prefix under
// another rule. A conflict that appears later (an instance started after
// this one) is reported, as WithRegistry reports it, by both. When the
// registry cannot be read at New (the store down), New cannot know, and
// returns the limiter: the registry never fails a limiter on an outage.
func WithStrictRegistry() Option {
	return option(func(c *config) {
		c.strictRegistry = true
		if c.registryTTL == 0 {
			c.registryTTL = DefaultRegistryTTL
		}
	})
}

// ConflictObserver is implemented by an Observer (WithObserver) that
// wants the registry's conflict reports (see WithRegistry):
// ObserveConflict is called once per other rule found, from New or from
// the limiter's refresh goroutine.
type ConflictObserver interface {
	ObserveConflict(Conflict)
}

// Conflict is one report: live instances run the limiter's name and key
// prefix under another rule.
type Conflict struct {
	Name, Prefix string
	// Rule is this limiter's rule and Instance its instance id.
	Rule, Instance string
	// Other is the other rule, and Instances the ids of the live
	// instances that run it, sorted.
	Other     string
	Instances []string
}

// Registration is one limiter the fleet runs: a name and key prefix under
// one rule, with its live instances. A name run under two rules is two
// Registrations.
type Registration struct {
	Name, Prefix string
	// Rule is the text form of the rule (see WithRegistry).
	Rule string
	// Instances are the live instances, sorted by id.
	Instances []Instance
}

// Instance is one live instance of a Registration.
type Instance struct {
	ID string
	// Age is the time since the instance last wrote its entry (it writes
	// every ttl/3) and TTL the time its entry has left, on the store's
	// clock, when the listing read them.
	Age, TTL time.Duration
}

// Registered lists the limiters the fleet runs, from the registry in st
// (see WithRegistry), sorted by name, prefix and rule: over Redis, one
// SCAN pass over every server for the names (never KEYS) and one read per
// name, bounded by ctx. It returns an error wrapping errors.ErrUnsupported
// for a store that keeps no registry (store.Registrar), and the listing of the
// first store.MaxRegistryNames names with ErrRegistryTruncated when there
// are more.
func Registered(ctx context.Context, st store.Store) ([]Registration, error) {
	g, ok := st.(store.Registrar)
	if !ok || isNil(st) {
		return nil, fmt.Errorf("fleetlimit: the %T store keeps no registry (store.Registrar): %w", st, errors.ErrUnsupported)
	}
	es, truncated, err := g.Registry(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("fleetlimit: reading the registry: %w", err)
	}
	var out []Registration
	at := map[[3]string]int{} // name, prefix, rule: its index in out
	for _, e := range es {
		ruleText, prefix := decodeRegistration(e.Value)
		k := [3]string{e.Name, prefix, ruleText}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, Registration{Name: e.Name, Prefix: prefix, Rule: ruleText})
		}
		out[i].Instances = append(out[i].Instances, Instance{ID: e.Instance, Age: max(e.Age, 0), TTL: e.TTL})
	}
	slices.SortStableFunc(out, func(a, b Registration) int {
		return cmpJoin(strings.Compare(a.Name, b.Name), strings.Compare(a.Prefix, b.Prefix), strings.Compare(a.Rule, b.Rule))
	})
	if truncated {
		return out, ErrRegistryTruncated
	}
	return out, nil
}

func cmpJoin(cs ...int) int {
	for _, c := range cs {
		if c != 0 {
			return c
		}
	}
	return 0
}

// An entry's value is the rule's text, a newline (which no rule's text
// holds), and the key prefix.
func encodeRegistration(ruleText, prefix string) string { return ruleText + "\n" + prefix }

func decodeRegistration(v string) (ruleText, prefix string) {
	ruleText, prefix, _ = strings.Cut(v, "\n")
	return ruleText, prefix
}

// registration is a limiter's entry in the registry and its refresh. It
// holds no reference to its Limiter, so that a limiter dropped without
// Close is collected (and its cleanup stops the refresh). reported and
// failing are guarded by mu; the rest is set by register and then read
// only.
type registration struct {
	st                                 store.Registrar
	name, prefix, rule, instance, text string
	ttl, timeout                       time.Duration
	observer                           ConflictObserver // nil: none
	logs                               bool             // report to slog.Default

	stop, done chan struct{} // stop: closed to end the refresh; done: closed when it has ended
	stopOnce   sync.Once

	mu       sync.Mutex
	reported map[string]bool // other rules reported
	failing  bool            // the last write failed (and was logged)
}

// register records l in the registry (WithRegistry), or returns nil
// without it. Under WithStrictRegistry a conflict is its error.
func register(l *Limiter) (*registration, error) {
	if l.cfg.registryTTL == 0 {
		return nil, nil
	}
	st, err := storeCan[store.Registrar](l.store, "WithRegistry", "keeps no registry")
	if err != nil {
		return nil, err
	}
	ruleText, err := algorithm.Format(l.rule)
	if err != nil {
		ruleText = rule.ID(l.rule)
	}
	r := &registration{st: st, name: l.cfg.name, prefix: l.cfg.prefix, rule: ruleText, instance: newInstanceID(),
		ttl: l.cfg.registryTTL, timeout: l.cfg.timeout, stop: make(chan struct{}), done: make(chan struct{}), reported: map[string]bool{}}
	r.text = encodeRegistration(r.rule, r.prefix)
	r.observer, _ = l.cfg.observer.(ConflictObserver)
	_, viaSlog := l.cfg.observer.(slogObserver)
	r.logs = !viaSlog
	conflicts := r.write()
	r.report(conflicts)
	if len(conflicts) > 0 && l.cfg.strictRegistry {
		r.deregister()
		c := conflicts[0]
		return nil, fmt.Errorf("%w: %w: limiter %q (key prefix %q) applies %q, but live instances %v of the fleet apply %q: both would decide the same keys under different rules. "+
			"Finish the rollout of one rule (or stop the instances of the other), or give this limiter another name (WithName)",
			ErrInvalidConfig, ErrRuleConflict, r.name, r.prefix, r.rule, c.Instances, c.Other)
	}
	ticker := time.NewTicker(r.ttl / 3)
	go r.loop(ticker.C, ticker.Stop)
	runtime.AddCleanup(l, func(r *registration) { r.end() }, r)
	return r, nil
}

// newInstanceID names this instance: host name, process id and 4 random
// bytes (two limiters of one name in one process are two instances).
func newInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// loop writes the entry again at every tick until stop, then removes it
// and stops the ticker.
func (r *registration) loop(tick <-chan time.Time, stopTicker func()) {
	defer close(r.done)
	defer stopTicker()
	for {
		select {
		case <-r.stop:
			r.deregister()
			return
		case <-tick:
			r.refresh()
		}
	}
}

// refresh writes the entry again and reports what it finds.
func (r *registration) refresh() { r.report(r.write()) }

// end stops the refresh (idempotent); the loop then removes the entry.
func (r *registration) end() { r.stopOnce.Do(func() { close(r.stop) }) }

// close stops the refresh and waits until the entry is removed (or its
// removal failed). r may be nil.
func (r *registration) close() {
	if r == nil {
		return
	}
	r.end()
	<-r.done
}

// write writes the entry, bounded by the timeout, and returns the
// conflicts it read: one per other rule run under the name and prefix by
// a live instance. A failed write is logged (once until one works again)
// and has no conflicts.
func (r *registration) write() []Conflict {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	es, err := r.st.Register(ctx, store.RegistryWrite{Name: r.name, Instance: r.instance, Value: r.text, TTL: r.ttl})
	cancel()
	r.mu.Lock()
	switch {
	case err != nil && !r.failing:
		slog.Warn("fleetlimit: writing the limiter's registry entry failed; it is written again every ttl/3", "limiter", r.name, "instance", r.instance, "err", err)
	case err == nil && r.failing:
		slog.Info("fleetlimit: writing the limiter's registry entry works again", "limiter", r.name, "instance", r.instance)
	}
	r.failing = err != nil
	r.mu.Unlock()
	byRule := map[string][]string{}
	for _, e := range es {
		other, prefix := decodeRegistration(e.Value)
		if e.Instance != r.instance && prefix == r.prefix && other != r.rule {
			byRule[other] = append(byRule[other], e.Instance)
		}
	}
	var out []Conflict
	for other, ids := range byRule {
		slices.Sort(ids)
		out = append(out, Conflict{Name: r.name, Prefix: r.prefix, Rule: r.rule, Instance: r.instance, Other: other, Instances: ids})
	}
	slices.SortFunc(out, func(a, b Conflict) int { return strings.Compare(a.Other, b.Other) })
	return out
}

// report reports each conflict whose other rule was not reported yet.
func (r *registration) report(conflicts []Conflict) {
	for _, c := range conflicts {
		r.mu.Lock()
		seen := r.reported[c.Other]
		r.reported[c.Other] = true
		r.mu.Unlock()
		if seen {
			continue
		}
		if r.logs {
			logConflict(slog.Default(), c)
		}
		if r.observer != nil {
			r.observer.ObserveConflict(c)
		}
	}
}

// logConflict logs c at Error.
func logConflict(log *slog.Logger, c Conflict) {
	log.LogAttrs(context.Background(), slog.LevelError, "rate limit: the fleet runs this limiter under two rules: instances decide the same keys by different limits",
		slog.String("name", c.Name), slog.String("prefix", c.Prefix), slog.String("rule", c.Rule), slog.String("instance", c.Instance),
		slog.String("other_rule", c.Other), slog.Any("other_instances", c.Instances))
}

// deregister removes the entry, bounded by the timeout; a failure leaves
// it to expire.
func (r *registration) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	_ = r.st.Deregister(ctx, r.name, r.instance)
}
