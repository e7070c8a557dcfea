package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// processesRecord is one run of BenchmarkProcesses, its output as go test
// printed it under a header naming its command, date and commit; the table
// of docs/service.md's "What the service costs" is computed from it.
const processesRecord = "testdata/processes_run.txt"

// processesHeader is the record's first line: its date and commit.
var processesHeader = regexp.MustCompile("^Recorded by `[^`]+-bench BenchmarkProcesses[^`]*` on (\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d) UTC at commit ([0-9a-f]{7,})")

// processesLine is a result line of the record: service, clients, ns/op,
// p50 and p99 in µs.
var processesLine = regexp.MustCompile(`^BenchmarkProcesses/(\w+)/clients=(\d+)-\d+\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) p50-µs\s+([\d.]+) p99-µs`)

// TestProcessesTableMatchesItsRun: docs/service.md's table of
// BenchmarkProcesses cites the recorded run (testdata/processes_run.txt)
// by date and commit, and each of its rows is computed from the record:
// per service and client count the median of the counts' calls/s (3
// significant figures), p50 and p99 (whole µs under a millisecond, ms to one
// decimal under 10 ms, else whole ms). A re-run is recorded whole and the table
// copied from what this test prints.
func TestProcessesTableMatchesItsRun(t *testing.T) {
	rec, err := os.ReadFile(processesRecord)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(rec), "\n")
	head := processesHeader.FindStringSubmatch(lines[0])
	if head == nil {
		t.Fatalf("%s: no header: %q", processesRecord, lines[0])
	}
	type key struct {
		service string
		clients int
	}
	runs := map[key][][3]float64{}
	var order []int
	for _, line := range lines[1:] {
		m := processesLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		clients, _ := strconv.Atoi(m[2])
		var v [3]float64
		for i := range v {
			v[i], _ = strconv.ParseFloat(m[3+i], 64)
		}
		k := key{m[1], clients}
		runs[k] = append(runs[k], v)
		if !slices.Contains(order, clients) {
			order = append(order, clients)
		}
	}
	median := func(k key, i int) float64 {
		var xs []float64
		for _, v := range runs[k] {
			xs = append(xs, v[i])
		}
		if len(xs) == 0 {
			t.Fatalf("%s: no counts of %v", processesRecord, k)
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	cells := func(k key) string {
		return fmt.Sprintf("%s | %s / %s", sigFigs(1e9/median(k, 0), 3), latency(median(k, 1)), latency(median(k, 2)))
	}
	var want []string
	for _, c := range order {
		want = append(want, fmt.Sprintf("| %d | %s | %s |", c, cells(key{"fleetlimitd", c}), cells(key{"envoyproxy", c})))
	}

	doc, err := os.ReadFile("../../docs/service.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- computed from cmd/fleetlimitd/testdata/processes_run.txt by TestProcessesTableMatchesItsRun -->"
	intro, table, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/service.md: no %q", marker)
	}
	intro = intro[strings.LastIndex(intro, "`BenchmarkProcesses` measures"):]
	if cite := fmt.Sprintf("at commit %s on %s UTC", head[2], head[1]); !strings.Contains(strings.Join(strings.Fields(intro), " "), cite) {
		t.Errorf("docs/service.md does not cite the recorded run of BenchmarkProcesses (%q)", cite)
	}
	var rows []string
	for _, line := range strings.Split(strings.TrimLeft(table, "\n"), "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if !strings.HasPrefix(line, "| clients") && !strings.HasPrefix(line, "|---") {
			rows = append(rows, line)
		}
	}
	if !slices.Equal(rows, want) {
		t.Errorf("docs/service.md's BenchmarkProcesses table is not the record's:\n the page:\n%s\n the record:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

// sigFigs formats x rounded to n significant figures, with comma
// separators.
func sigFigs(x float64, n int) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', n, 64), 64)
	s := strconv.FormatInt(int64(r), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// latency formats us microseconds: whole µs under a millisecond, else
// milliseconds to one decimal under 10 ms, else whole milliseconds.
func latency(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%.0f µs", us)
	case us < 10_000:
		return fmt.Sprintf("%.1f ms", us/1000)
	}
	return fmt.Sprintf("%.0f ms", us/1000)
}
