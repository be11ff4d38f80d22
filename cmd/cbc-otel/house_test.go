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
// the taps know no protocol, the wire format knows only the taps and
// safetext, the Tracker knows no sink (and cleans a checkpoint's text:
// safetext), no sink knows another or the
// decoder, and no source (supervise, spool, follow) knows a sink.
// telemetry builds the sinks of a process and only this command knows it;
// the command knows no sink.
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
			// Egress is one package: spans, the CLI's logs and metrics
			// leave through it alone.
			if strings.HasPrefix(imp, "go.opentelemetry.io/otel/exporters/otlp/") && pkg != "egress" {
				t.Errorf("%s imports %s; only egress may import the OTLP exporters", pkg, imp)
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
		"streamjson": {"tap", "safetext", "internal/jsonplain"},
		"cost":       {},
		"safetext":   {},
		"ingest":     {"tap", "ndjson", "streamjson", "cost", "safetext", "internal/fifo"},
		"supervise":  {},
		"spool":      {"tap", "streamjson"},
		"follow":     {"tap", "streamjson", "ingest", "spool"},
		"traces":     {"ingest", "cost", "safetext"},
		"metrics":    {"ingest", "cost", "safetext"},
		"report":     {"ingest", "cost", "internal/durtext", "internal/count", "internal/runcost", "internal/jsonnum"},
		"runspage":   {"ingest", "cost", "safetext", "internal/durtext", "internal/count", "internal/runcost"},
		// A run's cost beside its workflow's p95, and spend against a cap:
		// what the reports and the runs page both show, below both.
		"internal/runcost": {"ingest", "cost"},
		// The CLI's own telemetry: the receiver knows nothing of ours but the
		// OTLP/JSON codec it shares with the traces file; the join knows
		// the Tracker's events and the receiver, no sink and no egress (it
		// gets an Outlet).
		"clitelemetry": {"internal/otlpjson"},
		"join":         {"ingest", "cost", "safetext", "clitelemetry"},
		// Everything that leaves over OTLP: knows no sink (the traces
		// sink's IDGenerator comes in through its Config) and no receiver
		// (what the join hands it is OTLP protobuf, converted by otlpconv).
		"egress":            {"internal/otlpjson", "internal/otlpconv", "internal/jsonnum", "internal/jsonplain"},
		"internal/otlpconv": {},
		// Exposure (server, file, push, totals across restarts) knows no
		// sink: it takes a Gatherer.
		"exposition": {},
		// The sink set of one process: everything below it but the
		// supervisor, which is the command's.
		"telemetry": {"tap", "ndjson", "streamjson", "ingest", "spool", "follow", "traces", "metrics", "report", "runspage",
			"join", "egress", "exposition", "safetext", "internal/ghoutput", "internal/runcost"},
		// The face: flags, subcommands, exit codes; no sink, no decoder.
		// spool only for the names of its files in serve's globs.
		"cmd/cbc-otel": {"telemetry", "supervise", "follow", "spool", "simulate", "simulate/drive", "internal/count", "internal/runcost"},
		// Test support: builds the binary (tests, bench harness); a leaf.
		"internal/testbin": {},
		// The stand-in CLI and the SDK side demo plays: no sink, no
		// decoder of ours (they write the protocol, they do not read it).
		"simulate":        {"simulate/clitel"},
		"simulate/clitel": {"internal/otlpjson"},
		"simulate/drive":  {},
		// Leaves of shared vocabulary and test support.
		"internal/count": {}, "internal/durtext": {}, "internal/fifo": {}, "internal/ghoutput": {},
		"internal/jsonesc": {}, "internal/jsonnum": {}, "internal/jsonplain": {}, "internal/otlpjson": {}, "internal/attackgen": {}, "internal/clicorpus": {},
		"internal/golden": {}, "internal/mdtable": {}, "internal/oteltest": {}, "internal/promfam": {},
		"internal/realtool": {}, "supervise/supervisetest": {}, "internal/ingesttest": {"ingest"},
	}
	// The map is total: a new package states what it may import, or the
	// test fails (what only tests and tools use is exempt).
	for pkg := range imports {
		exempt := slices.ContainsFunc([]string{"bench/", "e2e", "chaos", "tools/", "dashboards", "deploy/", "docs"},
			func(p string) bool { return strings.HasPrefix(pkg, p) })
		if _, ok := allowed[pkg]; !ok && !exempt && pkg != "github.com/cbc-otel/cbc-otel" {
			t.Errorf("package %s is not in TestPackageGraph's map: say what it may import", pkg)
		}
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
	// The sinks (and the join) see the Tracker's events only: text hygiene
	// is safetext's, the counters iterate themselves (ingest.Stats), so no
	// decoder, framer or tap (issue 30).
	for _, s := range append(sinks, "join") {
		for _, imp := range imports[s] {
			if slices.Contains([]string{"streamjson", "ndjson", "tap"}, imp) {
				t.Errorf("%s imports %s; a sink needs no decoder, framer or tap", s, imp)
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

// TestOTelEnvReadOnlyInEgress: no non-test code outside egress reads an
// OTEL_EXPORTER_OTLP_* variable, so that endpoints, protocols, headers and
// timeouts are resolved once (simulate/, which plays the CLI, reads its
// own). Writing them (the child's environment) and naming them in docs
// and help are not reads.
func TestOTelEnvReadOnlyInEgress(t *testing.T) {
	const mod = "github.com/cbc-otel/cbc-otel/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		// internal/oteltest is test support: it blanks them for the tests
		// (ClearEnv), so that the developer's own cannot leak in.
		if pkg == "egress" || pkg == "simulate" || strings.HasPrefix(pkg, "simulate/") || pkg == "internal/oteltest" {
			continue
		}
		var srcs []string
		for _, name := range f[2:] {
			srcs = append(srcs, filepath.Join(f[1], name))
		}
		for _, r := range otelEnvReads(t, srcs) {
			t.Errorf("%s reads an OTEL_EXPORTER_OTLP_* variable; only egress resolves them", r)
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("checked %d packages", checked)
	}
}

// otelEnvReads finds, in the files of one package, the calls of an
// environment reader (a function or method whose name contains "env":
// os.Getenv, os.LookupEnv, cfg.Env, env) with an argument built from a
// string that starts with OTEL_EXPORTER_OTLP: a literal, a concatenation,
// or a name that holds one.
func otelEnvReads(t *testing.T, files []string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var parsed []*ast.File
	consts := map[string]bool{} // names that hold such a variable's name
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	// Names that hold such a variable's name: constants and variables
	// given one, and loop variables over a list of them. By name, not by
	// scope: a false alarm is a rename away, a miss is a second resolver.
	for again := true; again; {
		again = false
		mark := func(id *ast.Ident, from ast.Expr) {
			if id != nil && !consts[id.Name] && namesOTLPVar(from, consts) {
				consts[id.Name], again = true, true
			}
		}
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.ValueSpec:
					for i, v := range x.Values {
						if i < len(x.Names) {
							mark(x.Names[i], v)
						}
					}
				case *ast.AssignStmt:
					for i, v := range x.Rhs {
						if id, ok := x.Lhs[min(i, len(x.Lhs)-1)].(*ast.Ident); ok {
							mark(id, v)
						}
					}
				case *ast.RangeStmt:
					if id, ok := x.Value.(*ast.Ident); ok {
						if list, ok := x.X.(*ast.CompositeLit); ok {
							for _, el := range list.Elts {
								mark(id, el)
							}
						}
					}
				}
				return true
			})
		}
	}
	var found []string
	for _, f := range parsed {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var fn string
			switch x := call.Fun.(type) {
			case *ast.Ident:
				fn = x.Name
			case *ast.SelectorExpr:
				fn = x.Sel.Name
			}
			if !strings.Contains(strings.ToLower(fn), "env") {
				return true
			}
			for _, a := range call.Args {
				if namesOTLPVar(a, consts) {
					found = append(found, fset.Position(call.Pos()).String())
				}
			}
			return true
		})
	}
	return found
}

// namesOTLPVar reports whether e is, or is built from, a string literal
// starting with OTEL_EXPORTER_OTLP, or one of consts.
func namesOTLPVar(e ast.Expr, consts map[string]bool) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Kind == token.STRING && strings.HasPrefix(strings.Trim(x.Value, "`\""), "OTEL_EXPORTER_OTLP")
	case *ast.BinaryExpr:
		return namesOTLPVar(x.X, consts) || namesOTLPVar(x.Y, consts)
	case *ast.ParenExpr:
		return namesOTLPVar(x.X, consts)
	case *ast.Ident:
		return consts[x.Name]
	}
	return false
}

// TestOTelEnvReadsDetector holds the scan above to what it must find and
// what it must let pass.
func TestOTelEnvReadsDetector(t *testing.T) {
	for _, c := range []struct {
		name, src string
		reads     int
	}{
		{"os.Getenv literal", `os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")`, 1},
		{"LookupEnv raw string", "os.LookupEnv(`OTEL_EXPORTER_OTLP_HEADERS`)", 1},
		{"injected env, built name", `env("OTEL_EXPORTER_OTLP_" + sig + "_PROTOCOL")`, 1},
		{"method, constant", `cfg.Env(endpointVar)`, 1},
		{"parenthesised", `os.Getenv(("OTEL_EXPORTER_OTLP_TIMEOUT"))`, 1},
		{"loop over names", `for _, name := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} { os.Getenv(name) }`, 1},
		{"variable", `v := "OTEL_EXPORTER_OTLP_" + s; w := v; _ = os.Getenv(w)`, 1},
		{"writing the child's env", `_ = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+u)`, 0},
		{"naming it in a message", `fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: bad")`, 0},
		{"another variable", `os.Getenv("OTEL_SERVICE_NAME")`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "package p\n\nconst endpointVar = \"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT\"\n\nfunc f() {\n\t" + c.src + "\n}\n"
			name := filepath.Join(t.TempDir(), "p.go")
			if err := os.WriteFile(name, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := otelEnvReads(t, []string{name}); len(got) != c.reads {
				t.Errorf("%d reads found (%v), want %d", len(got), got, c.reads)
			}
		})
	}
}
