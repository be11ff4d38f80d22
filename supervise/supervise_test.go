package supervise

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
	"github.com/cbc-otel/cbc-otel/tap"
)

func TestMain(m *testing.M) {
	if mode := supervisetest.Mode(); mode != "" {
		if how, ok := strings.CutPrefix(mode, "watch-parent:"); ok {
			os.Exit(watchParentChild(how))
		}
		os.Exit(supervisetest.RunChild(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helper returns a Config that runs this test binary as the child mode.
func helper(t *testing.T, mode string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Path:         exe,
		Env:          supervisetest.Env(mode),
		KillTimeout:  30 * time.Second,
		DrainTimeout: 5 * time.Second,
		Logger:       slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// testWriter sends the supervisor's logs to t.Log until the test ends: a
// pump that Run abandoned may still log afterwards, and t.Log after the end
// is a race (and a panic).
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// run runs cfg with a deadline so that a hang fails the test instead of the
// whole package.
func run(t *testing.T, ctx context.Context, cfg Config) (Result, error) {
	t.Helper()
	type ret struct {
		r   Result
		err error
	}
	c := make(chan ret, 1)
	go func() {
		r, err := Run(ctx, cfg)
		c <- ret{r, err}
	}()
	select {
	case r := <-c:
		return r.r, r.err
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
		return Result{}, nil
	}
}

// lineReader reads lines from the read end of a pipe with a failsafe
// deadline.
type lineReader struct {
	t *testing.T
	f *os.File
	r *bufio.Reader
}

func newLineReader(t *testing.T, f *os.File) *lineReader {
	return &lineReader{t: t, f: f, r: bufio.NewReader(f)}
}

func (l *lineReader) next() string {
	l.t.Helper()
	l.f.SetReadDeadline(time.Now().Add(20 * time.Second))
	s, err := l.r.ReadString('\n')
	if err != nil {
		l.t.Fatalf("reading a line: got %q, %v", s, err)
	}
	return strings.TrimSuffix(s, "\n")
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// adversarial returns inputs that a line-oriented or text-minded copy would
// damage.
func adversarial() map[string][]byte {
	cases := map[string][]byte{
		"empty":            {},
		"no final newline": []byte(`{"type":"system"}`),
		"crlf":             []byte("a\r\nb\r\n\r\nc\r"),
		"nul":              {0, 0, '\n', 0, 'x', 0},
		"invalid utf8":     {0xff, 0xfe, 0xc3, 0x28, '\n', 0xe2, 0x82, '\n', 0xf0, 0x28, 0x8c},
		"only newlines":    bytes.Repeat([]byte{'\n'}, 100000),
	}
	for _, n := range []int{1, 4095, 65536, 128<<10 - 1, 128 << 10, 128<<10 + 1, 3<<20 + 17} {
		cases[fmt.Sprintf("binary %d", n)] = supervisetest.Pattern(n)
	}
	// One 8 MiB line (many read buffers long): no newline until the very end.
	long := bytes.Repeat([]byte(`{"k":"\u00e9 v"}`), 8<<20/15)
	cases["long line"] = append(long, '\n')
	return cases
}

// A cat child gets stdin and returns it: output and both taps must match
// the input byte for byte, whether the output goes to a writer or a pipe,
// and the taps are plain writers or tap.Taps.
func TestRoundTripByteExact(t *testing.T) {
	for _, dest := range []string{"writer", "pipe"} {
		for _, tapKind := range []string{"writer", "tap"} {
			for name, in := range adversarial() {
				t.Run(dest+"/"+tapKind+"/"+name, func(t *testing.T) {
					cfg := helper(t, "cat")
					cfg.Stdin = bytes.NewReader(in)
					var out bytes.Buffer
					cfg.Stdout = &out
					outDone := make(chan struct{})
					close(outDone)
					if dest == "pipe" {
						r, w := pipe(t)
						cfg.Stdout = w
						outDone = make(chan struct{})
						go func() {
							defer close(outDone)
							io.Copy(&out, r)
						}()
					}
					var outTap, inTap func() []byte
					if tapKind == "writer" {
						var o, i bytes.Buffer
						cfg.StdoutTap, cfg.StdinTap = &o, &i
						outTap, inTap = o.Bytes, i.Bytes
					} else {
						o, i := tap.NewTap(32<<20), tap.NewTap(32<<20)
						cfg.StdoutTap, cfg.StdinTap = o, i
						outTap, inTap = drainTap(t, o), drainTap(t, i)
					}
					res, err := run(t, context.Background(), cfg)
					if err != nil || res.ExitCode != 0 {
						t.Fatalf("Run = %+v, %v", res, err)
					}
					if w, ok := cfg.Stdout.(*os.File); ok {
						w.Close() // EOF for the reader: the child is done
					}
					<-outDone
					want := sha256.Sum256(in)
					for what, got := range map[string][]byte{"stdout": out.Bytes(), "stdout tap": outTap(), "stdin tap": inTap()} {
						if sha256.Sum256(got) != want {
							t.Errorf("%s: %d bytes differ from the %d input bytes", what, len(got), len(in))
						}
					}
					if res.StdoutBytes != int64(len(in)) || res.StdinBytes != int64(len(in)) {
						t.Errorf("counted %d out, %d in; want %d", res.StdoutBytes, res.StdinBytes, len(in))
					}
				})
			}
		}
	}
}

// drainTap consumes tap on a goroutine; the returned func closes the tap
// (Run is done with it), waits for the consumer and returns what it got,
// failing t on any drop.
func drainTap(t *testing.T, tap *tap.Tap) func() []byte {
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range tap.Chunks() {
			if c.Gap {
				t.Error("tap dropped bytes")
			}
			got.Write(c.Data)
			tap.Release(*c)
		}
	}()
	return func() []byte {
		tap.Close()
		<-done
		return got.Bytes()
	}
}

func TestExitStatusMirrorsChild(t *testing.T) {
	for _, tc := range []struct {
		mode string
		code int
		sig  syscall.Signal
	}{
		{"exit:0", 0, 0},
		{"exit:1", 1, 0},
		{"exit:7", 7, 0},
		{"exit:255", 255, 0},
		{"killself:9", 137, syscall.SIGKILL},
		{"killself:15", 143, syscall.SIGTERM},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			res, err := run(t, context.Background(), helper(t, tc.mode))
			if err != nil || res.ExitCode != tc.code || res.Signal != tc.sig {
				t.Fatalf("Run = %+v, %v; want code %d signal %v", res, err, tc.code, tc.sig)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	noExec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte{0x7f, 'E', 'L', 'F', 0, 0, 0}, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
		code int
	}{
		{"cbc-otel-test-no-such-command", ErrNotFound, 127},
		{filepath.Join(dir, "missing"), ErrNotFound, 127},
		{"", ErrNotFound, 127},
		{noExec, ErrNotExecutable, 126},
		{dir, ErrNotExecutable, 126},
		{garbage, ErrNotExecutable, 126},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			res, err := Run(context.Background(), Config{Path: tc.path, Stdin: strings.NewReader("x"), Stdout: io.Discard})
			var se *StartError
			if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.ExitCode() != tc.code || res.ExitCode != tc.code {
				t.Fatalf("Run(%q) = %+v, %v; want %v (%d)", tc.path, res, err, tc.want, tc.code)
			}
		})
	}
}

// Every forwarded signal reaches the child, which reports it on stdout.
func TestSignalsForwarded(t *testing.T) {
	cfg := helper(t, "sigreport")
	inR, inW := pipe(t)
	outR, outW := pipe(t)
	sigs := make(chan os.Signal, 1)
	cfg.Stdin, cfg.Stdout, cfg.Signals = inR, outW, sigs
	done := make(chan Result, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		outW.Close()
		done <- res
	}()
	lines := newLineReader(t, outR)
	if got := lines.next(); got != "ready" {
		t.Fatalf("got %q, want ready", got)
	}
	for _, s := range supervisetest.ForwardedSignals {
		sigs <- s
		if got, want := lines.next(), fmt.Sprintf("sig %d", s); got != want {
			t.Fatalf("after forwarding %v the child said %q, want %q", s, got, want)
		}
	}
	sigs <- syscall.SIGPIPE // the supervisor's own: never forwarded
	inW.Close()             // EOF: the child exits 0
	select {
	case res := <-done:
		if res.ExitCode != 0 || res.Killed {
			t.Fatalf("Run = %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not exit at stdin EOF")
	}
}

// Closing our stdin closes the child's: cat sees EOF and exits.
func TestStdinEOFPropagates(t *testing.T) {
	cfg := helper(t, "cat")
	inR, inW := pipe(t)
	var out bytes.Buffer
	cfg.Stdin, cfg.Stdout = inR, &out
	go func() {
		inW.Write([]byte("abc"))
		inW.Close()
	}()
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 0 || out.String() != "abc" {
		t.Fatalf("Run = %+v, %v, out %q", res, err, out.String())
	}
}

// A child that never reads stdin and exits must not keep Run waiting on the
// stdin pump, even though our stdin never reaches EOF.
func TestStdinNeverEOFDoesNotBlockExit(t *testing.T) {
	cfg := helper(t, "exit:5")
	inR, inW := pipe(t)
	cfg.Stdin = inR
	go inW.Write(make([]byte, 1<<20)) // more than the pipe holds
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 5 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
}

// A child that ignores SIGTERM is killed KillTimeout after a stop request,
// from a signal or from the context.
func TestKillAfterTimeout(t *testing.T) {
	for _, how := range []string{"signal", "context"} {
		t.Run(how, func(t *testing.T) {
			cfg := helper(t, "ignore-term")
			cfg.KillTimeout = 200 * time.Millisecond
			outR, outW := pipe(t)
			cfg.Stdout = outW
			sigs := make(chan os.Signal, 1)
			cfg.Signals = sigs
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				if got := newLineReader(t, outR).next(); got != "ready" {
					t.Errorf("got %q", got)
				}
				if how == "signal" {
					sigs <- syscall.SIGTERM
				} else {
					cancel()
				}
			}()
			res, err := run(t, ctx, cfg)
			if err != nil || !res.Killed || res.Signal != syscall.SIGKILL || res.ExitCode != 137 {
				t.Fatalf("Run = %+v, %v; want killed, 137", res, err)
			}
		})
	}
}

// pids parses "child N grandchild M".
func pids(t *testing.T, line string) (child, grandchild int) {
	t.Helper()
	if _, err := fmt.Sscanf(line, "child %d grandchild %d", &child, &grandchild); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	return child, grandchild
}

// The child exits but its grandchild holds stdout: Run gives up after
// DrainTimeout and kills the group, so nothing survives it.
func TestGrandchildHoldingStdout(t *testing.T) {
	cfg := helper(t, "grandchild")
	cfg.DrainTimeout = 300 * time.Millisecond
	var out bytes.Buffer
	cfg.Stdout = &out
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 0 || !res.DrainTimedOut {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	_, gc := pids(t, first)
	if !strings.Contains(out.String(), fmt.Sprintf("pid %d\n", gc)) {
		t.Errorf("the grandchild's output was lost: %q", out.String())
	}
	if !supervisetest.WaitGone(gc, 10*time.Second) {
		t.Fatalf("grandchild %d survived", gc)
	}
}

// A stop request ends the child and, with it, the grandchild it left in the
// process group.
func TestStopKillsGroup(t *testing.T) {
	cfg := helper(t, "grandchild-wait")
	cfg.DrainTimeout = 300 * time.Millisecond
	outR, outW := pipe(t)
	cfg.Stdout = outW
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	gcc := make(chan int, 1)
	go func() {
		_, gc := pids(t, newLineReader(t, outR).next())
		gcc <- gc
		sigs <- syscall.SIGTERM
	}()
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 143 {
		t.Fatalf("Run = %+v, %v; want 143", res, err)
	}
	if gc := <-gcc; !supervisetest.WaitGone(gc, 10*time.Second) {
		t.Fatalf("grandchild %d survived", gc)
	}
}

// When our stdout's reader goes away, the child sees what it would have
// seen without us: SIGPIPE (default disposition) or EPIPE (ignored).
func TestStdoutConsumerGone(t *testing.T) {
	for _, tc := range []struct {
		mode string
		tap  bool // a tap on the pump that writes into the pipe
		code int
	}{{"yes", false, 141}, {"epipe", false, 3}, {"yes", true, 141}, {"epipe", true, 3}} {
		t.Run(fmt.Sprintf("%s/tap=%v", tc.mode, tc.tap), func(t *testing.T) {
			cfg := helper(t, tc.mode)
			outR, outW := pipe(t)
			cfg.Stdout = outW
			if tc.tap {
				cfg.StdoutTap = tap.NewTap(1 << 20) // never read: it drops
			}
			go func() {
				io.ReadFull(outR, make([]byte, 1<<20))
				outR.Close()
			}()
			res, err := run(t, context.Background(), cfg)
			if err != nil || res.ExitCode != tc.code || !res.StdoutBroken {
				t.Fatalf("Run = %+v, %v; want exit %d, stdout broken", res, err, tc.code)
			}
		})
	}
}

// A tap whose consumer never reads does not stall the pipe: every byte
// passes, and what the tap could not queue is counted as dropped.
func TestStuckTapDoesNotStallPipe(t *testing.T) {
	cfg := helper(t, "cat")
	in := supervisetest.Pattern(32 << 20)
	outTap, inTap := tap.NewTap(64<<10), tap.NewTap(64<<10)
	h := sha256.New()
	cfg.Stdin, cfg.Stdout = bytes.NewReader(in), h
	cfg.StdoutTap, cfg.StdinTap = outTap, inTap
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if want := sha256.Sum256(in); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("output differs from input")
	}
	for name, tap := range map[string]*tap.Tap{"stdout": outTap, "stdin": inTap} {
		bytesIn, dropped, _ := tap.Stats()
		if bytesIn != int64(len(in)) || dropped < int64(len(in))-(64<<10) {
			t.Errorf("%s tap: in %d dropped %d; want in %d, all but the queue dropped", name, bytesIn, dropped, len(in))
		}
	}
}

// Each line reaches the consumer as soon as the child writes it: the child
// waits for our reply before writing the next one, so any buffering in the
// supervisor would deadlock (and fail on the read deadline).
func TestStreaming(t *testing.T) {
	cfg := helper(t, "pingpong")
	inR, inW := pipe(t)
	outR, outW := pipe(t)
	cfg.Stdin, cfg.Stdout = inR, outW
	done := make(chan Result, 1)
	go func() {
		res, _ := Run(context.Background(), cfg)
		done <- res
	}()
	lines := newLineReader(t, outR)
	for i := 1; i <= 3; i++ {
		if got, want := lines.next(), fmt.Sprintf("line %d", i); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		fmt.Fprintf(inW, "ack %d\n", i)
	}
	if res := <-done; res.ExitCode != 0 {
		t.Fatalf("Run = %+v", res)
	}
}

// blockingWriter holds its first Write until released, like a consumer
// that stalls for a while.
type blockingWriter struct {
	once    sync.Once
	release chan struct{}
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { <-w.release })
	return w.buf.Write(p)
}

// The child exits while the consumer is stalled for longer than
// DrainTimeout: what the child wrote is still delivered in full, because the
// drain deadline only bounds waiting for data, not writing it out.
func TestDrainWithSlowConsumerLosesNothing(t *testing.T) {
	const n = 100 << 10 // more than one read, less than pipe + buffer: the child can finish
	cfg := helper(t, fmt.Sprintf("write:%d", n))
	cfg.DrainTimeout = 50 * time.Millisecond
	errR, errW := pipe(t)
	out := &blockingWriter{release: make(chan struct{})}
	cfg.Stdout, cfg.Stderr = out, errW
	go func() {
		// "done" on stderr: the child has written everything and exits.
		newLineReader(t, errR).next()
		// Let the drain deadline pass while the consumer is stalled. This
		// makes time pass; it synchronises nothing.
		time.Sleep(10 * cfg.DrainTimeout)
		close(out.release)
	}()
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if !bytes.Equal(out.buf.Bytes(), supervisetest.Pattern(n)) {
		t.Fatalf("delivered %d of %d bytes", out.buf.Len(), n)
	}
	if res.DrainTimedOut {
		t.Error("reported a drain timeout: nobody held the pipe, the consumer was only slow")
	}
}

// A non-file stderr is pumped (and drained) like stdout.
func TestStderrWriter(t *testing.T) {
	cfg := helper(t, "stdio")
	var out, errb bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errb
	res, err := run(t, context.Background(), cfg)
	if err != nil || res.ExitCode != 0 || out.String() != "out" || errb.String() != "err" {
		t.Fatalf("Run = %+v, %v; out %q err %q", res, err, out.String(), errb.String())
	}
}

// stuckWriter is a consumer that stopped reading: its first Write never
// returns until the test ends.
type stuckWriter struct {
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newStuckWriter(t *testing.T) *stuckWriter {
	w := &stuckWriter{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(w.release) })
	return w
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return 0, io.ErrClosedPipe
}

// runAsync starts Run and returns its result channel.
func runAsync(ctx context.Context, cfg Config) <-chan Result {
	done := make(chan Result, 1)
	go func() {
		res, _ := Run(ctx, cfg)
		done <- res
	}()
	return done
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// The consumer of our stdout stopped reading and the child has exited: a
// stop signal must still stop the supervisor (with the child's status),
// instead of leaving it blocked on the stdout write until SIGKILL.
func TestStopAfterExitAbandonsStalledStdout(t *testing.T) {
	cfg := helper(t, "write:10")
	// Neither timeout may be what ends the wait: only the stop signal.
	cfg.KillTimeout, cfg.DrainTimeout = time.Hour, time.Hour
	errR, errW := pipe(t)
	out := newStuckWriter(t)
	sigs := make(chan os.Signal, 1)
	cfg.Stdout, cfg.Stderr, cfg.Signals = out, errW, sigs
	done := runAsync(context.Background(), cfg)
	waitClosed(t, out.entered, "the stdout write")
	if got := newLineReader(t, errR).next(); got != "done" { // the child wrote all and exits
		t.Fatalf("child said %q", got)
	}
	// A stop signal that lands before the supervisor saw the exit only
	// starts the kill timer; keep sending until one lands after it.
	res := termUntilDone(t, sigs, done)
	if res.ExitCode != 0 || res.Signal != 0 || !res.StdoutAbandoned || res.Killed {
		t.Fatalf("Run = %+v; want the child's exit 0, stdout abandoned", res)
	}
}

// termUntilDone sends SIGTERM on sigs every few milliseconds until Run
// returns on done, and returns its result.
func termUntilDone(t *testing.T, sigs chan<- os.Signal, done <-chan Result) Result {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case res := <-done:
			return res
		case <-tick.C:
			select {
			case sigs <- syscall.SIGTERM:
			default:
			}
		case <-deadline:
			t.Fatal("Run still waits for a stdout nobody reads, 20s after SIGTERM")
			return Result{}
		}
	}
}

// The repro: `run -- yes` with a stdout nobody reads, then SIGTERM. The
// signal kills the child; the supervisor gives its output DrainTimeout to be
// written out, then stops waiting.
func TestStopBeforeExitAbandonsStalledStdout(t *testing.T) {
	cfg := helper(t, "yes")
	cfg.KillTimeout, cfg.DrainTimeout = time.Hour, 200*time.Millisecond
	out := newStuckWriter(t)
	sigs := make(chan os.Signal, 1)
	cfg.Stdout, cfg.Signals = out, sigs
	done := runAsync(context.Background(), cfg)
	waitClosed(t, out.entered, "the stdout write")
	sigs <- syscall.SIGTERM
	select {
	case res := <-done:
		if res.ExitCode != 143 || res.Signal != syscall.SIGTERM || !res.StdoutAbandoned || res.Killed {
			t.Fatalf("Run = %+v; want 143 (the child died of SIGTERM), stdout abandoned", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits for a stdout nobody reads, 10s after SIGTERM")
	}
}

// A consumer that reads keeps getting everything after a stop request,
// within DrainTimeout: abandoning is only for a stalled one.
func TestStopWithReadingConsumerLosesNothing(t *testing.T) {
	cfg := helper(t, "sigreport")
	inR, inW := pipe(t)
	outR, outW := pipe(t)
	sigs := make(chan os.Signal, 1)
	cfg.Stdin, cfg.Stdout, cfg.Signals = inR, outW, sigs
	done := runAsync(context.Background(), cfg)
	lines := newLineReader(t, outR)
	if got := lines.next(); got != "ready" {
		t.Fatalf("got %q", got)
	}
	sigs <- syscall.SIGTERM // sigreport reports it and goes on
	if got := lines.next(); got != fmt.Sprintf("sig %d", syscall.SIGTERM) {
		t.Fatalf("got %q", got)
	}
	inW.Close() // the child exits 0
	res := <-done
	if res.ExitCode != 0 || res.StdoutAbandoned {
		t.Fatalf("Run = %+v", res)
	}
}

// When the child closes its stdin, whoever writes to ours gets EPIPE, as
// writing to the child directly would, instead of blocking forever.
func TestChildClosedStdinFailsOurWriter(t *testing.T) {
	cfg := helper(t, "closestdin")
	inR, inW := pipe(t)
	outR, outW := pipe(t)
	cfg.Stdin, cfg.Stdout = inR, outW
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, cfg)
	defer func() {
		cancel()
		if res := <-done; res.ExitCode != 143 {
			t.Errorf("Run = %+v; want 143", res)
		}
	}()
	if got := newLineReader(t, outR).next(); got != "closed" {
		t.Fatalf("got %q", got)
	}
	// Far more than our pipe and the child's hold: without EPIPE the
	// writes block, and the deadline fails the test.
	inW.SetWriteDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4<<10)
	for written := 0; ; written += len(buf) {
		if _, err := inW.Write(buf); err != nil {
			if !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("after %d bytes: %v; want EPIPE", written, err)
			}
			return
		}
		if written > 64<<20 {
			t.Fatal("writes never failed")
		}
	}
}

// lockedBuffer is a tap that keeps everything, safe to read once Run
// returned (Run makes no call on a tap after it returns).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Issue 28.8: an SDK that ends the session as soon as it has what it wants
// (stdin closed, SIGTERM at once) must not cost the telemetry what the child
// had already written: the passthrough gives up on a consumer that does not
// read, the tap still gets every byte the child wrote, whether the stop
// request comes after the child's exit or before it (the child then dies of
// it), with the pump stuck in a Write or not.
func TestAbandonedStdoutIsStillTapped(t *testing.T) {
	const n = 700 << 10 // several reads, less than the pipe: the child finishes
	for _, tc := range []struct {
		name  string
		mode  string
		drain time.Duration
	}{
		// The child exits by itself; the stop request comes after.
		{"stop after exit", "write", time.Hour},
		// The child is alive when the stop request comes and dies of it;
		// the wait ends 2 × DrainTimeout after.
		{"stop before exit", "writehang", 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := helper(t, fmt.Sprintf("%s:%d", tc.mode, n))
			cfg.KillTimeout, cfg.DrainTimeout = time.Hour, tc.drain
			errR, errW := pipe(t)
			tp := new(lockedBuffer)
			sigs := make(chan os.Signal, 1)
			out := newStuckWriter(t)
			cfg.Stdout, cfg.Stderr, cfg.Signals, cfg.StdoutTap = out, errW, sigs, tp
			done := runAsync(context.Background(), cfg)
			waitClosed(t, out.entered, "the stdout write")
			if got := newLineReader(t, errR).next(); got != "done" {
				t.Fatalf("child said %q", got)
			}
			// Until one lands after the exit (stop after exit); the first
			// one kills the child (stop before exit).
			res := termUntilDone(t, sigs, done)
			if !res.StdoutAbandoned {
				t.Fatalf("Run = %+v; want stdout abandoned", res)
			}
			if got := tp.Bytes(); !bytes.Equal(got, supervisetest.Pattern(n)) {
				t.Fatalf("tapped %d of the %d bytes the child wrote (Run = %+v)", len(got), n, res)
			}
			if res.StdoutBytes != n || res.StdoutUndelivered == 0 || res.StdoutUndelivered > n {
				t.Fatalf("Run = %+v; want StdoutBytes %d and some undelivered", res, n)
			}
		})
	}
}

// goneWriter is a consumer whose first Write blocks until gone is closed,
// then fails as a closed pipe does.
type goneWriter struct {
	once    sync.Once
	entered chan struct{}
	gone    chan struct{}
}

func (w *goneWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.gone
	return 0, syscall.EPIPE
}

// The consumer goes away (EPIPE) after the child wrote everything: the
// child's next write fails as it would without us, but what it had
// already written is tapped, not lost with the pipe.
func TestGoneConsumerStdoutIsStillTapped(t *testing.T) {
	const n = 700 << 10
	cfg := helper(t, fmt.Sprintf("write:%d", n))
	errR, errW := pipe(t)
	tp := new(lockedBuffer)
	out := &goneWriter{entered: make(chan struct{}), gone: make(chan struct{})}
	cfg.Stdout, cfg.Stderr, cfg.StdoutTap = out, errW, tp
	done := runAsync(context.Background(), cfg)
	waitClosed(t, out.entered, "the stdout write")
	if got := newLineReader(t, errR).next(); got != "done" {
		t.Fatalf("child said %q", got)
	}
	close(out.gone)
	res := <-done
	if !res.StdoutBroken {
		t.Fatalf("Run = %+v; want stdout broken", res)
	}
	if got := tp.Bytes(); !bytes.Equal(got, supervisetest.Pattern(n)) {
		t.Fatalf("tapped %d of the %d bytes the child wrote (Run = %+v)", len(got), n, res)
	}
	// All but the first read (whose size is the scheduler's business) was
	// never offered to the consumer.
	if res.StdoutBytes != n || res.StdoutUndelivered <= 0 || res.StdoutUndelivered >= n {
		t.Fatalf("Run = %+v; want StdoutBytes %d, all but the first read undelivered", res, n)
	}
}
