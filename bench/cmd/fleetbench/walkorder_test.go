package main

import (
	"strings"
	"testing"
	"time"
)

// fleetbench -walk-order measures its three contenders on both walks at
// 1 and 2 goroutines: one table row each, with a figure per goroutine count.
func TestWalkOrderTable(t *testing.T) {
	var out strings.Builder
	if code := walkOrder(&out, 1, 5*time.Millisecond); code != 0 {
		t.Fatalf("exit code %d: %s", code, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+3*2 {
		t.Fatalf("%d lines, want a header, a rule and 6 rows:\n%s", len(lines), out.String())
	}
	for _, want := range []string{"store.Memory.Decide", "x/time/rate", "a lock beside its state"} {
		for _, walk := range []string{"in the order made", "shuffled"} {
			found := false
			for _, l := range lines[2:] {
				if strings.Contains(l, want) && strings.Contains(l, "| "+walk+" |") && strings.Count(l, "|") == 5 && !strings.Contains(l, " 0 |") {
					found = true
				}
			}
			if !found {
				t.Errorf("no row with figures for %q walked %s:\n%s", want, walk, out.String())
			}
		}
	}
}
