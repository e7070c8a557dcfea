package compare

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func f(v float64) *float64 { return &v }

// sample is a report with one row of each kind.
func sample(embedded bool) *Report {
	rep := &Report{Server: "embedded miniredis", Embedded: embedded, Limit: 100, Window: time.Minute, WindowMS: 60000}
	rows := []Row{
		{Scenario: "boundary burst", Algorithm: "fixed_window", Store: StoreRedis, Instances: 1, Users: 1, Limit: 100, Sent: 200, Admitted: 200, Ideal: 100, OverAdmission: 100, WorstWindow: 2},
		{Scenario: "boundary burst", Algorithm: "fixed_window", Store: StoreMemory, Instances: 1, Users: 1, Limit: 100, Sent: 200, Admitted: 200, Ideal: 100, OverAdmission: 100, WorstWindow: 2, NotMeasured: "memory store"},
		{Scenario: manyUsersName, Algorithm: "sliding_window_log", Store: StoreRedis, Instances: 1, Users: 10000, Limit: 100, Sent: 1_000_000, Admitted: 1_000_000, Ideal: 1_000_000, WorstWindow: 1},
	}
	if embedded {
		rows[0].NotMeasured, rows[2].NotMeasured = "embedded", "embedded"
	} else {
		rep.Server = "redis-server 127.0.0.1:6379"
		rows[0].Commands, rows[0].LatencyP50, rows[0].LatencyP99 = f(2.5), f(41), f(1250)
		rows[2].Commands, rows[2].LatencyP50, rows[2].LatencyP99 = f(6), f(900), f(4000)
		rows[2].MemoryUsage, rows[2].UsedMemory = f(2664.4), f(2747)
	}
	rep.Rows = rows
	return rep
}

func write(t *testing.T, rep *Report, format string) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.Write(&b, format); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// tableLines returns the lines of the text table: after the caption, before
// the legend.
func tableLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n")[2:] {
		if strings.HasPrefix(l, "sent, admitted") {
			break
		}
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestTextEmbedded(t *testing.T) {
	out := write(t, sample(true), "text")
	lines := tableLines(out)
	if len(lines) != 4 {
		t.Fatalf("%d table lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[0]) {
			t.Errorf("ragged table:\n%s", strings.Join(lines, "\n"))
			break
		}
	}
	// Memory is said to be unmeasured where a real server would measure it,
	// and nothing else about a real server is shown.
	if !strings.HasSuffix(lines[3], "n/a (embedded)") || strings.Contains(lines[1], "n/a") || strings.Contains(lines[2], "n/a") {
		t.Errorf("n/a in the wrong rows:\n%s", out)
	}
	for _, h := range []string{"cmds/decision", "p50", "used_memory"} {
		if strings.Contains(lines[0], h) {
			t.Errorf("embedded table has a %s column", h)
		}
	}
	for _, want := range []string{"+100.0%", "2.00×", "1,000,000", "embedded miniredis", "-redis ADDR"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestTextReal(t *testing.T) {
	out := write(t, sample(false), "text")
	lines := tableLines(out)
	for _, want := range []string{"cmds/decision", "p50", "p99", "used_memory/key"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header lacks %s: %s", want, lines[0])
		}
	}
	if !strings.Contains(lines[1], "41 µs") || !strings.Contains(lines[1], "1.25 ms") || !strings.Contains(lines[3], "2,664") {
		t.Errorf("measurements missing:\n%s", out)
	}
	if strings.Contains(out, "n/a") {
		t.Errorf("n/a on a real server:\n%s", out)
	}
}

func TestMarkdown(t *testing.T) {
	out := write(t, sample(false), "markdown")
	// The first table; the memory projection follows the legend.
	var table []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			table = append(table, l)
		} else if len(table) > 0 {
			break
		}
	}
	if len(table) != 5 || !strings.HasPrefix(table[1], "|:---|:---|:---|---:") {
		t.Fatalf("markdown table:\n%s", out)
	}
	for _, l := range table {
		if strings.Count(l, "|") != strings.Count(table[0], "|") {
			t.Errorf("row with another column count: %s", l)
		}
	}
}

func TestCSVAndJSON(t *testing.T) {
	rep := sample(true)
	records, err := csv.NewReader(strings.NewReader(write(t, rep, "csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 4 {
		t.Fatalf("%d CSV records", len(records))
	}
	col := map[string]int{}
	for i, h := range records[0] {
		col[h] = i
	}
	// Every measured column names its unit.
	for _, h := range []string{"over_admission_pct", "worst_window_ratio", "round_trips_per_decision", "memory_usage_bytes_per_key", "used_memory_bytes_per_key", "latency_p50_us", "latency_p99_us", "memory_estimated", "lease_size", "store_calls"} {
		if _, ok := col[h]; !ok {
			t.Errorf("no CSV column %s in %v", h, records[0])
		}
	}
	if r := records[3]; r[col["admitted_units"]] != "1000000" || r[col["memory_usage_bytes_per_key"]] != "" || r[col["not_measured"]] != "embedded" {
		t.Errorf("CSV row %v (header %v)", r, records[0])
	}

	var decoded struct {
		Embedded bool
		WindowMS int64 `json:"window_ms"`
		Rows     []map[string]any
	}
	if err := json.Unmarshal([]byte(write(t, rep, "json")), &decoded); err != nil {
		t.Fatal(err)
	}
	if !decoded.Embedded || decoded.WindowMS != 60000 || len(decoded.Rows) != 3 {
		t.Fatalf("JSON %+v", decoded)
	}
	if v, ok := decoded.Rows[2]["memory_usage_bytes_per_key"]; !ok || v != nil {
		t.Errorf("memory on miniredis: %v (present %v), want null", v, ok)
	}
	if err := rep.Write(&bytes.Buffer{}, "xml"); err == nil {
		t.Error("unknown format written")
	}
}

// TestEstimatedMemory: an estimate says so in every format, and the
// projection multiplies it out.
func TestEstimatedMemory(t *testing.T) {
	rep := sample(true)
	rep.Rows[2].MemoryUsage, rep.Rows[2].MemoryEstimated, rep.Rows[2].KeyBytes = f(2664), true, 50
	rep.Projection = rep.Projections()
	text := write(t, rep, "text")
	lines := tableLines(text)
	if !strings.HasSuffix(lines[3], "2,664 est.") || strings.Contains(text, "n/a (embedded)") {
		t.Errorf("estimate not labelled:\n%s", text)
	}
	// 10,000 keys of 2,664 bytes plus the keyspace's 8 + 32 + 2*8*16384/10000.
	for _, want := range []string{"Memory projection", "27.3 MB", "2.72 GB", "27.3 GB", "estimate of MEMORY USAGE", "50 B"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if md := write(t, rep, "markdown"); !strings.Contains(md, "| sliding_window_log | 100 | 50 B | 2,664 est. | 27.3 MB | 2.72 GB | 27.3 GB |") {
		t.Errorf("markdown projection:\n%s", md)
	}
	records, err := csv.NewReader(strings.NewReader(write(t, rep, "csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range records[0] {
		col[h] = i
	}
	if r := records[3]; r[col["memory_estimated"]] != "true" {
		t.Errorf("CSV row %v does not say estimated", r)
	}
	var decoded struct{ Projection []Projection }
	if err := json.Unmarshal([]byte(write(t, rep, "json")), &decoded); err != nil || len(decoded.Projection) != 1 ||
		!decoded.Projection[0].Estimated || len(decoded.Projection[0].Bytes) != len(ProjectedKeys) {
		t.Errorf("JSON projection %+v, %v", decoded.Projection, err)
	}
}

func TestNumberFormats(t *testing.T) {
	for in, want := range map[float64]string{0: "0 B", 999: "999 B", 1000: "1.00 KB", 27_050_000: "27.1 MB", 2.7e9: "2.70 GB", 1.02e12: "1.02 TB", 155e6: "155 MB"} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%d) = %q", in, got)
		}
	}
	for in, want := range map[time.Duration]string{time.Minute: "1m", time.Hour: "1h", 90 * time.Second: "1m30s", 1500 * time.Millisecond: "1.5s"} {
		if got := window(in); got != want {
			t.Errorf("window(%v) = %q", in, got)
		}
	}
}
