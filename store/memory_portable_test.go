package store

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package type-checks on 32-bit platforms as on 64-bit ones: memory.go
// asserts the size of a shard at compile time (one cache line), and a
// size that holds only where pointers and ints are 8 bytes would make the
// package fail to build on 386 or arm. go/types with each platform's sizes
// evaluates those constant assertions without a cross compilation: the
// package's own files (those go/build selects for the platform) are
// checked against its imports' export data (go list -export, for this
// platform: what the imports declare does not depend on its sizes).
func TestMemoryTypeChecksOn32Bit(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goTool, "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".").Output()
	if err != nil {
		t.Skip("go list -export:", err)
	}
	export := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok && file != "" {
			export[path] = file
		}
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(file)
	}
	for _, arch := range []string{"386", "arm", "amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			ctxt := build.Default
			ctxt.GOARCH = arch
			ctxt.CgoEnabled = false
			pkg, err := ctxt.ImportDir(".", 0)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			var files []*ast.File
			for _, name := range pkg.GoFiles {
				f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			var errs []error
			conf := types.Config{
				Importer: importer.ForCompiler(fset, "gc", lookup),
				Sizes:    types.SizesFor("gc", arch),
				Error:    func(err error) { errs = append(errs, err) },
			}
			conf.Check("github.com/fleetlimit/fleetlimit/store", fset, files, nil)
			for _, err := range errs {
				t.Error(err)
			}
		})
	}
}
