package fleetlimit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeProgram wraps the README's Go blocks, in order, in one function
// whose parameters are the names the snippets take as given.
const readmeProgram = `package main

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

func readme(ctx context.Context, w http.ResponseWriter, userID string, mux *http.ServeMux, loginHandler, apiHandler http.Handler, proUsers map[string]bool) error {
%s
	return nil
}

func main() { _ = readme }
`

// nestedPrograms wrap the README's Go blocks fenced "```go MODULE", which
// use a nested module's packages (and its dependencies, which the core
// module does not require): each module's blocks, in order, compile inside
// that module.
var nestedPrograms = map[string]string{
	"grpclimit": `package main

import (
	"net"

	"google.golang.org/grpc"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/grpclimit"
	"github.com/fleetlimit/fleetlimit/httplimit"
)

func readme(lis net.Listener, login, api *fleetlimit.Limiter) error {
%s
	return nil
}

func main() { _ = readme }
`,
	"promobserver": `package main

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/promobserver"
	"github.com/fleetlimit/fleetlimit/store"
)

func readme(shared store.Store, mux *http.ServeMux, searchHandler http.Handler) error {
%s
	return nil
}

func main() { _ = readme }
`,
	"otelobserver": `package main

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/otelobserver"
	"github.com/fleetlimit/fleetlimit/store"
)

func readme(shared store.Store, mux *http.ServeMux, apiHandler http.Handler) error {
%s
	return nil
}

func main() { _ = readme }
`,
}

// vetProgram writes program, with body in place of %s, to a fresh
// directory under dir (in dir's module, where ./... skips it) and runs go
// vet on it there.
func vetProgram(t *testing.T, dir, program, body string) {
	t.Helper()
	sub, err := os.MkdirTemp(dir, "_readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sub) })
	if err := os.WriteFile(filepath.Join(sub, "main.go"), []byte(strings.Replace(program, "%s", body, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "vet", "./"+filepath.Base(sub))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go snippets for %s do not compile: %v\n%s", dir, err, out)
	}
}

// The README's Go snippets compile, as written, in order: a newcomer who
// pastes them gets no "declared and not used" and no type that changes
// between two snippets. go vet builds them: the plain "```go" blocks in
// the core module, the "```go MODULE" blocks in that nested module.
func TestREADMESnippetsCompile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 2 {
		t.Fatalf("found %d Go blocks in README.md, want the usage and HTTP snippets", len(blocks))
	}
	var body strings.Builder
	for _, b := range blocks {
		body.WriteString(b[1])
	}
	vetProgram(t, ".", readmeProgram, body.String())

	nested := map[string]*strings.Builder{}
	for _, b := range regexp.MustCompile("(?s)```go ([^\n]+)\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if _, ok := nestedPrograms[b[1]]; !ok {
			t.Fatalf("README.md has a Go block for %q, which no program here compiles", b[1])
		}
		if nested[b[1]] == nil {
			nested[b[1]] = &strings.Builder{}
		}
		nested[b[1]].WriteString(b[2])
	}
	for module, program := range nestedPrograms {
		if nested[module] == nil {
			t.Fatalf("README.md has no Go block for %s", module)
		}
		vetProgram(t, module, program, nested[module].String())
	}
}
