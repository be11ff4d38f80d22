package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/simulate"
)

func TestCmdSimulateUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--dialect", "vim"}, {"--scenario", "nope"}, {"--speed", "-1"}, {"--agents", "1"},
		{"--bogus"}, {"extra-arg"},
	} {
		var errb bytes.Buffer
		code := cmdSimulate(context.Background(), args, stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &errb})
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, errb.String())
		}
	}
}

func TestCmdSimulateRecordExpect(t *testing.T) {
	dir := t.TempDir()
	rec, exp := filepath.Join(dir, "rec.ndjson"), filepath.Join(dir, "exp.ndjson")
	stdin := `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:mixed]] go"}}` + "\n"
	var out, errb bytes.Buffer
	code := cmdSimulate(context.Background(),
		[]string{"--dialect", "claude", "--speed", "0", "--epoch", "1796205994000", "--noise", "64", "--record", rec, "--expect", exp},
		stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	recorded, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(recorded, out.Bytes()) {
		t.Fatal("--record differs from stdout")
	}
	if !bytes.Contains(out.Bytes(), []byte(simulate.CanaryToken)) {
		t.Fatal("initialize response lacks the canary token")
	}
	expect, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(expect, []byte("\n")); n != 3 {
		t.Fatalf("mixed makes 3 runs, expect has %d lines:\n%s", n, expect)
	}
}

// An agent SDK starts the simulator with the CLI's own flags: they are
// accepted and ignored, so no script has to drop them.
func TestSimulateAcceptsSDKFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--output-format", "stream-json", "--verbose", "--input-format", "stream-json"},
		{"--input-format=stream-json", "--output-format=stream-json", "--verbose", "--setting-sources", "none", "-p", "--dialect", "claude"},
	} {
		var out, errb bytes.Buffer
		in := strings.NewReader(`{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n")
		if code := cmdSimulate(context.Background(), append(args, "--speed", "0"), stdio{in: in, out: &out, err: &errb}); code != exitOK {
			t.Fatalf("simulate %q = %d: %s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), `"control_response"`) {
			t.Errorf("simulate %q did not answer initialize: %q", args, out.String())
		}
	}
}
