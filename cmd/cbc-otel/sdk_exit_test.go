package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// twoRunRecording is a stream of two completed workflow runs as a CLI
// writes it: the first run and the turn's result, then ~600 KiB of
// ordinary traffic, then a second run (the first one's ids renamed). An SDK
// that ends the session at the first turn's result leaves the rest in the
// pipes: the child has written it, the wrapper has not passed it on yet.
func twoRunRecording(t *testing.T) []byte {
	t.Helper()
	first, err := os.ReadFile(exportRecording)
	if err != nil {
		t.Fatal(err)
	}
	second := strings.NewReplacer("ww1t7k50l", "ww2t7k50l", "0mx5yo7rw-0b933e5a", "0mx5yo7rw-1c044f6b").Replace(string(first))
	if second == string(first) {
		t.Fatal("the recording's ids changed: update twoRunRecording")
	}
	var b bytes.Buffer
	b.Write(first)
	text := strings.Repeat("lorem ipsum ", 400)
	for b.Len() < 650<<10 {
		fmt.Fprintf(&b, `{"type":"assistant","message":{"content":[{"type":"text","text":%q}]}}`+"\n", text)
	}
	b.WriteString(second)
	return b.Bytes()
}

// burnCPU keeps every P of this process busy until the test ends: the
// machine is busy, as on a loaded CI runner.
func burnCPU(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := uint64(1); ctx.Err() == nil; x++ {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

var promSample = regexp.MustCompile(`(?m)^(\w+)(\{[^}]*\})? (\S+)$`)

// promValues reads a Prometheus text file into name{labels} → value.
func promValues(t *testing.T, path string) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, s := range promSample.FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(s[3], 64)
		if err != nil {
			t.Fatalf("%s: %q", path, s[0])
		}
		m[s[1]+s[2]] = v
	}
	return m
}

// Issue 28.8: whichever way an SDK ends the CLI once it has the result it
// wanted, the wrapper's exit accounts for every byte the child wrote: the
// metrics file counts both completed runs, and stdout's framed, incomplete
// and dropped bytes are all the child wrote. The endings: stdin closed (the
// Claude Agent SDK; the CLI exits at EOF), SIGTERM to the wrapper with
// stdout no longer read (the CodeBuddy SDK, whose CLI has exited or not),
// stdin and stdout closed then SIGTERM, and SIGKILL of the CLI's process
// group. The machine is kept busy and each ending tried several times; the
// old exit lost the second run (unread in the pipe) in every SIGTERM try.
func TestE2ESDKEndingsLoseNoTappedByte(t *testing.T) {
	rec := twoRunRecording(t)
	dir := t.TempDir()
	recFile := filepath.Join(dir, "two-runs.ndjson")
	if err := os.WriteFile(recFile, rec, 0o644); err != nil {
		t.Fatal(err)
	}
	burnCPU(t)
	tries := 6
	if testing.Short() {
		tries = 2
	}
	for _, tc := range []struct {
		name string
		end  string // the CLI's, after writing (see supervisetest "replay")
		sdk  func(t *testing.T, cmd *exec.Cmd, stdin io.Closer, stdout *os.File, childPid int)
		code int
	}{
		{"stdin closed", "stdin", func(t *testing.T, _ *exec.Cmd, stdin io.Closer, stdout *os.File, _ int) {
			stdin.Close()
			io.Copy(io.Discard, stdout)
		}, 0},
		{"SIGTERM after the CLI exited, stdout unread", "exit", func(t *testing.T, cmd *exec.Cmd, _ io.Closer, _ *os.File, _ int) {
			cmd.Process.Signal(syscall.SIGTERM)
		}, 0},
		{"SIGTERM to a live CLI, stdout unread", "hang", func(t *testing.T, cmd *exec.Cmd, _ io.Closer, _ *os.File, _ int) {
			cmd.Process.Signal(syscall.SIGTERM)
		}, 143},
		{"stdin and stdout closed, SIGTERM", "hang", func(t *testing.T, cmd *exec.Cmd, stdin io.Closer, stdout *os.File, _ int) {
			stdin.Close()
			stdout.Close()
			cmd.Process.Signal(syscall.SIGTERM)
		}, 143},
		{"SIGKILL of the CLI's group", "hang", func(t *testing.T, _ *exec.Cmd, _ io.Closer, stdout *os.File, pid int) {
			if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, stdout)
		}, 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for try := range tries {
				metrics := filepath.Join(dir, fmt.Sprintf("%s-%d.prom", tc.end, try))
				cmd := exec.Command(wrapperBin, "run", "--web.listen-address=", "--child.drain-timeout=200ms",
					"--metrics.file", metrics, "--", testExe)
				cmd.Env = supervisetest.Env("replay:" + tc.end + ":" + recFile)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				outR, outW, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdout = outW
				errR, err := cmd.StderrPipe()
				if err != nil {
					t.Fatal(err)
				}
				start(t, cmd)
				outW.Close()
				stderr := readLines(t, errR)
				var pid int
				if _, err := fmt.Sscanf(stderr.next(), "pid %d", &pid); err != nil {
					t.Fatal(err)
				}
				// The SDK reads up to the turn's result (the recording's
				// second result line), and the CLI has written everything.
				out := bufio.NewReader(outR)
				for results := 0; results < 2; {
					line, err := out.ReadBytes('\n')
					if err != nil {
						t.Fatalf("stdout ended before the result: %v", err)
					}
					if bytes.Contains(line, []byte(`"type":"result"`)) {
						results++
					}
				}
				if got := stderr.next(); got != "done" {
					t.Fatalf("the CLI said %q", got)
				}
				tc.sdk(t, cmd, stdin, outR, pid)
				code := exitCode(t, cmd)
				outR.Close()
				var rest []string
				for l := range stderr.c {
					rest = append(rest, l)
				}
				if code != tc.code {
					t.Fatalf("try %d: exit %d, want %d; stderr:\n%s", try, code, tc.code, strings.Join(rest, "\n"))
				}
				m := promValues(t, metrics)
				framed, dropped := m[`cbc_otel_bytes_total{source="stdout"}`], m[`cbc_otel_tap_dropped_bytes_total{source="stdout"}`]
				incomplete := m[`cbc_otel_incomplete_bytes_total{source="stdout"}`]
				completed := m[`cbc_workflow_runs_total{status="completed",workflow="mock-review"}`]
				if framed+incomplete+dropped != float64(len(rec)) {
					t.Errorf("try %d: stdout framed %v + incomplete %v + dropped %v bytes, the CLI wrote %d; stderr:\n%s", try, framed, incomplete, dropped, len(rec), strings.Join(rest, "\n"))
				}
				if dropped == 0 && completed != 2 {
					t.Errorf("try %d: %v completed runs, want 2 (nothing dropped); stderr:\n%s", try, completed, strings.Join(rest, "\n"))
				}
			}
		})
	}
}

// Issue 28.8: a consumer still behind when the wait at exit ends is given
// up on: what it had not read is counted as dropped (the tap's counts, which
// the metrics export), before the outputs are written, and the exit says
// so at the default log level; every tapped byte is consumed or dropped.
func TestRunGivesUpSlowConsumerCounted(t *testing.T) {
	t.Setenv(supervisetest.EnvMode, "cat")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	var in bytes.Buffer
	for in.Len() < 2<<20 {
		in.WriteString(`{"type":"assistant","message":{"content":"` + strings.Repeat("z", 1000) + "\"}}\n")
	}
	type result struct{ consumed, tapped, dropped int64 }
	got := make(chan result, 1)
	r := testRunner(nil)
	r.consumerWait = 50 * time.Millisecond
	r.consume = func(stdout, stdin *tap.Tap, _ *slog.Logger) {
		var consumed int64
		taps := [tap.NumSources]*tap.Tap{stdout, stdin}
		tap.Merge(context.Background(), stdout, stdin, tap.MergeOptions{
			Chunk: func(s tap.Source, c tap.Chunk) {
				// A consumer far behind the pipe: time passes, nothing waits on it.
				time.Sleep(5 * time.Millisecond)
				consumed += int64(len(c.Data))
				taps[s].Release(c)
			},
		})
		var res result
		res.consumed = consumed
		for _, tp := range taps {
			n, d, _ := tp.Stats()
			res.tapped += n
			res.dropped += d
		}
		got <- res
	}
	var out, errb bytes.Buffer
	code := r.run(context.Background(), childArgs("--tap.queue-bytes=4194304"), stdio{in: bytes.NewReader(in.Bytes()), out: &out, err: &errb})
	if code != 0 || !bytes.Equal(out.Bytes(), in.Bytes()) {
		t.Fatalf("run = %d, %d of %d bytes out; stderr:\n%s", code, out.Len(), in.Len(), errb.String())
	}
	res := <-got
	if res.tapped != 2*int64(in.Len()) || res.consumed+res.dropped != res.tapped || res.dropped == 0 {
		t.Fatalf("tapped %d (want %d), consumed %d + dropped %d", res.tapped, 2*in.Len(), res.consumed, res.dropped)
	}
	if !strings.Contains(errb.String(), "telemetry fell behind") || !strings.Contains(errb.String(), "given_up_bytes=") {
		t.Errorf("the exit does not say what it gave up:\n%s", errb.String())
	}
}
