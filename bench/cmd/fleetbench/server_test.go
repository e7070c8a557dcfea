package main

import (
	"testing"
)

const infoSample = `# Commandstats
cmdstat_evalsha:calls=1000,usec=9000,usec_per_call=9.00,rejected_calls=0,failed_calls=0
cmdstat_get:calls=1000,usec=500,usec_per_call=0.50,rejected_calls=0,failed_calls=0
cmdstat_info:calls=7,usec=700,usec_per_call=100.00,rejected_calls=0,failed_calls=0
cmdstat_client|setinfo:calls=4,usec=4,usec_per_call=1.00,rejected_calls=0,failed_calls=0

# CPU
used_cpu_sys:1.500000
used_cpu_user:2.250000
`

func TestSnapshotLeavesOutAdminCommands(t *testing.T) {
	s := snapshotOf(parseInfo(infoSample))
	if s.calls["evalsha"] != 1000 || s.calls["get"] != 1000 {
		t.Errorf("calls = %v, want evalsha and get at 1000", s.calls)
	}
	if _, ok := s.calls["info"]; ok {
		t.Errorf("INFO, which the harness sends, is counted: %v", s.calls)
	}
	if _, ok := s.calls["client|setinfo"]; ok {
		t.Errorf("connection set-up is counted: %v", s.calls)
	}
	if s.cpu != 3.75 {
		t.Errorf("cpu = %v, want 3.75", s.cpu)
	}
}

func TestDelta(t *testing.T) {
	before := snapshot{calls: map[string]int64{"evalsha": 10, "get": 10}}
	after := snapshot{calls: map[string]int64{"evalsha": 30, "get": 30, "time": 20}}
	d, total := delta(before, after)
	if total != 60 || d["time"] != 20 || d["evalsha"] != 20 {
		t.Errorf("delta = %v, total %d; want 20 each, 60 in all", d, total)
	}
	if got := cmdBreakdown(d, 20); got != "EVALSHA 1.00, GET 1.00, TIME 1.00" {
		t.Errorf("breakdown = %q", got)
	}
}

func TestFlatMapReadsBothProtocols(t *testing.T) {
	resp3 := map[any]any{"dataset.bytes": int64(5), "db.0": map[any]any{"overhead.hashtable.main": int64(7)}}
	resp2 := []any{"dataset.bytes", int64(5), "db.0", []any{"overhead.hashtable.main", int64(7)}}
	for _, v := range []any{resp3, resp2} {
		m := flatMap(v)
		if toInt(m["dataset.bytes"]) != 5 || toInt(flatMap(m["db.0"])["overhead.hashtable.main"]) != 7 {
			t.Errorf("flatMap(%v) = %v", v, m)
		}
	}
}

func TestPaddedKeyFillsTheWidth(t *testing.T) {
	for _, width := range []int{10, 20} {
		for _, i := range []int{0, 99_999} {
			if k := paddedKey("tb", 's', width, i); len(k) != width {
				t.Errorf("paddedKey(width %d, %d) = %q, %d bytes", width, i, k, len(k))
			}
		}
	}
	if paddedKey("tb", 's', 10, 1) == paddedKey("tc", 's', 10, 1) || paddedKey("tb", 's', 10, 1) == paddedKey("tb", 'h', 10, 1) {
		t.Errorf("contenders or key sets share keys")
	}
}
