package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/mdtable"
	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
)

// flagCommands are the subcommands whose flags are in the one dialect.
var flagCommands = []string{"run", "serve", "replay", "demo"}

// commandFlagSet is cmd's FlagSet as its parse builds it, aliases
// included, on a fresh config.
func commandFlagSet(t *testing.T, cmd string) *flag.FlagSet {
	t.Helper()
	fs := newFlagSet(cmd, "", io.Discard)
	registerVersion(fs)
	var c flagConfig
	switch cmd {
	case "run":
		rc := defaultRunConfig()
		c = &rc
	case "serve":
		c = new(serveConfig)
	case "replay":
		c = &replayConfig{logLevel: "error"}
	case "demo":
		c = new(demoConfig)
	default:
		t.Fatalf("no FlagSet for %s", cmd)
	}
	c.register(fs)
	addAliases(fs)
	return fs
}

// isBool reports whether f takes no argument.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagArgs is the command line that sets name to the i-th test value its
// flag accepts (a bool flag: true, then false).
func flagArgs(t *testing.T, cmd, name, dash string, i int) []string {
	t.Helper()
	f := commandFlagSet(t, cmd).Lookup(canonical(name))
	if isBool(f) {
		return []string{dash + name + "=" + []string{"true", "false"}[i]}
	}
	for _, v := range [][]string{{"3s", "5s"}, {"4096", "8192"}, {"v", "w"}} {
		if f.Value.Set(v[i]) == nil {
			return []string{dash + name, v[i]}
		}
	}
	t.Fatalf("%s --%s takes none of the test values", cmd, name)
	return nil
}

// parsed parses args into a fresh FlagSet of cmd and returns it.
func parsed(t *testing.T, cmd string, args []string) *flag.FlagSet {
	t.Helper()
	fs := commandFlagSet(t, cmd)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%s %q: %v", cmd, args, err)
	}
	return fs
}

// TestRenamedAliases holds every deprecated name of renamed to being the
// same flag as its new name on every command that has it: -old and --old
// set the same value as --new (a bool without an argument too), given
// twice or beside the new name the last wins (or both count, for a
// repeatable flag: as the new name given twice), it is noted once as used
// and counts as the new name among the explicit flags, and -h leaves it out.
func TestRenamedAliases(t *testing.T) {
	seen := map[string]bool{}
	for _, cmd := range flagCommands {
		help := helpText(t, cmd)
		for old, to := range renamed {
			if commandFlagSet(t, cmd).Lookup(to) == nil {
				continue
			}
			seen[old] = true
			t.Run(cmd+"/"+old, func(t *testing.T) {
				want := parsed(t, cmd, flagArgs(t, cmd, to, "--", 0)).Lookup(to).Value.String()
				for _, dash := range []string{"-", "--"} {
					fs := parsed(t, cmd, flagArgs(t, cmd, old, dash, 0))
					if got := fs.Lookup(to).Value.String(); got != want {
						t.Errorf("%s%s: --%s is %q, want %q", dash, old, to, got, want)
					}
					if got := aliasesUsed(fs); !slices.Equal(got, []string{old}) {
						t.Errorf("%s%s: used %q", dash, old, got)
					}
					if ex := explicitFlags(fs); !ex[to] || ex[old] {
						t.Errorf("%s%s: explicit %v, want %s and not %s", dash, old, ex, to, old)
					}
				}
				if f := commandFlagSet(t, cmd).Lookup(to); isBool(f) {
					fs := parsed(t, cmd, []string{"--" + old})
					if got := fs.Lookup(to).Value.String(); got != "true" {
						t.Errorf("--%s alone: --%s is %q, want true", old, to, got)
					}
				}
				// Both spellings in either order, and the old one twice: as
				// the new name given twice.
				for _, names := range [][2]string{{to, old}, {old, to}, {old, old}} {
					args := append(flagArgs(t, cmd, names[0], "--", 0), flagArgs(t, cmd, names[1], "--", 1)...)
					want := parsed(t, cmd, append(flagArgs(t, cmd, to, "--", 0), flagArgs(t, cmd, to, "--", 1)...)).Lookup(to).Value.String()
					fs := parsed(t, cmd, args)
					if got := fs.Lookup(to).Value.String(); got != want {
						t.Errorf("%q: --%s is %q, want %q", args, to, got, want)
					}
					if got := aliasesUsed(fs); !slices.Equal(got, []string{old}) {
						t.Errorf("%q: used %q, want the old name once", args, got)
					}
				}
				if !helpLists(help, to) || helpLists(help, old) {
					t.Errorf("%s -h: lists --%s %v and --%s %v; want the new name only", cmd, to, helpLists(help, to), old, helpLists(help, old))
				}
			})
		}
	}
	for old, to := range renamed {
		if !seen[old] {
			t.Errorf("renamed: --%s -> --%s, a flag no command has", old, to)
		}
		if _, ok := renamed[to]; ok {
			t.Errorf("renamed: --%s -> --%s, itself renamed", old, to)
		}
	}
}

// helpText is cmd -h.
func helpText(t *testing.T, cmd string) string {
	t.Helper()
	var errb bytes.Buffer
	if code := realMain(context.Background(), []string{cmd, "-h"}, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitOK {
		t.Fatalf("%s -h: exit %d", cmd, code)
	}
	return errb.String()
}

// helpLists reports whether help has a flag line for name.
func helpLists(help, name string) bool {
	for _, l := range strings.Split(help, "\n") {
		if f := strings.Fields(l); strings.HasPrefix(l, "  -") && len(f) > 0 && f[0] == "-"+name {
			return true
		}
	}
	return false
}

// TestRenamedWarnsOnce runs replay, whose log level defaults to error,
// with deprecated names (one of them twice, in both spellings): each is
// said once at warn, naming its new name; an explicit --log.level error
// silences them, and the new names alone say nothing.
func TestRenamedWarnsOnce(t *testing.T) {
	var olds []string
	for old, to := range renamed {
		if strings.HasPrefix(to, "summary.") || strings.HasPrefix(to, "tracker.grace") {
			olds = append(olds, old)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // the deprecated names warned about
	}{
		{"old", []string{"--width", "80", "-width=90", "--grace", "1s", "-"}, []string{"grace", "width"}},
		{"bool", []string{"-json", "-"}, []string{"json"}},
		{"silenced", []string{"--log.level", "error", "--width", "80", "-"}, nil},
		{"new", []string{"--summary.width", "80", "--tracker.grace=1s", "-"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain(context.Background(), append([]string{"replay"}, tc.args...), stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			for _, old := range olds {
				n := strings.Count(errb.String(), "flag --"+old+" is deprecated")
				if want := slices.Contains(tc.want, old); n != map[bool]int{true: 1}[want] {
					t.Errorf("--%s warned %d times; stderr:\n%s", old, n, errb.String())
				}
			}
			for _, old := range tc.want {
				if !strings.Contains(errb.String(), "level=WARN") || !strings.Contains(errb.String(), "use --"+renamed[old]) {
					t.Errorf("--%s: no warning naming --%s; stderr:\n%s", old, renamed[old], errb.String())
				}
			}
		})
	}
}

// TestCLIDocListsRenamed keeps docs/cli.md's table of deprecated names
// equal to renamed: every alias documented, none that does not exist.
func TestCLIDocListsRenamed(t *testing.T) {
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^`--([a-z-]+)`$")
	doc, found := map[string]string{}, false
	for _, tb := range mdtable.Tables(string(b)) {
		if tb.Tag != "renamed" {
			continue
		}
		found = true
		for _, r := range tb.Rows {
			m := row.FindStringSubmatch(tb.Cell(r, "old"))
			if m == nil {
				t.Errorf("%s:%d: row %q has no old --name", cliDoc, tb.Line, r)
				continue
			}
			if _, dup := doc[m[1]]; dup {
				t.Errorf("%s lists --%s twice", cliDoc, m[1])
			}
			doc[m[1]] = strings.TrimPrefix(strings.Trim(tb.Cell(r, "new"), "`"), "--")
		}
	}
	if !found {
		t.Fatalf("%s has no <!-- renamed --> table", cliDoc)
	}
	if !maps.Equal(doc, renamed) {
		t.Errorf("%s's deprecated flags %v, want renamed %v", cliDoc, doc, renamed)
	}
}

// TestRenamedWarnsUnderRun: run's quiet default (--log.level error) still
// says a deprecated name once, at warn, on stderr beside the child's; an
// explicit --log.level error silences it; the child runs either way.
func TestRenamedWarnsUnderRun(t *testing.T) {
	t.Setenv(supervisetest.EnvMode, "cat")
	for _, tc := range []struct {
		flags []string
		want  int
	}{
		{[]string{"--kill-timeout=5s", "-kill-timeout", "6s"}, 1},
		{[]string{"--log.level=error", "--kill-timeout=5s"}, 0},
		{[]string{"--child.kill-timeout=5s"}, 0},
	} {
		var out, errb bytes.Buffer
		r := testRunner(nil)
		if code := r.run(context.Background(), childArgs(tc.flags...), stdio{in: strings.NewReader("x\n"), out: &out, err: &errb}); code != exitOK || out.String() != "x\n" {
			t.Fatalf("run %q: exit %d, stdout %q, stderr %q", tc.flags, code, out.String(), errb.String())
		}
		if n := strings.Count(errb.String(), "level=WARN msg=\"flag --kill-timeout is deprecated"); n != tc.want {
			t.Errorf("run %q: %d warnings, want %d; stderr:\n%s", tc.flags, n, tc.want, errb.String())
		}
	}
}
