package fleetlimit_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// benchRun is the run a doc cites as "DATE UTC, commit C" or "DATE UTC at
// commit C": the bench's RESULTS.md names its date and commit.
var benchRunCite = regexp.MustCompile(`(\d{4}-\d\d-\d\d \d\d:\d\d) UTC,?\s+(?:at\s+)?commit\s+([0-9a-f]{7,})`)

// figureClaim is a figure a doc copies from a generated source: the
// groups of docRe in doc must equal the groups of srcRe (its first match)
// in src.
type figureClaim struct {
	what         string
	doc, docRe   string
	src, srcRe   string
	wantsMatches int // how many times docRe must match in doc; 0 means 1
}

// docFigureClaims are the figures the README and docs copy from the bench's
// run (bench/RESULTS.md and docs/performance.md, both written by
// bench/run.sh from one run). When the bench is re-run, the docs must be
// updated with it, or this fails.
var docFigureClaims = []figureClaim{
	{
		what: "the token bucket's speed against redis_rate at 64 goroutines",
		doc:  "README.md", docRe: `made\s+([\d.]+)× the decisions per second of go-redis/redis_rate at 64 goroutines`,
		src: "bench/RESULTS.md", srcRe: `Token bucket on Redis at 64 goroutines: [^|]*\| ([\d.]+)× \(WithClock`,
	},
	{
		what: "the token bucket's speed at 1 and 8 goroutines",
		doc:  "README.md", docRe: `at 1\s+and 8 goroutines it was (?:slower|about even|faster) \(([\d.]+)×, ([\d.]+)×\)`,
		src: "bench/RESULTS.md", srcRe: `Token bucket on Redis at 64 goroutines: [^|]*\| [^|]*all: 1 goroutines ([\d.]+)×, 8 goroutines ([\d.]+)×`,
	},
	{
		what: "Redis CPU per decision, token bucket and redis_rate",
		doc:  "README.md", docRe: `with ([\d.]+) µs of Redis CPU per decision against redis_rate's ([\d.]+) µs`,
		src: "docs/performance.md", srcRe: `(?s)## At a glance.*?\| fleetlimit token bucket \|(?: [^|]+ \|){5} ([\d.]+) \|.*?\| redis_rate \(GCRA\) \|(?: [^|]+ \|){5} ([\d.]+) \|`,
	},
	{
		what: "leases of 64 on one hot key against redis_rate",
		doc:  "docs/choosing.md", docRe: `made\s+([\d.]+)× redis_rate's decisions/s with leases of 64`,
		src: "bench/RESULTS.md", srcRe: `One hot key at 64 goroutines: token bucket with leases of 64 [^|]*\| ([\d.]+)× \(`,
	},
	{
		what: "leases of 64 on one hot key against redis_rate",
		doc:  "docs/leases.md", docRe: `goroutines,\s+([\d.]+)× its decisions/s with leases of 64`,
		src: "bench/RESULTS.md", srcRe: `One hot key at 64 goroutines: token bucket with leases of 64 [^|]*\| ([\d.]+)× \(`,
	},
	{
		what: "Redis CPU per decision on the hot key, leases of 64 and redis_rate",
		doc:  "docs/choosing.md", docRe: `\(([\d.]+) µs against ([\d.]+) µs\)`,
		src: "bench/RESULTS.md", srcRe: `with leases of 64, [\d.]+ round trips, ([\d.]+) µs of Redis CPU and [\d.]+ µs of Go CPU; redis_rate [\d.]+ round trips, ([\d.]+) µs`,
	},
	{
		what: "Limiter.Allow's CPU on the memory store",
		doc:  "docs/http.md", docRe: "`Limiter.Allow` on the memory store, default options, at (\\d+) CPU ns",
		src: "docs/performance.md", srcRe: `\| fleetlimit Limiter.Allow, memory, token bucket \| (\d+) \|`,
	},
	{
		what: "decisions per Redis core, sliding log and token bucket",
		doc:  "docs/operations.md", docRe: `half of ([\d.]+k) to ([\d.]+k) decisions/s per Redis core`,
		src: "docs/performance.md", srcRe: `(?s)## What Redis CPU.*?\| fleetlimit sliding log \|(?: [^|]+ \|){4} ([\d.]+k) \|.*?\| fleetlimit token bucket \|(?: [^|]+ \|){4} ([\d.]+k) \|`,
	},
}

// concurrencyRow is the regexp of algo's row over store in the
// concurrency table of docs/choosing.md's generated comparison (kept equal
// to a run by TestCompareTableMatchesItsRun), its cells from offered on as
// groups when capture holds "(...)", skipped when it holds "".
func concurrencyRow(algo, store string, capture ...bool) string {
	cells := []string{`[\d,]+`, `[\d,]+`, `[\d,]+`, `\d+ / \d+`, `[\d.]+%`, `[\d.]+`, `[\d,]+`} // offered ... denied, a slot free
	re := `\| ` + algo + ` \| [^|]+ \| ` + store + ` \| 4 \|`
	for i, c := range cells {
		if i < len(capture) && capture[i] {
			c = "(" + c + ")"
		}
		re += " " + c + ` \|`
	}
	return re
}

// concurrencyClaims are the figures docs/choosing.md's concurrency section
// quotes from its generated concurrency table.
var concurrencyClaims = []figureClaim{
	{what: "the in-flight limit on the shared store", doc: "docs/choosing.md",
		docRe: `Of ([\d,]+) jobs, ` + "`Concurrency\\(10, 30s\\)`" + `\s+on the shared store admitted ([\d,]+), against ([\d,]+) for an exact semaphore that\s+loses nothing, and never had more than 10 running \((\d+ / \d+)\); the crashed\s+holder's permits kept their slots ([\d.]+) slot·s in all, until their ttl,\s+and ([\d,]+) jobs were denied`,
		src:   "docs/choosing.md", srcRe: concurrencyRow("concurrency", "redis", true, true, true, true, false, true, true)},
	{what: "the token bucket's jobs in flight", doc: "docs/choosing.md",
		docRe: `had up to (\d+ / \d+)\s+running at once, over the limit ([\d.]+%) of the time, and still denied ([\d,]+)\s+jobs while slots idled`,
		src:   "docs/choosing.md", srcRe: concurrencyRow("token_bucket", "redis", false, false, false, true, true, false, true)},
	{what: "the sliding log's jobs in flight", doc: "docs/choosing.md",
		docRe: `a sliding log of 214 a minute: (\d+ / \d+), ([\d.]+%)\s+and ([\d,]+)\.`,
		src:   "docs/choosing.md", srcRe: concurrencyRow("sliding_window_log", "redis", false, false, false, true, true, false, true)},
	{what: "a memory store per instance", doc: "docs/choosing.md",
		docRe: `A memory\s+store per instance ran up to (\d+ / \d+)\.`,
		src:   "docs/choosing.md", srcRe: concurrencyRow("concurrency", "memory", false, false, false, true)},
}

// checkFigure checks claim c: docRe matches its doc once, srcRe matches
// its source, and same holds for their groups.
func checkFigure(t *testing.T, c figureClaim, same func(quoted, source []string) bool) {
	t.Helper()
	got := regexp.MustCompile(c.docRe).FindAllStringSubmatch(readDoc(t, c.doc), -1)
	if len(got) != 1 {
		t.Errorf("%s: %s: %d matches of %q, want 1", c.doc, c.what, len(got), c.docRe)
		return
	}
	want := regexp.MustCompile(c.srcRe).FindStringSubmatch(readDoc(t, c.src))
	if want == nil {
		t.Errorf("%s: %s: not found in %s (%q)", c.doc, c.what, c.src, c.srcRe)
		return
	}
	if !same(got[0][1:], want[1:]) {
		t.Errorf("%s: %s: the doc says %v, %s says %v", c.doc, c.what, got[0][1:], c.src, want[1:])
	}
}

// copiedRows are doc tables copied row for row from a generated page: each
// row under the marker (up to the first line that is not a table row) must
// be a row of the source's table under the heading.
var copiedRows = []struct{ doc, marker, src, heading string }{
	{"docs/operations.md", `<!-- rows from docs/performance.md, "What Redis CPU a request rate needs" -->`,
		"docs/performance.md", "## What Redis CPU a request rate needs"},
	{"docs/service.md", `<!-- rows from bench/RESULTS.md, "## fleetlimitd (issue 30)" -->`,
		"bench/RESULTS.md", "## fleetlimitd (issue 30)"},
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tableRows are the lines starting with "|" from the start of s up to the
// first line that is not one, after skipping lines before the table.
func tableRows(s string) []string {
	var rows []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "|") {
			rows = append(rows, line)
		} else if len(rows) > 0 {
			break
		}
	}
	return rows
}

// TestDocFiguresMatchTheirRun: the figures the README and docs copy from
// the bench's run are that run's. Every citation of a run by date and
// commit in these pages names the run bench/RESULTS.md holds; every copied
// figure equals its source's; every copied table row is a row of its
// source's table.
func TestDocFiguresMatchTheirRun(t *testing.T) {
	results := readDoc(t, "bench/RESULTS.md")
	date := regexp.MustCompile("Written by `cd bench && ./run.sh` \\(in `bench/`\\) on (\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d) UTC").FindStringSubmatch(results)
	commit := regexp.MustCompile(`\| fleetlimit commit \| ([0-9a-f]+) \|`).FindStringSubmatch(results)
	if date == nil || commit == nil {
		t.Fatal("bench/RESULTS.md names no date or commit")
	}
	perf := readDoc(t, "docs/performance.md")
	if !strings.Contains(perf, "run of `cd bench && ./run.sh` on "+date[1][:10]) {
		t.Errorf("docs/performance.md is not from the run of %s that bench/RESULTS.md holds", date[1])
	}

	for _, doc := range []string{"README.md", "docs/choosing.md", "docs/http.md", "docs/leases.md", "docs/operations.md", "docs/service.md"} {
		cites := benchRunCite.FindAllStringSubmatch(readDoc(t, doc), -1)
		if len(cites) == 0 {
			t.Errorf("%s cites no bench run by date and commit", doc)
		}
		for _, c := range cites {
			if c[1] != date[1] || !strings.HasPrefix(commit[1], c[2]) {
				t.Errorf("%s cites the run of %s UTC, commit %s; bench/RESULTS.md holds the run of %s UTC, commit %s", doc, c[1], c[2], date[1], commit[1])
			}
		}
	}

	for _, c := range append(slices.Clone(docFigureClaims), concurrencyClaims...) {
		checkFigure(t, c, slices.Equal[[]string])
	}

	for _, c := range copiedRows {
		doc := readDoc(t, c.doc)
		i := strings.Index(doc, c.marker)
		src := readDoc(t, c.src)
		j := strings.Index(src, c.heading)
		if i < 0 || j < 0 {
			t.Errorf("%s: marker %q or %s: heading %q missing", c.doc, c.marker, c.src, c.heading)
			continue
		}
		rows, srcRows := tableRows(doc[i+len(c.marker):]), tableRows(src[j+len(c.heading):])
		if len(rows) < 3 {
			t.Errorf("%s: the table under %q has %d rows", c.doc, c.marker, len(rows))
		}
		for _, r := range rows {
			if !slices.Contains(srcRows, r) {
				t.Errorf("%s: row %q is not in %s's table %q", c.doc, r, c.src, c.heading)
			}
		}
	}
}

// generatedTableIs checks that the table following marker in page (its
// rows, up to the first line that is not one) is table, the markdown a
// deterministic test generated: row for row, so a changed figure in
// either fails here. FLEETLIMIT_UPDATE_DOCS=1 rewrites the page's table
// from table instead.
func generatedTableIs(t *testing.T, page, marker, table string) {
	t.Helper()
	doc := readDoc(t, page)
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Errorf("%s: no %q", page, marker)
		return
	}
	rows, want := tableRows(doc[i+len(marker):]), tableRows(table)
	if os.Getenv("FLEETLIMIT_UPDATE_DOCS") == "1" && len(rows) > 0 {
		at := i + len(marker) + strings.Index(doc[i+len(marker):], rows[0])
		end := at + len(strings.Join(rows, "\n"))
		if err := os.WriteFile(page, []byte(doc[:at]+strings.Join(want, "\n")+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s updated", page)
		return
	}
	for k := range max(len(rows), len(want)) {
		if r, w := nth(rows, k), nth(want, k); r != w {
			t.Errorf("%s, row %d of the table after %q:\n the page: %s\n the run:  %s", page, k+1, marker, r, w)
		}
	}
}

// nth is s[i], or the zero value past the end of s.
func nth[T any](s []T, i int) (v T) {
	if i < len(s) {
		v = s[i]
	}
	return v
}
