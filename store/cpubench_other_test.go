//go:build !unix

package store_test

import "testing"

// reportCPU runs f; CPU time is only read on unix systems.
func reportCPU(_ *testing.B, f func()) { f() }
