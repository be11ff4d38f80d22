// Package supervise runs a child process and pumps its standard streams,
// byte-exact and streaming, with optional non-blocking taps on the child's
// stdout and stdin. It forwards signals, mirrors the child's exit status and
// makes sure no process of the child's process group outlives the supervisor.
//
// Exit-status contract (see Result.ExitCode): the child's exit code, or
// 128+N when signal N killed it; when the child cannot be started, 127 if it
// was not found and 126 if it could not be executed.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults used when the Config leaves a duration zero.
const (
	DefaultKillTimeout  = 10 * time.Second
	DefaultDrainTimeout = 2 * time.Second
	// DefaultBufSize is the read buffer of each pump: a fixed size whatever
	// the line length, so memory stays bounded on a 1 GiB line.
	DefaultBufSize = 128 << 10
)

// Exit codes reported when the child could not be started, as a shell would.
const (
	ExitNotFound      = 127
	ExitNotExecutable = 126
)

// Sentinel errors for start failures; test with errors.Is.
var (
	// ErrNotFound means the command does not exist (exit 127).
	ErrNotFound = errors.New("command not found")
	// ErrNotExecutable means the command exists but cannot be executed:
	// permission denied, a directory, not a valid executable (exit 126).
	ErrNotExecutable = errors.New("command not executable")
)

// StartError reports that the child could not be started.
type StartError struct {
	Path string
	Code int   // ExitNotFound or ExitNotExecutable
	Err  error // the underlying error from exec
}

// Error describes the failure like a shell would.
func (e *StartError) Error() string {
	kind := ErrNotExecutable
	if e.Code == ExitNotFound {
		kind = ErrNotFound
	}
	// The innermost error ("permission denied", "exec format error") says
	// why without repeating the path that exec's wrappers add.
	why := e.Err
	for {
		u := errors.Unwrap(why)
		if u == nil {
			break
		}
		why = u
	}
	return fmt.Sprintf("%s: %v: %v", e.Path, kind, why)
}

// Unwrap returns the underlying exec error.
func (e *StartError) Unwrap() error { return e.Err }

// Is matches ErrNotFound or ErrNotExecutable by the error's code.
func (e *StartError) Is(target error) bool {
	return (target == ErrNotFound && e.Code == ExitNotFound) ||
		(target == ErrNotExecutable && e.Code == ExitNotExecutable)
}

// ExitCode is the wrapper exit code for this failure (126 or 127).
func (e *StartError) ExitCode() int { return e.Code }

// Config describes the child and its streams.
type Config struct {
	// Path is the command, looked up in PATH when it has no slash.
	Path string
	// Args are the arguments after the command name.
	Args []string
	// Env is the child's environment; nil means the supervisor's own.
	Env []string
	// Dir is the child's working directory; empty means the current one.
	Dir string

	// Stdin is copied to the child's stdin; EOF on it closes the child's
	// stdin. When the child closes its stdin (a write gets EPIPE) and Stdin
	// is an *os.File, Run closes Stdin, so that whoever writes to it gets
	// EPIPE as they would writing to the child itself, instead of blocking.
	// Nil gives the child /dev/null. Run does not wait for a Read on
	// Stdin to return before it returns (a terminal may never send EOF), so
	// an in-process reader should be closed by its owner afterwards.
	Stdin io.Reader
	// Stdout receives the child's stdout. When a Write fails (EPIPE: the
	// consumer went away) the child's stdout pipe is closed so that the
	// child sees EPIPE/SIGPIPE as it would without the supervisor.
	// Nil discards.
	Stdout io.Writer
	// Stderr receives the child's stderr. An *os.File is handed to the child
	// as is (no copy); another writer is pumped. Nil gives /dev/null.
	Stderr io.Writer

	// StdoutEOF, when set, is called once the child's stdout reached EOF
	// (every writer closed it) and all of it was written to Stdout, on the
	// pumping goroutine, before Run returns: the moment to give Stdout's
	// own reader its EOF, whatever the supervisor does next. Not called
	// when the pump ends otherwise (a broken Stdout, a drain timeout).
	StdoutEOF func()

	// StdoutTap and StdinTap, when set, receive every byte of the child's
	// stdout and of Stdin before it is passed on: each side's bytes are
	// stamped before the other side can react to them (the child to a
	// request, the consumer to an event). They are called on the pumping
	// goroutine, so they must never block: use a tap.Tap (or tap.Join).
	// Run makes no call on them after it returns.
	StdoutTap, StdinTap io.Writer

	// Signals are forwarded to the child, except SIGCHLD, SIGURG and SIGPIPE
	// (the runtime's own and the supervisor's, never meant for the child).
	// SIGINT, SIGTERM, SIGHUP and SIGQUIT are also stop requests: if the
	// child has not exited KillTimeout later, its process group is killed.
	// Signals are served until Run returns: a stop request once the child
	// has exited (or twice DrainTimeout after the exit, when the request
	// came before it) makes Run stop waiting for a consumer that does not read
	// its stdout: the unwritten rest is not passed on (Result.StdoutAbandoned)
	// but still tapped, to EOF (Result.StdoutUndelivered).
	Signals <-chan os.Signal
	// KillTimeout is the grace period between a stop request (a stop
	// signal or ctx being done, which sends SIGTERM) and SIGKILL.
	KillTimeout time.Duration
	// DrainTimeout bounds how long, after the child exited, Run waits for
	// EOF on its stdout and stderr: a grandchild may hold them open. The
	// deadline is DrainTimeout after the child's exit, whatever the pumps
	// were doing meanwhile (waiting for data or writing it out to a slow
	// consumer). When it passes, what is already in the pipes is still read
	// and written out in full, without waiting for more: so a slow consumer
	// never loses what the child wrote, and only a writer still holding a
	// pipe (a grandchild) is cut off, and its process group killed.
	// Writing out is not bounded by it, except after a stop request: see
	// Signals.
	DrainTimeout time.Duration
	// BufSize is each pump's read buffer size (DefaultBufSize when zero).
	BufSize int
	// Logger receives the supervisor's own diagnostics (never payloads).
	Logger *slog.Logger
	// Inject, when set, lets the caller write lines of its own to the
	// child's stdin between two whole lines of Stdin and keeps the child's
	// answer from Stdout (see Injector). Nil: not one byte changes.
	Inject *Injector
}

// Result is how the child ended and what went through.
type Result struct {
	// ExitCode mirrors the child: its exit code, or 128+N for signal N.
	ExitCode int
	// Signal is the signal that killed the child, or 0 if it exited.
	Signal syscall.Signal
	// Killed is set when the supervisor had to SIGKILL the child after a
	// stop request went unanswered for KillTimeout.
	Killed bool
	// StdoutBroken is set when writing to Stdout failed and the child's
	// stdout was closed.
	StdoutBroken bool
	// DrainTimedOut is set when stdout or stderr did not reach EOF within
	// DrainTimeout after the child exited (a grandchild held them).
	DrainTimedOut bool
	// StdoutAbandoned is set when, the child having exited, a stop request
	// made Run return while stdout (or a pumped stderr) was still being
	// written to a consumer that did not read: what was not written out
	// was dropped.
	StdoutAbandoned bool
	// StdoutUndelivered counts what was read from the child's stdout and
	// tapped but not written out: Run gave up on the consumer
	// (StdoutAbandoned), or the consumer went away (StdoutBroken) with the
	// child's output still in the pipe.
	StdoutUndelivered int64
	// StdoutBytes counts what was read from the child's stdout (and
	// tapped); StdinBytes what was written to the child's stdin.
	StdoutBytes, StdinBytes int64
	// StdoutWithheld counts the stdout bytes read, tapped and kept from
	// Stdout on purpose: the answers to Config.Inject's requests.
	StdoutWithheld int64
}

// stopSignals are the forwarded signals that also ask the supervisor to stop.
func isStopSignal(s os.Signal) bool {
	switch s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// child is the started process and the parent's ends of its pipes.
type child struct {
	pid    int
	proc   *os.Process
	exited chan struct{} // closed once the child has been reaped
	state  *os.ProcessState
	werr   error
}

// Run starts the child, pumps its streams until it has exited and its
// stdout and stderr are drained, kills whatever is left of its process group
// and returns how it ended. A *StartError (errors.Is ErrNotFound or
// ErrNotExecutable) means the child never ran; any other error is an
// internal failure. ctx being done asks the child to stop (SIGTERM, then
// SIGKILL after KillTimeout).
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.setDefaults()
	log := cfg.Logger

	path, serr := lookPath(cfg.Path)
	if serr != nil {
		return Result{ExitCode: serr.Code}, serr
	}
	var err error

	var (
		closeAfterStart []*os.File // the child's ends: closed in the parent once started
		closeOnError    []*os.File // the parent's ends
		attr            = &os.ProcAttr{Dir: cfg.Dir, Env: cfg.Env}
	)
	defer func() {
		for _, f := range closeAfterStart {
			f.Close()
		}
	}()
	fail := func(err error) (Result, error) {
		for _, f := range closeOnError {
			f.Close()
		}
		return Result{ExitCode: 1}, err
	}
	devNull := func() (*os.File, error) {
		f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err == nil {
			closeAfterStart = append(closeAfterStart, f)
		}
		return f, err
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("create pipe: %w", err)
		}
		growPipe(r, log)
		return r, w, nil
	}

	// stdin: our pump writes into a pipe we created (not exec.Cmd.Stdin with
	// a reader, whose copy Wait would wait for).
	var stdinR, stdinW *os.File
	if cfg.Stdin == nil {
		if stdinR, err = devNull(); err != nil {
			return fail(fmt.Errorf("open %s: %w", os.DevNull, err))
		}
	} else {
		if stdinR, stdinW, err = pipe(); err != nil {
			return fail(err)
		}
		closeAfterStart = append(closeAfterStart, stdinR)
		closeOnError = append(closeOnError, stdinW)
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return fail(err)
	}
	closeAfterStart = append(closeAfterStart, stdoutW)
	closeOnError = append(closeOnError, stdoutR)

	var stderrChild, stderrR *os.File
	switch w := cfg.Stderr.(type) {
	case nil:
		if stderrChild, err = devNull(); err != nil {
			return fail(fmt.Errorf("open %s: %w", os.DevNull, err))
		}
	case *os.File:
		stderrChild = w // shared, not copied: the child writes straight to it
	default:
		var wr *os.File
		if stderrR, wr, err = pipe(); err != nil {
			return fail(err)
		}
		stderrChild = wr
		closeAfterStart = append(closeAfterStart, wr)
		closeOnError = append(closeOnError, stderrR)
	}
	attr.Files = []*os.File{stdinR, stdoutW, stderrChild}
	attr.Sys = &syscall.SysProcAttr{
		// Own process group: terminal signals reach only the supervisor,
		// which forwards them, and grandchildren can be killed as a group.
		Setpgid: true,
		// Dies with the thread that started it; start() keeps that thread
		// locked for the child's lifetime, so in effect with the supervisor.
		Pdeathsig: syscall.SIGKILL,
	}

	ch, err := start(path, append([]string{cfg.Path}, cfg.Args...), attr)
	if err != nil {
		for _, f := range closeOnError {
			f.Close()
		}
		var se *StartError
		if errors.As(err, &se) {
			return Result{ExitCode: se.Code}, se
		}
		return Result{ExitCode: 1}, err
	}
	for _, f := range closeAfterStart {
		f.Close()
	}
	closeAfterStart = nil
	log.Debug("child started", "pid", ch.pid, "path", path)

	var res Result
	s := &supervisor{cfg: cfg, log: log, ch: ch, res: &res}

	// Pumps. stdout and stderr are waited for (within limits: see
	// superviseSignals); stdin is not (see Config.Stdin).
	var outWG sync.WaitGroup
	outSt, errSt := newOutPump(), newOutPump()
	stdout := cfg.Stdout
	if cfg.Inject != nil {
		stdout = newRespFilter(cfg.Stdout, cfg.Inject)
	}
	outWG.Add(1)
	go func() {
		defer outWG.Done()
		s.pumpOut(outSt, stdoutR, stdout, cfg.StdoutTap, true)
	}()
	if stderrR != nil {
		outWG.Add(1)
		go func() {
			defer outWG.Done()
			s.pumpOut(errSt, stderrR, cfg.Stderr, nil, false)
		}()
	}
	pumpsDone := make(chan struct{})
	go func() {
		outWG.Wait()
		close(pumpsDone)
	}()
	var in *inPump
	if stdinW != nil {
		in = newInPump(cfg.Stdin, stdinW, cfg.StdinTap, cfg.BufSize, log, cfg.Inject)
		go in.run()
	}

	// Until the child has exited and stdout/stderr are drained (the pumps
	// give them DrainTimeout to reach EOF), or a stop request says to stop
	// waiting for a consumer that does not read.
	abandoned := s.superviseSignals(ctx, pumpsDone)
	// Kill the group so no grandchild survives us (which also lets the
	// pumps see EOF).
	s.killGroup()
	if abandoned {
		// The consumer is given up on, not the child's output: what the
		// child wrote is still tapped (the telemetry of a session the SDK
		// ended while the wrapper was still writing out its last lines
		// lost them). A pump blocked in a Write that may never return
		// leaves its pipe to us; one that is not goes on, tapping only,
		// and ends within DrainTimeout of the child's exit (the group is
		// killed: EOF comes at once).
		s.takeOver(outSt, stdoutR, cfg.StdoutTap)
		if stderrR != nil {
			s.takeOver(errSt, stderrR, nil)
		}
		res.StdoutAbandoned = true
	}
	o, e := outSt.detach(), errSt.detach()
	res.StdoutBytes, res.StdoutBroken, res.StdoutUndelivered = o.n, o.broken, o.undelivered
	res.DrainTimedOut = o.timedOut || e.timedOut
	if in != nil {
		res.StdinBytes = in.detach()
	}
	if cfg.Inject != nil {
		res.StdoutWithheld = cfg.Inject.Withheld()
	}

	if ch.werr != nil {
		return Result{ExitCode: 1}, fmt.Errorf("wait for child %d: %w", ch.pid, ch.werr)
	}
	ws, _ := ch.state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.Signal = ws.Signal()
		res.ExitCode = 128 + int(res.Signal)
	default:
		res.ExitCode = ws.ExitStatus()
	}
	log.Debug("child ended", "pid", ch.pid, "exit_code", res.ExitCode, "signal", int(res.Signal),
		"killed", res.Killed, "stdout_bytes", res.StdoutBytes, "stdout_undelivered", res.StdoutUndelivered, "stdin_bytes", res.StdinBytes,
		"stdout_broken", res.StdoutBroken, "drain_timed_out", res.DrainTimedOut)
	return res, nil
}

func (c *Config) setDefaults() {
	if c.KillTimeout <= 0 {
		c.KillTimeout = DefaultKillTimeout
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.BufSize <= 0 {
		c.BufSize = DefaultBufSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
}

// lookPath resolves the command like exec.Command does and classifies
// failures into 127 and 126.
func lookPath(name string) (string, *StartError) {
	if name == "" {
		return "", &StartError{Path: name, Code: ExitNotFound, Err: errors.New("empty command")}
	}
	p, err := exec.LookPath(name)
	if err == nil || errors.Is(err, exec.ErrDot) {
		// ErrDot: found through a relative PATH entry such as ".". A shell
		// runs it, and so do we: the wrapper must not change what runs.
		return p, nil
	}
	return "", classify(name, err)
}

func classify(name string, err error) *StartError {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return &StartError{Path: name, Code: ExitNotFound, Err: err}
	default: // EACCES, EISDIR, ENOEXEC, ...: it is there but will not run
		return &StartError{Path: name, Code: ExitNotExecutable, Err: err}
	}
}

// PipeSize is the capacity the supervisor asks for on the pipes it creates
// (the kernel default is 64 KiB; 1 MiB is the default unprivileged maximum,
// /proc/sys/fs/pipe-max-size). With a larger pipe the child and the pumps
// hand over the CPU far less often, which is most of the wrapper's cost.
const PipeSize = 1 << 20

// growPipe raises the pipe's capacity, best effort: a smaller pipe is only
// slower.
func growPipe(f *os.File, log *slog.Logger) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		if _, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, PipeSize); err != nil {
			log.Debug("cannot grow pipe", "size", PipeSize, "err", err)
		}
	})
}

// cannotExec tells execve failures that are about the command (a shell's
// 126/127) from resource failures of the supervisor.
func cannotExec(err error) bool {
	for _, e := range []error{fs.ErrNotExist, syscall.EACCES, syscall.EPERM, syscall.ENOEXEC,
		syscall.EISDIR, syscall.ENOTDIR, syscall.ETXTBSY, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.ELIBBAD} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// start starts the child on a goroutine locked to its OS thread and keeps
// the thread locked until the child is reaped: Pdeathsig fires when the
// thread that forked the child exits, and a Go thread only exits when a
// goroutine ends while locked to it. So the signal fires when the
// supervisor process dies, not when the runtime retires an idle thread.
func start(path string, argv []string, attr *os.ProcAttr) (*child, error) {
	type started struct {
		proc *os.Process
		err  error
	}
	startc := make(chan started, 1)
	ch := &child{exited: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread on the error path either: the
		// goroutine ends locked, so the runtime discards this thread.
		p, err := os.StartProcess(path, argv, attr)
		startc <- started{p, err}
		if err != nil {
			return
		}
		ch.state, ch.werr = p.Wait()
		close(ch.exited)
		runtime.UnlockOSThread()
	}()
	st := <-startc
	if st.err != nil {
		if cannotExec(st.err) {
			return nil, classify(argv[0], st.err)
		}
		// EAGAIN, ENOMEM, EMFILE...: our failure, not the command's.
		return nil, fmt.Errorf("start %s: %w", path, st.err)
	}
	ch.proc, ch.pid = st.proc, st.proc.Pid
	return ch, nil
}

// supervisor holds the state shared by Run's helpers.
type supervisor struct {
	cfg Config
	log *slog.Logger
	ch  *child
	res *Result
}

// superviseSignals forwards signals and handles stop requests until the
// child has exited and the output pumps are done (pumpsDone), and reports
// whether it gave up waiting for the pumps instead.
//
// Signals are served for as long as Run waits, because once the child has
// exited the wait is for the consumer: a stdout consumer that stopped
// reading would otherwise keep the supervisor, deaf to SIGTERM, alive until
// SIGKILL, where the child alone would have died of the signal. So a stop
// request (a stop signal or ctx being done) abandons the pumps: at once when
// it comes after the child exited, and twice DrainTimeout after the exit
// when it came before (the pumps' drain, then as long again for the child's
// last words to be written out to a consumer that reads).
func (s *supervisor) superviseSignals(ctx context.Context, pumpsDone <-chan struct{}) (abandoned bool) {
	var (
		killTimer    <-chan time.Time
		timer        *time.Timer
		abandonTimer <-chan time.Time
		ctxDone      = ctx.Done()
		exited       = s.ch.exited
		childGone    bool
		stopping     bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	stop := func(why string) {
		if stopping {
			return
		}
		stopping = true
		s.log.Debug("stop requested", "reason", why, "kill_timeout", s.cfg.KillTimeout)
		timer = time.NewTimer(s.cfg.KillTimeout)
		killTimer = timer.C
	}
	abandon := func(why string) bool {
		s.log.Warn("child exited but its output is not written out yet (the consumer does not read); stop requested, dropping the rest (still tapped for telemetry)",
			"pid", s.ch.pid, "reason", why)
		return true
	}
	for {
		select {
		case <-exited:
			exited, childGone = nil, true
			if timer != nil {
				timer.Stop()
				killTimer = nil
			}
			if pumpsDone == nil {
				return false
			}
			if stopping {
				// The pumps' own drain deadline comes first: a grandchild
				// holding a pipe is their business, not a stalled consumer.
				t := time.NewTimer(2 * s.cfg.DrainTimeout)
				defer t.Stop()
				abandonTimer = t.C
			}
		case <-pumpsDone:
			pumpsDone = nil
			if childGone {
				return false
			}
		case <-abandonTimer:
			return abandon("stop requested before the child exited")
		case sig := <-s.cfg.Signals:
			switch sig {
			case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE:
				continue
			}
			s.signal(sig)
			if isStopSignal(sig) {
				if childGone {
					return abandon(sig.String())
				}
				stop(sig.String())
			}
		case <-ctxDone:
			ctxDone = nil
			if childGone {
				return abandon("context done")
			}
			s.signal(syscall.SIGTERM)
			stop("context done")
		case <-killTimer:
			killTimer = nil
			s.log.Warn("child did not exit after a stop request, killing it", "pid", s.ch.pid, "kill_timeout", s.cfg.KillTimeout)
			s.res.Killed = true
			s.killGroup()
		}
	}
}

// takeOver ends an output pump that Run gave up waiting for: the pipe's
// rest is read without waiting and tapped (not passed on: the consumer does
// not take it), by the pump if it is not stuck writing, else here. The
// child has exited and its group is killed, so the pipe holds all there
// will ever be; a pump that is not stuck reaches EOF at once, or its drain
// deadline.
func (s *supervisor) takeOver(st *outPump, r *os.File, tap io.Writer) {
	if !st.abandon() {
		<-st.done
		return
	}
	buf := make([]byte, s.cfg.BufSize)
	s.sweep(r, buf, func(b []byte) bool { return st.tapOnly(tap, b) })
	r.Close() // a late writer gets EPIPE; the stuck Write is left alone
}

// signal sends sig to the child (not its group: the child decides what its
// own children get, as it would under a shell). Through os.Process it is
// safe against pid reuse once the child is reaped.
func (s *supervisor) signal(sig os.Signal) {
	if err := s.ch.proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.log.Warn("forward signal", "signal", sig, "pid", s.ch.pid, "err", err)
		return
	}
	s.log.Debug("forwarded signal", "signal", sig, "pid", s.ch.pid)
}

// killGroup SIGKILLs the child's process group (the child and every
// descendant that did not leave it). The group id stays reserved by the
// kernel while any member lives, so this cannot hit an unrelated group.
func (s *supervisor) killGroup() {
	err := syscall.Kill(-s.ch.pid, syscall.SIGKILL)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("kill process group", "pgid", s.ch.pid, "err", err)
	}
}
