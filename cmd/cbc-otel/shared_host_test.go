package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// sharedCLI is the CLI of TestWrappersShareAHost: it writes to stderr
// before and after its stdout (recording i), and stays up until its stdin
// closes, as an SDK's CLI does between turns.
func sharedCLI(dir string, i int) []string {
	return []string{"sh", "-c", `echo "cli $1: starting" >&2; cat "$2"; cat >/dev/null; echo "cli $1: done" >&2`,
		"sh", strconv.Itoa(i), filepath.Join(dir, strconv.Itoa(i))}
}

// TestWrappersShareAHost: n wrappers at once on one host, as an SDK starts
// them (one per session), each over a CLI that writes to stderr. With the
// defaults, with the README's recipe (run --spool.dir and one serve) and
// with a metrics file each, every wrapper's stderr is the CLI's alone,
// byte for byte, its stdout the CLI's, and (where counted) no count is
// lost. The control: a port all of them are given explicitly is fought
// over, and the losers say so on stderr, so the comparison would see the
// fight the old default started.
func TestWrappersShareAHost(t *testing.T) {
	const n = 4
	data := t.TempDir()
	recs := make([]recording, n)
	sum := recording{runs: map[string]float64{}}
	for i := range recs {
		recs[i] = record(t, 40+i, "completed", "failed", "mixed")
		if err := os.WriteFile(filepath.Join(data, strconv.Itoa(i)), recs[i].all(), 0o600); err != nil {
			t.Fatal(err)
		}
		for st, v := range recs[i].runs {
			sum.runs[st] += v
		}
		sum.agents += recs[i].agents
		sum.tokens += recs[i].tokens
	}
	if sum.runs["completed"] == 0 || sum.runs["failed"] == 0 || sum.agents == 0 {
		t.Fatalf("recordings with nothing to count: %+v", sum)
	}
	// The CLI alone: what every wrapper's stdout and stderr must be.
	alone := make([][2][]byte, n)
	for i := range alone {
		argv := sharedCLI(data, i)
		cmd := exec.Command(argv[0], argv[1:]...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || len(out) == 0 || stderr.Len() == 0 {
			t.Fatalf("the CLI alone: %v, %d bytes out, stderr %q", err, len(out), stderr.String())
		}
		alone[i] = [2][]byte{out, stderr.Bytes()}
	}

	port := freeAddr(t)
	for _, tc := range []struct {
		name string
		args func(i int) []string
		// counted compares the totals with the recordings' ("" if equal);
		// nil: nothing counts.
		counted func(t *testing.T) func() string
		fight   bool // the control
	}{
		{name: "defaults", args: func(int) []string { return nil }},
		{name: "run --spool.dir and one serve", args: func(int) []string { return []string{"--spool.dir", filepath.Join(data, "spool")} },
			counted: func(t *testing.T) func() string {
				spool := filepath.Join(data, "spool")
				if err := os.MkdirAll(spool, 0o700); err != nil {
					t.Fatal(err)
				}
				s := startServed(t, "--spool.dir", spool)
				return func() string { return s.matches(sum) }
			}},
		{name: "a metrics file each", args: func(i int) []string {
			return []string{"--metrics.file", filepath.Join(data, fmt.Sprintf("m%d.prom", i))}
		}, counted: func(*testing.T) func() string {
			return func() string {
				return sum.differs(func(name, label string) (map[string]float64, error) {
					total := map[string]float64{}
					for i := range n {
						f, err := os.Open(filepath.Join(data, fmt.Sprintf("m%d.prom", i)))
						if err != nil {
							return nil, err
						}
						m, err := sumFamily(f, name, label)
						f.Close()
						if err != nil {
							return nil, err
						}
						for k, v := range m {
							total[k] += v
						}
					}
					return total, nil
				})
			}
		}},
		{name: "one port given to all (control)", args: func(int) []string { return []string{"--web.listen-address", port} }, fight: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var totals func() string
			if tc.counted != nil {
				totals = tc.counted(t)
			}
			type wrapper struct {
				cmd            *exec.Cmd
				stdin          io.WriteCloser
				stdout, stderr *oteltest.SyncBuffer
				done           chan error
			}
			ws := make([]*wrapper, n)
			for i := range ws {
				w := &wrapper{stdout: new(oteltest.SyncBuffer), stderr: new(oteltest.SyncBuffer), done: make(chan error, 1)}
				w.cmd = exec.Command(wrapperBin, append(append([]string{"run"}, tc.args(i)...), sharedCLI(data, i)...)...)
				w.cmd.Stdout, w.cmd.Stderr = w.stdout, w.stderr
				var err error
				if w.stdin, err = w.cmd.StdinPipe(); err != nil {
					t.Fatal(err)
				}
				if err := w.cmd.Start(); err != nil {
					t.Fatal(err)
				}
				go func() { w.done <- w.cmd.Wait() }()
				t.Cleanup(func() {
					w.cmd.Process.Kill()
					<-w.done
				})
				ws[i] = w
			}
			// All of them up at once: each has written its whole stdout
			// while every stdin is still open.
			for i, w := range ws {
				poll(t, 20*time.Second, fmt.Sprintf("wrapper %d's stdout", i), func() (bool, string) {
					return w.stdout.String() == string(alone[i][0]), fmt.Sprintf("%d of %d bytes", len(w.stdout.String()), len(alone[i][0]))
				})
			}
			for _, w := range ws {
				w.stdin.Close()
			}
			fought := 0
			for i, w := range ws {
				select {
				case err := <-w.done:
					w.done <- err // for the cleanup
					if err != nil {
						t.Errorf("wrapper %d: %v", i, err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("wrapper %d did not exit after its stdin closed", i)
				}
				if got := w.stderr.String(); got != string(alone[i][1]) {
					if !tc.fight {
						t.Errorf("wrapper %d's stderr differs from the CLI's alone:\n got %q\nwant %q", i, got, alone[i][1])
					}
					if strings.Contains(got, "address already in use") {
						fought++
					}
				}
			}
			if tc.fight && fought != n-1 {
				t.Errorf("%d wrappers reported the port taken on the CLI's stderr, want %d: the comparison would not see a fight", fought, n-1)
			}
			if totals != nil {
				poll(t, 20*time.Second, "every run counted once", func() (bool, string) {
					d := totals()
					return d == "", d
				})
			}
		})
	}
}
