package compare

import (
	"fmt"
	"strings"
)

// CapacityRow is one line of the capacity table (docs/operations.md): what
// keys of one algorithm, full at one limit, cost a real Redis.
type CapacityRow struct {
	Algorithm string
	Limit     int64
	// KeyBytes is the length of the keys' names.
	KeyBytes int
	// MemoryUsage is MEMORY USAGE per key, in bytes (sampled keys).
	MemoryUsage float64
	// UsedMemory is the growth of INFO used_memory per key created, in
	// bytes: the keys with everything Redis keeps for them (expiry entries,
	// hash-table buckets).
	UsedMemory float64
	// Keys is the number of keys used_memory grew by.
	Keys int
}

// CapacityUsers are the numbers of active users the capacity table
// projects to.
var CapacityUsers = []int64{1_000_000, 10_000_000}

// CapacityRows returns the measured many-users rows of reports as capacity
// rows, or an error if one was not measured on a real Redis.
func CapacityRows(reports ...*Report) ([]CapacityRow, error) {
	var out []CapacityRow
	for _, rep := range reports {
		for _, r := range rep.Rows {
			if r.Scenario != manyUsersName {
				continue
			}
			if r.MemoryUsage == nil || r.MemoryEstimated || r.UsedMemory == nil {
				return nil, fmt.Errorf("compare: %s at a limit of %d: memory not measured on a real Redis", r.Algorithm, r.Limit)
			}
			out = append(out, CapacityRow{Algorithm: r.Algorithm, Limit: r.Limit, KeyBytes: r.KeyBytes,
				MemoryUsage: *r.MemoryUsage, UsedMemory: *r.UsedMemory, Keys: r.Users})
		}
	}
	return out, nil
}

// CapacityMarkdown renders rows as the capacity table: per key by MEMORY
// USAGE and by used_memory's growth, and the memory of each of
// CapacityUsers active users, each with one full key, computed from the
// latter.
func CapacityMarkdown(rows []CapacityRow) string {
	var b strings.Builder
	b.WriteString("| algorithm | limit | key name | MEMORY USAGE per key | used_memory per key (over keys) |")
	for _, n := range CapacityUsers {
		fmt.Fprintf(&b, " %s users |", thousands(n))
	}
	b.WriteString("\n|:---|---:|---:|---:|---:|")
	b.WriteString(strings.Repeat("---:|", len(CapacityUsers)) + "\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %d B | %s B | %s B (%s) |", r.Algorithm, thousands(r.Limit), r.KeyBytes,
			formatBytes(r.MemoryUsage), formatBytes(r.UsedMemory), thousands(int64(r.Keys)))
		for _, n := range CapacityUsers {
			fmt.Fprintf(&b, " %s |", formatSize(float64(n)*r.UsedMemory))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
