package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/algorithm"
)

func runCmd(t *testing.T, tty bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, tty)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-format", "xml"}, `-format "xml"`},
		{[]string{"-users", "0"}, "-users 0"},
		{[]string{"-users", "2000000"}, "-users 2000000"},
		{[]string{"-instances", "1,x"}, `"x" is not an integer`},
		{[]string{"-instances", "0", "-scenarios", "fleet"}, "fleet of 0"},
		{[]string{"-scenarios", "boundary,nope"}, `unknown scenario "nope"`},
		{[]string{"-window", "10ms"}, "window 10ms"},
		{[]string{"-window", "0s"}, "-window 0s"},
		{[]string{"-limit", "0"}, "-limit 0"},
		{[]string{"-limit", "1", "-users", "1", "-scenarios", "fleet", "-instances", "65"}, "fleet of 65"},
		{[]string{"-redis", "a:1", "-cluster", "b:2"}, "exclusive"},
		{[]string{"-redis", "a:1", "-embedded"}, "exclusive"},
		{[]string{"-progress", "sometimes"}, `-progress "sometimes"`},
		{[]string{"-scenarios", " , "}, "-scenarios is empty"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"-leases", "8,x"}, `-leases: "x" is not an integer`},
		{[]string{"-leases", "0", "-scenarios", "fleet"}, "lease size 0"},
		{[]string{"-lease-max-age", "-1s", "-scenarios", "fleet"}, "lease max age -1s"},
	} {
		code, stdout, stderr := runCmd(t, false, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2 saying %q", c.args, code, stderr, stdout, c.want)
		}
	}
}

// TestUnreachableRedis runs the command in a process of its own (this test
// binary, re-executed into main) and reads all it writes to stderr: one line
// says what happened, and go-redis's own pool log lines, which go to the
// process's stderr, are silenced.
func TestUnreachableRedis(t *testing.T) {
	if os.Getenv("COMPARE_RUN_MAIN") == "1" {
		os.Args = append([]string{"compare"}, strings.Fields(os.Getenv("COMPARE_ARGS"))...)
		main()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnreachableRedis$")
	cmd.Env = append(os.Environ(), "COMPARE_RUN_MAIN=1", "COMPARE_ARGS=-redis 127.0.0.1:1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v; stderr %q", err, stderr.String())
	}
	if got := stderr.String(); !strings.Contains(got, "does not answer") || strings.Count(got, "\n") != 1 || stdout.Len() > 0 {
		t.Errorf("stderr %q, stdout %q; want one line saying the server does not answer", got, stdout.String())
	}
}

func TestSmallRun(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "chart.svg")
	code, stdout, stderr := runCmd(t, true, "-limit", "5", "-users", "10", "-instances", "1,4",
		"-scenarios", "boundary,fleet", "-format", "json", "-svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Limit int64
		Rows  []struct {
			Scenario, Algorithm, Store string
			Admitted                   int64
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	// Every algorithm x two stores x (boundary + two fleet sizes), and
	// every strategy that can lease x two lease sizes, fixed and adapting
	// from 2, x two fleet sizes.
	rows := len(algorithm.Registry()) * 2 * 3
	for _, e := range algorithm.Registry() {
		if sc := e.New(5, time.Minute).Script(); sc != nil && sc.Leases {
			rows += 2 * 2 * 2
		}
	}
	if rep.Limit != 5 || len(rep.Rows) != rows {
		t.Fatalf("limit %d, %d rows", rep.Limit, len(rep.Rows))
	}
	data, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(data, []byte("<svg")) || !bytes.Contains(data, []byte("Boundary burst")) {
		t.Fatalf("chart: %v, %.80q", err, data)
	}
	// A terminal gets a progress line, and the summary.
	if !strings.Contains(stderr, fmt.Sprintf("[1/%d]", rows)) || !strings.Contains(stderr, fmt.Sprintf("%d rows in", rows)) {
		t.Errorf("stderr %q", stderr)
	}
	// Not a terminal: no progress.
	code, stdout, stderr = runCmd(t, false, "-limit", "5", "-scenarios", "boundary")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "boundary burst") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	// -leases none leaves the lease rows out; sizes of one's own are labelled.
	for _, c := range []struct {
		leases string
		want   []string
		not    string
	}{
		{"none", []string{"token_bucket "}, "leases of"},
		{"3", []string{"token_bucket, leases of 3", "fixed_window, leases of 3", "round trips/decision"}, "leases of 8"},
	} {
		code, stdout, stderr = runCmd(t, false, "-limit", "5", "-instances", "2", "-scenarios", "fleet", "-leases", c.leases)
		if code != 0 || strings.Contains(stdout, c.not) {
			t.Errorf("-leases %s: exit %d, stderr %q, stdout:\n%s", c.leases, code, stderr, stdout)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("-leases %s: no %q in\n%s", c.leases, w, stdout)
			}
		}
	}
}
