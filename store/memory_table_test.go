package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

// A shard's table keeps every key apart through its growth, Reset and
// Sweep: 20,000 keys, each under two prefixes whose namespace bits agree
// (so that their hashes collide and share a chain) and two algorithms, each
// counted on its own; Reset drops exactly its key, and Sweep the full ones.
func TestMemoryTableKeepsKeysApart(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemory(WithSweepInterval(time.Hour), WithMemoryClock(func() time.Time { return now }))
	defer m.Close()
	fw, tb := algorithm.FixedWindow(10, time.Minute), algorithm.TokenBucket(10, time.Hour, 10)
	if namespaceBits("a:x:", tagOf(fw)) != namespaceBits("b:x:", tagOf(fw)) {
		t.Fatal("the two prefixes are meant to collide")
	}
	const keys = 20_000
	prefixes := []string{"a:x:", "b:x:"}
	strategies := []algorithm.Strategy{fw, tb}
	req := func(p, s, k int) Request {
		return Request{Strategy: strategies[s], Prefix: prefixes[p], Key: "k" + strconv.Itoa(k), N: 1}
	}
	// Key k takes 1 + (k+p+s)%3 units under prefix p and strategy s.
	for k := range keys {
		for p := range prefixes {
			for s := range strategies {
				for range 1 + (k+p+s)%3 {
					if d, err := m.Decide(ctx, req(p, s, k)); err != nil || !d.Allowed {
						t.Fatalf("%+v: %+v, %v", req(p, s, k), d, err)
					}
				}
			}
		}
	}
	if n := m.Len(); n != 4*keys {
		t.Fatalf("Len %d, want %d", n, 4*keys)
	}
	for i := range m.shards {
		sh := &m.shards[i]
		if sh.n > len(sh.table) {
			t.Fatalf("shard %d: %d entries in a table of %d", i, sh.n, len(sh.table))
		}
	}
	// remaining is what a peek of one unit would leave.
	remaining := func(p, s, k int) int64 {
		d, err := m.Peek(ctx, req(p, s, k))
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	for k := range keys {
		for p := range prefixes {
			for s := range strategies {
				if got, want := remaining(p, s, k), int64(10-2-(k+p+s)%3); got != want {
					t.Fatalf("%+v: remaining %d, want %d", req(p, s, k), got, want)
				}
			}
		}
	}
	// Reset the even keys under prefix 0 and the fixed window.
	for k := 0; k < keys; k += 2 {
		if err := m.Reset(ctx, req(0, 0, k)); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Len(); n != 4*keys-keys/2 {
		t.Fatalf("Len %d after Reset, want %d", n, 4*keys-keys/2)
	}
	for k := range keys {
		for p := range prefixes {
			for s := range strategies {
				want := int64(10 - 2 - (k+p+s)%3)
				if p == 0 && s == 0 && k%2 == 0 {
					want = 9
				}
				if got := remaining(p, s, k); got != want {
					t.Fatalf("%+v after Reset: remaining %d, want %d", req(p, s, k), got, want)
				}
			}
		}
	}
	// A minute on, the fixed windows are over and the buckets (a sixth of a
	// token a minute) not yet full.
	now = now.Add(time.Minute)
	m.Sweep()
	if n := m.Len(); n != 2*keys {
		t.Fatalf("Len %d after Sweep, want %d", n, 2*keys)
	}
	for k := range keys {
		for p := range prefixes {
			if got := remaining(p, 0, k); got != 9 {
				t.Fatalf("%+v after Sweep: remaining %d, want 9", req(p, 0, k), got)
			}
		}
	}
}

// One key's hash differs under each built-in algorithm and under prefixes
// that differ in their last byte (namespaceBits reads it), and stays in one
// shard: the namespace is
// mixed into the hash where it survives (TestMemoryTableKeepsKeysApart
// covers the namespaces whose bits agree).
func TestMemoryNamespacesSpreadHashes(t *testing.T) {
	m := NewMemory()
	defer m.Close()
	strategies := []algorithm.Strategy{
		algorithm.FixedWindow(10, time.Minute), algorithm.TokenBucket(10, time.Hour, 10),
		algorithm.SlidingWindowLog(10, time.Minute), algorithm.SlidingWindowCounter(10, time.Minute),
	}
	var shard *memoryShard
	seen := map[uint64]string{}
	for _, p := range []string{"", "rl-a", "rl-b", "api:v1", "api:v2"} {
		for _, s := range strategies {
			req := Request{Strategy: s, Prefix: p, Key: "user:1", N: 1}
			tag, sh, h := m.locate(&req)
			if shard == nil {
				shard = sh
			} else if sh != shard {
				t.Errorf("prefix %q, tag %q: another shard", p, tag)
			}
			ns := p + "|" + tag
			if other, ok := seen[h]; ok {
				t.Errorf("namespaces %q and %q give user:1 one hash %#x", other, ns, h)
			}
			seen[h] = ns
		}
	}
}

// A sweep gives back the tables that a burst of keys made grow: once the
// keys are full and dropped, every shard's table is back at its least, and
// the store decides as before.
func TestMemorySweepShrinksTables(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemory(WithSweepInterval(time.Hour), WithMemoryClock(func() time.Time { return now }))
	defer m.Close()
	tb := algorithm.TokenBucket(10, time.Hour, 10) // a unit back every 6 minutes
	req := func(k int) Request { return Request{Strategy: tb, Key: "k" + strconv.Itoa(k), N: 1} }
	const keys = 20_000
	for k := range keys {
		if d, err := m.Decide(ctx, req(k)); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", k, d, err)
		}
	}
	grown := 0
	for i := range m.shards {
		grown = max(grown, len(m.shards[i].table))
	}
	if grown <= memoryTableMin {
		t.Fatalf("the tables never grew (largest %d)", grown)
	}
	// Half the keys spend again 5 minutes later: full 7 minutes after
	// that, while the other half is full at 6 minutes.
	now = now.Add(5 * time.Minute)
	for k := range keys / 2 {
		if d, err := m.Decide(ctx, req(k)); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", k, d, err)
		}
	}
	now = now.Add(3 * time.Minute) // the second half is full, the first not
	m.Sweep()
	if n := m.Len(); n != keys/2 {
		t.Fatalf("Len %d after the first sweep, want %d", n, keys/2)
	}
	for i := range m.shards {
		if sh := &m.shards[i]; len(sh.table) > memoryTableMin && 4*sh.n < len(sh.table) {
			t.Fatalf("shard %d: %d entries left in a table of %d", i, sh.n, len(sh.table))
		}
	}
	now = now.Add(5 * time.Minute)
	m.Sweep()
	if n := m.Len(); n != 0 {
		t.Fatalf("Len %d after the last sweep, want 0", n)
	}
	for i := range m.shards {
		if l := len(m.shards[i].table); l != memoryTableMin {
			t.Fatalf("shard %d: a table of %d with no entries, want %d", i, l, memoryTableMin)
		}
	}
	// The store decides as before on the shrunk tables, and every key is
	// fresh: a full bucket admits its burst.
	for k := range keys {
		for range 10 {
			if d, err := m.Decide(ctx, req(k)); err != nil || !d.Allowed {
				t.Fatalf("key %d after the sweeps: %+v, %v", k, d, err)
			}
		}
	}
	if d, err := m.Decide(ctx, req(7)); err != nil || d.Allowed {
		t.Fatalf("key 7, the 11th unit: %+v, %v, want denied", d, err)
	}
	if n := m.Len(); n != keys {
		t.Fatalf("Len %d, want %d", n, keys)
	}
}
