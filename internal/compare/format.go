package compare

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Formats accepted by Write.
var Formats = []string{"text", "markdown", "json", "csv"}

// column is one column of the table.
type column struct {
	head  string
	csv   string                   // CSV header, with its unit; default head with "/" as "_per_"
	right bool                     // right-aligned (numbers)
	text  func(Report, Row) string // as shown in text and markdown
	raw   func(Row) string         // as written in CSV
	real  bool                     // shown only for a real Redis
}

// optional formats a measurement, or says why there is none: "n/a
// (embedded)" where a real Redis would have measured it, "-" where nothing
// would.
func optional(v *float64, format func(float64) string, measurable bool) string {
	switch {
	case v != nil:
		return format(*v)
	case measurable:
		return "n/a (embedded)"
	}
	return "-"
}

// memoryMeasurable reports whether a real Redis would have measured memory
// for r.
func memoryMeasurable(rep Report, r Row) bool {
	return rep.Embedded && r.Store == StoreRedis && r.Scenario == manyUsersName
}

func rawOptional(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

var columns = []column{
	{head: "scenario", text: func(_ Report, r Row) string { return r.Scenario }, raw: func(r Row) string { return r.Scenario }},
	{head: "algorithm", text: func(_ Report, r Row) string { return algorithmLabel(r.Algorithm, r.Lease, r.LeaseFloor) }, raw: func(r Row) string { return r.Algorithm }},
	{head: "store", text: func(_ Report, r Row) string { return r.Store }, raw: func(r Row) string { return r.Store }},
	{head: "inst", csv: "instances", right: true, text: func(_ Report, r Row) string { return strconv.Itoa(r.Instances) }, raw: func(r Row) string { return strconv.Itoa(r.Instances) }},
	{head: "users", right: true, text: func(_ Report, r Row) string { return thousands(int64(r.Users)) }, raw: func(r Row) string { return strconv.Itoa(r.Users) }},
	{head: "limit", csv: "limit_units", right: true, text: func(_ Report, r Row) string { return thousands(r.Limit) }, raw: func(r Row) string { return strconv.FormatInt(r.Limit, 10) }},
	{head: "sent", csv: "sent_units", right: true, text: func(_ Report, r Row) string { return thousands(r.Sent) }, raw: func(r Row) string { return strconv.FormatInt(r.Sent, 10) }},
	{head: "admitted", csv: "admitted_units", right: true, text: func(_ Report, r Row) string { return thousands(r.Admitted) }, raw: func(r Row) string { return strconv.FormatInt(r.Admitted, 10) }},
	{head: "ideal", csv: "ideal_units", right: true, text: func(_ Report, r Row) string { return thousands(r.Ideal) }, raw: func(r Row) string { return strconv.FormatInt(r.Ideal, 10) }},
	{head: "over", csv: "over_admission_pct", right: true, text: func(_ Report, r Row) string { return fmt.Sprintf("%+.1f%%", r.OverAdmission) }, raw: func(r Row) string { return strconv.FormatFloat(r.OverAdmission, 'f', 2, 64) }},
	{head: "worst/limit", csv: "worst_window_ratio", right: true, text: func(_ Report, r Row) string { return fmt.Sprintf("%.2f×", r.WorstWindow) }, raw: func(r Row) string { return strconv.FormatFloat(r.WorstWindow, 'f', 4, 64) }},
	{head: "round trips/decision", csv: "round_trips_per_decision", right: true, text: func(_ Report, r Row) string {
		return optional(r.RoundTrips, func(v float64) string { return fmt.Sprintf("%.3f", v) }, false)
	}, raw: func(r Row) string { return rawOptional(r.RoundTrips) }},
	{head: "bytes/key", csv: "memory_usage_bytes_per_key", right: true, text: func(rep Report, r Row) string {
		if r.MemoryEstimated && r.MemoryUsage != nil {
			return formatBytes(*r.MemoryUsage) + " est."
		}
		return optional(r.MemoryUsage, formatBytes, memoryMeasurable(rep, r))
	}, raw: func(r Row) string { return rawOptional(r.MemoryUsage) }},
	{head: "used_memory/key", csv: "used_memory_bytes_per_key", right: true, real: true, text: func(rep Report, r Row) string {
		return optional(r.UsedMemory, formatBytes, memoryMeasurable(rep, r))
	}, raw: func(r Row) string { return rawOptional(r.UsedMemory) }},
	{head: "cmds/decision", csv: "commands_per_decision", right: true, real: true, text: func(_ Report, r Row) string {
		return optional(r.Commands, func(v float64) string { return fmt.Sprintf("%.2f", v) }, false)
	}, raw: func(r Row) string { return rawOptional(r.Commands) }},
	{head: "p50", csv: "latency_p50_us", right: true, real: true, text: func(_ Report, r Row) string {
		return optional(r.LatencyP50, micros, false)
	}, raw: func(r Row) string { return rawOptional(r.LatencyP50) }},
	{head: "p99", csv: "latency_p99_us", right: true, real: true, text: func(_ Report, r Row) string {
		return optional(r.LatencyP99, micros, false)
	}, raw: func(r Row) string { return rawOptional(r.LatencyP99) }},
}

// shown returns the columns for rep: the real-Redis ones only when it was
// measured on a real Redis.
func (rep *Report) shown() []column {
	var cols []column
	for _, c := range columns {
		if !c.real || !rep.Embedded {
			cols = append(cols, c)
		}
	}
	return cols
}

// formatBytes formats a byte count.
func formatBytes(v float64) string { return thousands(int64(v + 0.5)) }

// micros formats microseconds as µs or ms.
func micros(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// window formats a duration without trailing zero units: 1m, 1h30m, 1.5s.
func window(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Caption is one line describing the run.
func (rep *Report) Caption() string {
	return fmt.Sprintf("Every registered algorithm at a limit of %s per %s; store \"redis\" is %s, \"memory\" is store.NewMemory per instance.",
		thousands(rep.Limit), window(rep.Window), rep.Server)
}

// Legend explains the columns, one line each.
func (rep *Report) Legend() []string {
	w := window(rep.Window)
	lines := []string{
		"sent, admitted, ideal: units of cost (every request costs 1, except in \"many users\", where each user sends its whole limit at once).",
		fmt.Sprintf("ideal: what one exact limiter of limit per %s, shared by the whole fleet, admits from the same traffic.", w),
		"over: (admitted - ideal) / ideal.",
		fmt.Sprintf("worst/limit: the most admitted to one user in any %s interval, divided by the limit.", w),
		"round trips/decision: calls to the shared store (Decide, or Lease, which hands back and takes a lease in the same script call) per decision, counted around the real store, for the \"redis\" rows: 1 without leases. Decisions here come one at a time, so each call is a round trip of its own (\"many users\": concurrent calls may share one pipeline).",
		"bytes/key: Redis MEMORY USAGE of about 100 sampled full keys (\"many users\" only).",
	}
	if slices.ContainsFunc(rep.Rows, func(r Row) bool { return r.Lease > 0 }) {
		lines = append(lines, fmt.Sprintf("leases of N: each instance is a Limiter of its own built with WithLeases(N, %s): it takes up to N units (never more than half of what the key has left) in one round trip and admits from them in process; its bound is in docs/guarantees.md.", window(rep.LeaseMaxAge)))
	}
	if slices.ContainsFunc(rep.Rows, func(r Row) bool { return r.LeaseFloor > 0 }) {
		lines = append(lines, "leases of F to N: the same with WithLeaseFloor(F): each lease's size follows the instance's traffic on the key, from F (a key's first lease) doubling while leases are spent fast, halving while they are not, never above N; the same bound, with N the largest size.")
	}
	if rep.Embedded {
		lines = append(lines,
			"est.: miniredis does not model Redis memory, so bytes/key is estimated from each sampled key's contents by a model of Redis 7's encodings (held within 10% of MEMORY USAGE by a test); install redis-server, or pass -redis ADDR, to measure it.",
			"Redis commands per decision and latency are measured on a real server only: with redis-server installed, or -redis ADDR (or -cluster ADDR,...).")
	} else {
		lines = append(lines,
			"used_memory/key: growth of INFO used_memory, less what MEMORY STATS counts outside the keys (clients, scripts, replication), divided by the growth of the key count: the keys with their expiry entries and hash-table buckets (noisy with few keys or a busy server; MEMORY USAGE is exact).",
			"cmds/decision: INFO commandstats growth per decision: the EVALSHA and every command inside the script.",
			"p50, p99: the AllowN round trip as the caller sees it (\"many users\": under concurrent clients).",
		)
	}
	return lines
}

// Write writes rep in format: text, markdown, json or csv.
func (rep *Report) Write(w io.Writer, format string) error {
	switch format {
	case "text":
		return rep.writeText(w)
	case "markdown":
		return rep.writeMarkdown(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		return rep.writeCSV(w)
	}
	return fmt.Errorf("%w: format %q, want one of %s", ErrConfig, format, strings.Join(Formats, ", "))
}

// cells returns the header and the rows as shown in text and markdown.
func (rep *Report) cells() ([]column, [][]string) {
	cols := rep.shown()
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = c.head
	}
	out := [][]string{head}
	for _, r := range rep.Rows {
		line := make([]string, len(cols))
		for i, c := range cols {
			line[i] = c.text(*rep, r)
		}
		out = append(out, line)
	}
	return cols, out
}

func (rep *Report) writeText(w io.Writer) error {
	cols, cells := rep.cells()
	widths := make([]int, len(cols))
	for _, line := range cells {
		for i, s := range line {
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
	}
	var b strings.Builder
	b.WriteString(rep.Caption() + "\n\n")
	for n, line := range cells {
		for i, s := range line {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s))
			if i > 0 {
				b.WriteString("  ")
			}
			if cols[i].right {
				b.WriteString(pad + s)
			} else if i < len(line)-1 {
				b.WriteString(s + pad)
			} else {
				b.WriteString(s)
			}
		}
		b.WriteByte('\n')
		// A blank line under the header and between scenarios.
		if n == 0 || n < len(rep.Rows) && group(rep.Rows[n-1]) != group(rep.Rows[n]) {
			b.WriteByte('\n')
		}
	}
	rep.writeTail(&b, "", textSection)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTail writes what follows the report's main table, in either
// format: the legend, a line each after bullet, then the memory projection
// and the concurrency comparison, when the report has them, each by
// section.
func (rep *Report) writeTail(b *strings.Builder, bullet string, section func(b *strings.Builder, title string, head []string, rows [][]string, notes []string, left int)) {
	b.WriteByte('\n')
	for _, l := range rep.Legend() {
		b.WriteString(bullet + l + "\n")
	}
	if head, rows, notes := rep.projectionCells(); head != nil {
		section(b, "Memory projection", head, rows, notes, 1)
	}
	if head, rows, notes := rep.concurrencyCells(); head != nil {
		section(b, "Concurrency: an in-flight limit against rate limits", head, rows, notes, 3)
	}
}

// textSection writes a table of its own under title, its first left
// columns left-aligned, and its notes.
func textSection(b *strings.Builder, title string, head []string, rows [][]string, notes []string, left int) {
	b.WriteString("\n" + title + "\n\n")
	writeAligned(b, append([][]string{head}, rows...), left)
	b.WriteByte('\n')
	for _, l := range notes {
		b.WriteString(l + "\n")
	}
}

// markdownSection writes a table of its own under a bold title, its first
// left columns left-aligned, and its notes as a list.
func markdownSection(b *strings.Builder, title string, head []string, rows [][]string, notes []string, left int) {
	b.WriteString("\n**" + title + "**\n\n")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n" + strings.Repeat("|:---", left) + strings.Repeat("|---:", len(head)-left) + "|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	b.WriteByte('\n')
	for _, l := range notes {
		b.WriteString("- " + l + "\n")
	}
}

// writeAligned writes cells as a text table: the first skip columns
// left-aligned, the rest right-aligned, two spaces apart.
func writeAligned(b *strings.Builder, cells [][]string, skip int) {
	widths := make([]int, len(cells[0]))
	for _, line := range cells {
		for i, s := range line {
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
	}
	for _, line := range cells {
		for i, s := range line {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s))
			switch {
			case i >= skip:
				b.WriteString("  " + pad + s)
			case i == 0:
				b.WriteString(s + pad)
			default:
				b.WriteString("  " + s + pad)
			}
		}
		b.WriteByte('\n')
	}
}

// group identifies the rows of one scenario run.
func group(r Row) string { return fmt.Sprint(r.Scenario, r.Instances, r.Limit) }

func (rep *Report) writeMarkdown(w io.Writer) error {
	cols, cells := rep.cells()
	var b strings.Builder
	b.WriteString(rep.Caption() + "\n\n")
	for n, line := range cells {
		b.WriteString("| " + strings.Join(line, " | ") + " |\n")
		if n == 0 {
			for _, c := range cols {
				if c.right {
					b.WriteString("|---:")
				} else {
					b.WriteString("|:---")
				}
			}
			b.WriteString("|\n")
		}
	}
	rep.writeTail(&b, "- ", markdownSection)
	_, err := io.WriteString(w, b.String())
	return err
}

func (rep *Report) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{"server", "window_ms"}
	for _, c := range columns {
		h := c.csv
		if h == "" {
			h = c.head
		}
		head = append(head, h)
	}
	head = append(head, "memory_estimated", "decisions", "one_instance_units", "not_measured", "lease_size", "store_calls", "lease_floor")
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		line := []string{rep.Server, strconv.FormatInt(rep.WindowMS, 10)}
		for _, c := range columns {
			line = append(line, c.raw(r))
		}
		line = append(line, strconv.FormatBool(r.MemoryEstimated), strconv.FormatInt(r.Decisions, 10), strconv.FormatInt(r.OneInstance, 10), r.NotMeasured,
			strconv.FormatInt(r.Lease, 10), strconv.FormatInt(r.StoreCalls, 10), strconv.FormatInt(r.LeaseFloor, 10))
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
