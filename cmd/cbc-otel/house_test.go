package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of the command: flags, wiring and exit
// codes read as a list of steps; a longer one hides a step that belongs in
// a function (or a package) of its own.
const maxFuncLines = 80

// TestNoLongFunctions keeps every function of the command's code (tests
// aside) within maxFuncLines lines.
func TestNoLongFunctions(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			if n := end - start + 1; n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, more than %d", name, start, fn.Name.Name, n, maxFuncLines)
			}
		}
	}
}

// TestPackageGraph holds the direction of the imports (docs/development.md, Layout):
// the taps know no protocol, the wire format knows only the taps, the
// Tracker knows no sink, no sink knows another, and no source (supervise,
// spool, follow) knows a sink. telemetry builds the sinks of a process and
// only this command knows it; the command knows no sink.
func TestPackageGraph(t *testing.T) {
	const mod = "github.com/cbc-otel/cbc-otel/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, mod); ok {
				imports[pkg] = append(imports[pkg], rest)
			}
		}
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
	}
	sinks := []string{"traces", "metrics", "report", "runspage"}
	allowed := map[string][]string{
		"tap":        {},
		"ndjson":     {},
		"streamjson": {"tap"},
		"usage":      {},
		"ingest":     {"tap", "ndjson", "streamjson", "usage", "internal/fifo"},
		"supervise":  {},
		"spool":      {"tap", "streamjson"},
		"follow":     {"tap", "streamjson", "ingest", "spool"},
		"traces":     {"ingest", "streamjson", "internal/otlpjson"},
		"metrics":    {"tap", "streamjson", "ingest"},
		"report":     {"tap", "streamjson", "ingest", "internal/durtext", "internal/count", "internal/runcost"},
		"runspage":   {"tap", "streamjson", "ingest", "internal/durtext", "internal/count", "internal/runcost"},
		// A run's cost beside its workflow's p95, and spend against a cap:
		// what the reports and the runs page both show, below both.
		"internal/runcost": {"ingest"},
		// The CLI's own telemetry: the receiver knows nothing of ours but the
		// OTLP/JSON codec it shares with the traces file; the
		// join knows the Tracker's events and the receiver, no sink.
		"clitelemetry": {"internal/otlpjson"},
		"join":         {"tap", "streamjson", "ingest", "clitelemetry"},
		// Exposure (server, file, push, totals across restarts) knows no
		// sink: it takes a Gatherer.
		"exposition": {},
		// The sink set of one process: everything below it but the
		// supervisor, which is the command's.
		"telemetry": {"tap", "ndjson", "streamjson", "ingest", "spool", "follow", "traces", "metrics", "report", "runspage",
			"clitelemetry", "join", "exposition", "internal/ghoutput", "internal/runcost"},
		// The face: flags, subcommands, exit codes; no sink, no decoder.
		// spool only for the names of its files in serve's globs.
		"cmd/cbc-otel": {"telemetry", "supervise", "follow", "spool", "simulate", "simulate/drive", "internal/count", "internal/runcost"},
	}
	for pkg, ok := range allowed {
		got, found := imports[pkg]
		if !found {
			t.Errorf("package %s not found", pkg)
			continue
		}
		for _, imp := range got {
			if !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s; it may import only %v", pkg, imp, ok)
			}
		}
	}
	for _, s := range sinks {
		for _, imp := range imports[s] {
			if slices.Contains(sinks, imp) {
				t.Errorf("sink %s imports sink %s", s, imp)
			}
			if imp == "exposition" {
				t.Errorf("sink %s imports exposition: a sink fills a registry, the command exposes it", s)
			}
		}
	}
	for pkg, imps := range imports {
		if pkg != "cmd/cbc-otel" && slices.Contains(imps, "telemetry") {
			t.Errorf("%s imports telemetry, which only the command may", pkg)
		}
	}
}

// maxPackageLines bounds the non-test code of one package of ours: past it
// a package does more than one job (ingest had five in 4,824 lines).
const maxPackageLines = 2600

// TestPackageSize is an alarm, not a gate: a package past maxPackageLines
// lines of non-test Go is named in the log (go test -v), as a question
// whether it does more than one job. A count must not steer the structure:
// squeezing code under it, or splitting along lines rather than jobs, hurt
// more than the size did (issue 30), so it never fails the build.
func TestPackageSize(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}`, "github.com/cbc-otel/cbc-otel/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		n := 0
		for _, name := range f[1:] {
			b, err := os.ReadFile(filepath.Join(f[0], name))
			if err != nil {
				t.Fatal(err)
			}
			n += bytes.Count(b, []byte("\n"))
		}
		if n > maxPackageLines {
			t.Logf("size alarm: %s: %d lines of non-test Go, more than %d: does it do more than one job?", f[0], n, maxPackageLines)
		}
	}
}
