package compare

import (
	"fmt"
	"math/bits"
	"strings"
)

// ProjectedKeys are the numbers of active keys the memory projection is
// made for.
var ProjectedKeys = []int64{10_000, 1_000_000, 10_000_000}

// Projection is the Redis memory of many active keys of one algorithm, each
// full at one limit, from the bytes per key of a many-users row.
type Projection struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// MemoryUsage is the row's MEMORY USAGE per key, in bytes: the key's
	// name, its value with its object, its keyspace entry.
	MemoryUsage float64 `json:"memory_usage_bytes_per_key"`
	// Estimated reports that MemoryUsage is the model's estimate.
	Estimated bool `json:"memory_estimated,omitempty"`
	// KeyBytes is the length of the keys' names.
	KeyBytes int `json:"key_bytes"`
	// Bytes is the projected memory at each of ProjectedKeys: that many
	// times MemoryUsage plus the keyspace's own cost per key (see
	// keyspaceOverhead), in bytes.
	Bytes []float64 `json:"bytes"`
}

// Projections returns the memory projection of every many-users row with
// bytes per key, in report order.
func (rep *Report) Projections() []Projection {
	var out []Projection
	for _, r := range rep.Rows {
		if r.Scenario != manyUsersName || r.MemoryUsage == nil {
			continue
		}
		p := Projection{Algorithm: r.Algorithm, Limit: r.Limit, MemoryUsage: *r.MemoryUsage, Estimated: r.MemoryEstimated, KeyBytes: r.KeyBytes}
		for _, n := range ProjectedKeys {
			p.Bytes = append(p.Bytes, float64(n)*(p.MemoryUsage+keyspaceOverhead(n)))
		}
		out = append(out, p)
	}
	return out
}

// keyspaceOverhead is what Redis 7 spends per key, at n keys that all have
// a TTL, beyond MEMORY USAGE: the key's entry in the expiry dictionary, the
// allocator's rounding of both dictionary entries (MEMORY USAGE counts the
// keyspace entry's 24 bytes; jemalloc allocates 32), and the key's share of
// both dictionaries' bucket arrays (a pointer per bucket, the bucket count
// being the next power of two from n). It is a model: over 10,000 keys
// used_memory grew by 12 bytes more per key (TestCapacityTable's table in
// docs/operations.md).
func keyspaceOverhead(n int64) float64 {
	entry := float64(jemallocSize(dictEntrySize))
	buckets := float64(uint64(1) << bits.Len64(uint64(n-1)))
	return entry - dictEntrySize + entry + 2*8*buckets/float64(n)
}

// formatSize formats bytes in B, KB, MB, GB or TB (powers of 1,000), with
// three significant digits.
func formatSize(b float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB"}
	i := 0
	for b >= 999.5 && i < len(units)-1 {
		b /= 1000
		i++
	}
	switch {
	case i == 0 || b >= 99.95:
		return fmt.Sprintf("%.0f %s", b, units[i])
	case b >= 9.995:
		return fmt.Sprintf("%.1f %s", b, units[i])
	}
	return fmt.Sprintf("%.2f %s", b, units[i])
}

// projectionCells returns the projection as a header and rows of cells,
// and the lines that explain it; nil when there is nothing to project.
func (rep *Report) projectionCells() (head []string, rows [][]string, notes []string) {
	ps := rep.Projections()
	if len(ps) == 0 {
		return nil, nil, nil
	}
	head = []string{"algorithm", "limit", "key name", "bytes/key"}
	for _, n := range ProjectedKeys {
		head = append(head, thousands(n)+" keys")
	}
	estimated := false
	for _, p := range ps {
		cell := formatBytes(p.MemoryUsage)
		if p.Estimated {
			cell += " est."
			estimated = true
		}
		key := "-"
		if p.KeyBytes > 0 {
			key = fmt.Sprintf("%d B", p.KeyBytes)
		}
		row := []string{p.Algorithm, thousands(p.Limit), key, cell}
		for _, b := range p.Bytes {
			row = append(row, formatSize(b))
		}
		rows = append(rows, row)
	}
	basis := "MEMORY USAGE"
	if estimated {
		basis = "the estimate of MEMORY USAGE"
	}
	notes = []string{
		fmt.Sprintf("Redis memory for N active keys, each full at its limit: N x (bytes/key + the keyspace's cost per key). bytes/key is %s: the key's name (its length under \"key name\"), its value with its Redis object, and its keyspace entry.", basis),
		fmt.Sprintf("The keyspace's cost per key, which MEMORY USAGE leaves out, is modelled as the expiry entry (every limiter key has a TTL), the allocator's rounding of both entries, and two hash-table bucket pointers: %s B at these N (used_memory grew by about 12 B more per key in docs/operations.md's capacity table).", overheads()),
	}
	if rep.Embedded {
		notes = append(notes, "Allocator fragmentation, replication and persistence buffers come on top.")
	} else {
		notes = append(notes, "Allocator fragmentation, replication and persistence buffers come on top; used_memory/key in the table above is what the run's keys really added to INFO used_memory.")
	}
	return head, rows, notes
}

// overheads lists keyspaceOverhead at ProjectedKeys.
func overheads() string {
	var s []string
	for _, n := range ProjectedKeys {
		s = append(s, fmt.Sprintf("%.0f", keyspaceOverhead(n)))
	}
	return strings.Join(s, ", ")
}
