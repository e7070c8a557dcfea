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

func readme(ctx context.Context, w http.ResponseWriter, userID string, mux *http.ServeMux, loginHandler, apiHandler http.Handler) error {
%s
	return nil
}

func main() { _ = readme }
`

// The README's Go snippets compile, as written, in order: a newcomer who
// pastes them gets no "declared and not used" and no type that changes
// between two snippets. go vet builds them.
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
	// Under the module (for its go.mod), in a directory ./... skips.
	dir, err := os.MkdirTemp(".", "_readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(strings.Replace(readmeProgram, "%s", body.String(), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "vet", "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("the README's Go snippets do not compile: %v\n%s", err, out)
	}
}
