package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
)

// TestOverrideTables: on every store (and the Cluster), a table's entries
// live for their TTL on the time given, a known version reads as
// unchanged, every write changes the version, and ClearOverride removes
// only what its prefix names.
func TestOverrideTables(t *testing.T) {
	all := stores.All(t)
	if redistest.HaveReal(t) {
		all["cluster"] = stores.Redis(t, redistest.Cluster(t))
	}
	ctx := context.Background()
	for name, s := range all {
		t.Run(name, func(t *testing.T) {
			o := s.(store.Overrider)
			table := redistest.Prefix() + "overrides"
			t0 := time.Unix(1_800_000_000, 0)
			empty, err := o.Overrides(ctx, table, "", t0)
			if err != nil || empty.Version != "" || empty.Changed || len(empty.Entries) != 0 {
				t.Fatalf("a table never written: %+v, %v; want version \"\", unchanged, empty", empty, err)
			}
			for _, w := range []store.OverrideWrite{
				{Table: table, Key: "a", Value: "unlimited", TTL: time.Minute, Now: t0},
				{Table: table, Key: "b}{", Value: "block", TTL: time.Second, Now: t0},
			} {
				if err := o.SetOverride(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			read := func(at time.Time, known string) store.OverrideTable {
				t.Helper()
				tab, err := o.Overrides(ctx, table, known, at)
				if err != nil {
					t.Fatal(err)
				}
				return tab
			}
			// At +500ms both live, with the time each has left.
			tab := read(t0.Add(500*time.Millisecond), "")
			got := map[string]store.OverrideEntry{}
			for _, e := range tab.Entries {
				got[e.Key] = e
			}
			if !tab.Changed || len(got) != 2 || got["a"].Value != "unlimited" || got["a"].TTL != time.Minute-500*time.Millisecond ||
				got["b}{"].Value != "block" || got["b}{"].TTL != 500*time.Millisecond {
				t.Fatalf("at +500ms: %+v", tab)
			}
			// The known version reads as unchanged, with no entries.
			if again := read(t0.Add(time.Second), tab.Version); again.Changed || len(again.Entries) != 0 || again.Version != tab.Version {
				t.Fatalf("known version: %+v", again)
			}
			// At +1s the block has expired.
			if tab2 := read(t0.Add(time.Second), ""); len(tab2.Entries) != 1 || tab2.Entries[0].Key != "a" {
				t.Fatalf("at +1s: %+v, want only a", tab2)
			}
			// A clear whose prefix does not match removes nothing and
			// keeps the version.
			if ok, err := o.ClearOverride(ctx, table, "a", "block", t0); err != nil || ok {
				t.Fatalf("clear a as a block: %v, %v", ok, err)
			}
			if tab3 := read(t0, tab.Version); tab3.Changed {
				t.Fatalf("a clear that removed nothing changed the version: %+v", tab3)
			}
			if ok, err := o.ClearOverride(ctx, table, "a", "", t0); err != nil || !ok {
				t.Fatalf("clear a: %v, %v", ok, err)
			}
			tab4 := read(t0, tab.Version)
			if !tab4.Changed || tab4.Version == tab.Version || len(tab4.Entries) != 1 || tab4.Entries[0].Key != "b}{" {
				t.Fatalf("after clearing a at t0: %+v", tab4)
			}
			if ok, _ := o.ClearOverride(ctx, table, "missing", "", t0); ok {
				t.Fatal("cleared a key that had no entry")
			}
			// Bad writes are refused, and nothing is written.
			for _, w := range []store.OverrideWrite{
				{Table: table, Key: "", Value: "x", TTL: time.Second},
				{Table: table, Key: "k", Value: "x", TTL: 0},
				{Table: "", Key: "k", Value: "x", TTL: time.Second},
			} {
				if err := o.SetOverride(ctx, w); !errors.Is(err, store.ErrRejected) {
					t.Errorf("SetOverride(%+v): %v, want ErrRejected", w, err)
				}
			}
			if tab5 := read(t0, tab4.Version); tab5.Changed {
				t.Fatalf("a refused write changed the table: %+v", tab5)
			}
		})
	}
}
