// Package cpubench reports the CPU time of a benchmark's loop, for the
// benchmarks of the root package and of store: on a shared machine other
// processes taking the cores inflate wall time per call, but not the
// process's own CPU time.
package cpubench

import "testing"

// Report runs f and reports the process's CPU time (user and system) per
// operation of b as cpu-ns/op; where the CPU time cannot be read (not a
// unix system) it only runs f.
func Report(b *testing.B, f func()) {
	b.Helper()
	start, ok := processCPU()
	f()
	if end, _ := processCPU(); ok && b.N > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}
