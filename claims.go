package fleetlimit

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"weak"

	"github.com/fleetlimit/fleetlimit/internal/rule"
)

// claims records, for this process, the rule each live limiter applies, so
// that New refuses a limiter that would silently share state with another
// under a different rule. Two limiters over one store are the same limit
// when they have the same key prefix and the same name (WithName, or the
// strategy's name): that is how a fleet's instances share a limit, and a
// second rule under that name would read and write the first's keys. Two
// limiters also share keys when they have the same prefix and algorithm
// tag (store.RedisKey), whatever their names.
//
// A store is identified by its pointer: stores that are not pointers are
// not checked, nor are two store values over one Redis (the usual case is
// one store per Redis, built once). A limiter's claims last while it is
// reachable: they are dropped once the garbage collector has freed it.
var claims = struct {
	mu sync.Mutex
	m  map[claimKey]*claim
}{m: map[claimKey]*claim{}}

// claimKey is one key space: a store, a key prefix, and a name or an
// algorithm tag.
type claimKey struct {
	store  uintptr
	prefix string
	scope  string // "name " + name, or "tag " + tag
}

// claim is the rule applied in one key space, and the limiters applying it.
type claim struct {
	rule    string // rule.ID of the strategy
	name    string // the first claimant's name, for errors
	desc    string // rule.Describe of the strategy, for errors
	holders []weak.Pointer[Limiter]
}

// live reports whether a limiter still holds c, dropping those freed.
// Requires claims.mu.
func (c *claim) live() bool {
	c.holders = slices.DeleteFunc(c.holders, func(w weak.Pointer[Limiter]) bool { return w.Value() == nil })
	return len(c.holders) > 0
}

// claimKeys records that l applies its decider under its name and its
// keys, or returns an error wrapping ErrInvalidConfig if a live limiter
// applies another rule there.
func claimKeys(l *Limiter) error {
	v := reflect.ValueOf(l.store)
	if v.Kind() != reflect.Pointer {
		return nil
	}
	store := v.Pointer()
	// l.rule is what runs on the keys: the strategy, in its penalty box
	// if any.
	id, desc := rule.ID(l.rule), rule.Describe(l.rule)
	keys := []claimKey{
		{store, l.cfg.prefix, "name " + l.cfg.name},
		{store, l.cfg.prefix, "tag " + l.rule.Script().Tag},
	}
	claims.mu.Lock()
	defer claims.mu.Unlock()
	for i, k := range keys {
		c := claims.m[k]
		if c == nil || c.rule == id || !c.live() {
			continue
		}
		if i == 0 {
			return fmt.Errorf("%w: limiter %q applies %s, but a limiter of that name over this store (key prefix %q) applies %s: both would read and write the same keys under different rules. "+
				"Limiters of one name are one limit, shared by a fleet's instances: give this one another name (WithName), or build both from the same strategy",
				ErrInvalidConfig, l.cfg.name, desc, l.cfg.prefix, c.desc)
		}
		return fmt.Errorf("%w: limiter %q applies %s, but limiter %q over this store applies %s under the same key prefix %q and algorithm: both would read and write the same keys under different rules. "+
			"Give one of them another name (WithName) or key prefix (WithKeyPrefix)",
			ErrInvalidConfig, l.cfg.name, desc, c.name, c.desc, l.cfg.prefix)
	}
	self := weak.Make(l)
	for _, k := range keys {
		c := claims.m[k]
		if c == nil || c.rule != id {
			// Absent, or held by no live limiter (checked above).
			c = &claim{rule: id, name: l.cfg.name, desc: desc}
			claims.m[k] = c
		}
		c.live()
		c.holders = append(c.holders, self)
	}
	runtime.AddCleanup(l, releaseClaims, keys)
	return nil
}

// releaseClaims drops the claims on keys that no live limiter holds any
// more; it runs once a limiter that held them has been freed.
func releaseClaims(keys []claimKey) {
	claims.mu.Lock()
	defer claims.mu.Unlock()
	for _, k := range keys {
		if c := claims.m[k]; c != nil && !c.live() {
			delete(claims.m, k)
		}
	}
}
