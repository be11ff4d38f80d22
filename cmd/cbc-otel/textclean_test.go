package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSinksOnlyCut holds issue 30's "cleaned once": ingest is the one
// text boundary (the decoder, Tracker.Restore, join for the CLI's
// attributes), so no sink names safetext.Clean in its code (tests aside):
// a sink bounds clean text with safetext.Cut.
func TestSinksOnlyCut(t *testing.T) {
	const mod = "github.com/cbc-otel/cbc-otel/"
	sinks := []string{"traces", "metrics", "report", "runspage"}
	args := append([]string{"list", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}`}, sinks...)
	for i := range sinks {
		args[3+i] = mod + sinks[i]
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(sinks) {
		t.Fatalf("go list gave %d packages, want %d", len(lines), len(sinks))
	}
	for _, line := range lines {
		f := strings.Fields(line)
		var files []string
		for _, name := range f[1:] {
			files = append(files, filepath.Join(f[0], name))
		}
		for _, at := range cleanRefs(t, files) {
			t.Errorf("%s names safetext.Clean; a sink only Cuts text ingest cleaned", at)
		}
	}
}

// cleanRefs finds, in files, every use of safetext's Clean (under
// whatever name the file imports safetext).
func cleanRefs(t *testing.T, files []string) []string {
	t.Helper()
	var found []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/cbc-otel/cbc-otel/safetext" {
				local = "safetext"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" || local == "_" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Clean" {
				if x, ok := sel.X.(*ast.Ident); ok && (x.Name == local || local == ".") {
					found = append(found, fset.Position(sel.Pos()).String())
				}
			}
			if id, ok := n.(*ast.Ident); ok && local == "." && id.Name == "Clean" {
				found = append(found, fset.Position(id.Pos()).String())
			}
			return true
		})
	}
	return found
}

// TestCleanRefsDetector: the scan finds a call, a function value and an
// aliased import, and leaves Cut and another package's Clean alone.
func TestCleanRefsDetector(t *testing.T) {
	dir := t.TempDir()
	for name, tt := range map[string]struct {
		src  string
		want int
	}{
		"call.go":  {`package p; import "github.com/cbc-otel/cbc-otel/safetext"; var _ = safetext.Clean("x", 1)`, 1},
		"value.go": {`package p; import "github.com/cbc-otel/cbc-otel/safetext"; var f = safetext.Clean`, 1},
		"alias.go": {`package p; import st "github.com/cbc-otel/cbc-otel/safetext"; var _ = st.Clean("x", 1)`, 1},
		"cut.go":   {`package p; import "github.com/cbc-otel/cbc-otel/safetext"; var _ = safetext.Cut("x", 1)`, 0},
		"other.go": {`package p; import "path/filepath"; var _ = filepath.Clean("x")`, 0},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(tt.src), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := cleanRefs(t, []string{path}); len(got) != tt.want {
			t.Errorf("%s: found %v, want %d", name, got, tt.want)
		}
	}
}
