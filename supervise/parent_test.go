package supervise

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
)

// watchParentChild is the helper process of these tests, in mode
// "watch-parent:pidfd" or "watch-parent:poll": it watches its parent,
// prints "watching HOW", then answers each line of stdin: "state" with
// "alive" or "gone" at once, "wait" with "gone" once the parent has exited
// (or "timeout" after a failsafe minute). It exits 0 at EOF.
func watchParentChild(how string) int {
	ctx := context.Background()
	var gone <-chan struct{}
	var desc string
	switch how {
	case "pidfd":
		gone, desc = WatchParent(ctx, 0)
	case "poll":
		gone, desc = watchParent(ctx, 10*time.Millisecond, false)
	default:
		fmt.Fprintf(os.Stderr, "watch-parent: unknown way %q\n", how)
		return 2
	}
	fmt.Printf("watching %s\n", desc)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "state":
			select {
			case <-gone:
				fmt.Println("gone")
			default:
				fmt.Println("alive")
			}
		case "wait":
			select {
			case <-gone:
				fmt.Println("gone")
			case <-time.After(time.Minute):
				fmt.Println("timeout")
			}
		}
	}
	return 0
}

// startWatcher starts the helper in mode from an OS thread that exits once
// the helper watches, and returns the helper's stdin and stdout lines.
func startWatcher(t *testing.T, mode string) (io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = supervisetest.Env(mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	var line string
	err = supervisetest.StartFromExitingThread(cmd, func() error {
		if !out.Scan() {
			return fmt.Errorf("helper ended: %v", out.Err())
		}
		line = out.Text()
		return nil
	}, 30*time.Second)
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "watching ") {
		t.Fatalf("helper said %q, want watching ...", line)
	}
	t.Logf("helper: %s", line)
	return stdin, out
}

// ask writes cmd to the helper and returns its answer.
func ask(t *testing.T, w io.Writer, out *bufio.Scanner, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(w, cmd); err != nil {
		t.Fatal(err)
	}
	if !out.Scan() {
		t.Fatalf("helper ended without answering %q: %v", cmd, out.Err())
	}
	return out.Text()
}

// The thread that started us exits while its process lives on: the
// parent has not exited, whichever way it is watched.
func TestWatchParentIgnoresThreadExit(t *testing.T) {
	for _, how := range []string{"pidfd", "poll"} {
		t.Run(how, func(t *testing.T) {
			stdin, out := startWatcher(t, "watch-parent:"+how)
			// A parent-death signal is sent as the thread exits, before
			// the task leaves /proc: the helper would be dead by now.
			if got := ask(t, stdin, out, "state"); got != "alive" {
				t.Fatalf("after the forking thread exited: %q, want alive", got)
			}
		})
	}
}

// The parent process exits: the watcher sees it, whichever way it watches.
func TestWatchParentSeesProcessExit(t *testing.T) {
	for _, how := range []string{"pidfd", "poll"} {
		t.Run(how, func(t *testing.T) {
			// test → spawner (hangs) → watcher, sharing the spawner's stdio.
			// Pipes of our own (not StdinPipe...): they must outlive the
			// spawner's Wait, which closes those it made.
			spawner := exec.Command(os.Args[0], os.Args[0])
			spawner.Env = supervisetest.Env("spawn-wrapper:watch-parent:" + how)
			inR, stdin := pipe(t)
			stdout, outW := pipe(t)
			stderr, errW := pipe(t)
			spawner.Stdin, spawner.Stdout, spawner.Stderr = inR, outW, errW
			if err := spawner.Start(); err != nil {
				t.Fatal(err)
			}
			for _, f := range []*os.File{inR, outW, errW} {
				f.Close()
			}
			t.Cleanup(func() { spawner.Process.Kill() })
			var wpid int
			errs := bufio.NewScanner(stderr)
			if !errs.Scan() {
				t.Fatalf("spawner: %v", errs.Err())
			}
			if _, err := fmt.Sscanf(errs.Text(), "wrapper %d", &wpid); err != nil {
				t.Fatalf("spawner said %q: %v", errs.Text(), err)
			}
			t.Cleanup(func() { unix.Kill(wpid, unix.SIGKILL) })
			out := bufio.NewScanner(stdout)
			if !out.Scan() || !strings.HasPrefix(out.Text(), "watching ") {
				t.Fatalf("watcher said %q, want watching ...", out.Text())
			}
			if !strings.Contains(out.Text(), "watched by "+how) {
				t.Fatalf("watcher said %q, want it watched by %s", out.Text(), how)
			}
			if got := ask(t, stdin, out, "state"); got != "alive" {
				t.Fatalf("with its parent alive: %q", got)
			}
			if err := spawner.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			spawner.Wait()
			if got := ask(t, stdin, out, "wait"); got != "gone" {
				t.Fatalf("after its parent was killed: %q, want gone", got)
			}
		})
	}
}

// pollParent on a pid that is not our parent reports it gone at once; on
// our parent, nothing until ctx ends.
func TestPollParent(t *testing.T) {
	for _, tc := range []struct {
		name string
		ppid int
		gone bool
	}{
		{"our parent", os.Getppid(), false},
		{"another pid", os.Getppid() + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			gone := make(chan struct{})
			done := make(chan struct{})
			go func() {
				pollParent(ctx, tc.ppid, time.Millisecond, gone)
				close(done)
			}()
			if tc.gone {
				<-done
				select {
				case <-gone:
				default:
					t.Fatal("pollParent returned without closing gone")
				}
				cancel()
				return
			}
			cancel()
			<-done
			select {
			case <-gone:
				t.Fatal("gone closed while the parent lives")
			default:
			}
		})
	}
}
