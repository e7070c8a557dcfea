package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// Overrider is implemented by stores that keep tables of per-key overrides
// (fleetlimit.WithOverrides): Memory for one process, Redis for a fleet. A
// table belongs to one limiter (its name is the limiter's key prefix +
// "overrides"); each entry maps a user key to an opaque value (the
// override's text) until its TTL passes. Every table carries a version
// that changes on every write, so that a reader that holds the current
// version pays a few bytes per read, whatever the table's size.
//
// Each method is atomic, as Decide is. Errors are classed as Decide's are;
// a table name holding another type in Redis is ErrWrongType.
type Overrider interface {
	// SetOverride writes w.Value as w.Key's entry in w.Table for w.TTL
	// from w.Now (the store's clock when zero), replacing any entry of the
	// key, and drops the table's expired entries.
	SetOverride(ctx context.Context, w OverrideWrite) error
	// ClearOverride removes key's entry from table when its value starts
	// with prefix ("" for any value), and reports whether a live entry was
	// removed.
	ClearOverride(ctx context.Context, table, key, prefix string, now time.Time) (bool, error)
	// Overrides returns table's version and, unless it equals known, its
	// live entries at now (the store's clock when zero). A table never
	// written is version "" with no entries.
	Overrides(ctx context.Context, table, known string, now time.Time) (OverrideTable, error)
}

// OverrideWrite is one entry to write (Overrider.SetOverride).
type OverrideWrite struct {
	Table, Key, Value string
	TTL               time.Duration // > 0, whole microseconds count
	Now               time.Time     // zero: the store's clock
}

// OverrideTable is a read of a table (Overrider.Overrides).
type OverrideTable struct {
	// Version names the table's contents: it changes on every write.
	Version string
	// Changed is false when Version is the one the reader knew: Entries is
	// then empty, and the reader's copy is current.
	Changed bool
	// Entries are the live entries, in no particular order.
	Entries []OverrideEntry
}

// OverrideEntry is one live entry of a table.
type OverrideEntry struct {
	Key, Value string
	// TTL is the time the entry had left when it was read (> 0).
	TTL time.Duration
}

// checkOverrideWrite refuses what no table holds.
func checkOverrideWrite(w OverrideWrite) error {
	if w.Table == "" || w.Key == "" || len(w.Key) > MaxKeyLen {
		return fmt.Errorf("store: override of key %q in table %q: empty table, or key not 1 to %d bytes: %w", w.Key, w.Table, MaxKeyLen, ErrRejected)
	}
	if w.TTL < time.Microsecond || w.TTL > algorithm.MaxWindow {
		return fmt.Errorf("store: override of key %q: ttl %v not between 1µs and %v: %w", w.Key, w.TTL, algorithm.MaxWindow, ErrRejected)
	}
	return nil
}

// memoryOverrides are a Memory's tables. The zero value is ready.
type memoryOverrides struct {
	mu     sync.Mutex // guards tables
	tables map[string]*memoryTable
}

type memoryTable struct {
	version uint64
	entries map[string]memoryOverride
}

type memoryOverride struct {
	value    string
	deadline int64 // µs on the store's clock
}

func (m *Memory) overrideNow(now time.Time) int64 {
	if now.IsZero() {
		now = m.clock()
	}
	return now.UnixMicro()
}

// lockTable returns table (nil when never written, and then unlocked) and
// now in µs, with the tables locked until unlock.
func (m *Memory) lockTable(table string, now time.Time) (t *memoryTable, at int64, unlock func(), err error) {
	if m.closed.Load() {
		return nil, 0, nil, ErrClosed
	}
	at = m.overrideNow(now)
	o := &m.overrides
	o.mu.Lock()
	if t = o.tables[table]; t == nil {
		o.mu.Unlock()
		return nil, at, nil, nil
	}
	return t, at, o.mu.Unlock, nil
}

// SetOverride writes an override into the process's table (see
// Overrider). It never blocks on I/O.
func (m *Memory) SetOverride(_ context.Context, w OverrideWrite) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := checkOverrideWrite(w); err != nil {
		return err
	}
	now := m.overrideNow(w.Now)
	o := &m.overrides
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tables == nil {
		o.tables = map[string]*memoryTable{}
	}
	t := o.tables[w.Table]
	if t == nil {
		t = &memoryTable{entries: map[string]memoryOverride{}}
		o.tables[w.Table] = t
	}
	for k, e := range t.entries {
		if e.deadline <= now {
			delete(t.entries, k)
		}
	}
	t.entries[w.Key] = memoryOverride{value: w.Value, deadline: now + w.TTL.Microseconds()}
	t.version++
	return nil
}

// ClearOverride removes an override from the process's table (see
// Overrider).
func (m *Memory) ClearOverride(_ context.Context, table, key, prefix string, now time.Time) (bool, error) {
	t, at, unlock, err := m.lockTable(table, now)
	if err != nil || t == nil {
		return false, err
	}
	defer unlock()
	e, ok := t.entries[key]
	if !ok || len(e.value) < len(prefix) || e.value[:len(prefix)] != prefix {
		return false, nil
	}
	delete(t.entries, key)
	t.version++
	return e.deadline > at, nil
}

// Overrides reads the process's table (see Overrider).
func (m *Memory) Overrides(_ context.Context, table, known string, now time.Time) (OverrideTable, error) {
	t, at, unlock, err := m.lockTable(table, now)
	if err != nil || t == nil {
		return OverrideTable{Changed: known != ""}, err
	}
	defer unlock()
	v := strconv.FormatUint(t.version, 10)
	if v == known {
		return OverrideTable{Version: v}, nil
	}
	out := OverrideTable{Version: v, Changed: true}
	for k, e := range t.entries {
		if e.deadline > at {
			out.Entries = append(out.Entries, OverrideEntry{Key: k, Value: e.value, TTL: time.Duration(e.deadline-at) * time.Microsecond})
		}
	}
	return out, nil
}

// tableNowLua starts every script of the override tables and the registry:
// it reads now from the last argument, in integer microseconds since the
// Unix epoch, or ("0") from the server's TIME, as the decision scripts do.
const tableNowLua = `
local now = tonumber(ARGV[#ARGV])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// The Redis tables: one hash per table. Each field is a user key and its
// value "<deadline µs>|<value>"; the field "" (no user key is empty) holds
// the version, "<time of the write µs>.<count of writes>", so that a table
// deleted and written again (FLUSHALL, DEL) never repeats a version a
// reader knew. Redis 7.0 has no per-field expiry: readers skip expired
// entries and every write drops them. The hash itself never expires: one
// small key per limiter that has used overrides. The scripts start with
// tableNowLua.
const overrideNowLua = tableNowLua + `-- bump gives the table a new version: the write's time and the count of writes.
local function bump(k)
  local n = tonumber(string.match(redis.call('HGET', k, '') or '', '%.(%d+)$') or '0') + 1
  redis.call('HSET', k, '', string.format('%d.%d', now, n))
end
`

var (
	// ARGV: key, value, ttl µs, now. Drops expired entries, writes one.
	setOverrideScript = algorithm.NewScript("ovset", overrideNowLua+`
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= '' then
    local d = tonumber(string.match(all[i + 1], '^(%d+)|'))
    if d == nil or d <= now then redis.call('HDEL', KEYS[1], all[i]) end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + tonumber(ARGV[3])) .. '|' .. ARGV[2])
bump(KEYS[1])
return 1
`)
	// ARGV: key, prefix, now. Removes the key's entry if its value starts
	// with prefix; 1 if it was live.
	clearOverrideScript = algorithm.NewScript("ovclear", overrideNowLua+`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local d, val = string.match(cur, '^(%d+)|(.*)$')
if val == nil then val = '' end
if string.sub(val, 1, #ARGV[2]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
bump(KEYS[1])
if tonumber(d or '0') > now then return 1 end
return 0
`)
	// ARGV: known version, now. Returns {version} when it is known, else
	// {version, key, ttl µs, value, ...} for every live entry.
	readOverridesScript = algorithm.NewScript("ovread", overrideNowLua+`
local v = redis.call('HGET', KEYS[1], '') or ''
if v == ARGV[1] then return {v} end
local out = {v}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= '' then
    local d, val = string.match(all[i + 1], '^(%d+)|(.*)$')
    d = tonumber(d)
    if d ~= nil and d > now then
      out[#out + 1] = all[i]
      out[#out + 1] = string.format('%d', d - now)
      out[#out + 1] = val
    end
  end
end
return out
`)
)

func overrideNowArg(now time.Time) string {
	if now.IsZero() {
		return "0"
	}
	return strconv.FormatInt(now.UnixMicro(), 10)
}

// runAdmin runs an override script, bounded by ctx (and abandoned at its
// end when the client ignores deadlines), never pipelined.
func (r *Redis) runAdmin(ctx context.Context, s *algorithm.Script, key string, args ...any) (any, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	keys := []string{key}
	reply, err := r.within(ctx, func(ctx context.Context) (any, error) { return r.run(ctx, s, keys, args) })
	if err != nil {
		return nil, r.failed(ctx, key, err)
	}
	return reply, nil
}

// SetOverride writes an override with one script (see Overrider).
func (r *Redis) SetOverride(ctx context.Context, w OverrideWrite) error {
	if err := checkOverrideWrite(w); err != nil {
		return err
	}
	_, err := r.runAdmin(ctx, setOverrideScript, w.Table, w.Key, w.Value, strconv.FormatInt(w.TTL.Microseconds(), 10), overrideNowArg(w.Now))
	return err
}

// ClearOverride removes an override with one script (see Overrider).
func (r *Redis) ClearOverride(ctx context.Context, table, key, prefix string, now time.Time) (bool, error) {
	reply, err := r.runAdmin(ctx, clearOverrideScript, table, key, prefix, overrideNowArg(now))
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("store: override table %q: reply %T: %w", table, reply, ErrBadReply)
	}
	return n == 1, nil
}

// Overrides reads a table with one script (see Overrider): a few bytes
// when the version is known, every live entry otherwise.
func (r *Redis) Overrides(ctx context.Context, table, known string, now time.Time) (OverrideTable, error) {
	reply, err := r.runAdmin(ctx, readOverridesScript, table, known, overrideNowArg(now))
	if err != nil {
		return OverrideTable{}, err
	}
	vs, ok := reply.([]any)
	if !ok || len(vs)%3 != 1 {
		return OverrideTable{}, fmt.Errorf("store: override table %q: reply %T of %d: %w", table, reply, len(vs), ErrBadReply)
	}
	strs := make([]string, len(vs))
	for i, v := range vs {
		if strs[i], ok = v.(string); !ok {
			return OverrideTable{}, fmt.Errorf("store: override table %q: reply item %T: %w", table, v, ErrBadReply)
		}
	}
	out := OverrideTable{Version: strs[0], Changed: strs[0] != known}
	for i := 1; i < len(strs); i += 3 {
		us, err := strconv.ParseInt(strs[i+1], 10, 64)
		if err != nil || us <= 0 {
			return OverrideTable{}, fmt.Errorf("store: override table %q: ttl %q: %w", table, strs[i+1], ErrBadReply)
		}
		out.Entries = append(out.Entries, OverrideEntry{Key: strs[i], Value: strs[i+2], TTL: time.Duration(us) * time.Microsecond})
	}
	return out, nil
}
