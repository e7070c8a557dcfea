package fleetlimit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeProgram wraps the README's Go blocks that are not whole programs,
// in order, in one function whose parameters are the names the snippets
// take as given.
const readmeProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
)

func readme(ctx context.Context, api *fleetlimit.Limiter, userID string) error {
%s
	return nil
}

func main() { _ = readme }
`

// choosingProgram wraps docs/choosing.md's Go blocks, in order, as
// readmeProgram wraps the README's.
const choosingProgram = `package main

import (
	"context"
	"time"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/store"
)

func choosing(shared store.Store, proUsers map[string]bool) error {
%s
	_ = exports
	return err
}

func main() { _ = choosing }
`

// nestedPrograms wrap the Go blocks fenced "```go MODULE", which
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

// goBlocks are the "```go" blocks of the Markdown file at path, and those
// fenced "```go MODULE", by module.
func goBlocks(t *testing.T, path string) (plain []string, nested map[string][]string) {
	t.Helper()
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(md), -1) {
		plain = append(plain, b[1])
	}
	nested = map[string][]string{}
	for _, b := range regexp.MustCompile("(?s)```go ([^\n]+)\n(.*?)```").FindAllStringSubmatch(string(md), -1) {
		nested[b[1]] = append(nested[b[1]], b[2])
	}
	return plain, nested
}

// The README's Go code compiles, as written: a block that is a whole
// program ("package main" and its imports) on its own, the other snippets
// in order in one function, so that a newcomer who pastes them gets no
// "declared and not used" and no type that changes between two snippets;
// "```go MODULE" blocks in that nested module. docs/choosing.md's blocks,
// and the nested modules' blocks of docs/grpc.md and docs/metrics.md,
// compile the same way. go vet builds them.
func TestREADMESnippetsCompile(t *testing.T) {
	plain, nested := goBlocks(t, "README.md")
	var whole int
	var body strings.Builder
	for _, b := range plain {
		if strings.HasPrefix(b, "package ") {
			vetProgram(t, ".", "%s", b)
			whole++
			continue
		}
		body.WriteString(b)
	}
	if whole == 0 || body.Len() == 0 {
		t.Fatalf("README.md has %d whole programs and %d bytes of snippets, want the first program and the snippet without HTTP", whole, body.Len())
	}
	vetProgram(t, ".", readmeProgram, body.String())
	for module, blocks := range nested {
		program, ok := nestedPrograms[module]
		if !ok {
			t.Fatalf("README.md has a Go block for %q, which no program here compiles", module)
		}
		vetProgram(t, module, program, strings.Join(blocks, ""))
	}

	// The adapters' pages hold the nested modules' examples.
	for _, page := range []string{"docs/grpc.md", "docs/metrics.md"} {
		_, nested := goBlocks(t, page)
		if len(nested) == 0 {
			t.Fatalf("%s has no Go block for its module", page)
		}
		for module, blocks := range nested {
			program, ok := nestedPrograms[module]
			if !ok {
				t.Fatalf("%s has a Go block for %q, which no program here compiles", page, module)
			}
			vetProgram(t, module, program, strings.Join(blocks, ""))
		}
	}

	plain, _ = goBlocks(t, "docs/choosing.md")
	if len(plain) == 0 {
		t.Fatal("docs/choosing.md has no Go block, want the real policies' example")
	}
	vetProgram(t, ".", choosingProgram, strings.Join(plain, ""))
}
