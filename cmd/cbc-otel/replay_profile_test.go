package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayProfiles: --profile.cpu and --profile.heap write pprof profiles
// (gzipped protobuf) that go tool pprof reads, whether given alone or
// together, and an unwritable profile path fails the command.
func TestReplayProfiles(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool pprof is needed to read the profiles: %v", err)
	}
	rec := filepath.Join("..", "..", "testdata", "corpus", "claude-code-2.1.328")
	recs, err := filepath.Glob(filepath.Join(rec, "*.ndjson"))
	if err != nil || len(recs) == 0 {
		t.Fatalf("no recording under %s: %v", rec, err)
	}
	for _, tc := range []struct {
		name      string
		cpu, heap bool
	}{{"cpu", true, false}, {"heap", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cpu, heap := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "heap.pprof")
			args := []string{"--summary.json"}
			if tc.cpu {
				args = append(args, "--profile.cpu", cpu)
			}
			if tc.heap {
				args = append(args, "--profile.heap", heap)
			}
			args = append(args, recs[0])
			var errb bytes.Buffer
			if code := cmdReplay(context.Background(), args, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitOK {
				t.Fatalf("replay %v: exit %d: %s", args, code, errb.String())
			}
			for _, p := range []struct {
				path string
				want bool
			}{{cpu, tc.cpu}, {heap, tc.heap}} {
				b, err := os.ReadFile(p.path)
				if !p.want {
					if err == nil {
						t.Errorf("%s written without its flag", p.path)
					}
					continue
				}
				if err != nil {
					t.Fatalf("profile not written: %v", err)
				}
				if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
					t.Fatalf("%s: not gzip (a pprof profile is gzipped protobuf): % x", p.path, b[:min(len(b), 8)])
				}
				out, err := exec.Command(goBin, "tool", "pprof", "-top", p.path).CombinedOutput()
				if err != nil {
					t.Fatalf("go tool pprof -top %s: %v\n%s", p.path, err, out)
				}
			}
		})
	}
	t.Run("unwritable", func(t *testing.T) {
		for _, flag := range []string{"--profile.cpu", "--profile.heap"} {
			bad := filepath.Join(t.TempDir(), "no-such-dir", "p.pprof")
			var errb bytes.Buffer
			code := cmdReplay(context.Background(), []string{flag, bad, recs[0]}, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb})
			if code != exitFailure || !strings.Contains(errb.String(), "profile") {
				t.Errorf("%s into a missing directory: exit %d, stderr %q; want %d and the profile named", flag, code, errb.String(), exitFailure)
			}
		}
	})
}

// TestReplayPrintsTheSameWithoutMetrics: replay leaves the metrics sink out
// when nothing reads the metrics (telemetry's
// TestReplayMetricsSinkOnlyWhenRead), which must change nothing it prints:
// the same lines with and without --metrics.file, whose file counts the
// runs.
func TestReplayPrintsTheSameWithoutMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "replay.prom")
	recs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "simulate", "*.ndjson"))
	if err != nil || len(recs) == 0 {
		t.Fatalf("no simulated stream: %v", err)
	}
	for _, rec := range recs {
		for _, format := range [][]string{{"--summary.json"}, nil} {
			var outs [2]bytes.Buffer
			for i, args := range [][]string{append(format[:len(format):len(format)], rec), append(format[:len(format):len(format)], "--metrics.file", file, rec)} {
				var errb bytes.Buffer
				if code := cmdReplay(context.Background(), args, stdio{in: strings.NewReader(""), out: &outs[i], err: &errb}); code != exitOK {
					t.Fatalf("replay %v: exit %d: %s", args, code, errb.String())
				}
			}
			if outs[0].String() != outs[1].String() {
				t.Errorf("%s %v: replay printed\n%s\nwithout --metrics.file, and with it\n%s", rec, format, outs[0].String(), outs[1].String())
			}
			if format != nil && strings.Contains(outs[0].String(), `"kind":"workflow"`) {
				b, _ := os.ReadFile(file)
				if !strings.Contains(string(b), "cbc_workflow_runs_total{") {
					t.Errorf("%s: the metrics file counts no run:\n%s", rec, b)
				}
			}
		}
	}
}
