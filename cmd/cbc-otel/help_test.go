package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
)

// flagBlocks splits PrintDefaults-format text into one block per flag
// (its "  -name" line and the usage lines under it), by name.
func flagBlocks(text string) map[string]string {
	blocks := map[string]string{}
	name := ""
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "  -"):
			name = strings.Fields(l)[0][1:]
			blocks[name] = l + "\n"
		case name != "" && strings.HasPrefix(l, "    \t"):
			blocks[name] += l + "\n"
		default:
			name = ""
		}
	}
	return blocks
}

// TestHelpGrouped: each command's -h has two or three examples, then its
// flags grouped by namespace, one group each, under a header naming it;
// every flag but the deprecated aliases is there, each exactly as
// PrintDefaults prints it (the parsers of the README test, chaos and the
// chart tests read that format); the aliases are pointed at in one line.
func TestHelpGrouped(t *testing.T) {
	header := regexp.MustCompile(`^(?:([a-z-]+)\.\*: .+|the command itself:)$`)
	for _, cmd := range flagCommands {
		t.Run(cmd, func(t *testing.T) {
			help := helpText(t, cmd)
			usage, flags, ok := strings.Cut(help, "\nflags:\n")
			if !ok {
				t.Fatalf("-h has no flags section:\n%s", help)
			}
			flags, _, _ = strings.Cut(flags, "\nenvironment:\n")
			_, examples, ok := strings.Cut(usage, "\nexamples:\n")
			if n := strings.Count(examples, "\n  cbc-otel "+cmd) + strings.Count(examples, "\n  exec cbc-otel "+cmd); !ok || n < 2 || n > 3 {
				t.Errorf("-h has %d examples, want 2 or 3:\n%s", n, usage)
			}
			seen := map[string]bool{} // namespaces whose group is done
			group := "?"
			for _, l := range strings.Split(flags, "\n") {
				if m := header.FindStringSubmatch(l); m != nil {
					if seen[m[1]] {
						t.Errorf("namespace %q has two groups", m[1])
					}
					seen[m[1]], group = true, m[1]
				} else if strings.HasPrefix(l, "  -") {
					if ns := namespace(strings.Fields(l)[0][1:]); ns != group {
						t.Errorf("%q is under the group of %q", l, group)
					}
				}
			}
			if !strings.Contains(flags, `"Deprecated flag names"`) {
				t.Error("-h does not point at the deprecated names")
			}
			fs := commandFlagSet(t, cmd)
			var want bytes.Buffer
			plain := flag.NewFlagSet(cmd, flag.ContinueOnError)
			plain.SetOutput(&want)
			fs.VisitAll(func(f *flag.Flag) {
				if !isAlias(f) {
					plain.Var(f.Value, f.Name, f.Usage)
				}
			})
			plain.PrintDefaults()
			got, wantBlocks := flagBlocks(flags), flagBlocks(want.String())
			for name, b := range wantBlocks {
				if got[name] != b {
					t.Errorf("--%s: -h prints\n%q\nPrintDefaults\n%q", name, got[name], b)
				}
			}
			if len(got) != len(wantBlocks) {
				t.Errorf("-h lists %d flags, the FlagSet has %d besides the aliases", len(got), len(wantBlocks))
			}
		})
	}
}

// TestHelpShowsDefaultsNotValues: a flag given before -h still shows its
// default, not the value given.
func TestHelpShowsDefaultsNotValues(t *testing.T) {
	var errb bytes.Buffer
	if code := realMain(context.Background(), []string{"replay", "--summary.width", "33", "-h"}, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	if b := flagBlocks(errb.String())["summary.width"]; !strings.Contains(b, "(default 100)") {
		t.Errorf("--summary.width after --summary.width 33: %q", b)
	}
}

// TestVersionFlag: each command's --version prints the version and ends
// with 0 before anything else is checked or run (run has no command,
// replay no file, serve nothing to follow); -version=false does nothing.
func TestVersionFlag(t *testing.T) {
	for _, cmd := range flagCommands {
		for _, v := range []string{"--version", "-version", "--version=true"} {
			var out, errb bytes.Buffer
			code := realMain(context.Background(), []string{cmd, v}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
			if code != exitOK || errb.String() != "cbc-otel "+buildVersion()+"\n" || out.Len() != 0 {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q", cmd, v, code, out.String(), errb.String())
			}
		}
	}
	var errb bytes.Buffer
	if code := realMain(context.Background(), []string{"replay", "--version=false"}, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitUsage || !strings.Contains(errb.String(), "no FILE given") {
		t.Errorf("replay --version=false: exit %d, stderr %q; want the usual usage error", code, errb.String())
	}
}
