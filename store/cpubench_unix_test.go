//go:build unix

package store_test

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU runs f and reports the process's CPU time (user and system)
// per operation as cpu-ns/op: on a shared machine other processes taking
// the cores inflate wall time per call, but not this.
func reportCPU(b *testing.B, f func()) {
	b.Helper()
	start := processCPU()
	f()
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
