package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/mdtable"
)

// cliDoc is the reference that documents every subcommand's flags and
// environment variables (the README maps it).
const cliDoc = "../../docs/cli.md"

// docFlagCell is a flag table's first cell: `--name[ ARG]`, or
// `run --name` (a flag of run documented in serve's table).
var docFlagCell = regexp.MustCompile("^`(run )?--([a-z][a-z0-9.-]*)[^`]*`$")

// docEnvCell is the environment table's first cell: `NAME`.
var docEnvCell = regexp.MustCompile("^`([A-Z_]+)`$")

// helpCommands are the subcommands whose -h the docs must match.
var helpCommands = []string{"run", "demo", "replay", "serve", "simulate"}

// doc is what one docs row says of a flag.
type doc struct{ env, def string }

// docTables reads docs/cli.md's tagged tables (<!-- flags: run demo -->
// above a flag table, <!-- env --> above the environment table): per
// subcommand, its flags and what their rows say, and the environment
// variables it reads.
func docTables(t *testing.T) (flags map[string]map[string][]doc, env map[string]map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	flags, env = map[string]map[string][]doc{}, map[string]map[string]bool{}
	for _, c := range helpCommands {
		flags[c], env[c] = map[string][]doc{}, map[string]bool{}
	}
	for _, tb := range mdtable.Tables(string(b)) {
		if tb.Tag == "env" {
			for _, row := range tb.Rows {
				m := docEnvCell.FindStringSubmatch(row[0])
				if m == nil {
					continue
				}
				for _, c := range strings.Split(tb.Cell(row, "read by"), ",") {
					c = strings.Trim(strings.TrimSpace(c), "`")
					if env[c] == nil {
						t.Errorf("%s: %s is read by %q, which is no subcommand", cliDoc, m[1], c)
						continue
					}
					env[c][m[1]] = true
				}
			}
			continue
		}
		cmdList, ok := strings.CutPrefix(tb.Tag, "flags: ")
		if !ok {
			continue
		}
		cmds := strings.Fields(cmdList)
		for _, row := range tb.Rows {
			m := docFlagCell.FindStringSubmatch(row[0])
			if m == nil {
				continue
			}
			// The telemetry tables have an env column before the default.
			d := doc{env: tb.Cell(row, "env"), def: tb.Cell(row, "default")}
			of := cmds
			if m[1] != "" {
				of = []string{"run"}
			}
			for _, cmd := range of {
				flags[cmd][m[2]] = append(flags[cmd][m[2]], d)
			}
		}
	}
	return flags, env
}

// helpFlag is a flag as -h prints it.
type helpFlag struct{ def string }

// helpOf runs `cbc-otel CMD -h` and reads its flags (with their defaults)
// and its environment variables. Flags accepted only for the CLI's sake
// (simulate) are left out: docs/cli.md mentions them in prose.
func helpOf(t *testing.T, cmd string) (flags map[string]helpFlag, env map[string]bool) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{cmd, "-h"}, stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != exitOK {
		t.Fatalf("%s -h: exit %d", cmd, code)
	}
	flags, env = map[string]helpFlag{}, map[string]bool{}
	name, inEnv := "", false
	defRE := regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|[^)]*)\)$`)
	for _, l := range strings.Split(errb.String(), "\n") {
		switch {
		case l == "environment:":
			inEnv = true
		case !inEnv && strings.HasPrefix(l, "  -"):
			f := strings.Fields(l)
			name = f[0][1:]
			// PrintDefaults leaves a zero default out: bool flags have
			// no type word; numbers and durations print 0.
			def := "false"
			if len(f) > 1 {
				def = map[string]string{"int": "0", "int64": "0", "float": "0", "duration": "0s"}[f[1]]
			}
			flags[name] = helpFlag{def: def}
			if strings.Contains(l, "accepted for CLI compatibility") { // a one-letter flag: usage on its line
				delete(flags, name)
			}
		case inEnv && strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "    "):
			env[strings.TrimSpace(l)] = true
		case !inEnv && name != "" && strings.HasPrefix(l, "    \t"):
			if strings.Contains(l, "accepted for CLI compatibility") {
				delete(flags, name)
				continue
			}
			if m := defRE.FindStringSubmatch(l); m != nil {
				def := m[1]
				if u, err := strconv.Unquote(def); err == nil {
					def = u
				}
				flags[name] = helpFlag{def: def}
			}
		}
	}
	return flags, env
}

// TestCLIDocAgreesWithHelp keeps docs/cli.md's flag and environment tables
// equal to every subcommand's -h: each flag -h lists is in a table tagged
// with that subcommand, with the same default; no table lists a flag the
// subcommand lacks; the environment table and each -h list the same
// variables for the same subcommands.
func TestCLIDocAgreesWithHelp(t *testing.T) {
	docFlags, docEnv := docTables(t)
	for _, cmd := range helpCommands {
		flags, env := helpOf(t, cmd)
		for name, f := range flags {
			rows, ok := docFlags[cmd][name]
			if !ok {
				t.Errorf("%s: %s's --%s is in no table tagged %q", cliDoc, cmd, name, cmd)
				continue
			}
			// An empty flag whose row names environment variables takes
			// its default from them: the column says what that gives.
			if !slices.ContainsFunc(rows, func(d doc) bool {
				return (d.env != "" && (f.def == "" || strings.HasPrefix(f.def, "$"))) || sameDefault(d.def, f.def)
			}) {
				t.Errorf("%s: %s --%s is documented with %+v; -h says the default is %q", cliDoc, cmd, name, rows, f.def)
			}
		}
		for name := range docFlags[cmd] {
			if _, ok := flags[name]; !ok {
				t.Errorf("%s documents --%s for %s, whose -h does not list it", cliDoc, name, cmd)
			}
		}
		for v := range env {
			if !docEnv[cmd][v] {
				t.Errorf("%s's environment table lacks %s for %s (its -h lists it)", cliDoc, v, cmd)
			}
		}
		for v := range docEnv[cmd] {
			if !env[v] {
				t.Errorf("%s says %s reads %s; its -h does not list it", cliDoc, cmd, v)
			}
		}
	}
}

// sameDefault reports whether doc, a docs default column, says value:
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
