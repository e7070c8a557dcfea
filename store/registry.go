package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// RegistryKeyPrefix starts the key of every name in the fleet's registry
// (fleetlimit.WithRegistry): one Redis hash per limiter name,
// RegistryKeyPrefix + name. A name's data is that one key, so it lives in
// one Cluster slot, and every write to it is one script.
const RegistryKeyPrefix = "fleetlimit:registry:"

// MaxRegistryNames bounds Registrar.Registry: the most names one listing
// returns.
const MaxRegistryNames = 10000

// Registrar is implemented by stores that keep the fleet's registry
// (fleetlimit.WithRegistry): Memory for one process, Redis for a fleet.
// The registry maps each limiter name to its live instances, each with an
// opaque value (the limiter's rule and key prefix) that lives until its
// TTL passes unless the instance writes it again. An instance that stops
// writing expires from it; a name without live instances disappears
// (on Redis its hash expires with its last instance).
//
// Each method is atomic per name, as Decide is per key. Errors are classed
// as Decide's are; a registry key holding another type in Redis is
// ErrWrongType.
type Registrar interface {
	// Register writes w.Instance's entry under w.Name for w.TTL from w.Now
	// (the store's clock when zero), replacing the instance's earlier
	// entry, drops the name's expired entries, and returns the name's live
	// entries after the write, its own included, sorted by instance.
	Register(ctx context.Context, w RegistryWrite) ([]RegistryEntry, error)
	// Deregister removes instance's entry under name; removing an entry
	// that is not there succeeds.
	Deregister(ctx context.Context, name, instance string) error
	// Registry returns the live entries of every name at now (the store's
	// clock when zero), sorted by name and instance, of at most
	// MaxRegistryNames names; truncated reports that there were more. On
	// Redis it finds the names with SCAN (MATCH RegistryKeyPrefix*) on
	// each server, never KEYS.
	Registry(ctx context.Context, now time.Time) (entries []RegistryEntry, truncated bool, err error)
}

// RegistryWrite is one instance's entry to write (Registrar.Register).
type RegistryWrite struct {
	Name, Instance, Value string
	TTL                   time.Duration // 1ms to algorithm.MaxWindow; whole microseconds count
	Now                   time.Time     // zero: the store's clock
}

// RegistryEntry is one live instance of a name.
type RegistryEntry struct {
	Name, Instance, Value string
	// Age is the time since the instance last wrote its entry, and TTL
	// the time the entry has left, both when it was read.
	Age, TTL time.Duration
}

// checkRegistryWrite refuses what the registry does not hold.
func checkRegistryWrite(w RegistryWrite) error {
	if w.Name == "" || len(w.Name) > MaxKeyLen || w.Instance == "" || len(w.Instance) > MaxKeyLen {
		return fmt.Errorf("store: registry entry %q of %q: name and instance must be 1 to %d bytes: %w", w.Instance, w.Name, MaxKeyLen, ErrRejected)
	}
	if w.TTL < time.Millisecond || w.TTL > algorithm.MaxWindow {
		return fmt.Errorf("store: registry entry %q of %q: ttl %v not between 1ms and %v: %w", w.Instance, w.Name, w.TTL, algorithm.MaxWindow, ErrRejected)
	}
	return nil
}

func sortEntries(es []RegistryEntry) {
	slices.SortFunc(es, func(a, b RegistryEntry) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Instance, b.Instance)
	})
}

// memoryRegistry is a Memory's registry. The zero value is ready.
type memoryRegistry struct {
	mu    sync.Mutex // guards names
	names map[string]map[string]memoryInstance
}

type memoryInstance struct {
	value          string
	seen, deadline int64 // µs on the store's clock
}

// live is name's live entries at now; it drops the expired ones.
// Requires mu.
func (g *memoryRegistry) live(name string, now int64) []RegistryEntry {
	var out []RegistryEntry
	for id, e := range g.names[name] {
		if e.deadline <= now {
			delete(g.names[name], id)
			continue
		}
		out = append(out, RegistryEntry{Name: name, Instance: id, Value: e.value,
			Age: time.Duration(now-e.seen) * time.Microsecond, TTL: time.Duration(e.deadline-now) * time.Microsecond})
	}
	if len(g.names[name]) == 0 {
		delete(g.names, name)
	}
	return out
}

// Register writes an instance's entry in the process's registry (see
// Registrar). It never blocks on I/O.
func (m *Memory) Register(_ context.Context, w RegistryWrite) ([]RegistryEntry, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if err := checkRegistryWrite(w); err != nil {
		return nil, err
	}
	now := m.overrideNow(w.Now)
	g := &m.registry
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.names == nil {
		g.names = map[string]map[string]memoryInstance{}
	}
	if g.names[w.Name] == nil {
		g.names[w.Name] = map[string]memoryInstance{}
	}
	g.names[w.Name][w.Instance] = memoryInstance{value: w.Value, seen: now, deadline: now + w.TTL.Microseconds()}
	out := g.live(w.Name, now)
	sortEntries(out)
	return out, nil
}

// Deregister removes an instance's entry (see Registrar).
func (m *Memory) Deregister(_ context.Context, name, instance string) error {
	if m.closed.Load() {
		return ErrClosed
	}
	g := &m.registry
	g.mu.Lock()
	defer g.mu.Unlock()
	if is := g.names[name]; is != nil {
		delete(is, instance)
		if len(is) == 0 {
			delete(g.names, name)
		}
	}
	return nil
}

// Registry lists the process's registry (see Registrar).
func (m *Memory) Registry(_ context.Context, now time.Time) ([]RegistryEntry, bool, error) {
	if m.closed.Load() {
		return nil, false, ErrClosed
	}
	at := m.overrideNow(now)
	g := &m.registry
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []RegistryEntry
	names := 0
	truncated := false
	for name := range g.names {
		if names == MaxRegistryNames {
			truncated = true
			break
		}
		if es := g.live(name, at); len(es) > 0 {
			out = append(out, es...)
			names++
		}
	}
	sortEntries(out)
	return out, truncated, nil
}

// The Redis registry: one hash per name, RegistryKeyPrefix + name. Each
// field is an instance and its value "<deadline µs>|<written at µs>|<value>".
// Redis 7.0 has no per-field expiry: every write drops the expired
// entries and sets the hash's own expiry to its latest deadline, so a
// name whose instances all stopped disappears with the last of them, and
// readers skip expired entries. The scripts start with tableNowLua.
const registryNowLua = tableNowLua + `-- live appends {instance, ttl µs, age µs, value} of each live entry of
-- the hash to out, and returns the latest deadline seen (0: none); with
-- prune, it deletes the expired entries.
local function live(k, out, prune)
  local latest = 0
  local all = redis.call('HGETALL', k)
  for i = 1, #all, 2 do
    local d, seen, val = string.match(all[i + 1], '^(%d+)|(%d+)|(.*)$')
    d = tonumber(d)
    if d == nil or d <= now then
      if prune then redis.call('HDEL', k, all[i]) end
    else
      if d > latest then latest = d end
      out[#out + 1] = all[i]
      out[#out + 1] = string.format('%d', d - now)
      out[#out + 1] = string.format('%d', now - tonumber(seen))
      out[#out + 1] = val
    end
  end
  return latest
end
`

var (
	// ARGV: instance, value, ttl µs, now. Writes the instance's entry,
	// drops the expired ones, sets the hash's expiry to the latest
	// deadline; returns every live entry.
	registerScript = algorithm.NewScript("regset", registryNowLua+`
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d|%d|', now + ttl, now) .. ARGV[2])
local out = {}
local latest = live(KEYS[1], out, true)
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil((latest - now) / 1000)))
return out
`)
	// ARGV: now. Returns every live entry, writing nothing.
	readRegistryScript = algorithm.NewScript("regread", registryNowLua+`
local out = {}
live(KEYS[1], out, false)
return out
`)
	// ARGV: instance, now. Removes the instance's entry.
	deregisterScript = algorithm.NewScript("regdel", registryNowLua+`
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
`)
)

// Register writes an instance's entry with one script (see Registrar).
func (r *Redis) Register(ctx context.Context, w RegistryWrite) ([]RegistryEntry, error) {
	if err := checkRegistryWrite(w); err != nil {
		return nil, err
	}
	key := RegistryKeyPrefix + w.Name
	reply, err := r.runAdmin(ctx, registerScript, key, w.Instance, w.Value, strconv.FormatInt(w.TTL.Microseconds(), 10), overrideNowArg(w.Now))
	if err != nil {
		return nil, err
	}
	out, err := registryEntries(w.Name, reply)
	sortEntries(out)
	return out, err
}

// Deregister removes an instance's entry with one script (see Registrar).
func (r *Redis) Deregister(ctx context.Context, name, instance string) error {
	_, err := r.runAdmin(ctx, deregisterScript, RegistryKeyPrefix+name, instance, "0")
	return err
}

// Registry lists the registry (see Registrar): SCAN on each server (each
// master of a Cluster, each shard of a Ring) for the names, bounded by
// MaxRegistryNames, then one read script per name.
func (r *Redis) Registry(ctx context.Context, now time.Time) ([]RegistryEntry, bool, error) {
	if r.closed.Load() {
		return nil, false, ErrClosed
	}
	keys, truncated, err := r.registryKeys(ctx)
	if err != nil {
		return nil, false, r.failed(ctx, RegistryKeyPrefix, err)
	}
	var out []RegistryEntry
	for _, k := range keys {
		name := strings.TrimPrefix(k, RegistryKeyPrefix)
		reply, err := r.runAdmin(ctx, readRegistryScript, k, overrideNowArg(now))
		if err != nil {
			return nil, false, err
		}
		es, err := registryEntries(name, reply)
		if err != nil {
			return nil, false, err
		}
		out = append(out, es...)
	}
	sortEntries(out)
	return out, truncated, nil
}

// registryScanCount is the COUNT of each SCAN call of a listing.
const registryScanCount = 512

// registryKeys finds the registry's keys with SCAN on every server, at
// most MaxRegistryNames of them, sorted.
func (r *Redis) registryKeys(ctx context.Context) ([]string, bool, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	truncated := false
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, RegistryKeyPrefix+"*", registryScanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				if len(seen) == MaxRegistryNames && !seen[k] {
					truncated = true
					break
				}
				seen[k] = true
			}
			full := truncated
			mu.Unlock()
			if cursor = next; cursor == 0 || full {
				return nil
			}
		}
	}
	each := func(ctx context.Context) (any, error) {
		switch c := r.client.(type) {
		case *redis.ClusterClient:
			return nil, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
		case *redis.Ring:
			return nil, c.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return scan(ctx, s) })
		}
		return nil, scan(ctx, r.client)
	}
	if _, err := r.within(ctx, each); err != nil {
		return nil, false, err
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, truncated, nil
}

// registryEntries reads a registry script's reply: {instance, ttl µs,
// age µs, value, ...}.
func registryEntries(name string, reply any) ([]RegistryEntry, error) {
	vs, ok := reply.([]any)
	if !ok || len(vs)%4 != 0 {
		return nil, fmt.Errorf("store: registry of %q: reply %T of %d: %w", name, reply, len(vs), ErrBadReply)
	}
	out := make([]RegistryEntry, 0, len(vs)/4)
	for i := 0; i < len(vs); i += 4 {
		var s [4]string
		for j := range s {
			if s[j], ok = vs[i+j].(string); !ok {
				return nil, fmt.Errorf("store: registry of %q: reply item %T: %w", name, vs[i+j], ErrBadReply)
			}
		}
		ttl, err1 := strconv.ParseInt(s[1], 10, 64)
		age, err2 := strconv.ParseInt(s[2], 10, 64)
		if err1 != nil || err2 != nil || ttl <= 0 {
			return nil, fmt.Errorf("store: registry of %q: ttl %q, age %q: %w", name, s[1], s[2], ErrBadReply)
		}
		out = append(out, RegistryEntry{Name: name, Instance: s[0], Value: s[3],
			TTL: time.Duration(ttl) * time.Microsecond, Age: time.Duration(age) * time.Microsecond})
	}
	return out, nil
}
