// Package supervisetest fakes wrapped children for tests with the
// helper-process pattern: a test binary re-runs itself with EnvMode set, and
// its TestMain hands over to RunChild, which behaves like the named child
// (cat, exit 7, ignore SIGTERM, spawn a grandchild, ...).
//
// Every mode that the test must wait for prints a line first ("ready",
// "pid N"), so tests synchronise on output, never on sleeps.
package supervisetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvMode is the environment variable that selects the child's behaviour.
const EnvMode = "GO_HELPER_CHILD"

// ForwardedSignals are the signals a wrapper forwards and the "sigreport"
// child reports.
var ForwardedSignals = []syscall.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// Mode returns the requested child mode, or "" when running as the test.
func Mode() string { return os.Getenv(EnvMode) }

// Env returns the current environment plus the switch for mode. It also
// turns off the race detector's one-second sleep at exit, which a -race
// test binary would otherwise add to every child.
func Env(mode string) []string {
	return append(os.Environ(), EnvMode+"="+mode, "GORACE=atexit_sleep_ms=0")
}

// forever parks the child; it is never used to synchronise anything.
func forever() {
	for {
		time.Sleep(time.Hour)
	}
}

// RunChild behaves as the child named by mode and returns its exit code
// (modes that die of a signal do not return). Modes:
//
//	cat            copy stdin to stdout until EOF
//	exit:N         exit with code N
//	killself:N     kill itself with signal N
//	sigreport      print "ready", then "sig N" for each forwarded signal; exit 0 at stdin EOF
//	ignore-term    ignore SIGTERM, print "ready", then hang
//	sleeper        print "pid N", then hang (default signal dispositions)
//	grandchild     start a sleeper grandchild sharing stdout, print "pid N" for both, exit 0
//	grandchild-wait  like grandchild, then hang instead of exiting
//	yes            write "y\n" forever (dies of SIGPIPE when the reader goes)
//	epipe          like yes with SIGPIPE ignored; exit 3 on EPIPE
//	pingpong       write "line i", wait for "ack i" on stdin, three times
//	write:N        write N bytes of a pattern to stdout, print "done" to stderr, exit
//	writehang:N    like write, then hang (default signal dispositions)
//	closestdout    print "bye", close stdout, print "closed" to stderr, exit 0
//	               at stdin EOF
//	replay:END:F   print "pid N" to stderr, write file F to stdout, print
//	               "done" to stderr, then END: exit (exit 0), stdin (exit 0
//	               at stdin EOF) or hang
//	stdio          write "out" to stdout and "err" to stderr
//	closestdin     close stdin, print "closed", then hang
//	ctl            echo each stdin line to stdout; after a line that is a
//	               control_request, write its control_response (success,
//	               same request_id); exit 0 at stdin EOF
//	budgetcli[:deaf|free]  a CLI speaking stream-json whose spend grows by
//	               $0.6 a turn (see BudgetCLI); deaf ignores control requests
//	               and exits 130 on SIGINT; free reports 0 (as CodeBuddy)
//	spawn-wrapper:MODE  start args (a wrapper's argv) sharing stdio, with the
//	               wrapper's own child in MODE, print "wrapper N" to stderr,
//	               then hang: the wrapper's parent in parent-death tests
func RunChild(mode string, args []string) int {
	name, arg, _ := strings.Cut(mode, ":")
	switch name {
	case "ctl":
		return ctl()
	case "budgetcli":
		return BudgetCLI(arg)
	case "cat":
		buf := make([]byte, 64<<10)
		if _, err := io.CopyBuffer(os.Stdout, os.Stdin, buf); err != nil {
			fmt.Fprintln(os.Stderr, "cat:", err)
			return 1
		}
		return 0
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n
	case "killself":
		n, _ := strconv.Atoi(arg)
		signal.Reset(syscall.Signal(n))
		syscall.Kill(os.Getpid(), syscall.Signal(n))
		forever()
	case "sigreport":
		c := make(chan os.Signal, 16)
		sigs := make([]os.Signal, len(ForwardedSignals))
		for i, s := range ForwardedSignals {
			sigs[i] = s
		}
		signal.Notify(c, sigs...)
		eof := make(chan struct{})
		go func() {
			io.Copy(io.Discard, os.Stdin)
			close(eof)
		}()
		fmt.Println("ready")
		for {
			select {
			case s := <-c:
				fmt.Printf("sig %d\n", s.(syscall.Signal))
			case <-eof:
				return 0
			}
		}
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		forever()
	case "sleeper", "sleeper-after":
		if name == "sleeper-after" {
			// Its parent's line first: wait until the parent closes the
			// pipe on fd 3 after writing it, so that tests can read the
			// pids from the first line.
			_, _ = io.Copy(io.Discard, os.NewFile(3, "after"))
		}
		fmt.Printf("pid %d\n", os.Getpid())
		forever()
	case "grandchild", "grandchild-wait":
		after, release, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, "grandchild:", err)
			return 1
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = Env("sleeper-after")
		cmd.Stdout = os.Stdout
		cmd.Stderr = os.Stderr
		cmd.ExtraFiles = []*os.File{after}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "grandchild:", err)
			return 1
		}
		after.Close()
		fmt.Printf("child %d grandchild %d\n", os.Getpid(), cmd.Process.Pid)
		release.Close()
		if name == "grandchild-wait" {
			forever()
		}
		return 0
	case "yes", "epipe":
		if name == "epipe" {
			signal.Ignore(syscall.SIGPIPE)
		}
		p := []byte(strings.Repeat("y\n", 4096))
		for {
			if _, err := os.Stdout.Write(p); err != nil {
				if errors.Is(err, syscall.EPIPE) {
					return 3
				}
				return 4
			}
		}
	case "pingpong":
		in := bufio.NewReader(os.Stdin)
		for i := 1; i <= 3; i++ {
			fmt.Printf("line %d\n", i)
			got, err := in.ReadString('\n')
			if err != nil || got != fmt.Sprintf("ack %d\n", i) {
				fmt.Fprintf(os.Stderr, "pingpong: got %q, %v\n", got, err)
				return 1
			}
		}
		return 0
	case "write":
		n, _ := strconv.Atoi(arg)
		if _, err := os.Stdout.Write(Pattern(n)); err != nil {
			return 1
		}
		fmt.Fprintln(os.Stderr, "done")
		return 0
	case "writehang":
		n, _ := strconv.Atoi(arg)
		if _, err := os.Stdout.Write(Pattern(n)); err != nil {
			return 1
		}
		fmt.Fprintln(os.Stderr, "done")
		forever()
	case "replay":
		// arg is END:FILE.
		end, file, _ := strings.Cut(arg, ":")
		b, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "replay:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "pid %d\n", os.Getpid())
		if _, err := os.Stdout.Write(b); err != nil {
			return 1
		}
		fmt.Fprintln(os.Stderr, "done")
		switch end {
		case "stdin":
			io.Copy(io.Discard, os.Stdin)
		case "hang":
			forever()
		}
		return 0
	case "closestdout":
		fmt.Println("bye")
		os.Stdout.Close()
		fmt.Fprintln(os.Stderr, "closed")
		io.Copy(io.Discard, os.Stdin)
		return 0
	case "closestdin":
		os.Stdin.Close()
		fmt.Println("closed")
		forever()
	case "stdio":
		fmt.Fprint(os.Stdout, "out")
		fmt.Fprint(os.Stderr, "err")
		return 0
	case "spawn-wrapper":
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "spawn-wrapper: no command")
			return 2
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = Env(arg)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn-wrapper:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "wrapper %d\n", cmd.Process.Pid)
		forever()
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// Pattern returns n bytes of a recognisable non-repeating-at-small-scale
// pattern with newlines, NULs and high bytes.
func Pattern(n int) []byte {
	p := make([]byte, n)
	x := uint32(2463534242)
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = byte(x)
	}
	return p
}

// Alive reports whether pid names a live, non-zombie process.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself
	// contain spaces or parentheses: take the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st != 'Z' && st != 'X'
}

// WaitGone polls until pid is no longer alive or the deadline passes, and
// reports whether it is gone.
func WaitGone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !Alive(pid) {
			return true
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	return !Alive(pid)
}

// ctl echoes stdin lines and answers control requests as a CLI does: the
// control_response after what came before it.
func ctl() int {
	r := bufio.NewReaderSize(os.Stdin, 1<<20)
	w := bufio.NewWriter(os.Stdout)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			w.Write(line)
			if len(line) > 0 && line[len(line)-1] == '\n' && strings.HasPrefix(string(line), `{"type":"control_request"`) {
				_, rest, _ := strings.Cut(string(line), `"request_id":"`)
				id, _, _ := strings.Cut(rest, `"`)
				fmt.Fprintf(w, `{"type":"control_response","response":{"subtype":"success","request_id":"%s"}}`+"\n", id)
			}
			if w.Flush() != nil {
				return 1
			}
		}
		if err != nil {
			return 0
		}
	}
}

// EnvBudgetOut names the file where BudgetCLI copies all it writes.
const EnvBudgetOut = "GO_HELPER_BUDGET_OUT"

// BudgetCLI fakes a Claude Code session on stream-json: system/init, then
// for each user line a turn whose result adds $0.6 to total_cost_usd, the
// first one launching workflow "spend" (task wf-1) that runs until an
// interrupt. To an interrupt it answers as the CLI does: the
// control_response, the run killed and stopped, the turn's result. It exits
// 0 at stdin EOF. Everything it writes is copied to $GO_HELPER_BUDGET_OUT.
// how is "deaf" (control requests ignored, exit 130 on SIGINT), "free"
// (total_cost_usd 0, as CodeBuddy writes) or "".
func BudgetCLI(how string) int {
	deaf, perTurn := how == "deaf", 0.6
	if how == "free" {
		perTurn = 0
	}
	if deaf {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT)
		go func() {
			<-c
			os.Exit(130)
		}()
	}
	copyTo, err := os.Create(os.Getenv(EnvBudgetOut))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer copyTo.Close()
	w := bufio.NewWriter(io.MultiWriter(os.Stdout, copyTo))
	say := func(format string, a ...any) {
		fmt.Fprintf(w, format+"\n", a...)
	}
	say(`{"type":"system","subtype":"init","session_id":"sess-1","model":"fake"}`)
	w.Flush()
	r := bufio.NewReader(os.Stdin)
	turns, running := 0, false
	for {
		line, err := r.ReadString('\n')
		switch {
		case strings.HasPrefix(line, `{"type":"user"`):
			turns++
			if turns == 1 {
				running = true
				say(`{"type":"system","subtype":"task_started","task_id":"wf-1","tool_use_id":"tu-1","task_type":"local_workflow","workflow_name":"spend","description":"d","session_id":"sess-1"}`)
			}
			say(`{"type":"result","subtype":"success","is_error":false,"duration_ms":10,"num_turns":%d,"session_id":"sess-1","total_cost_usd":%.1f,"usage":{}}`, turns, perTurn*float64(turns))
		case strings.HasPrefix(line, `{"type":"control_request"`) && !deaf:
			_, rest, _ := strings.Cut(line, `"request_id":"`)
			id, _, _ := strings.Cut(rest, `"`)
			say(`{"type":"control_response","response":{"subtype":"success","request_id":"%s"}}`, id)
			if running {
				running = false
				say(`{"type":"system","subtype":"task_updated","task_id":"wf-1","patch":{"status":"killed","end_time":1700000000000}}`)
				say(`{"type":"system","subtype":"task_notification","task_id":"wf-1","tool_use_id":"tu-1","status":"stopped","summary":"","session_id":"sess-1"}`)
			}
			say(`{"type":"result","subtype":"error_during_execution","is_error":true,"duration_ms":1,"num_turns":%d,"session_id":"sess-1","total_cost_usd":%.1f,"usage":{}}`, turns, perTurn*float64(turns))
		}
		if w.Flush() != nil {
			return 1
		}
		if err != nil {
			return 0
		}
	}
}
