package proptest

import "testing"

// The replay command that a failing property prints selects exactly the
// failing subtest, in the failing test's own package.
func TestReplayCommand(t *testing.T) {
	if got, want := runPattern("TestX/sliding_window_log/memory"), "^TestX$/^sliding_window_log$/^memory$"; got != want {
		t.Errorf("runPattern = %q, want %q", got, want)
	}
	if got, want := runPattern("TestX/a.b+c"), `^TestX$/^a\.b\+c$`; got != want {
		t.Errorf("runPattern = %q, want %q", got, want)
	}
	if got, want := packageDir(), "./internal/proptest/"; got != want {
		t.Errorf("packageDir = %q, want %q", got, want)
	}
}
