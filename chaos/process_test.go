//go:build chaos

package chaos

// Section 3, process faults: the built wrapper around children that are
// killed, signalled, cut off by their consumer, starved of stdin or never
// reading it, and serve killed -9 mid-stream. Wherever a behaviour has a
// reference without the wrapper, the same child is run both ways and the
// wrapped outcome must equal the direct one.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbc-otel/cbc-otel/internal/promfam"
	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
)

// pfEpoch makes simulate's output reproducible (virtual clock).
const pfEpoch = "1790000000000"

func init() {
	// process-exec-pid: print "pid N" on stderr, then become args (same pid), so a
	// test can signal the real child of a wrapper.
	chaosChildren["process-exec-pid"] = func(args []string) int {
		fmt.Fprintf(os.Stderr, "pid %d\n", os.Getpid())
		if len(args) == 0 {
			return 2
		}
		err := syscall.Exec(args[0], args, os.Environ())
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 2
	}
	// process-no-stdin: never touch stdin; print "ready", exit 5 on SIGUSR1.
	chaosChildren["process-no-stdin"] = func([]string) int {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGUSR1)
		fmt.Println("ready")
		<-c
		return 5
	}
	// process-hello-exit: print "hello" and exit 5 at once, stdin untouched.
	chaosChildren["process-hello-exit"] = func([]string) int {
		fmt.Println("hello")
		return 5
	}
	// process-close-stdin: close stdin, print "closed", exit 0 on SIGUSR1.
	chaosChildren["process-close-stdin"] = func([]string) int {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGUSR1)
		os.Stdin.Close()
		fmt.Println("closed")
		<-c
		return 0
	}
}

// ------------------------------------------------------------ helpers

// pfProc is a started process with piped stdio.
type pfProc struct {
	cmd    *exec.Cmd
	stdin  *os.File // write end; nil when stdin was given
	out    *bufio.Reader
	outR   *os.File
	stderr *syncBuffer
	done   chan struct{}
	end    time.Time
}

// pfStart starts argv with env; stdin is a pipe kept by the test when in
// is nil. stdout is a pipe read through p.out, stderr is collected.
func pfStart(t *testing.T, env []string, in *os.File, argv ...string) *pfProc {
	t.Helper()
	p := &pfProc{cmd: exec.Command(argv[0], argv[1:]...), stderr: new(syncBuffer), done: make(chan struct{})}
	p.cmd.Env = env
	var closeAfter []*os.File
	if in == nil {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Stdin, p.stdin = r, w
		closeAfter = append(closeAfter, r)
	} else {
		p.cmd.Stdin = in
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.outR, p.out = w, r, bufio.NewReaderSize(r, 1<<20)
	closeAfter = append(closeAfter, w)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	go func() {
		p.cmd.Wait()
		p.end = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		p.outR.Close()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(argv[0]), p.stderr)
		}
	})
	return p
}

// waitLine reads stdout until a line containing s (within d).
func (p *pfProc) waitLine(t *testing.T, s string, d time.Duration) {
	t.Helper()
	found := make(chan error, 1)
	go func() {
		for {
			l, err := p.out.ReadString('\n')
			if strings.Contains(l, s) {
				found <- nil
				return
			}
			if err != nil {
				found <- err
				return
			}
		}
	}()
	select {
	case err := <-found:
		if err != nil {
			t.Fatalf("stdout ended before %q: %v", s, err)
		}
	case <-time.After(d):
		t.Fatalf("no %q on stdout within %v", s, d)
	}
}

// drain discards the rest of stdout in the background.
func (p *pfProc) drain() { go io.Copy(io.Discard, p.out) }

// childPid polls stderr for the "pid N" of exec-pid.
func (p *pfProc) childPid(t *testing.T) int {
	t.Helper()
	var pid int
	pfPoll(t, 10*time.Second, "the child's pid on stderr", func() bool {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, "pid "); ok {
				pid, _ = strconv.Atoi(rest)
				return pid > 0
			}
		}
		return false
	})
	return pid
}

// wait returns the exit status as a shell sees it (128+N for signal N) and
// when the process ended; it fails t after d.
func (p *pfProc) wait(t *testing.T, d time.Duration) (int, time.Time) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.cmd.Path, d)
	}
	return pfStatus(p.cmd.ProcessState), p.end
}

func pfStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// pfPoll calls f every 20 ms until it is true; it fails t after d.
func pfPoll(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// wrapped is argv under `cbc-otel run` with no metrics endpoint (tests
// run side by side) and the given run flags.
func pfWrapped(flags []string, argv ...string) []string {
	return append(append(append([]string{wrapperBin, "run", "--web.listen-address="}, flags...), "--"), argv...)
}

// pfTurns writes one user message per scenario to a file.
func pfTurns(t *testing.T, scenarios ...string) string {
	t.Helper()
	var b bytes.Buffer
	for i, sc := range scenarios {
		fmt.Fprintf(&b, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] %d"}}`+"\n", sc, i)
	}
	path := filepath.Join(t.TempDir(), "turns.ndjson")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pfPromSums reads Prometheus text and sums name's series by label
// (internal/promfam's rule).
func pfPromSums(r io.Reader, name, label string) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return promfam.ByLabel(fams, name, label), nil
}

func pfPromFile(t *testing.T, path, name, label string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("metrics file: %v", err)
	}
	defer f.Close()
	m, err := pfPromSums(f, name, label)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pfRunStatuses counts the workflow runs of a summary or expect file by status.
func pfRunStatuses(t *testing.T, path string) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	out := map[string]float64{}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r struct{ Kind, Status string }
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.Kind == "workflow" {
			out[r.Status]++
		}
	}
	return out
}

func pfMs(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// ------------------------------------------------------------ tests

// The child killed by SIGKILL mid-workflow: the wrapper exits 137 at once,
// and its open run is abandoned in the metrics and the summary.
func TestProcessChildKilled(t *testing.T) {
	dir := t.TempDir()
	prom, sum := filepath.Join(dir, "m.prom"), filepath.Join(dir, "summary.ndjson")
	w := pfStart(t, childEnv("process-exec-pid"), nil, pfWrapped([]string{"--metrics.file", prom, "--summary.file", sum},
		testExe, wrapperBin, "simulate", "--speed", "20", "--noise", "0", "--epoch", pfEpoch)...)
	turns, err := os.ReadFile(pfTurns(t, "completed"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.stdin.Write(turns); err != nil { // stdin stays open: a live session
		t.Fatal(err)
	}
	pid := w.childPid(t)
	w.waitLine(t, `"task_progress"`, 20*time.Second)
	w.drain()
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, end := w.wait(t, 30*time.Second)
	took := end.Sub(t0)
	record(t, SecProcess, "child SIGKILL mid-workflow: wrapper exit", strconv.Itoa(code), "137", code == 137)
	record(t, SecProcess, "child SIGKILL: child death to wrapper exit", pfMs(took), "< 2000 ms", took < 2*time.Second)
	runs := pfPromFile(t, prom, "cbc_workflow_runs_total", "status")
	record(t, SecProcess, "child SIGKILL: cbc_workflow_runs_total", fmt.Sprint(runs), "abandoned 1, nothing else",
		runs["abandoned"] == 1 && pfSum(runs) == 1)
	st := pfRunStatuses(t, sum)
	record(t, SecProcess, "child SIGKILL: --summary.file runs", fmt.Sprint(st), "abandoned 1, nothing else",
		st["abandoned"] == 1 && len(st) == 1)
}

// SIGTERM to the wrapper: forwarded to the child, whose own status the
// wrapper returns (the same as the child's without the wrapper); telemetry
// is flushed before the exit.
func TestProcessWrapperSIGTERM(t *testing.T) {
	sim := []string{wrapperBin, "simulate", "--speed", "20", "--noise", "0", "--epoch", pfEpoch}
	for _, tc := range []struct {
		name  string
		env   []string
		argv  []string
		flags []string
		ready string        // line on stdout once the child is at the point of interest
		want  int           // expected status, wrapped and direct
		min   time.Duration // lower bound of signal to exit (kill timeout)
		max   time.Duration
		runs  string // workflow runs by status in the metrics and summary files
	}{
		// simulate stops on SIGTERM without a notification: its run is
		// abandoned at the end of the stream.
		{"workflow child (simulate, exits 130 on SIGTERM)", os.Environ(), sim, nil, `"task_progress"`, 130, 0, 2 * time.Second, "map[abandoned:1]"},
		{"child with the default disposition", supervisetest.Env("sleeper"), []string{testExe}, nil, "pid ", 143, 0, 2 * time.Second, "map[]"},
		{"child ignoring SIGTERM, --child.kill-timeout 1s", supervisetest.Env("ignore-term"), []string{testExe}, []string{"--child.kill-timeout", "1s"}, "ready", 137, time.Second, 3 * time.Second, "map[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var direct int
			var directTook time.Duration
			for _, wrap := range []bool{false, true} {
				dir := t.TempDir()
				prom, sum := filepath.Join(dir, "m.prom"), filepath.Join(dir, "summary.ndjson")
				argv := tc.argv
				if wrap {
					argv = pfWrapped(append([]string{"--metrics.file", prom, "--summary.file", sum}, tc.flags...), tc.argv...)
				} else if tc.min > 0 {
					continue // no kill timeout without the wrapper
				}
				p := pfStart(t, tc.env, nil, argv...)
				turns, err := os.ReadFile(pfTurns(t, "completed"))
				if err != nil {
					t.Fatal(err)
				}
				p.stdin.Write(turns) // read by simulate only
				p.waitLine(t, tc.ready, 20*time.Second)
				p.drain()
				t0 := time.Now()
				p.cmd.Process.Signal(syscall.SIGTERM)
				code, end := p.wait(t, 30*time.Second)
				took := end.Sub(t0)
				if !wrap {
					direct, directTook = code, took
					continue
				}
				ref := "direct " + strconv.Itoa(direct)
				if tc.min > 0 {
					ref = "direct n/a"
				}
				record(t, SecProcess, "SIGTERM, "+tc.name+": wrapper exit", fmt.Sprintf("%d (%s)", code, ref),
					strconv.Itoa(tc.want), code == tc.want && (tc.min > 0 || direct == tc.want))
				record(t, SecProcess, "SIGTERM, "+tc.name+": signal to exit", fmt.Sprintf("%s (direct %s)", pfMs(took), pfMs(directTook)),
					fmt.Sprintf("%s..%s", pfMs(tc.min), pfMs(tc.max)), took >= tc.min && took < tc.max)
				// Flushed: both files written (the metrics file whole, with
				// its build info), the same runs in each.
				runs := pfPromFile(t, prom, "cbc_workflow_runs_total", "status")
				for k, v := range runs {
					if v == 0 {
						delete(runs, k) // pre-created series
					}
				}
				info := pfPromFile(t, prom, "cbc_otel_build_info", "")
				st := pfRunStatuses(t, sum)
				record(t, SecProcess, "SIGTERM, "+tc.name+": telemetry flushed", fmt.Sprintf("metrics file runs %v, summary %v", runs, st),
					"both files written, runs "+tc.runs, info[""] == 1 && fmt.Sprint(runs) == tc.runs && fmt.Sprint(st) == tc.runs)
			}
		})
	}
}

// pfHead runs first | head -c n and returns first's status, the
// bytes head printed and the time from head's exit to first's.
func pfHead(t *testing.T, first *exec.Cmd, n int) (code int, sum [32]byte, got int, lag time.Duration) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	head := exec.Command("head", "-c", strconv.Itoa(n))
	var out bytes.Buffer
	head.Stdin, head.Stdout = r, &out
	first.Stdout = w
	first.Stderr = new(syncBuffer)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	if err := head.Start(); err != nil {
		first.Process.Kill()
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	firstDone := make(chan time.Time, 1)
	go func() { first.Wait(); firstDone <- time.Now() }()
	if err := head.Wait(); err != nil {
		t.Fatalf("head: %v", err)
	}
	headEnd := time.Now()
	select {
	case end := <-firstDone:
		lag = end.Sub(headEnd)
	case <-time.After(20 * time.Second):
		first.Process.Kill()
		<-firstDone
		t.Fatalf("%v still running 20s after its consumer closed the pipe", first.Args)
	}
	if lag < 0 {
		lag = 0
	}
	return pfStatus(first.ProcessState), sha256.Sum256(out.Bytes()), out.Len(), lag
}

// The consumer of the wrapper's stdout closes early: the child sees EPIPE
// or SIGPIPE exactly as under `child | head -c N`, and the consumer gets
// the same bytes.
func TestProcessEPIPE(t *testing.T) {
	turns := pfTurns(t, "completed", "failed", "mixed", "many-agents", "completed", "cached", "mixed", "spellings")
	for _, tc := range []struct {
		name string
		env  []string
		argv []string
		in   string
		n    int
	}{
		{"yes (dies of SIGPIPE)", supervisetest.Env("yes"), []string{testExe}, "", 100_000},
		{"SIGPIPE ignored (exits 3 on EPIPE)", supervisetest.Env("epipe"), []string{testExe}, "", 100_000},
		{"workflow stream (simulate)", os.Environ(), []string{wrapperBin, "simulate", "--speed", "0", "--epoch", pfEpoch}, turns, 150_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type res struct {
				code, got int
				sum       [32]byte
				lag       time.Duration
			}
			var rs [2]res
			for i, argv := range [][]string{tc.argv, pfWrapped(nil, tc.argv...)} {
				c := exec.Command(argv[0], argv[1:]...)
				c.Env = tc.env
				if tc.in != "" {
					f, err := os.Open(tc.in)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					c.Stdin = f
				}
				rs[i].code, rs[i].sum, rs[i].got, rs[i].lag = pfHead(t, c, tc.n)
			}
			d, w := rs[0], rs[1]
			record(t, SecProcess, fmt.Sprintf("EPIPE (| head -c %d), %s: status", tc.n, tc.name),
				fmt.Sprintf("wrapped %d, direct %d", w.code, d.code), "equal", w.code == d.code)
			record(t, SecProcess, fmt.Sprintf("EPIPE, %s: bytes the consumer got", tc.name),
				fmt.Sprintf("wrapped %d, direct %d, same: %v", w.got, d.got, w.sum == d.sum), "identical, N", w.sum == d.sum && w.got == tc.n)
			record(t, SecProcess, fmt.Sprintf("EPIPE, %s: consumer exit to child exit", tc.name),
				fmt.Sprintf("wrapped %s, direct %s", pfMs(w.lag), pfMs(d.lag)), "< 2000 ms", w.lag < 2*time.Second)
		})
	}
}

// The wrapper's stdin closed early, mid-workflow: the child gets EOF as it
// would directly, finishes, and the wrapper counts the run; and a child
// that closes its own stdin: whoever feeds the wrapper gets EPIPE as when
// feeding the child directly.
func TestProcessStdinClosedEarly(t *testing.T) {
	turns, err := os.ReadFile(pfTurns(t, "mixed"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("EOF mid-workflow", func(t *testing.T) {
		var outs [2][32]byte
		var codes [2]int
		var tooks [2]time.Duration
		dir := t.TempDir()
		prom, exp := filepath.Join(dir, "m.prom"), filepath.Join(dir, "expect.ndjson")
		sim := []string{wrapperBin, "simulate", "--speed", "2", "--noise", "0", "--epoch", pfEpoch, "--expect", exp}
		for i, argv := range [][]string{sim, pfWrapped([]string{"--metrics.file", prom}, sim...)} {
			p := pfStart(t, os.Environ(), nil, argv...)
			if _, err := p.stdin.Write(turns); err != nil {
				t.Fatal(err)
			}
			// The header lines precede the workflow; hash everything.
			h := sha256.New()
			tee := io.TeeReader(p.out, h)
			br := bufio.NewReader(tee)
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("stdout ended before the workflow started: %v", err)
				}
				if strings.Contains(l, `"task_progress"`) {
					break
				}
			}
			t0 := time.Now()
			p.stdin.Close() // EOF while the workflow runs
			io.Copy(io.Discard, br)
			code, end := p.wait(t, 30*time.Second)
			copy(outs[i][:], h.Sum(nil))
			codes[i], tooks[i] = code, end.Sub(t0)
		}
		record(t, SecProcess, "stdin EOF mid-workflow: status", fmt.Sprintf("wrapped %d, direct %d", codes[1], codes[0]), "equal, 0",
			codes[0] == 0 && codes[1] == 0)
		record(t, SecProcess, "stdin EOF mid-workflow: stdout", fmt.Sprintf("identical: %v", outs[0] == outs[1]), "byte-identical", outs[0] == outs[1])
		record(t, SecProcess, "stdin EOF mid-workflow: EOF to exit", fmt.Sprintf("wrapped %s, direct %s", pfMs(tooks[1]), pfMs(tooks[0])),
			"wrapped < direct + 2000 ms", tooks[1] < tooks[0]+2*time.Second)
		truth := pfRunStatuses(t, exp)
		runs := pfPromFile(t, prom, "cbc_workflow_runs_total", "status")
		ok := len(truth) > 0
		for k, v := range truth {
			ok = ok && runs[k] == v
		}
		for k, v := range runs {
			ok = ok && truth[k] == v
		}
		record(t, SecProcess, "stdin EOF mid-workflow: runs counted", fmt.Sprintf("%v (truth %v)", runs, truth), "= simulate's truth", ok)
	})
	t.Run("child closes its stdin", func(t *testing.T) {
		var errs [2]error
		var codes [2]int
		for i, argv := range [][]string{{testExe}, pfWrapped(nil, testExe)} {
			p := pfStart(t, childEnv("process-close-stdin"), nil, argv...)
			p.waitLine(t, "closed", 20*time.Second)
			p.drain()
			wrote := make(chan error, 1)
			go func() {
				chunk := make([]byte, 64<<10)
				for range 64 { // 4 MiB: far more than any pipe and pump buffer
					if _, err := p.stdin.Write(chunk); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			}()
			select {
			case errs[i] = <-wrote:
			case <-time.After(10 * time.Second):
				errs[i] = errors.New("writer still blocked after 10 s")
			}
			p.cmd.Process.Signal(syscall.SIGUSR1) // forwarded by the wrapper
			codes[i], _ = p.wait(t, 20*time.Second)
		}
		isPipe := func(err error) bool { return errors.Is(err, syscall.EPIPE) }
		record(t, SecProcess, "child closes stdin: the feeder's write", fmt.Sprintf("wrapped %v, direct %v", errs[1], errs[0]),
			"EPIPE both, no hang", isPipe(errs[0]) && isPipe(errs[1]))
		record(t, SecProcess, "child closes stdin: status", fmt.Sprintf("wrapped %d, direct %d", codes[1], codes[0]), "equal, 0",
			codes[0] == 0 && codes[1] == 0)
	})
}

// A child that never reads stdin: the wrapper neither hangs on a stdin held
// open nor on one flooded, and returns the child's status, as directly.
func TestProcessChildNeverReadsStdin(t *testing.T) {
	t.Run("stdin held open, idle", func(t *testing.T) {
		var codes [2]int
		var tooks [2]time.Duration
		for i, argv := range [][]string{{testExe}, pfWrapped(nil, testExe)} {
			t0 := time.Now()
			p := pfStart(t, childEnv("process-hello-exit"), nil, argv...) // p.stdin never closed
			p.waitLine(t, "hello", 20*time.Second)
			p.drain()
			code, end := p.wait(t, 20*time.Second)
			codes[i], tooks[i] = code, end.Sub(t0)
		}
		record(t, SecProcess, "child never reads, stdin held open: status", fmt.Sprintf("wrapped %d, direct %d", codes[1], codes[0]),
			"equal, 5", codes[0] == 5 && codes[1] == 5)
		record(t, SecProcess, "child never reads, stdin held open: start to exit", fmt.Sprintf("wrapped %s, direct %s", pfMs(tooks[1]), pfMs(tooks[0])),
			"wrapped < direct + 2000 ms", tooks[1] < tooks[0]+2*time.Second)
	})
	t.Run("stdin flooded", func(t *testing.T) {
		var codes [2]int
		var tooks [2]time.Duration
		var errs [2]error
		for i, argv := range [][]string{{testExe}, pfWrapped(nil, testExe)} {
			p := pfStart(t, childEnv("process-no-stdin"), nil, argv...)
			p.waitLine(t, "ready", 20*time.Second)
			p.drain()
			var mu sync.Mutex
			written := 0
			wrote := make(chan error, 1)
			go func() {
				chunk := make([]byte, 4096)
				for {
					n, err := p.stdin.Write(chunk)
					mu.Lock()
					written += n
					mu.Unlock()
					if err != nil {
						wrote <- err
						return
					}
				}
			}()
			// A direct child's pipe holds 64 KiB; the writer is then blocked
			// (and through the wrapper, blocked further on).
			pfPoll(t, 10*time.Second, "64 KiB written", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return written >= 60<<10
			})
			t0 := time.Now()
			p.cmd.Process.Signal(syscall.SIGUSR1) // the wrapper forwards it
			code, end := p.wait(t, 20*time.Second)
			codes[i], tooks[i] = code, end.Sub(t0)
			select {
			case errs[i] = <-wrote:
			case <-time.After(10 * time.Second):
				errs[i] = errors.New("writer still blocked 10 s after the exit")
			}
		}
		record(t, SecProcess, "child never reads, stdin flooded: status", fmt.Sprintf("wrapped %d, direct %d", codes[1], codes[0]),
			"equal, 5", codes[0] == 5 && codes[1] == 5)
		record(t, SecProcess, "child never reads, stdin flooded: signal to exit", fmt.Sprintf("wrapped %s, direct %s", pfMs(tooks[1]), pfMs(tooks[0])),
			"< 2000 ms", tooks[1] < 2*time.Second)
		record(t, SecProcess, "child never reads, stdin flooded: the feeder's write", fmt.Sprintf("wrapped %v, direct %v", errs[1], errs[0]),
			"EPIPE both", errors.Is(errs[0], syscall.EPIPE) && errors.Is(errs[1], syscall.EPIPE))
	})
}

// pfFreeAddr returns a free 127.0.0.1 port.
func pfFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// pfServeTotals scrapes serve's workflow totals: runs by status, agents and
// tokens.
func pfServeTotals(addr string) (runs map[string]float64, agents, tokens float64, err error) {
	get := func(name, label string) (map[string]float64, error) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return pfPromSums(resp.Body, name, label)
	}
	if runs, err = get("cbc_workflow_runs_total", "status"); err != nil {
		return nil, 0, 0, err
	}
	a, err := get("cbc_workflow_agents_total", "")
	if err != nil {
		return nil, 0, 0, err
	}
	tk, err := get("cbc_workflow_tokens_total", "")
	if err != nil {
		return nil, 0, 0, err
	}
	return runs, a[""], tk[""], nil
}

// pfTruth reads simulate's --expect file: workflow runs by status,
// agents and tokens.
func pfTruth(t *testing.T, path string) (runs map[string]float64, agents, tokens float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	runs = map[string]float64{}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r struct {
			Kind, Status string
			Tokens       float64
			Agents       []json.RawMessage
		}
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "workflow" {
			runs[r.Status]++
			agents += float64(len(r.Agents))
			tokens += r.Tokens
		}
	}
	return runs, agents, tokens
}

func pfSum(m map[string]float64) (n float64) {
	for _, v := range m {
		n += v
	}
	return n
}

// serve killed -9 twice while a spooled stream is being written and a run
// of it is in flight, restarted on the same --state.dir each time: the
// final totals equal simulate's truth exactly (nothing counted twice,
// nothing lost, nothing abandoned). The session is fed one user turn at a
// time, so every kill is mid-stream by construction, not by timing.
func TestProcessServeKill9(t *testing.T) {
	dir := t.TempDir()
	spoolDir, stateDir := filepath.Join(dir, "spool"), filepath.Join(dir, "state")
	for _, d := range []string{spoolDir, stateDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sc := []string{"completed", "failed", "mixed", "cached", "spellings", "many-agents", "completed"}
	turns, err := os.ReadFile(pfTurns(t, sc...))
	if err != nil {
		t.Fatal(err)
	}
	turn := bytes.SplitAfter(turns, []byte("\n"))
	exp := filepath.Join(dir, "expect.ndjson")
	// The writer: a spooling wrapper around a simulated session (~2 s per
	// run), its stdin held by the test.
	// With --spool.process it also counts the stream itself: its metrics
	// file is the reference for serve's line, byte and violation counters.
	wprom := filepath.Join(dir, "wrapper.prom")
	w := pfStart(t, os.Environ(), nil, wrapperBin, "run", "--spool.dir", spoolDir, "--spool.process",
		"--web.listen-address=", "--metrics.file", wprom, "--",
		wrapperBin, "simulate", "--speed", "2", "--noise", "2000", "--agents", "6", "--expect", exp)
	w.drain()
	fed := 0
	feed := func(n int) {
		for ; n > 0; n-- {
			if _, err := w.stdin.Write(turn[fed]); err != nil {
				t.Fatalf("feeding turn %d: %v", fed, err)
			}
			fed++
		}
	}

	args := []string{"serve", "--spool.dir", spoolDir, "--state.dir", stateDir, "--follow.poll-interval", "20ms",
		"--state.checkpoint-interval", "100ms", "--tracker.grace", "300ms"}
	startServe := func() (*pfProc, string) {
		addr := pfFreeAddr(t)
		return pfStart(t, os.Environ(), nil, append([]string{wrapperBin}, append(args, "--web.listen-address", addr)...)...), addr
	}
	gauge := func(addr, name string) float64 {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		m, err := pfPromSums(resp.Body, name, "")
		if err != nil {
			return -1
		}
		return m[""]
	}
	counted := func(addr string) float64 {
		runs, _, _, err := pfServeTotals(addr)
		if err != nil {
			return -1
		}
		return pfSum(runs)
	}
	// Each round: two runs written and counted, then a third written and
	// serve killed -9 while it is open.
	var points, resumes []string
	for round := range 2 {
		s, addr := startServe()
		feed(2)
		pfPoll(t, 60*time.Second, fmt.Sprintf("serve counting %d runs", fed), func() bool { return counted(addr) >= float64(fed) })
		feed(1)
		pfPoll(t, 60*time.Second, "a run in flight", func() bool { return gauge(addr, "cbc_workflow_runs_active") >= 1 })
		n, active := counted(addr), gauge(addr, "cbc_workflow_runs_active")
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.wait(t, 10*time.Second)
		points = append(points, fmt.Sprintf("#%d: %v counted, %v open", round+1, n, active))
		for _, l := range strings.Split(s.stderr.String(), "\n") {
			if i := strings.Index(l, "open_runs="); i >= 0 && strings.Contains(l, "resuming stream") {
				resumes = append(resumes, l[i:])
			}
		}
		if strings.Contains(s.stderr.String(), "checkpoint unusable") {
			t.Fatalf("kill -9 left an unusable checkpoint:\n%s", s.stderr)
		}
	}
	select {
	case <-w.done:
		t.Fatal("the writer ended before the last kill: the kills were not mid-stream")
	default:
	}
	record(t, SecProcess, "serve kill -9 mid-stream: kill points", strings.Join(points, "; "),
		"2 kills, each with a run open", len(points) == 2)

	s, addr := startServe()
	feed(len(turn) - 1 - fed) // the last element of SplitAfter is empty
	w.stdin.Close()
	code, wEnd := w.wait(t, 120*time.Second)
	if code != 0 {
		t.Fatalf("writer exit %d:\n%s", code, w.stderr)
	}
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if i := strings.Index(l, "open_runs="); i >= 0 && strings.Contains(l, "resuming stream") {
			resumes = append(resumes, l[i:])
		}
	}
	wantRuns, wantAgents, wantTokens := pfTruth(t, exp)
	// Counters that a re-read would inflate even where the tracker's
	// tombstones keep the run counts exact.
	type family struct{ name, label, key string }
	others := []family{{"cbc_otel_lines_total", "source", "stdout"}, {"cbc_otel_bytes_total", "source", "stdout"},
		{"cbc_protocol_violations_total", "", ""}, {"cbc_otel_lines_rejected_total", "", ""}}
	want := map[family]float64{}
	for _, f := range others {
		want[f] = pfPromFile(t, wprom, f.name, f.label)[f.key]
	}
	var got, gotOthers string
	var totalsOK, countersOK bool
	exact := func() bool {
		runs, agents, tokens, err := pfServeTotals(addr)
		if err != nil {
			got = err.Error()
			return false
		}
		got = fmt.Sprintf("runs %v agents %v tokens %v", runs, agents, tokens)
		totalsOK = agents == wantAgents && tokens == wantTokens
		for _, st := range []string{"completed", "failed", "stopped", "abandoned"} {
			totalsOK = totalsOK && runs[st] == wantRuns[st]
		}
		countersOK = false
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return false
		}
		var parts []string
		ok := true
		for _, f := range others {
			m, err := pfPromSums(bytes.NewReader(body), f.name, f.label)
			if err != nil {
				return false
			}
			parts = append(parts, fmt.Sprintf("%s %v (wrapper %v)", strings.TrimPrefix(f.name, "cbc_"), m[f.key], want[f]))
			if m[f.key] != want[f] {
				ok = false
			}
		}
		gotOthers = strings.Join(parts, ", ")
		countersOK = ok
		return totalsOK && countersOK
	}
	deadline := time.Now().Add(30 * time.Second)
	for !exact() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	lag := time.Since(wEnd)
	ok := exact()
	record(t, SecProcess, "serve kill -9: resumes from the checkpoint", strings.Join(resumes, "; "), "one per restart (2)", len(resumes) == 2)
	record(t, SecProcess, fmt.Sprintf("serve kill -9 ×2, %d runs: final totals", len(sc)), got,
		fmt.Sprintf("exact: runs %v agents %v tokens %v", wantRuns, wantAgents, wantTokens), totalsOK)
	record(t, SecProcess, "serve kill -9 ×2: line, byte, violation, rejected counters", gotOthers,
		"= the spooling wrapper's own (--spool.process)", countersOK)
	record(t, SecProcess, "serve kill -9: writer exit to exact totals", pfMs(lag), "< 30000 ms", ok && lag < 30*time.Second)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := s.wait(t, 20*time.Second); code != 0 {
		t.Errorf("serve exit %d after SIGTERM", code)
	}
}
