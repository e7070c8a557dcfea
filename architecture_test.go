package fleetlimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitectureMapIsTrue: docs/architecture.md names every non-test Go
// file of the root package in its table of root files, and names no file
// that is gone; and the root package keeps its decision path readable: no
// function of 50 lines or more, no goto.
func TestArchitectureMapIsTrue(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	listed := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if f, ok := strings.CutPrefix(line, "| "); ok {
			if name, _, ok := strings.Cut(f, " |"); ok && strings.HasSuffix(name, ".go") {
				listed[name] = true
			}
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if !listed[f] {
			t.Errorf("docs/architecture.md does not name %s in its table of root files", f)
		}
		delete(listed, f)
		af, err := parser.ParseFile(fs, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if lines := fs.Position(n.End()).Line - fs.Position(n.Pos()).Line + 1; lines >= 50 {
					t.Errorf("%s: %s is %d lines: split it into stages (docs/architecture.md)", f, n.Name.Name, lines)
				}
			case *ast.BranchStmt:
				if n.Tok == token.GOTO {
					t.Errorf("%s: goto", fs.Position(n.Pos()))
				}
			}
			return true
		})
	}
	for f := range listed {
		t.Errorf("docs/architecture.md names %s, which the root package does not have", f)
	}
}
