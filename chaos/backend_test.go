//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/cbc-otel/cbc-otel/egress"
	"github.com/cbc-otel/cbc-otel/simulate"
)

// Section 2 of issue #10: the wrapper against telemetry backends that fail.
// Every case runs the released binary on the same streams of workflows, in
// two kinds of runs:
//
//   - blast runs copy a 256 MiB bulk at pipe speed: the pipe must keep its
//     throughput whatever the backend does. At that speed the telemetry
//     consumer may fall behind on a loaded or 2-core machine and the tap
//     then drops bytes by design (--tap-queue: never slow the pipe), so
//     these runs hold the metrics to one thing only: a run whose metrics
//     are inexact has counted tap drops.
//   - paced runs copy a smaller bulk at the rate of a brisk real CLI
//     (backendPacedRate): nothing may be dropped by the tap, the metrics
//     must be exact and every span delivered or counted as dropped.
//
// Both kinds check that the wrapper exits within the flush deadline after
// its child and keeps the child's status.
const (
	// backendTurns workflows (simulate's "mixed" scenario: one workflow of
	// 2 phases and 4 agents plus 2 plain tasks per turn) spread over about
	// 384 MiB by backendNoise-byte assistant messages: the blast bulk,
	// about a second per run pinned, long enough that a stray wakeup of
	// another process is a small part of it.
	backendTurns = 48
	backendNoise = 2 << 20
	// backendBlastPrefixTurns workflows before the blast bulk, 9 spans a
	// turn: of 64, only 384 spans had ended by the end of the prefix (a run
	// ends a grace window after its notification, on the stream's clock),
	// less than an export batch (egress.DefaultBatchSize), so the first
	// export waited for the batch interval; of 96, 512 have.
	backendBlastPrefixTurns = 96
	// backendRounds interleaved blast runs of every case.
	backendRounds = 6
	// backendConfirmRounds bounds the extra pairs that confirm a
	// throughput ratio under the bound before it is a breach.
	backendConfirmRounds = 4
	// backendPacedTurns workflows over about 32 MiB (backendPacedNoise-byte
	// messages): the paced bulk, written at backendPacedRate, so that a
	// paced run takes about 1.5 s.
	backendPacedTurns = 16
	backendPacedNoise = 512 << 10
	// backendPacedRate is the paced child's write rate, bytes per second:
	// several times what a real CLI writes (a few MB/s at most), far below
	// the pipe's speed.
	backendPacedRate = 24 << 20
	// backendPacedRounds paced runs of every case.
	backendPacedRounds = 1
	// backendFlush is --traces.flush-timeout: the most a dead backend may
	// add to the exit. Long enough for the slow receiver to take the last
	// batch (one request in flight, then the final one).
	backendFlush = 3 * time.Second
	// backendBlastFlush is --traces.flush-timeout in the blast runs, which
	// count no spans: a shorter deadline (and exit bound with it) keeps
	// the section short.
	backendBlastFlush = 500 * time.Millisecond
	// backendExitAllowance is what the exit may take beyond the flush
	// deadline with no backend at all: process teardown, the final metrics
	// file (fsync) on a shared, loaded machine. The no-backend run is held
	// to it alone.
	backendExitAllowance = time.Second
	// backendStatus is the fake child's exit status, to be passed through.
	backendStatus = 7
	// backendMinRatio is the throughput ratio of the issue: "within 5 % of
	// the no-telemetry run". Single runs on a 2-vCPU VM spread by ±10 %
	// even pinned (bePin), so a case breaches it when its runs are slower
	// than the reference's stretched by 1/backendMinRatio with a one-sided
	// rank-test p under backendBreachP (beSlowerP): evidence, not one
	// unlucky best of N. Under backendConfirmP, confirming pairs are run
	// first.
	backendMinRatio = 0.95
	backendBreachP  = 0.01
	backendConfirmP = 0.05
	// backendControlRounds interleaved (reference, control) pairs of the
	// positive control: 5 against 5 breaches with at most one inversion
	// (U >= 24 of 25, p <= 2/252).
	backendControlRounds = 5
	// backendControlConfirmRounds bounds the positive control's extra
	// pairs, more than a case's: the control must show power through the
	// host's slow phases, which slow some runs 2-3x and so invert some
	// (reference, control) comparisons. A CI run and a run by hand on a
	// busy host both stopped at 9 pairs with U 66/81 (p 0.0122 against
	// 0.01); at the same share of inversions 13 pairs give p 0.003. A pair
	// costs about 3 s and is only run while p is not yet under the bound.
	backendControlConfirmRounds = 8
	// beSlowDelay is how long the slow receiver takes per request.
	beSlowDelay = time.Second
	// beFlapPeriod is how long the flapping receiver stays up, then down.
	beFlapPeriod = 400 * time.Millisecond
	// beRecoverWait bounds the wait for the spans after a backend returns:
	// the export timeout (10 s, within which the exporter retries) plus
	// the grace window (5 s) plus a batch interval, with room to spare.
	beRecoverWait = 30 * time.Second
	// beMetWait bounds the wait for the exporter to meet a fault: its
	// first export comes one batch interval (1 s) after the first span.
	beMetWait = 10 * time.Second
	// bePushTimeout is --push.timeout in the Pushgateway black-hole run.
	bePushTimeout = 2 * time.Second
)

func init() {
	chaosChildren["backend-emit"] = backendEmit
}

// backendEmit is the fake CLI: args are STAMP RATE PREFIX [BULK]. It
// copies the stream file PREFIX to stdout, waits for the test's go-ahead (a
// line or EOF on stdin), copies BULK if given (at RATE bytes/s, 0: as fast
// as the pipe takes it), writes the time it exits (Unix ns) to STAMP and
// exits with backendStatus.
func backendEmit(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "backend-emit: want STAMP RATE PREFIX [BULK]")
		return 2
	}
	rate, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || rate < 0 {
		fmt.Fprintln(os.Stderr, "backend-emit: bad RATE", args[1])
		return 2
	}
	copyFile := func(path string, rate int64) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if rate == 0 {
			_, err = io.Copy(os.Stdout, f)
			return err
		}
		return bePacedCopy(os.Stdout, f, rate)
	}
	if err := copyFile(args[2], 0); err != nil {
		fmt.Fprintln(os.Stderr, "backend-emit:", err)
		return 1
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil && err != io.EOF {
		fmt.Fprintln(os.Stderr, "backend-emit:", err)
		return 1
	}
	if len(args) > 3 {
		if err := copyFile(args[3], rate); err != nil {
			fmt.Fprintln(os.Stderr, "backend-emit:", err)
			return 1
		}
	}
	if err := os.WriteFile(args[0], []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "backend-emit:", err)
		return 1
	}
	return backendStatus
}

// bePacedCopy copies r to w in rate/100-byte writes, one per 10 ms tick: a
// slow writer, not a synchronisation. Late ticks are not made up for (the
// ticker keeps one and drops the rest), so the rate is a ceiling and a
// descheduled child never catches up in a burst.
func bePacedCopy(w io.Writer, r io.Reader, rate int64) error {
	const tick = 10 * time.Millisecond
	buf := make([]byte, max(rate/int64(time.Second/tick), 1))
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		<-tk.C
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// backendStream is a generated stream file and what a correct wrapper must
// make of it, from simulate's ground truth.
type backendStream struct {
	path   string
	size   int64
	runs   map[string]float64 // cbc_workflow_runs_total by workflow/status
	tasks  map[string]float64 // cbc_tasks_total by task_type/status
	agents map[string]float64 // cbc_workflow_agents_total by workflow/state
	spans  int                // spans: 1 + phases + agents per workflow, 1 per task
}

func genBackendStream(t *testing.T, dir string, turns, noise int, seed int64) backendStream {
	t.Helper()
	var in strings.Builder
	in.WriteString(`{"type":"control_request","request_id":"init","request":{"subtype":"initialize","hooks":{},"capabilities":{},"hasPrompt":true}}` + "\n")
	for i := range turns {
		b, err := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": fmt.Sprintf("turn %d", i)}, "session_id": ""})
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
		in.WriteByte('\n')
	}
	st := backendStream{
		path: filepath.Join(dir, fmt.Sprintf("stream-%d-%d-%d.ndjson", turns, noise, seed)),
		runs: map[string]float64{}, tasks: map[string]float64{}, agents: map[string]float64{},
	}
	f, err := os.Create(st.path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var expect bytes.Buffer
	cfg := simulate.Config{Scenario: simulate.ScenarioMixed, Speed: 0, Epoch: 1_767_225_600_000, Seed: seed, Noise: noise, Expect: &expect}
	if err := simulate.Run(context.Background(), cfg, strings.NewReader(in.String()), w); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Written back now, not by the kernel's flusher up to 30 s later
	// (vm.dirty_expire_centisecs) in the middle of the timed runs: one
	// cause of a slow phase less (not shown to be the one seen).
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(st.path)
	if err != nil {
		t.Fatal(err)
	}
	st.size = fi.Size()
	dec := json.NewDecoder(&expect)
	for {
		var r simulate.ExpectedRun
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch r.Kind {
		case simulate.KindWorkflow:
			st.runs[r.Workflow+"/"+r.Status]++
			for _, a := range r.Agents {
				st.agents[r.Workflow+"/"+a.State]++
			}
			st.spans += 1 + len(r.Phases) + len(r.Agents)
		default:
			st.tasks[r.TaskType+"/"+r.Status]++
			st.spans++
		}
	}
	if len(st.runs) == 0 {
		t.Fatal("generated stream has no workflow")
	}
	return st
}

// beCombine is what a correct wrapper makes of a then b (distinct seeds:
// distinct sessions and tasks).
func beCombine(a, b backendStream) backendStream {
	out := backendStream{size: a.size + b.size, spans: a.spans + b.spans,
		runs: map[string]float64{}, tasks: map[string]float64{}, agents: map[string]float64{}}
	for _, s := range []backendStream{a, b} {
		for k, v := range s.runs {
			out.runs[k] += v
		}
		for k, v := range s.tasks {
			out.tasks[k] += v
		}
		for k, v := range s.agents {
			out.agents[k] += v
		}
	}
	return out
}

// beSpanReceiver is an OTLP/gRPC trace receiver that counts distinct spans
// (trace id + span id: an export retried after a lost answer counts once),
// taking delay per request.
type beSpanReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	delay   time.Duration
	started atomic.Int64 // requests begun, answered or not

	mu       sync.Mutex
	seen     map[string]struct{}
	requests int
}

func (r *beSpanReceiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.started.Add(1)
	if r.delay > 0 {
		tm := time.NewTimer(r.delay)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.seen[string(sp.GetTraceId())+string(sp.GetSpanId())] = struct{}{}
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// reset forgets the spans seen: every run of a stream has the same ids.
func (r *beSpanReceiver) reset() {
	r.mu.Lock()
	r.seen = map[string]struct{}{}
	r.requests = 0
	r.mu.Unlock()
}

func (r *beSpanReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// beGateMode is what a beGateListener does with a new connection.
type beGateMode int

const (
	beGateRefuse    beGateMode = iota // accept and close at once: the server is down
	beGateBlackhole                   // accept and hold: never read, never answer
	beGateServe                       // hand it to the gRPC server
)

// beGateListener puts a backend fault between the kernel and a gRPC server.
// Switching mode closes every connection open so far, as a collector that
// restarts or goes away would.
type beGateListener struct {
	net.Listener
	mu       sync.Mutex
	mode     beGateMode
	conns    []net.Conn
	turned   atomic.Int64 // connections refused or held
	accepted atomic.Int64 // connections, whatever became of them
}

func (g *beGateListener) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g.accepted.Add(1)
		g.mu.Lock()
		mode := g.mode
		if mode != beGateRefuse {
			g.conns = append(g.conns, c)
		}
		g.mu.Unlock()
		if mode == beGateServe {
			return c, nil
		}
		if mode == beGateRefuse {
			c.Close()
		}
		g.turned.Add(1)
	}
}

func (g *beGateListener) set(m beGateMode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = m
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// beStartReceiver serves rcv on 127.0.0.1 behind a gate in mode m and
// returns the gate and the endpoint URL.
func beStartReceiver(t *testing.T, rcv *beSpanReceiver, m beGateMode) (*beGateListener, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv.reset()
	g := &beGateListener{Listener: l, mode: m}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, rcv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(g)
	}()
	t.Cleanup(func() {
		g.set(beGateRefuse) // free the held connections, or Stop waits on them
		srv.Stop()
		<-done
	})
	return g, "http://" + l.Addr().String()
}

// beClosedAddr is a 127.0.0.1 port nobody listens on: it was free a moment
// ago, and another process binding that very port during the test is
// unlikely enough.
func beClosedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// beWrapperRun is what one run of the wrapper showed.
type beWrapperRun struct {
	passthrough time.Duration // start → the stream's last byte read from the wrapper's stdout
	exitLag     time.Duration // the child's exit → the wrapper's
	cpu         time.Duration // user + system time of the wrapper and its child
	faultMet    bool          // the exporter met the fault before the bulk was let through
	wall        time.Duration // the whole run: start → the wrapper's exit
	held        time.Duration // the bulk held back until the fault was met
	code        int
	bytes       int64
	stderr      string
	metrics     map[string]*dto.MetricFamily // nil when the file could not be read
	spans       int                          // distinct spans received, -1 without a receiver
}

// beRunOpts is one run of the wrapper.
type beRunOpts struct {
	prefix backendStream
	bulk   *backendStream // nil: the prefix alone
	rate   int64          // the bulk's write rate, bytes/s; 0: pipe speed
	flags  []string
	rcv    *beSpanReceiver // nil: no receiver of ours to count spans
	// release, if set, is called once the prefix is through; the child
	// waits for it to return before the bulk.
	release func()
	// metricsFile, if set, is the --metrics-file path (default: one in a
	// temporary directory).
	metricsFile string
	// pinned: the wrapper (and so its child) runs on CPU cpu alone.
	pinned bool
	cpu    int
}

// beRunWrapper runs the wrapper with o.flags over the prefix then, if
// given, the bulk; passthrough is timed over the bulk alone.
func beRunWrapper(t *testing.T, o beRunOpts) beWrapperRun {
	t.Helper()
	dir := t.TempDir()
	stamp := filepath.Join(dir, "child-exit")
	mfile := o.metricsFile
	if mfile == "" {
		mfile = filepath.Join(dir, "metrics.prom")
	}
	args := []string{"run", "--web.listen-address=", "--log.level=warn", "--metrics-file=" + mfile}
	args = append(args, o.flags...)
	args = append(args, "--", testExe, stamp, strconv.FormatInt(o.rate, 10), o.prefix.path)
	total := o.prefix.size
	if o.bulk != nil {
		args = append(args, o.bulk.path)
		total += o.bulk.size
	}
	cmd := exec.Command(wrapperBin, args...)
	cmd.Env = backendEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if o.rcv != nil {
		o.rcv.reset()
	}
	cpu := -1
	if o.pinned {
		cpu = o.cpu
	}
	began := time.Now()
	if err := beStartOn(cmd, cpu); err != nil {
		t.Fatal(err)
	}
	var r beWrapperRun
	var start time.Time
	buf := make([]byte, 1<<20)
	for {
		n, err := stdout.Read(buf)
		r.bytes += int64(n)
		if start.IsZero() && r.bytes >= o.prefix.size {
			if o.release != nil {
				held := time.Now()
				o.release()
				r.held = time.Since(held)
			}
			start = time.Now()
			stdin.Close() // the go-ahead: EOF
		}
		if r.passthrough == 0 && r.bytes >= total {
			r.passthrough = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	if start.IsZero() {
		stdin.Close()
	}
	werr := cmd.Wait()
	exited := time.Now()
	r.wall = exited.Sub(began)
	r.stderr = stderr.String()
	r.code = cmd.ProcessState.ExitCode()
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		t.Fatalf("wrapper: %v\n%s", werr, r.stderr)
	}
	if b, err := os.ReadFile(stamp); err == nil {
		ns, _ := strconv.ParseInt(string(b), 10, 64)
		r.exitLag = exited.Sub(time.Unix(0, ns))
	} else {
		t.Errorf("child left no exit stamp: %v (wrapper exit code %d)\nwrapper stderr:\n%s", err, r.code, r.stderr)
		r.exitLag = -1
	}
	r.metrics, err = beReadMetricsFile(mfile)
	if err != nil {
		t.Errorf("metrics file: %v\nwrapper stderr:\n%s", err, r.stderr)
	}
	r.spans = -1
	if o.rcv != nil {
		r.spans = o.rcv.count()
	}
	return r
}

// backendEnv is the fake child's environment without the OTEL_* variables
// of whoever runs the suite: only the flags say where telemetry goes.
func backendEnv() []string {
	var env []string
	for _, kv := range childEnv("backend-emit") {
		if strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "TRACEPARENT=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func beReadMetricsFile(path string) (map[string]*dto.MetricFamily, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(f)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return mfs, nil
}

// beSumBy sums the samples of family name by the values of labels joined
// with "/"; counters, gauges and untyped alike.
func beSumBy(mfs map[string]*dto.MetricFamily, name string, labels ...string) map[string]float64 {
	out := map[string]float64{}
	mf := mfs[name]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		var key []string
		for _, l := range labels {
			v := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == l {
					v = lp.GetValue()
				}
			}
			key = append(key, v)
		}
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		out[strings.Join(key, "/")] += v
	}
	return out
}

// beScalar is the value of a family without labels (0 when absent).
func beScalar(mfs map[string]*dto.MetricFamily, name string) float64 {
	return beSumBy(mfs, name)[""]
}

// beMetricsExact compares the run's metrics with the stream's ground truth
// and returns "" when they match exactly, else what differs.
func beMetricsExact(st backendStream, mfs map[string]*dto.MetricFamily) string {
	if mfs == nil {
		return "no metrics file"
	}
	var diffs []string
	for _, c := range []struct {
		name   string
		labels []string
		want   map[string]float64
	}{
		{"cbc_workflow_runs_total", []string{"workflow", "status"}, st.runs},
		{"cbc_workflow_runs_started_total", []string{"workflow"}, beStartedOf(st.runs)},
		{"cbc_tasks_total", []string{"task_type", "status"}, st.tasks},
		{"cbc_workflow_agents_total", []string{"workflow", "state"}, st.agents},
	} {
		got := beSumBy(mfs, c.name, c.labels...)
		if !beMapsEqual(got, c.want) {
			diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", c.name, got, c.want))
		}
	}
	return strings.Join(diffs, "; ")
}

func beStartedOf(runs map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range runs {
		wf, _, _ := strings.Cut(k, "/")
		out[wf] += v
	}
	return out
}

func beMapsEqual(a, b map[string]float64) bool {
	for k, v := range a {
		if v != 0 && b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// backendCase is one backend fault under test.
type backendCase struct {
	name     string
	baseline bool // no backend: the reference of the others
	flags    []string
	rcv      *beSpanReceiver // nil: no OTLP receiver of ours
	otlp     bool            // spans are exported (and must be delivered or counted)
	push     bool            // a Pushgateway that is down: its failure must be logged
	// allSpans: the backend is merely slow, so every span must arrive.
	allSpans bool
	// noSpans: nothing can arrive (closed port, black hole), so every
	// span must be counted as dropped.
	noSpans bool
	// met reports that the exporter has met the fault; the bulk of the
	// stream is held back until it does, so that the bulk is written with
	// the fault active. nil: nothing to wait for.
	met   func() bool
	blast []beWrapperRun
	paced []beWrapperRun
	// confirmed counts the extra (reference, case) pairs run to confirm a
	// ratio under the bound.
	confirmed int
	// refExtra are the reference runs of this case's confirming pairs: a
	// case is judged against the rounds' reference runs plus its own, so
	// both sides of its ratio are a best of the same number of runs (a
	// reference best taken over every case's extra pairs would be biased
	// low).
	refExtra []beWrapperRun
}

// TestBackendFaults is issue #10 item 2: OTLP endpoint refusing,
// black-holing, slow, flapping, and a Pushgateway that is down, each
// against the no-backend run of the same stream, in blast runs (the
// throughput) then paced runs (exactness and spans).
func TestBackendFaults(t *testing.T) {
	// A small prefix of workflows whose spans meet the fault, then the
	// bulk: about 384 MiB at pipe speed (blast, timed) or 32 MiB at
	// backendPacedRate (paced). The blast prefix ends a whole export batch
	// of spans, so that the first export starts at once rather than a
	// batch interval (1 s) later: that wait was a third of every blast
	// run's time, and the blast runs count no spans.
	dir := t.TempDir()
	prefix := genBackendStream(t, dir, 8, 4<<10, 11)
	blastPrefix := genBackendStream(t, dir, backendBlastPrefixTurns, 4<<10, 12)
	if blastPrefix.spans < egress.DefaultBatchSize {
		t.Fatalf("blast prefix: %d spans, fewer than a batch (%d)", blastPrefix.spans, egress.DefaultBatchSize)
	}
	bulk := genBackendStream(t, dir, backendTurns, backendNoise, 10)
	pacedBulk := genBackendStream(t, dir, backendPacedTurns, backendPacedNoise, 14)
	blastSt := beCombine(blastPrefix, bulk)
	pacedSt := beCombine(prefix, pacedBulk)
	t.Logf("blast stream: %d + %d bytes, %d spans expected; paced: %d + %d bytes at %d MiB/s, %d spans expected",
		blastPrefix.size, bulk.size, blastSt.spans, prefix.size, pacedBulk.size, backendPacedRate>>20, pacedSt.spans)

	okRcv := &beSpanReceiver{}
	_, okURL := beStartReceiver(t, okRcv, beGateServe)
	refuseRcv := &beSpanReceiver{}
	refuseGate, refuseURL := beStartReceiver(t, refuseRcv, beGateRefuse)

	blackRcv := &beSpanReceiver{}
	blackGate, blackURL := beStartReceiver(t, blackRcv, beGateBlackhole)
	slowRcv := &beSpanReceiver{delay: beSlowDelay}
	_, slowURL := beStartReceiver(t, slowRcv, beGateServe)
	flapRcv := &beSpanReceiver{}
	flapGate, flapURL := beStartReceiver(t, flapRcv, beGateServe)
	stopFlap := make(chan struct{})
	flapDone := make(chan struct{})
	go func() {
		// The fault's own schedule, not a synchronisation: up, down, up...
		defer close(flapDone)
		tk := time.NewTicker(beFlapPeriod)
		defer tk.Stop()
		up := true
		for {
			select {
			case <-tk.C:
				up = !up
				if up {
					flapGate.set(beGateServe)
				} else {
					flapGate.set(beGateRefuse)
				}
			case <-stopFlap:
				return
			}
		}
	}()
	defer func() { close(stopFlap); <-flapDone }()

	cases := []*backendCase{
		// The reference: no OTLP, no push. It writes the metrics file like
		// the others (at exit, after the stream), so that it is also the
		// control of exactness; the pipeline and the Metrics sink run the
		// same with or without outputs.
		{name: "no backend", baseline: true},
		// A healthy receiver: the cost of exporting itself, the control of
		// the faults that deliver some spans (slow, flapping).
		{name: "otlp healthy (control)", flags: []string{"--otlp.endpoint=" + okURL}, rcv: okRcv, otlp: true, allSpans: true,
			met: func() bool { return okRcv.started.Load() > 0 }},
		// Refusing: every connection closed as soon as it is accepted, so
		// that the test sees the exporter meet the fault (TestBackendOneRun
		// has the closed port).
		{name: "otlp refusing", flags: []string{"--otlp.endpoint=" + refuseURL}, rcv: refuseRcv, otlp: true, noSpans: true,
			met: func() bool { return refuseGate.turned.Load() > 0 }},
		{name: "otlp black hole", flags: []string{"--otlp.endpoint=" + blackURL}, rcv: blackRcv, otlp: true, noSpans: true,
			met: func() bool { return blackGate.turned.Load() > 0 }},
		// The HTTP exporter has its own client, timeouts and retries.
		{name: "otlp/http black hole", flags: []string{"--otlp.endpoint=" + blackURL, "--otlp.protocol=http/protobuf"}, rcv: blackRcv, otlp: true, noSpans: true,
			met: func() bool { return blackGate.turned.Load() > 0 }},
		{name: "otlp slow (1 s/request)", flags: []string{"--otlp.endpoint=" + slowURL}, rcv: slowRcv, otlp: true, allSpans: true,
			met: func() bool { return slowRcv.started.Load() > 0 }},
		{name: "otlp flapping", flags: []string{"--otlp.endpoint=" + flapURL}, rcv: flapRcv, otlp: true,
			met: func() bool { return flapGate.accepted.Load() > 0 }},
		// The push is made at exit: nothing to meet during the stream.
		{name: "pushgateway down", flags: []string{"--push.gateway=http://" + beClosedAddr(t)}, push: true},
	}
	// CHAOS_BACKEND_CASES (a regexp) keeps only the matching cases beside
	// the reference, CHAOS_BACKEND_ROUNDS and CHAOS_BACKEND_PACED_ROUNDS
	// set the rounds: to look closer at one fault.
	if re := os.Getenv("CHAOS_BACKEND_CASES"); re != "" {
		keep, err := regexp.Compile(re)
		if err != nil {
			t.Fatalf("CHAOS_BACKEND_CASES: %v", err)
		}
		cases = slices.DeleteFunc(cases, func(c *backendCase) bool { return !c.baseline && !keep.MatchString(c.name) })
	}
	rounds := beEnvRounds(t, "CHAOS_BACKEND_ROUNDS", backendRounds)
	place := bePin(t)
	t.Logf("placement of the blast runs: %s", place.note)
	pacedRounds := beEnvRounds(t, "CHAOS_BACKEND_PACED_ROUNDS", backendPacedRounds)

	// lastRef is the passthrough of the latest blast run of the reference.
	var lastRef time.Duration
	// flush is --traces.flush-timeout, given to every case alike.
	run := func(c *backendCase, prefix, bulk *backendStream, rate int64, flush time.Duration) beWrapperRun {
		var release func()
		met := false
		if c.met != nil {
			// Counters from here on: the gates and receivers serve every
			// run.
			for _, g := range []*beGateListener{refuseGate, blackGate, flapGate} {
				g.turned.Store(0)
				g.accepted.Store(0)
			}
			slowRcv.started.Store(0)
			okRcv.started.Store(0)
			release = func() { met = bePollUntil(beMetWait, c.met) }
		}
		r := beRunWrapper(t, beRunOpts{prefix: *prefix, bulk: bulk, rate: rate,
			flags: append(slices.Clone(c.flags), "--traces.flush-timeout="+flush.String()), rcv: c.rcv, release: release,
			pinned: place.wrapperCPU >= 0, cpu: place.wrapperCPU})
		r.faultMet = met
		if c.baseline && prefix == &blastPrefix && rate == 0 {
			lastRef = r.passthrough
		}
		return r
	}
	for round := range rounds {
		// Rotate the order so that no case always runs first or after the
		// slowest one.
		for i := range cases {
			c := cases[(i+round)%len(cases)]
			r := run(c, &blastPrefix, &bulk, 0, backendBlastFlush)
			t.Logf("blast round %d %s: passthrough %s, cpu %s, exit lag %s, tap dropped %.0f bytes; run %s, held %s, exit code %d",
				round, c.name, beSecs(r.passthrough), beSecs(r.cpu), beSecs(r.exitLag), beScalar(r.metrics, "cbc_otel_tap_dropped_bytes_total"), beSecs(r.wall), beSecs(r.held), r.code)
			c.blast = append(c.blast, r)
		}
	}
	// A throughput ratio under the bound is confirmed before it counts:
	// on a small shared machine a best of four can still be four unlucky
	// runs. Pairs (reference, case) run again, up to backendConfirmRounds
	// and alternating which side runs first, and join both sides' samples
	// (the reference's only for this case); a fault that really costs
	// throughput stays under the bound however many runs it gets.
	refOf := func(c *backendCase) []beWrapperRun { return append(slices.Clone(cases[0].blast), c.refExtra...) }
	pass := func(runs []beWrapperRun) []time.Duration {
		return beDurations(runs, func(r beWrapperRun) time.Duration { return r.passthrough })
	}
	// pair runs the reference and then c, its child's bulk written at
	// rate() bytes/s (0: pipe speed), or the other way round for odd i:
	// neither side always runs first.
	pair := func(i int, c *backendCase, rate func() int64) (ref, r beWrapperRun) {
		if i%2 == 0 {
			ref = run(cases[0], &blastPrefix, &bulk, 0, backendBlastFlush)
			r = run(c, &blastPrefix, &bulk, rate(), backendBlastFlush)
		} else {
			r = run(c, &blastPrefix, &bulk, rate(), backendBlastFlush)
			ref = run(cases[0], &blastPrefix, &bulk, 0, backendBlastFlush)
		}
		return ref, r
	}
	pipeSpeed := func() int64 { return 0 }
	for _, c := range cases[1:] {
		for extra := 0; extra < backendConfirmRounds && beSlowerPOf(pass(refOf(c)), pass(c.blast)) < backendConfirmP; extra++ {
			ref, r := pair(extra, c, pipeSpeed)
			t.Logf("confirming %s, extra pair %d: reference %s, case %s", c.name, extra, beSecs(ref.passthrough), beSecs(r.passthrough))
			c.refExtra = append(c.refExtra, ref)
			c.blast = append(c.blast, r)
			c.confirmed++
		}
	}
	// The positive control: the reference again, its child paced at half
	// the throughput of the latest reference run, must breach. It shows
	// that the verdict can fail, on this machine's noise, for a fault that
	// costs half the throughput (one that blocks the pipe costs more).
	//
	// The pace follows the machine, as a real fault's cost would: a fixed
	// pace (half the rounds' best) lost the control in a clean CI run
	// whose host turned 2-3x slower for the whole control, so that the
	// reference itself fell below half its best speed (control 1.16x
	// faster, U 26/81).
	//
	// It is judged against reference runs interleaved with its own, as a
	// case is in the rounds above, not against the rounds' reference runs
	// made a minute earlier: this machine has slow phases of several
	// seconds (runs at 2-3x their time, CPU time up by half: the host's
	// other tenants). One that fell on the rounds' reference runs alone
	// lifted p to 0.041 in a clean CI run, and to 0.029 even after four
	// confirming pairs here; interleaved, a phase slows both sides alike.
	// It gets confirming pairs while p >= backendBreachP, up to
	// backendControlConfirmRounds.
	var pace int64
	ctlRate := func() int64 {
		pace = int64(float64(bulk.size) / lastRef.Seconds() / 2)
		return pace
	}
	var ctl, ctlRef []beWrapperRun
	ctlPair := func(i int) {
		ref, r := pair(i, cases[0], ctlRate)
		t.Logf("positive control, pair %d: reference %s, control %s (paced at %d MiB/s)", i, beSecs(ref.passthrough), beSecs(r.passthrough), pace>>20)
		ctlRef = append(ctlRef, ref)
		ctl = append(ctl, r)
	}
	for i := range backendControlRounds {
		ctlPair(i)
	}
	ctlPairs := 0
	for ; ctlPairs < backendControlConfirmRounds && beSlowerPOf(pass(ctlRef), pass(ctl)) >= backendBreachP; ctlPairs++ {
		ctlPair(backendControlRounds + ctlPairs)
	}
	ctlRefPass, ctlPass := pass(ctlRef), pass(ctl)
	ctlU, ctlP := beSlowerP(ctlRefPass, ctlPass, backendMinRatio)
	record(t, SecBackend, "throughput verdict's power: the reference's child at half the latest reference run's speed (positive control)",
		fmt.Sprintf("%.3f best of %d (median %.3f; U %.1f/%d, p %.4f; %d confirming pair(s) run)", ctlRefPass[0].Seconds()/ctlPass[0].Seconds(), len(ctl),
			beMedian(ctlRefPass).Seconds()/beMedian(ctlPass).Seconds(), ctlU, len(ctl)*len(ctlRefPass), ctlP, ctlPairs),
		fmt.Sprintf("a breach: p < %.2g", backendBreachP), ctlP < backendBreachP)

	for round := range pacedRounds {
		for i := range cases {
			c := cases[(i+round)%len(cases)]
			r := run(c, &prefix, &pacedBulk, backendPacedRate, backendFlush)
			t.Logf("paced round %d %s: bulk in %s, exit lag %s, spans received %d; run %s, held %s", round, c.name, beSecs(r.passthrough), beSecs(r.exitLag), r.spans, beSecs(r.wall), beSecs(r.held))
			c.paced = append(c.paced, r)
		}
	}

	for _, c := range cases {
		ref := refOf(c)
		basePass := beDurations(ref, func(r beWrapperRun) time.Duration { return r.passthrough })
		baseCPU := beDurations(ref, func(r beWrapperRun) time.Duration { return r.cpu })
		checkBackendBlast(t, blastSt, c, basePass, baseCPU, place.note)
	}
	for _, c := range cases {
		checkBackendPaced(t, pacedSt, c)
	}
}

// beEnvRounds is the positive number in the environment variable name, or
// def when it is unset.
func beEnvRounds(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s %q: want a positive number", name, v)
	}
	return n
}

func beDurations(runs []beWrapperRun, f func(beWrapperRun) time.Duration) []time.Duration {
	var d []time.Duration
	for _, r := range runs {
		d = append(d, f(r))
	}
	slices.Sort(d)
	return d
}

func beMedian(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

func beSecs(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

// beSlowerPOf is the p-value that the case's runs c are slower than
// backendMinRatio allows against the reference's runs ref.
func beSlowerPOf(ref, c []time.Duration) float64 {
	_, p := beSlowerP(ref, c, backendMinRatio)
	return p
}

// checkBackendBlast records the rows of the blast runs: throughput, tap
// drops counted, exit and status.
func checkBackendBlast(t *testing.T, st backendStream, c *backendCase, basePass, baseCPU []time.Duration, placement string) {
	t.Helper()
	n := len(c.blast)
	pass := beDurations(c.blast, func(r beWrapperRun) time.Duration { return r.passthrough })

	// (a) Throughput against the no-telemetry run: the best of N (other
	// tenants only ever add time, so the fastest run of each is the least
	// disturbed) and the median are shown; the verdict is the rank test's
	// (see backendMinRatio), which weighs every run. CPU time (wrapper and
	// child) is shown too: it tells contention from a cost of the fault
	// (it includes the final flush, though).
	cpu := beDurations(c.blast, func(r beWrapperRun) time.Duration { return r.cpu })
	if !c.baseline {
		best := basePass[0].Seconds() / pass[0].Seconds()
		med := beMedian(basePass).Seconds() / beMedian(pass).Seconds()
		u, p := beSlowerP(basePass, pass, backendMinRatio)
		bound := fmt.Sprintf(">= %.2f: breach when slower than that with p < %.2g (one-sided Mann-Whitney)", backendMinRatio, backendBreachP)
		metText, metOK := beFaultMet(c, c.blast)
		if c.confirmed > 0 {
			metText += fmt.Sprintf("; %d confirming pair(s) run", c.confirmed)
		}
		if c.met != nil {
			bound += ", fault met first in every run"
		}
		record(t, SecBackend, "throughput vs no backend, "+c.name,
			fmt.Sprintf("%.3f best of %d (%s vs %s; median %.3f; U %.1f/%d, p %.3f), %d MiB; cpu median %s vs %s%s",
				best, n, beSecs(pass[0]), beSecs(basePass[0]), med, u, n*len(basePass), p, st.size>>20, beSecs(beMedian(cpu)), beSecs(beMedian(baseCPU)), metText),
			bound, p >= backendBreachP && metOK)
	} else {
		record(t, SecBackend, "passthrough, no backend (reference)",
			fmt.Sprintf("%.0f MiB/s best of %d (%s; median %s; worst %s); cpu median %s; %s", float64(st.size)/(1<<20)/pass[0].Seconds(), n, beSecs(pass[0]), beSecs(beMedian(pass)), beSecs(pass[len(pass)-1]), beSecs(beMedian(cpu)), placement),
			"reference", true)
	}

	// (a') At pipe speed the tap may drop (by design: --tap-queue), but
	// never silently: a run whose metrics are inexact must have counted
	// its drops in cbc_otel_tap_dropped_bytes_total.
	exact, tapDrops, inexactNoTap, unreadable := 0, 0, 0, 0
	for _, r := range c.blast {
		if r.metrics == nil {
			unreadable++
			continue
		}
		tap := beScalar(r.metrics, "cbc_otel_tap_dropped_bytes_total") > 0
		if tap {
			tapDrops++
		}
		if beMetricsExact(st, r.metrics) == "" {
			exact++
		} else if !tap {
			inexactNoTap++
		}
	}
	val := fmt.Sprintf("tap dropped (counted) in %d/%d runs; metrics exact in %d/%d; inexact with no counted drop: %d",
		tapDrops, n, exact, n, inexactNoTap)
	if unreadable > 0 {
		val += fmt.Sprintf("; no metrics file in %d", unreadable)
	}
	record(t, SecBackend, "blast: tap drops counted, "+c.name, val,
		"inexact with no counted drop = 0, metrics file in every run", inexactNoTap == 0 && unreadable == 0)

	beCheckExitStatus(t, "blast", st, c, c.blast, backendBlastFlush)
}

// beFaultMet says in how many runs the exporter met the fault before the
// bulk, and whether it did in all of them (always true without a fault to
// meet).
func beFaultMet(c *backendCase, runs []beWrapperRun) (string, bool) {
	if c.met == nil {
		return "", true
	}
	met := 0
	for _, r := range runs {
		if r.faultMet {
			met++
		}
	}
	return fmt.Sprintf("; fault met before the bulk in %d/%d", met, len(runs)), met == len(runs)
}

// beCheckExitStatus records (b), the exit after the child against the
// flush deadline (--traces.flush-timeout flush), and (c), the child's
// status and bytes, for runs of kind.
func beCheckExitStatus(t *testing.T, kind string, st backendStream, c *backendCase, runs []beWrapperRun, flush time.Duration) {
	t.Helper()
	n := len(runs)
	lag := beDurations(runs, func(r beWrapperRun) time.Duration { return r.exitLag })
	bound := backendExitAllowance
	boundText := fmt.Sprintf("<= %s (no backend to flush)", beSecs(bound))
	if !c.baseline {
		bound += flush
		boundText = fmt.Sprintf("<= %s (--traces.flush-timeout %s + %s)", beSecs(bound), flush, backendExitAllowance)
	}
	worst := lag[len(lag)-1]
	record(t, SecBackend, kind+": exit after child, "+c.name,
		fmt.Sprintf("max %s, median %s over %d", beSecs(worst), beSecs(beMedian(lag)), n),
		boundText, lag[0] >= 0 && worst <= bound)

	kept, bytesOK := 0, 0
	for _, r := range runs {
		if r.code == backendStatus {
			kept++
		}
		if r.bytes == st.size {
			bytesOK++
		}
	}
	record(t, SecBackend, kind+": child status kept, "+c.name,
		fmt.Sprintf("%d in %d/%d runs; all %d bytes out in %d/%d", backendStatus, kept, n, st.size, bytesOK, n),
		fmt.Sprintf("%d and every byte, in every run", backendStatus), kept == n && bytesOK == n)
}

// checkBackendPaced records the rows of the paced runs: exit, status,
// exact metrics with no tap drop, and spans delivered or counted (or the
// push failure logged).
func checkBackendPaced(t *testing.T, st backendStream, c *backendCase) {
	t.Helper()
	n := len(c.paced)
	beCheckExitStatus(t, "paced", st, c, c.paced, backendFlush)

	// (d) At a real CLI's rate nothing is lost: the metrics file is
	// exact and the tap dropped nothing.
	exact, tapDrops, firstDiff := 0, 0, ""
	var slowest time.Duration
	for _, r := range c.paced {
		slowest = max(slowest, r.passthrough)
		if beScalar(r.metrics, "cbc_otel_tap_dropped_bytes_total") > 0 {
			tapDrops++
		}
		d := "no metrics file"
		if r.metrics != nil {
			d = beMetricsExact(st, r.metrics)
		}
		if d == "" {
			exact++
		} else if firstDiff == "" {
			firstDiff = d
		}
	}
	val := fmt.Sprintf("exact in %d/%d runs (%v workflows, %v tasks); tap drops in %d/%d; bulk %d MiB in <= %s (paced at %d MiB/s)",
		exact, n, beSumValues(st.runs), beSumValues(st.tasks), tapDrops, n, (st.size)>>20, beSecs(slowest), backendPacedRate>>20)
	if firstDiff != "" {
		val += "; " + firstDiff
	}
	record(t, SecBackend, "paced: metrics exact, "+c.name, val,
		"every run: runs, started, tasks, agents = ground truth; 0 tap drops", exact == n && tapDrops == 0)

	// (e) Every span is delivered or counted as dropped, none is made up,
	// and a loss is also said on stderr.
	switch {
	case c.otlp:
		ok := true
		var badRun string
		minRecv, maxRecv, minDrop, maxDrop := st.spans, 0, float64(st.spans), 0.0
		minErr, maxErr := -1.0, 0.0
		for _, r := range c.paced {
			dropped := beScalar(r.metrics, "cbc_otel_spans_dropped_total")
			errs := beScalar(r.metrics, "cbc_otel_export_errors_total")
			if minErr < 0 || errs < minErr {
				minErr = errs
			}
			maxErr = max(maxErr, errs)
			recv := max(r.spans, 0)
			minRecv, maxRecv = min(minRecv, recv), max(maxRecv, recv)
			minDrop, maxDrop = min(minDrop, dropped), max(maxDrop, dropped)
			var good bool
			switch {
			case c.allSpans:
				good = recv == st.spans && dropped == 0
			case c.noSpans:
				// Every span lost, in at least one failed export.
				good = recv == 0 && dropped == float64(st.spans) && errs >= 1
			default:
				// Flapping: each span either arrived or was counted. (A
				// batch received whose answer was then lost would be both
				// and breach this: the receiver answers at once, so that
				// window is a few microseconds of the 400 ms period.)
				good = float64(recv)+dropped == float64(st.spans)
			}
			if dropped > 0 && !strings.Contains(r.stderr, "spans dropped") {
				good = false
			}
			if r.metrics == nil {
				good = false
			}
			if !good && badRun == "" {
				badRun = fmt.Sprintf("; a run: received %d, dropped %.0f, export errors %.0f, tap dropped %.0f bytes",
					recv, dropped, errs, beScalar(r.metrics, "cbc_otel_tap_dropped_bytes_total"))
			}
			ok = ok && good
		}
		metText, metOK := beFaultMet(c, c.paced)
		bound := "received + dropped = expected"
		switch {
		case c.allSpans:
			bound = "all received, 0 dropped"
		case c.noSpans:
			bound = "0 received, dropped = expected, export errors >= 1"
		}
		bound += "; drops warned on stderr; fault met first in every run"
		record(t, SecBackend, "paced: spans delivered or counted, "+c.name,
			fmt.Sprintf("%d expected; received %d-%d, cbc_otel_spans_dropped_total %.0f-%.0f, cbc_otel_export_errors_total %.0f-%.0f over %d runs%s%s",
				st.spans, minRecv, maxRecv, minDrop, maxDrop, minErr, maxErr, n, metText, badRun),
			bound, ok && metOK)
	case c.push:
		// A Pushgateway that is down: no counter can carry it (the push
		// is the last thing the process does), so the loss must at least
		// be said on stderr. Blast and paced runs alike.
		all := append(slices.Clone(c.blast), c.paced...)
		said := 0
		for _, r := range all {
			if strings.Contains(r.stderr, "push") && strings.Contains(r.stderr, "flushing metrics") {
				said++
			}
		}
		record(t, SecBackend, "push failure reported, "+c.name,
			fmt.Sprintf("error logged in %d/%d runs (blast and paced; no counter exists)", said, len(all)),
			"logged in every run", said == len(all))
	}
}

func beSumValues(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// TestBackendRecovery is issue #10 item 2 (f): an OTLP backend that
// refuses, or black-holes, the first export and then comes back within the
// exporter's retry window (one export call may take 10 s, retries
// included) receives every span, with nothing counted as dropped. The
// child stays alive until the spans are in, so that it is the retry, not
// the final flush, that delivers them.
func TestBackendRecovery(t *testing.T) {
	st := genBackendStream(t, t.TempDir(), 8, 4<<10, 12)
	for _, tc := range []struct {
		name  string
		first beGateMode
	}{
		{"refusing then up", beGateRefuse},
		{"black hole then up", beGateBlackhole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := &beSpanReceiver{}
			gate, url := beStartReceiver(t, rcv, tc.first)
			var waitedUp, waitedSpans time.Duration
			var failedFirst bool
			var before int
			during := func() {
				// The backend returns once the wrapper has met the fault.
				t0 := time.Now()
				failedFirst = bePollUntil(beRecoverWait, func() bool { return gate.turned.Load() > 0 })
				waitedUp = time.Since(t0)
				gate.set(beGateServe)
				t1 := time.Now()
				bePollUntil(beRecoverWait, func() bool { return rcv.count() >= st.spans })
				waitedSpans = time.Since(t1)
				before = rcv.count()
			}
			// The receiver is reset at start, so the count read in the run
			// is what this run delivered.
			r := beRunWrapper(t, beRunOpts{prefix: st, flags: []string{"--otlp.endpoint=" + url, "--traces.flush-timeout=" + backendFlush.String()}, rcv: rcv, release: during})
			dropped := beScalar(r.metrics, "cbc_otel_spans_dropped_total")
			errs := beScalar(r.metrics, "cbc_otel_export_errors_total")
			record(t, SecBackend, "spans after backend returns, otlp "+tc.name,
				fmt.Sprintf("%d/%d received before the child exited, %d by the wrapper's exit (fault met after %s, spans in %s after the return); dropped %.0f, export errors %.0f; status %d",
					before, st.spans, r.spans, beSecs(waitedUp), beSecs(waitedSpans), dropped, errs, r.code),
				"all received, 0 dropped, fault met first, status kept",
				failedFirst && before == st.spans && r.spans == st.spans && dropped == 0 && r.code == backendStatus)
			if d := beMetricsExact(st, r.metrics); d != "" {
				t.Errorf("metrics not exact: %s", d)
			}
		})
	}
}

// bePollUntil polls cond every 20 ms until it holds or d has passed, and
// reports whether it held.
func bePollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tk.C
	}
}

// TestBackendOneRun holds single runs of faults that cost too much time to
// be repeated: an OTLP endpoint on a closed port (the exporter retries
// until the flush deadline) and a Pushgateway that accepts the connection
// and never answers. The push runs under --push.timeout, after the traces
// flush and after the metrics file is written: the file must be complete
// on disk while the gateway still holds the push.
func TestBackendOneRun(t *testing.T) {
	st := genBackendStream(t, t.TempDir(), 8, 4<<10, 13)
	flush := "--traces.flush-timeout=" + backendFlush.String()
	gate, pushURL := beStartReceiver(t, &beSpanReceiver{}, beGateBlackhole)
	for _, tc := range []struct {
		name  string
		flags []string
		bound time.Duration
		why   string
		otlp  bool
	}{
		{"otlp closed port", []string{"--otlp.endpoint=http://" + beClosedAddr(t), flush}, backendFlush + backendExitAllowance,
			fmt.Sprintf("--traces.flush-timeout %s + %s", backendFlush, backendExitAllowance), true},
		{"pushgateway black hole", []string{"--push.gateway=" + pushURL, "--push.timeout=" + bePushTimeout.String(), flush}, bePushTimeout + backendExitAllowance,
			fmt.Sprintf("--push.timeout %s + %s", bePushTimeout, backendExitAllowance), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mfile := filepath.Join(t.TempDir(), "metrics.prom")
			// For the push: once the gateway holds the connection, read
			// the metrics file as it is on disk at that moment.
			var atPush string
			held := make(chan struct{})
			if !tc.otlp {
				gate.turned.Store(0)
				go func() {
					defer close(held)
					if !bePollUntil(beMetWait+tc.bound, func() bool { return gate.turned.Load() > 0 }) {
						atPush = "the gateway was never reached"
						return
					}
					mfs, err := beReadMetricsFile(mfile)
					if err != nil {
						atPush = "no file while the push was held: " + err.Error()
						return
					}
					atPush = beMetricsExact(st, mfs)
				}()
			} else {
				close(held)
			}
			r := beRunWrapper(t, beRunOpts{prefix: st, flags: tc.flags, metricsFile: mfile})
			<-held
			record(t, SecBackend, "exit after child, "+tc.name,
				fmt.Sprintf("%s; status %d", beSecs(r.exitLag), r.code),
				fmt.Sprintf("<= %s (%s), status %d", beSecs(tc.bound), tc.why, backendStatus),
				r.exitLag >= 0 && r.exitLag <= tc.bound && r.code == backendStatus)
			d := "no metrics file"
			if r.metrics != nil {
				d = beMetricsExact(st, r.metrics)
			}
			record(t, SecBackend, "metrics exact, "+tc.name,
				map[bool]string{true: "exact", false: d}[d == ""], "= ground truth", d == "")
			if tc.otlp {
				dropped := beScalar(r.metrics, "cbc_otel_spans_dropped_total")
				errs := beScalar(r.metrics, "cbc_otel_export_errors_total")
				record(t, SecBackend, "spans delivered or counted, "+tc.name,
					fmt.Sprintf("%d expected; cbc_otel_spans_dropped_total %.0f, cbc_otel_export_errors_total %.0f", st.spans, dropped, errs),
					"dropped = expected, export errors >= 1; drops warned on stderr",
					dropped == float64(st.spans) && errs >= 1 && strings.Contains(r.stderr, "spans dropped"))
				return
			}
			record(t, SecBackend, "metrics file written before the push, "+tc.name,
				map[bool]string{true: "exact on disk while the gateway held the push", false: atPush}[atPush == ""],
				"file exact while the push hangs", atPush == "")
			said := strings.Contains(r.stderr, "flushing metrics") && strings.Contains(r.stderr, "push")
			record(t, SecBackend, "push failure reported, "+tc.name,
				fmt.Sprintf("%s (connections held: %d)", map[bool]string{true: "error logged", false: "nothing logged"}[said], gate.turned.Load()),
				"logged", said && gate.turned.Load() > 0)
		})
	}
}
