//go:build !unix

package cpubench

import "time"

// processCPU is not read on systems other than unix.
func processCPU() (time.Duration, bool) { return 0, false }
