package main

import (
	"flag"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// readmeFlagRow is a row of a README flag table: | `--name[ ARG]` | ... |,
// or | `run --name` | ... | in serve's table.
var readmeFlagRow = regexp.MustCompile("^\\| `(?:run )?--([a-z][a-z0-9.-]*)[^`]*` \\|(.*)$")

// TestReadmeFlagTables keeps README.md's flag tables equal to the flags run
// and serve register (the telemetry flags, shared by run, demo, replay and
// serve, included): every flag documented, no flag documented that the
// binary lacks, and the documented default the binary's. replay's and
// demo's own few flags (--json, --width, --scenarios, ...) are described in
// prose, not in tables.
func TestReadmeFlagTables(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ env, def string }
	documented := map[string][]row{} // name → its rows' env and default columns
	for _, l := range strings.Split(string(b), "\n") {
		m := readmeFlagRow.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		c := cells(m[2])
		r := row{def: c[0]}
		if len(c) == 3 { // the telemetry table has an env column first
			r = row{env: c[0], def: c[1]}
		}
		documented[m[1]] = append(documented[m[1]], r)
	}

	rc := defaultRunConfig()
	rfs := flag.NewFlagSet("run", flag.ContinueOnError)
	rc.register(rfs)
	var sc serveConfig
	sfs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sc.register(sfs)
	registered := map[string]bool{}
	missing := map[string]bool{}
	for _, fs := range []*flag.FlagSet{rfs, sfs} {
		fs.VisitAll(func(f *flag.Flag) {
			registered[f.Name] = true
			rows, ok := documented[f.Name]
			if !ok {
				missing["--"+f.Name] = true
				return
			}
			// An empty flag whose row names environment variables takes
			// its default from them: the column says what that gives.
			if !slices.ContainsFunc(rows, func(r row) bool {
				return (r.env != "" && f.DefValue == "") || sameDefault(r.def, f.DefValue)
			}) {
				t.Errorf("README.md: --%s is documented with %+v; %s's default is %q", f.Name, rows, fs.Name(), f.DefValue)
			}
		})
	}
	var extra []string
	for name := range documented {
		if _, ok := registered[name]; !ok {
			extra = append(extra, "--"+name)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("README.md's flag tables lack %s", strings.Join(slices.Sorted(maps.Keys(missing)), ", "))
	}
	if len(extra) > 0 {
		t.Errorf("README.md's flag tables document %s, which neither run nor serve has", strings.Join(extra, ", "))
	}
}

// sameDefault reports whether doc, a README default column, says value:
// off for false, nothing for an empty value, else the value in backticks
// (durations compared as durations: `5m` is 5m0s).
func sameDefault(doc, value string) bool {
	switch value {
	case "", "[]":
		return doc == ""
	case "false":
		return doc == "off"
	}
	v, pre := strings.CutPrefix(doc, "`")
	v, suf := strings.CutSuffix(v, "`")
	if !pre || !suf {
		return false
	}
	if v == value {
		return true
	}
	d1, err1 := time.ParseDuration(v)
	d2, err2 := time.ParseDuration(value)
	return err1 == nil && err2 == nil && d1 == d2
}

// cells splits the rest of a table row into its trimmed cells.
func cells(row string) []string {
	out := strings.Split(strings.TrimSuffix(strings.TrimSpace(row), "|"), "|")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}
