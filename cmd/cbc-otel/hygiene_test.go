package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Input hygiene: a mistake on the command line is refused up front, in one
// line that says what and where to look, before anything runs.
func TestUsageErrorsAreOneLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string // in the line
	}{
		{[]string{"run", "--bogus", "--", "true"}, "flag provided but not defined: -bogus"},
		{[]string{"serve", "--follow"}, "flag needs an argument"},
		{[]string{"replay", "--width", "x", "-"}, "invalid value"},
		{[]string{"demo", "--speed", "fast"}, "invalid value"},
		{[]string{"simulate", "--seed", "x"}, "invalid value"},
		{[]string{"install", "--nope", dir}, "flag provided but not defined"},
		{[]string{"demo", "--scenarios", "completed,nosuch"}, `unknown scenario "nosuch"`},
		{[]string{"demo", "--traces.exporter", "bogus"}, "--traces.exporter"},
		{[]string{"replay", "--otlp.protocol", "smoke", "-"}, "--otlp.protocol"},
		{[]string{"run", "--summary-file", "/nonexistent/x", "--", "true"}, "--summary-file /nonexistent/x: directory /nonexistent does not exist"},
		{[]string{"run", "--summary-file", dir, "--", "true"}, "is a directory"},
		{[]string{"run", "--web.listen-address=", "--metrics-file", filepath.Join(dir, "nodir", "m.prom"), "--", "true"}, "does not exist"},
		{[]string{"replay", "--json"}, "no FILE given"},
		{[]string{"demo", "extra", "--json"}, `unexpected argument "extra"`},
		{[]string{"serve", "--follow", filepath.Join(dir, "*"), "extra"}, "unexpected arguments"},
		{[]string{"simulate", "extra"}, "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := realMain(context.Background(), tc.args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			msg := strings.TrimSuffix(errb.String(), "\n")
			if strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, "cbc-otel "+tc.args[0]+": ") {
				t.Errorf("stderr %q: want one line \"cbc-otel %s: ...%s...\"", errb.String(), tc.args[0], tc.want)
			}
			if out.Len() > 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

// A flag parse error points at -h; -h itself prints the whole usage and
// exits 0.
func TestFlagErrorPointsAtHelp(t *testing.T) {
	var errb bytes.Buffer
	if code := realMain(context.Background(), []string{"replay", "--bogus"}, stdio{out: new(bytes.Buffer), err: &errb}); code != exitUsage {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errb.String(), "(see 'cbc-otel replay -h')") {
		t.Errorf("stderr %q does not point at -h", errb.String())
	}
	errb.Reset()
	if code := realMain(context.Background(), []string{"replay", "-h"}, stdio{out: new(bytes.Buffer), err: &errb}); code != exitOK {
		t.Fatalf("-h: exit %d", code)
	}
	if !strings.Contains(errb.String(), "usage: cbc-otel replay") || !strings.Contains(errb.String(), "-width") {
		t.Errorf("-h printed %q", errb.String())
	}
}

// replay's operands and flags mix in any order; after "--" everything is
// a file.
func TestReplayFlagsAfterOperands(t *testing.T) {
	in := `{"type":"system","subtype":"task_started","task_id":"w","task_type":"local_workflow","workflow_name":"x","session_id":"s"}` + "\n"
	for _, args := range [][]string{
		{"replay", "-", "--json", "--width", "60"},
		{"replay", "--json", "-", "--width", "60"},
		{"replay", "--width", "60", "--json", "--", "-"},
	} {
		var out, errb bytes.Buffer
		code := realMain(context.Background(), args, stdio{in: strings.NewReader(in), out: &out, err: &errb})
		if code != exitOK || !strings.Contains(out.String(), `"kind":"stats"`) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the --json output of stdin", args, code, out.String(), errb.String())
		}
	}
	var errb bytes.Buffer
	code := realMain(context.Background(), []string{"replay", "--json", "--", "--width"}, stdio{in: strings.NewReader(""), out: new(bytes.Buffer), err: &errb})
	if code != exitFailure || !strings.Contains(errb.String(), "--width") {
		t.Errorf(`after "--", --width is a file: exit %d, stderr %q`, code, errb.String())
	}
}

// Every exporter docs/cli.md documents is accepted: console writes OTLP/JSON
// to stderr, never to stdout (replay's summary, run's child stream).
func TestConsoleExporterAccepted(t *testing.T) {
	in := `{"type":"system","subtype":"task_started","task_id":"w","task_type":"local_workflow","workflow_name":"x","session_id":"s"}` + "\n" +
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"completed","session_id":"s"}` + "\n"
	var out, errb bytes.Buffer
	code := realMain(context.Background(), []string{"replay", "--traces.exporter", "console", "--json", "-"}, stdio{in: strings.NewReader(in), out: &out, err: &errb})
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if strings.Contains(out.String(), "resourceSpans") || !strings.Contains(out.String(), `"kind":"stats"`) {
		t.Errorf("stdout %q: want the --json lines only", out.String())
	}
	if !strings.Contains(errb.String(), `"resourceSpans"`) {
		t.Errorf("stderr %q: want the spans as OTLP/JSON", errb.String())
	}
}
