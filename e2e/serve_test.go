package e2e

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/simulate"
)

// TestServe runs the sidecar against real wrappers. The binary is built
// once for all cases.
func TestServe(t *testing.T) {
	bin := promBuildCLI(t)
	t.Run("ConcurrentWrappers", func(t *testing.T) { testServeConcurrentWrappers(t, bin) })
	t.Run("Kill9", func(t *testing.T) { testServeKill9(t, bin) })
	t.Run("NoSecretsSpooled", func(t *testing.T) { testServeNoSecretsSpooled(t, bin) })
}

// testServeNoSecretsSpooled: an SDK session starts with initialize, whose
// answer carries the account's token and e-mail; in both dialects they
// never reach the spool file (the shared volume), and serve still counts
// the session exactly.
func testServeNoSecretsSpooled(t *testing.T, bin string) {
	dir := t.TempDir()
	spoolDir := filepath.Join(dir, "spool")
	if err := os.Mkdir(spoolDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var expects []string
	var turns []int
	for i, dialect := range []string{"cbc", "claude"} {
		sc := []string{"completed", "mixed"}
		in := userTurns(t, dir, fmt.Sprintf("in-%d.ndjson", i), sc)
		b, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		initReq := `{"type":"control_request","request_id":"init-1","request":{"subtype":"initialize"}}` + "\n"
		if err := os.WriteFile(in, append([]byte(initReq), b...), 0o600); err != nil {
			t.Fatal(err)
		}
		exp := filepath.Join(dir, fmt.Sprintf("expect-%d.ndjson", i))
		w := spoolingWrapper(t, bin, spoolDir, in, exp, "--speed", "0", "--noise", "100", "--seed", fmt.Sprint(40+i), "--dialect", dialect)
		if err := w.Wait(); err != nil {
			t.Fatalf("wrapper (%s): %v; stderr:\n%s", dialect, err, w.Stderr)
		}
		expects, turns = append(expects, exp), append(turns, len(sc))
	}
	files, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
	if len(files) != 2 {
		t.Fatalf("spool files %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), simulate.CanaryToken) || strings.Contains(string(b), simulate.CanaryEmail) {
			t.Fatalf("%s: the initialize answer's credentials reached the spool file", f)
		}
	}
	srv := startServe(t, bin, "--spool.dir", spoolDir, "--follow.poll-interval", "50ms", "--tracker.grace", "300ms")
	truth := sumTruth(t, expects, turns)
	promPoll(t, 20*time.Second, "serve's totals equal the simulators' truth", func() (bool, string) {
		fams, err := srv.scrape()
		if err != nil {
			return false, err.Error()
		}
		if d := truth.compare(fams); d != "" {
			return false, d
		}
		if v := byLabel(fams, "cbc_otel_lines_rejected_total", "reason")["invalid_json"]; v != 0 {
			return false, fmt.Sprintf("invalid_json %v", v)
		}
		return true, ""
	})
	if code := srv.stop(t); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM; stderr:\n%s", code, srv.stderr)
	}
}

// testServeConcurrentWrappers: 20 wrappers spool at once into one
// directory; one serve follows them all; its /metrics ends equal to the sum
// of the simulators' ground truth, and every spool file is removed.
func testServeConcurrentWrappers(t *testing.T, bin string) {
	dir := t.TempDir()
	spoolDir, stateDir := filepath.Join(dir, "spool"), filepath.Join(dir, "state")
	for _, d := range []string{spoolDir, stateDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv := startServe(t, bin, "--spool.dir", spoolDir, "--state.dir", stateDir, "--follow.poll-interval", "50ms", "--tracker.grace", "300ms")
	promPoll(t, 20*time.Second, "serve ready", func() (bool, string) { return srv.ready(), srv.stderr.String() })

	all := []string{"completed", "failed", "cached", "mixed", "spellings", "stopped", "many-agents"}
	const n = 20
	var expects []string
	var turns []int
	var wrappers []*exec.Cmd
	for i := range n {
		k := 2 + i%3
		sc := make([]string, k)
		for j := range sc {
			sc[j] = all[(i+j)%len(all)]
		}
		in := userTurns(t, dir, fmt.Sprintf("in-%d.ndjson", i), sc)
		exp := filepath.Join(dir, fmt.Sprintf("expect-%d.ndjson", i))
		args := []string{"--speed", "0.01", "--noise", "300", "--seed", fmt.Sprint(i + 1), "--agents", "6"}
		if i%4 == 3 {
			args = append(args, "--dialect", "claude")
		}
		if i%5 == 4 {
			args = append(args, "--interrupt-after", "2") // a stopped run
		}
		wrappers = append(wrappers, spoolingWrapper(t, bin, spoolDir, in, exp, args...))
		expects, turns = append(expects, exp), append(turns, k)
	}
	for i, w := range wrappers {
		if err := w.Wait(); err != nil {
			t.Fatalf("wrapper %d: %v; stderr:\n%s", i, err, w.Stderr)
		}
	}
	truth := sumTruth(t, expects, turns)
	promPoll(t, 30*time.Second, "serve's totals equal the simulators' truth", func() (bool, string) {
		fams, err := srv.scrape()
		if err != nil {
			return false, err.Error()
		}
		if d := truth.compare(fams); d != "" {
			return false, d
		}
		left, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
		if len(left) > 0 {
			return false, fmt.Sprintf("spool files left: %v", left)
		}
		return true, ""
	})
	if code := srv.stop(t); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM; stderr:\n%s", code, srv.stderr)
	}
	t.Logf("20 wrappers, %d workflow runs: runs %v agents %v tokens %v", truth.workflows, promNonZero(truth.runs), promNonZero(truth.agents), truth.tokens)
}

// testServeKill9 kills serve with SIGKILL at random points while a long
// stream is written and processed, restarting it on the same --state.dir
// each time; the last one's totals must be exact: no run twice, none lost,
// none abandoned.
func testServeKill9(t *testing.T, bin string) {
	dir := t.TempDir()
	spoolDir, stateDir := filepath.Join(dir, "spool"), filepath.Join(dir, "state")
	for _, d := range []string{spoolDir, stateDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"completed", "failed", "cached", "mixed", "spellings", "many-agents"}
	var sc []string
	for i := range 30 {
		sc = append(sc, all[i%len(all)])
	}
	in := userTurns(t, dir, "in.ndjson", sc)
	exp := filepath.Join(dir, "expect.ndjson")
	w := spoolingWrapper(t, bin, spoolDir, in, exp, "--speed", "0.06", "--noise", "500", "--agents", "8")
	wrapperDone := make(chan error, 1)
	go func() { wrapperDone <- w.Wait() }()

	args := []string{"--spool.dir", spoolDir, "--state.dir", stateDir, "--follow.poll-interval", "20ms", "--state.checkpoint-interval", "100ms", "--tracker.grace", "300ms"}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var points []string
	resumed, resumedOpen := 0, 0
	written := false
	for kills := 0; kills < 12 || !written; kills++ {
		if kills > 60 {
			t.Fatal("the wrapper did not finish")
		}
		srv := startServe(t, bin, args...)
		// Kill at a random point: sometimes before it is even ready,
		// mostly while it reads.
		d := time.Duration(rng.Intn(400)) * time.Millisecond
		select {
		case err := <-srv.exited:
			t.Fatalf("serve exited by itself (%v); stderr:\n%s", err, srv.stderr)
		case <-time.After(d):
		}
		srv.kill9(t)
		points = append(points, d.String())
		for _, l := range strings.Split(srv.stderr.String(), "\n") {
			if strings.Contains(l, "resuming stream") {
				resumed++
				if !strings.Contains(l, "open_runs=0") {
					resumedOpen++
				}
			}
		}
		if strings.Contains(srv.stderr.String(), "checkpoint unusable") {
			t.Fatalf("a kill -9 left an unusable checkpoint; stderr:\n%s", srv.stderr)
		}
		select {
		case err := <-wrapperDone:
			if err != nil {
				t.Fatalf("wrapper: %v", err)
			}
			written = true
		default:
		}
	}
	if resumed == 0 {
		t.Fatal("no restart resumed a stream from a checkpoint: the kills did not hit processing")
	}
	truth := sumTruth(t, []string{exp}, []int{len(sc)})
	srv := startServe(t, bin, args...)
	promPoll(t, 30*time.Second, "totals after the kills equal the truth", func() (bool, string) {
		fams, err := srv.scrape()
		if err != nil {
			return false, err.Error()
		}
		if d := truth.compare(fams); d != "" {
			return false, d
		}
		if v := byLabel(fams, "cbc_workflow_runs_total", "status")["abandoned"]; v != 0 {
			return false, fmt.Sprintf("abandoned %v", v)
		}
		left, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
		return len(left) == 0, fmt.Sprintf("spool files left: %v", left)
	})
	if code := srv.stop(t); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM; stderr:\n%s", code, srv.stderr)
	}
	t.Logf("%d kill -9 points (after %s); %d resumes from a checkpoint, %d with runs open; %d runs: %v",
		len(points), strings.Join(points, ", "), resumed, resumedOpen, truth.workflows, promNonZero(truth.runs))
}
