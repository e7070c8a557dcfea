package faults_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recordBreaker makes the breaker tests write what they measured to
// breakerRecord, the run docs/reliability.md's breaker table copies:
//
//	go test -run TestBreaker -v ./faults/ -args -record
var recordBreaker = flag.Bool("record", false, "write the breaker tests' figures to "+breakerRecord)

// breakerRecord holds one run's figures of the breaker tests: a header
// naming its date and commit, then a row per test, "| test | measured |".
const breakerRecord = "testdata/breaker_run.md"

// breakerRecordHeader is the record's first line.
var breakerRecordHeader = regexp.MustCompile("^Recorded by `go test -run TestBreaker -v ./faults/ -args -record` on (\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d) UTC at commit (\\S+)\\.$")

// record logs what test measured and, with -record, puts it in
// breakerRecord as test's row, under a header of the current commit and
// time; the rows of another commit are dropped (one record is one commit's
// run).
func record(t *testing.T, test, measured string) {
	t.Helper()
	t.Logf("measured: %s", measured)
	if !*recordBreaker {
		return
	}
	commit, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	header := fmt.Sprintf("Recorded by `go test -run TestBreaker -v ./faults/ -args -record` on %s UTC at commit %s.",
		time.Now().UTC().Format("2006-01-02 15:04"), strings.TrimSpace(string(commit)))
	rows := map[string]string{}
	if old, err := readBreakerRecord(); err == nil && old.commit == strings.TrimSpace(string(commit)) {
		rows = old.rows
	}
	rows[test] = measured
	var b strings.Builder
	b.WriteString(header + "\n\n| test | measured |\n|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		b.WriteString("| `" + k + "` | " + rows[k] + " |\n")
	}
	if err := os.MkdirAll(filepath.Dir(breakerRecord), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(breakerRecord, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// breakerRun is a record read back.
type breakerRun struct {
	date, commit string
	rows         map[string]string // test -> measured
}

// readBreakerRecord reads breakerRecord.
func readBreakerRecord() (breakerRun, error) {
	b, err := os.ReadFile(breakerRecord)
	if err != nil {
		return breakerRun{}, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	m := breakerRecordHeader.FindStringSubmatch(lines[0])
	if m == nil {
		return breakerRun{}, fmt.Errorf("%s: no header: %q", breakerRecord, lines[0])
	}
	run := breakerRun{date: m[1], commit: m[2], rows: map[string]string{}}
	for _, line := range lines[1:] {
		if test, measured, ok := breakerRow(line); ok {
			run.rows[test] = measured
		}
	}
	return run, nil
}

// breakerRow splits a table row "| `test` | measured |" of the record.
func breakerRow(line string) (test, measured string, ok bool) {
	rest, ok := strings.CutPrefix(line, "| `")
	if !ok {
		return "", "", false
	}
	test, measured, ok = strings.Cut(rest, "` | ")
	return test, strings.TrimSuffix(measured, " |"), ok
}

// thousands formats n with comma separators, as the docs write counts.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ms formats d in whole milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

// TestBreakerTableMatchesItsRun: docs/reliability.md's table "The circuit
// breaker, measured" is the recorded run's (testdata/breaker_run.md,
// written by the breaker tests with -record): the page cites the record's
// date and commit, and each row's "measured" cell is the record's row of
// the test it names, for every test recorded. A changed figure fails
// here until the page and the record agree, and a re-run must be
// recorded whole (one commit's rows only).
func TestBreakerTableMatchesItsRun(t *testing.T) {
	run, err := readBreakerRecord()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	const heading = "## The circuit breaker, measured"
	_, section, ok := strings.Cut(string(doc), heading)
	if !ok {
		t.Fatalf("docs/reliability.md: no %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	intro, table, _ := strings.Cut(section, "\n| fault |")
	if cite := fmt.Sprintf("on %s UTC, at commit %s", run.date, run.commit); !strings.Contains(strings.Join(strings.Fields(intro), " "), cite) {
		t.Errorf("docs/reliability.md's breaker section does not cite the recorded run (%q)", cite)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 4 {
			continue
		}
		for test, measured := range run.rows {
			if cells[3] != "`"+test+"`" {
				continue
			}
			seen[test] = true
			if cells[2] != measured {
				t.Errorf("docs/reliability.md, the row of %s:\n the page:   %s\n the record: %s", test, cells[2], measured)
			}
		}
	}
	for _, test := range breakerTests {
		if _, ok := run.rows[test]; !ok {
			t.Errorf("%s has no row of %s: record a whole run", breakerRecord, test)
		} else if !seen[test] {
			t.Errorf("docs/reliability.md's breaker table has no row of %s", test)
		}
	}
}

// breakerTests are the tests whose figures the breaker table shows.
var breakerTests = []string{
	"faults/TestBreakerStallIsNotAnOutage",
	"faults/TestBreakerOutageIsDetectedAndReported/kill",
	"faults/TestBreakerOutageIsDetectedAndReported/black_hole",
	"faults/TestBreakerClusterMasterKilled",
	"faults/TestBreakerWrongAddressIsLoud",
}
