package follow

// In-process tests of the serve engine: a fake clock, files in t.TempDir(),
// the cycle the Run loop calls driven by hand, and sinks of the tests' own
// that checkpoint themselves through the ingest interfaces (the engine
// knows no real sink either).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/spool"
)

// tally counts what reached the sinks: runs started, terminal statuses of
// runs and tasks, agents ended, and "orphan" finishes (of runs its stream's
// memo never saw start: a restore that lost the open runs). Its totals are
// its process-wide checkpoint, restored as a base, like the metrics'.
type tally struct {
	base, live map[string]int
	saveErr    error
}

func newTally() *tally { return &tally{base: map[string]int{}, live: map[string]int{}} }

func (tl *tally) Observe(l ingest.Lifecycle) {
	switch l.Kind {
	case ingest.RunStarted:
		tl.live["run started"]++
	case ingest.RunFinished:
		tl.live["run "+l.Run.Status.String()]++
	case ingest.TaskEnded:
		tl.live["task "+l.Run.Status.String()]++
	case ingest.AgentEnded:
		tl.live["agent "+l.Agent.State.String()]++
	case ingest.TurnEnded:
		tl.live["turn"]++
		if l.Turn.Reset {
			tl.live["turn reset"]++
		}
		tl.live["cost µ$"] += int(math.Round(l.Turn.CostUSD * 1e6))
		for _, d := range l.Turn.Delta {
			tl.live["tokens "+d.Model] += int(d.Tokens.Total())
		}
	}
}

// totals are the counts since the first process.
func (tl *tally) totals() map[string]int {
	out := maps.Clone(tl.base)
	for k, v := range tl.live {
		out[k] += v
	}
	return out
}

func (tl *tally) SaveCheckpoint() (json.RawMessage, error) {
	if tl.saveErr != nil {
		return nil, tl.saveErr
	}
	return json.Marshal(tl.totals())
}

func (tl *tally) RestoreCheckpoint(state json.RawMessage) (func(), error) {
	base := map[string]int{}
	if state != nil {
		if err := json.Unmarshal(state, &base); err != nil {
			return nil, fmt.Errorf("tally: %w", err)
		}
	}
	return func() { tl.base = base }, nil
}

// memo is a per-stream sink: the runs of its stream it saw start, saved as
// their positions among the open runs.
type memo struct {
	tl   *tally
	seen map[[2]string]bool
}

func runKeyOf(r *ingest.Run) [2]string { return [2]string{r.TaskID, r.RunID} }

func (m *memo) Observe(l ingest.Lifecycle) {
	switch l.Kind {
	case ingest.RunStarted, ingest.TaskStarted:
		m.seen[runKeyOf(l.Run)] = true
	case ingest.RunFinished, ingest.TaskEnded:
		if !m.seen[runKeyOf(l.Run)] {
			m.tl.live["orphan"]++
		}
	}
}

func (m *memo) SaveStream(open []*ingest.Run) (json.RawMessage, error) {
	var idx []int
	for i, r := range open {
		if m.seen[runKeyOf(r)] {
			idx = append(idx, i)
		}
	}
	if idx == nil {
		return nil, nil
	}
	return json.Marshal(idx)
}

func (m *memo) RestoreStream(state json.RawMessage, open []*ingest.Run) (func(), error) {
	var idx []int
	if state != nil {
		if err := json.Unmarshal(state, &idx); err != nil {
			return nil, fmt.Errorf("memo: %w", err)
		}
	}
	for _, i := range idx {
		if i < 0 || i >= len(open) {
			return nil, fmt.Errorf("memo: run %d of %d", i, len(open))
		}
	}
	return func() {
		for _, i := range idx {
			m.seen[runKeyOf(open[i])] = true
		}
	}, nil
}

// t0 is the fake clock's start: later than any real file time, so that
// only the tests' own Chtimes act as a spool heartbeat.
var t0 = time.Unix(1_900_000_000, 0)

const idle = time.Minute

// rig is one engine process over a followed directory and a state
// directory that outlive it.
type rig struct {
	t     *testing.T
	dir   string
	state string
	now   time.Time
	tl    *tally
	logs  *bytes.Buffer
	e     *Engine
	mod   func(*Options)
}

// newRig makes the directories and starts the first engine; mod adjusts
// the options of every engine the rig starts.
func newRig(t *testing.T, mod func(*Options)) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), state: t.TempDir(), now: t0, mod: mod}
	r.start()
	return r
}

func (r *rig) options() Options {
	return Options{
		Globs:           []string{filepath.Join(r.dir, "*.ndjson"), filepath.Join(r.dir, "*"+spool.DoneSuffix+"*")},
		StateDir:        r.state,
		IdleTimeout:     idle,
		CheckpointEvery: 5 * time.Second,
		NewStream: func() StreamConfig {
			m := &memo{tl: r.tl, seen: map[[2]string]bool{}}
			return StreamConfig{
				Pipeline: ingest.PipelineOptions{Tracker: ingest.TrackerOptions{
					Grace: time.Second, Sinks: []ingest.Sink{r.tl, m}, Stats: new(ingest.Stats)}},
				Checkpointers: map[string]ingest.StreamCheckpointer{"memo": m},
			}
		},
		Checkpointers: map[string]ingest.Checkpointer{"tally": r.tl},
		Registerer:    prometheus.NewRegistry(),
		Logger:        slog.New(slog.NewTextHandler(r.logs, nil)),
		Now:           func() time.Time { return r.now },
	}
}

// start builds a new engine (a new process: new sinks) and restores it.
func (r *rig) start() {
	r.t.Helper()
	r.tl, r.logs = newTally(), new(bytes.Buffer)
	opts := r.options()
	if r.mod != nil {
		r.mod(&opts)
	}
	e, err := New(opts)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := e.Restore(); err != nil {
		r.t.Fatal(err)
	}
	r.e = e
}

// stop ends the engine as SIGTERM does: Run with its context done reads
// what is written and writes a final checkpoint.
func (r *rig) stop() {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.e.Run(ctx); err != nil {
		r.t.Fatal(err)
	}
	if r.e.Ready() {
		r.t.Fatal("ready after Run returned")
	}
	for _, s := range r.e.streams {
		s.f.Close()
	}
}

func (r *rig) cycle()                  { r.e.cycle() }
func (r *rig) advance(d time.Duration) { r.now = r.now.Add(d) }

// step advances the clock and runs one cycle.
func (r *rig) step(d time.Duration) {
	r.advance(d)
	r.cycle()
}

// settle lets every stream go idle and be finalized.
func (r *rig) settle() {
	r.t.Helper()
	r.step(time.Second) // what is new is followed first
	for i := 0; i < 5 && len(r.e.streams) > 0; i++ {
		r.step(idle)
	}
	r.step(2 * time.Second) // grace windows close
	if len(r.e.streams) > 0 {
		r.t.Fatalf("%d streams still followed", len(r.e.streams))
	}
}

func (r *rig) path(name string) string { return filepath.Join(r.dir, name) }

func (r *rig) write(name, data string) {
	r.t.Helper()
	f, err := os.OpenFile(r.path(name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		r.t.Fatal(err)
	}
}

// want checks the totals since the first process.
func (r *rig) want(counts ...any) {
	r.t.Helper()
	want := map[string]int{}
	for i := 0; i+1 < len(counts); i += 2 {
		want[counts[i].(string)] = counts[i+1].(int)
	}
	got := r.tl.totals()
	maps.DeleteFunc(got, func(_ string, v int) bool { return v == 0 })
	if !maps.Equal(got, want) {
		r.t.Fatalf("totals %v, want %v", got, want)
	}
}

func (r *rig) finalized(reason string) float64 {
	return testutil.ToFloat64(r.e.mFinalized.WithLabelValues(reason))
}

func (r *rig) files() []string {
	m, _ := filepath.Glob(filepath.Join(r.dir, "*"))
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	slices.Sort(m)
	return m
}

// Stream-json lines.
func wfStart(task string) string {
	return `{"type":"system","subtype":"task_started","task_id":"` + task + `","task_type":"local_workflow","workflow_name":"wf","session_id":"S"}` + "\n"
}

func agent(task string, idx int, state string) string {
	return fmt.Sprintf(`{"type":"system","subtype":"task_progress","task_id":"%s","workflow_progress":[{"type":"workflow_agent","index":%d,"state":"%s","startedAt":%d,"endedAt":%d}]}`+"\n",
		task, idx, state, t0.UnixMilli(), t0.UnixMilli()+1000)
}

func notify(task, status string) string {
	return `{"type":"system","subtype":"task_notification","task_id":"` + task + `","status":"` + status + `","session_id":"S"}` + "\n"
}

func bashTask(task string) string {
	return `{"type":"system","subtype":"task_started","task_id":"` + task + `","task_type":"local_bash","session_id":"S"}` + "\n"
}

// workflow is a whole workflow run with one agent.
func workflow(task, status string) string {
	return wfStart(task) + agent(task, 1, "done") + notify(task, status)
}

const header = "\x1ecbcspool 1\n"

// Appended lines are processed as they come; a partial line waits for its
// newline, and the offset saved stops before it.
func TestEngineGrowth(t *testing.T) {
	r := newRig(t, nil)
	r.write("s.ndjson", wfStart("w1"))
	r.step(time.Second)
	r.want("run started", 1)
	r.write("s.ndjson", agent("w1", 1, "done")+notify("w1", "completed")+`{"type":"system","subtype":"task_st`)
	r.step(time.Second)
	r.want("run started", 1, "agent done", 1, "run completed", 1)
	s := r.e.streams[slices.Collect(maps.Keys(r.e.streams))[0]]
	if want := int64(len(wfStart("w1") + agent("w1", 1, "done") + notify("w1", "completed"))); s.offset() != want {
		t.Fatalf("offset %d, want %d (the end of the last complete line)", s.offset(), want)
	}
	r.write("s.ndjson", `arted","task_id":"b1","task_type":"local_bash"}`+"\n"+notify("b1", "completed"))
	r.step(time.Second)
	r.want("run started", 1, "agent done", 1, "run completed", 1, "task completed", 1)
	if n := testutil.ToFloat64(r.e.mCkpt); n == 0 {
		t.Fatal("no checkpoint written after runs ended")
	}
}

// A file that shrinks is read again from the start; what was counted
// stays counted once, the partial line read before the truncation is
// dropped, and the first line of the new content is kept.
func TestEngineTruncation(t *testing.T) {
	r := newRig(t, nil)
	r.write("s.ndjson", workflow("w1", "completed")+`{"partial":`)
	r.step(time.Second)
	if err := os.Truncate(r.path("s.ndjson"), 0); err != nil {
		t.Fatal(err)
	}
	// (A task's start: were it dropped, its end would be an unknown task's.)
	r.write("s.ndjson", bashTask("b1")+notify("b1", "failed"))
	r.step(time.Second)
	if n := testutil.ToFloat64(r.e.mTruncated); n != 1 {
		t.Fatalf("%v truncations", n)
	}
	r.settle()
	r.want("run started", 1, "agent done", 1, "run completed", 1, "task failed", 1)
}

// Rotation: the file is renamed (its writer goes on writing to it) and a
// new one takes its name; both streams are read to their ends.
func TestEngineRotation(t *testing.T) {
	r := newRig(t, nil)
	w, err := os.Create(r.path("s.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.WriteString(wfStart("w1"))
	r.step(time.Second)
	if err := os.Rename(r.path("s.ndjson"), r.path("s.ndjson.1")); err != nil {
		t.Fatal(err)
	}
	w.WriteString(agent("w1", 1, "done") + notify("w1", "completed"))
	r.write("s.ndjson", workflow("w2", "completed"))
	r.step(time.Second)
	if len(r.e.streams) != 2 {
		t.Fatalf("%d streams, want the rotated file and the new one", len(r.e.streams))
	}
	r.settle()
	r.want("run started", 2, "agent done", 2, "run completed", 2)
}

// A file deleted while followed is read to its end, then finalized: the
// run it left open is abandoned.
func TestEngineDeletion(t *testing.T) {
	r := newRig(t, nil)
	r.write("s.ndjson", wfStart("w1"))
	r.step(time.Second)
	r.write("s.ndjson", agent("w1", 1, "done"))
	if err := os.Remove(r.path("s.ndjson")); err != nil {
		t.Fatal(err)
	}
	r.step(time.Second) // read to the end
	r.step(time.Second) // nothing more: finalized
	if r.finalized(ReasonDeleted) != 1 || len(r.e.streams) != 0 {
		t.Fatalf("deleted %v, %d streams", r.finalized(ReasonDeleted), len(r.e.streams))
	}
	r.step(2 * time.Second)
	r.want("run started", 1, "agent done", 1, "run abandoned", 1)
	if len(r.e.finished) != 0 {
		t.Fatalf("a deleted file is remembered: %v", r.e.finished)
	}
}

// A plain file, or a spool file never marked complete, is finalized after
// IdleTimeout without growth (or, for the spool file, without a heartbeat
// of its wrapper); both are kept on disk and followed again from where
// they were finalized should they grow.
func TestEngineIdle(t *testing.T) {
	for _, tc := range []struct {
		name, file, head string
	}{
		{"plain file", "s.ndjson", ""},
		{"spool file never marked complete", "1-1-a" + spool.OpenSuffix, header},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.write(tc.file, tc.head+wfStart("w1"))
			r.step(time.Second)
			spoolFile := spool.KindOf(tc.file) == spool.Open
			for range 3 {
				if spoolFile {
					// The wrapper's heartbeat: touched, not written.
					if err := os.Chtimes(r.path(tc.file), r.now, r.now); err != nil {
						t.Fatal(err)
					}
				} else {
					r.write(tc.file, "\n") // growth
				}
				r.step(idle - time.Second)
			}
			if len(r.e.streams) != 1 {
				t.Fatal("finalized while growing or touched")
			}
			r.step(idle)
			if r.finalized(ReasonIdle) != 1 || len(r.e.streams) != 0 {
				t.Fatalf("idle finalized %v, %d streams", r.finalized(ReasonIdle), len(r.e.streams))
			}
			r.step(2 * time.Second)
			r.want("run started", 1, "run abandoned", 1)
			if got := r.files(); !slices.Equal(got, []string{tc.file}) {
				t.Fatalf("files %v, want the idle file kept", got)
			}
			r.step(time.Second) // not read again while it does not grow
			if len(r.e.streams) != 0 {
				t.Fatal("an idle file followed again without growing")
			}
			r.write(tc.file, workflow("w2", "completed"))
			r.step(time.Second)
			r.settle()
			r.want("run started", 2, "agent done", 1, "run abandoned", 1, "run completed", 1)
		})
	}
}

// A spool file renamed to its complete name is finalized once read to its
// end; it is then removed, or kept with Keep (and not read again).
func TestEngineSpoolComplete(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keep     bool
		stateDir bool
	}{
		{"removed once the checkpoint has it", false, true},
		{"removed, no state directory", false, false},
		{"kept", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(o *Options) {
				o.Keep = tc.keep
				if !tc.stateDir {
					o.StateDir = ""
				}
			})
			open := "1-1-a" + spool.OpenSuffix
			done := "1-1-a" + spool.DoneSuffix
			r.write(open, header+wfStart("w1"))
			r.step(time.Second)
			r.write(open, agent("w1", 1, "done")+notify("w1", "stopped"))
			if err := os.Rename(r.path(open), r.path(done)); err != nil {
				t.Fatal(err)
			}
			r.step(time.Second) // read to the end
			r.step(time.Second) // complete
			if r.finalized(ReasonComplete) != 1 || len(r.e.streams) != 0 {
				t.Fatalf("complete %v, %d streams", r.finalized(ReasonComplete), len(r.e.streams))
			}
			want := []string{}
			if tc.keep {
				want = []string{done}
			}
			if got := r.files(); !slices.Equal(got, want) {
				t.Fatalf("files %v, want %v", got, want)
			}
			r.step(2 * time.Second)
			r.step(time.Second)
			r.want("run started", 1, "agent done", 1, "run stopped", 1)
		})
	}
}

// A spool file found complete is followed, processed and finalized at its
// end without waiting for the idle timeout; a header of a newer format is
// read for what this version understands.
func TestEngineSpoolFoundComplete(t *testing.T) {
	r := newRig(t, nil)
	r.write("1-1-a"+spool.DoneSuffix, "\x1ecbcspool 9\n"+workflow("w1", "completed")+"\x1egap stdout 5\n\n")
	r.step(time.Second)
	r.step(time.Second)
	if r.finalized(ReasonComplete) != 1 || !strings.Contains(r.logs.String(), "newer format") {
		t.Fatalf("complete %v; logs:\n%s", r.finalized(ReasonComplete), r.logs)
	}
	if n := testutil.ToFloat64(r.e.mGapRecords); n != 1 {
		t.Fatalf("%v gap records", n)
	}
	r.step(2 * time.Second)
	r.want("run started", 1, "agent done", 1, "run completed", 1)
}

// Over MaxSpoolBytes, complete spool files not yet processed are evicted
// oldest first and counted, the newest is processed; later a processed
// file kept by Keep goes first, without being counted as lost. Files being
// written are never removed.
func TestEngineEviction(t *testing.T) {
	data := header + workflow("w", "completed")
	size := int64(len(data))
	r := newRig(t, func(o *Options) {
		o.Keep = true
		o.MaxSpoolBytes = size * 3 / 2
	})
	r.write("1-1-live"+spool.OpenSuffix, data[:len(header)]) // being written: never evicted
	for i := range 3 {
		r.write(fmt.Sprintf("%d-1-a%s", i+2, spool.DoneSuffix), data)
	}
	r.step(time.Second)
	if n := testutil.ToFloat64(r.e.mEvicted); n != 2 {
		t.Fatalf("%v evicted, want 2", n)
	}
	if n := testutil.ToFloat64(r.e.mEvictedB); n != float64(2*size) {
		t.Fatalf("%v bytes evicted, want %d", n, 2*size)
	}
	r.step(time.Second)
	r.step(2 * time.Second)
	r.want("run started", 1, "agent done", 1, "run completed", 1)
	if got := r.files(); !slices.Equal(got, []string{"1-1-live" + spool.OpenSuffix, "4-1-a" + spool.DoneSuffix}) {
		t.Fatalf("files %v", got)
	}
	r.write("5-1-a"+spool.DoneSuffix, data)
	r.step(time.Second)
	r.step(time.Second)
	r.step(2 * time.Second)
	if n := testutil.ToFloat64(r.e.mEvicted); n != 2 {
		t.Fatalf("%v evicted: the processed file was counted as lost", n)
	}
	if got := r.files(); !slices.Equal(got, []string{"1-1-live" + spool.OpenSuffix, "5-1-a" + spool.DoneSuffix}) {
		t.Fatalf("files %v", got)
	}
	r.want("run started", 2, "agent done", 2, "run completed", 2)
}

// A restart from the checkpoint (SIGTERM, then a new process on the same
// state directory) counts no run twice: the totals are restored, files are
// read on from their offsets, finished files are not read again, and the
// runs open at the stop continue.
func TestEngineRestart(t *testing.T) {
	r := newRig(t, nil)
	r.write("a.ndjson", workflow("w1", "completed")+wfStart("w2")+bashTask("b1"))
	r.write("b.ndjson", workflow("w3", "failed"))
	r.write("1-1-s"+spool.OpenSuffix, header+wfStart("w4"))
	r.step(time.Second)
	r.advance(idle / 2)
	r.write("b.ndjson", "\n")
	r.step(idle / 2) // a.ndjson and the spool file go idle; b.ndjson grew
	r.stop()
	// w2, b1 and w4 were abandoned when their files went idle.
	r.want("run started", 4, "agent done", 2, "run completed", 1, "run failed", 1, "run abandoned", 2, "task abandoned", 1)
	before := r.tl.totals()

	r.start()
	if !maps.Equal(r.tl.totals(), before) {
		t.Fatalf("restored totals %v, want %v", r.tl.totals(), before)
	}
	r.step(time.Second)
	r.want("run started", 4, "agent done", 2, "run completed", 1, "run failed", 1, "run abandoned", 2, "task abandoned", 1)
	r.settle()
	r.want("run started", 4, "agent done", 2, "run completed", 1, "run failed", 1, "run abandoned", 2, "task abandoned", 1)
}

// Runs open at a stop continue in the next process: their end is counted
// once, by the process that sees it, and the per-stream sink state comes
// back (no orphan finish).
func TestEngineRestartOpenRunsContinue(t *testing.T) {
	r := newRig(t, nil)
	open := "1-1-s" + spool.OpenSuffix
	r.write(open, header+wfStart("w1")+agent("w1", 1, "done")+bashTask("b1"))
	r.write("p.ndjson", wfStart("w2"))
	r.step(time.Second)
	r.stop()
	r.want("run started", 2, "agent done", 1)

	r.write(open, agent("w1", 2, "error")+notify("w1", "failed")+notify("b1", "completed"))
	if err := os.Rename(r.path(open), r.path("1-1-s"+spool.DoneSuffix)); err != nil {
		t.Fatal(err)
	}
	r.write("p.ndjson", notify("w2", "completed"))
	r.advance(time.Hour) // down for an hour
	r.start()
	if len(r.e.streams) != 2 {
		t.Fatalf("%d streams resumed, want 2", len(r.e.streams))
	}
	r.step(time.Second)
	r.step(time.Second)
	if r.finalized(ReasonComplete) != 1 {
		t.Fatal("the spool file completed while serve was down is not finalized")
	}
	r.settle()
	r.want("run started", 2, "agent done", 1, "agent error", 1, "run failed", 1, "task completed", 1, "run completed", 1)
	if got := r.files(); !slices.Equal(got, []string{"p.ndjson"}) {
		t.Fatalf("files %v, want the processed spool file removed", got)
	}
}

// kill -9 at any cycle: a new process restored from the last checkpoint
// written ends with exactly the totals of a process that never stopped
// (counts after that checkpoint are made again from the bytes, the others
// are not).
func TestEngineCrashAtAnyCycleIsExact(t *testing.T) {
	steps := []func(r *rig){
		func(r *rig) { r.write("a.ndjson", wfStart("w1")+bashTask("b1")) },
		func(r *rig) { r.write("a.ndjson", agent("w1", 1, "done")) },
		func(r *rig) { r.write("1-1-s"+spool.OpenSuffix, header+wfStart("w2")) },
		func(r *rig) { r.write("a.ndjson", notify("w1", "completed")+wfStart("w3")) },
		func(r *rig) {
			r.write("1-1-s"+spool.OpenSuffix, agent("w2", 1, "done")+notify("w2", "stopped"))
			os.Rename(r.path("1-1-s"+spool.OpenSuffix), r.path("1-1-s"+spool.DoneSuffix))
		},
		func(r *rig) { r.write("a.ndjson", notify("b1", "failed")+agent("w3", 4, "error")) },
		func(r *rig) {}, // the spool file is finalized and removed
		func(r *rig) { r.write("a.ndjson", notify("w3", "failed")) },
		func(r *rig) {},
	}
	// run plays the steps, one cycle each; crashAt >= 0 stops the process
	// after that many steps without a final checkpoint, and a new one
	// takes over from the checkpoint on disk.
	run := func(t *testing.T, crashAt int) map[string]int {
		r := newRig(t, func(o *Options) { o.CheckpointEvery = time.Hour })
		for i, st := range steps {
			if i == crashAt {
				for _, s := range r.e.streams {
					s.f.Close()
				}
				r.start()
			}
			st(r)
			r.step(3 * time.Second)
		}
		r.settle()
		if got := r.tl.totals()["orphan"]; got != 0 {
			t.Fatalf("%d runs finished that their stream's sinks never saw start", got)
		}
		return r.tl.totals()
	}
	want := run(t, -1)
	if want["run completed"] != 1 || want["run stopped"] != 1 || want["run failed"] != 1 || want["task failed"] != 1 {
		t.Fatalf("uninterrupted totals %v", want)
	}
	for crashAt := range steps {
		t.Run(fmt.Sprintf("after step %d", crashAt), func(t *testing.T) {
			if got := run(t, crashAt); !maps.Equal(got, want) {
				t.Fatalf("totals %v, want %v", got, want)
			}
		})
	}
}

// result is a result line of session S with cumulative values: n turns
// of 100 input and 10 output tokens on one model, $0.001 each (a second
// model from the third turn on).
func result(n int) string {
	models := fmt.Sprintf(`"sonnet":{"inputTokens":%d,"outputTokens":%d,"costUSD":%g}`, 100*n, 10*n, 0.001*float64(n))
	total := 0.001 * float64(n)
	if n >= 3 {
		models += fmt.Sprintf(`,"haiku":{"inputTokens":%d,"costUSD":%g}`, n-2, 0.0001*float64(n-2))
		total += 0.0001 * float64(n-2)
	}
	return fmt.Sprintf(`{"type":"result","subtype":"success","duration_ms":900,"session_id":"S","total_cost_usd":%g,"modelUsage":{%s},"result":"ok"}`+"\n", total, models)
}

// A session's cost survives a crash after any cycle exactly: the result
// lines after the restart give their deltas, never the session's whole
// cumulative cost again (the baselines are in the Tracker's checkpoint).
func TestEngineCrashSessionCostIsExact(t *testing.T) {
	steps := []func(r *rig){
		func(r *rig) { r.write("a.ndjson", result(1)) },
		func(r *rig) { r.write("a.ndjson", wfStart("w1")+result(2)) },
		func(r *rig) { r.write("a.ndjson", result(3)+agent("w1", 1, "done")) },
		func(r *rig) { r.write("a.ndjson", notify("w1", "completed")+result(4)) },
		func(r *rig) {},
		func(r *rig) { r.write("a.ndjson", result(5)) },
		func(r *rig) {},
	}
	run := func(t *testing.T, crashAt int) map[string]int {
		r := newRig(t, func(o *Options) { o.CheckpointEvery = time.Hour })
		for i, st := range steps {
			if i == crashAt {
				for _, s := range r.e.streams {
					s.f.Close()
				}
				r.start()
			}
			st(r)
			r.step(3 * time.Second)
		}
		r.settle()
		return r.tl.totals()
	}
	want := run(t, -1)
	// The sums of the deltas are the last cumulative values.
	if want["turn"] != 5 || want["turn reset"] != 0 || want["tokens sonnet"] != 550 || want["tokens haiku"] != 3 ||
		want["cost µ$"] != 5300 || want["run completed"] != 1 {
		t.Fatalf("uninterrupted totals %v", want)
	}
	for crashAt := range steps {
		t.Run(fmt.Sprintf("after step %d", crashAt), func(t *testing.T) {
			if got := run(t, crashAt); !maps.Equal(got, want) {
				t.Fatalf("totals %v, want %v", got, want)
			}
		})
	}
}

// A file gone while serve was down: its open runs are abandoned at the
// restart.
func TestEngineVanishedWhileDown(t *testing.T) {
	r := newRig(t, nil)
	r.write("a.ndjson", wfStart("w1"))
	r.step(time.Second)
	r.stop()
	os.Remove(r.path("a.ndjson"))
	r.start()
	if r.finalized(ReasonVanished) != 1 {
		t.Fatalf("vanished %v", r.finalized(ReasonVanished))
	}
	r.step(2 * time.Second)
	r.want("run started", 1, "run abandoned", 1)
}

// A checkpoint that cannot be used (undecodable, of another version, or
// one whose sink or Tracker state does not restore) is moved aside: the
// totals restart from zero (no sink saw anything of it) and every file is
// read from the start. Only an unreadable state directory is an error.
func TestEngineCorruptCheckpoint(t *testing.T) {
	// A good checkpoint to spoil: one stream with an open run, the sinks'
	// states, a finished file.
	good := func(t *testing.T) (dir, state string, st map[string]any) {
		r := newRig(t, nil)
		r.write("a.ndjson", wfStart("w1"))
		r.write("b.ndjson", workflow("w2", "completed"))
		r.step(time.Second)
		r.advance(idle)
		r.write("a.ndjson", "\n")
		r.step(time.Second) // b.ndjson is finished
		r.stop()
		b, err := os.ReadFile(filepath.Join(r.state, StateFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		if len(st["streams"].([]any)) != 1 || len(st["finished"].([]any)) != 1 {
			t.Fatalf("checkpoint %s", b)
		}
		return r.dir, r.state, st
	}
	streamOf := func(st map[string]any) map[string]any { return st["streams"].([]any)[0].(map[string]any) }
	for _, tc := range []struct {
		name  string
		spoil func(st map[string]any) []byte
	}{
		{"not JSON", func(map[string]any) []byte { return []byte(`{"version":2,"streams":[{"offset":`) }},
		{"version 1", func(st map[string]any) []byte { st["version"] = 1; return nil }},
		{"a negative offset", func(st map[string]any) []byte { streamOf(st)["offset"] = -1; return nil }},
		{"a sink's state", func(st map[string]any) []byte {
			st["sinks"].(map[string]any)["tally"] = "not a map"
			return nil
		}},
		{"a stream sink's state", func(st map[string]any) []byte {
			streamOf(st)["sinks"].(map[string]any)["memo"] = []int{7}
			return nil
		}},
		{"a Tracker's state", func(st map[string]any) []byte {
			streamOf(st)["tracker"].(map[string]any)["runs"] = []any{map[string]any{"run": map[string]any{}}}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, state, st := good(t)
			b := tc.spoil(st)
			if b == nil {
				b, _ = json.Marshal(st)
			}
			if err := os.WriteFile(filepath.Join(state, StateFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			r := &rig{t: t, dir: dir, state: state, now: t0.Add(time.Hour)}
			r.start()
			if !strings.Contains(r.logs.String(), "checkpoint unusable") {
				t.Fatalf("no clear error; logs:\n%s", r.logs)
			}
			if m, _ := filepath.Glob(filepath.Join(state, StateFile+".corrupt-*")); len(m) != 1 {
				t.Fatalf("not moved aside: %v", m)
			}
			r.want()
			r.step(time.Second)
			r.settle()
			// Both files again, from the start: each run once in the new
			// totals.
			r.want("run started", 2, "agent done", 1, "run completed", 1, "run abandoned", 1)
			if _, err := os.Stat(filepath.Join(state, StateFile)); err != nil {
				t.Fatalf("no new checkpoint: %v", err)
			}
		})
	}
	t.Run("unreadable", func(t *testing.T) {
		state := t.TempDir()
		if err := os.Mkdir(filepath.Join(state, StateFile), 0o700); err != nil {
			t.Fatal(err)
		}
		r := &rig{t: t, dir: t.TempDir(), state: state, now: t0}
		r.tl, r.logs = newTally(), new(bytes.Buffer)
		e, err := New(r.options())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Restore(); err == nil || errors.Is(err, ErrCorrupt) {
			t.Fatalf("Restore: %v, want a plain error", err)
		}
	})
}

// A checkpoint that cannot be written is counted and logged once; the
// engine goes on, and the next one that succeeds clears the error. Run
// returns the final checkpoint's failure.
func TestEngineCheckpointFailure(t *testing.T) {
	r := newRig(t, nil)
	r.write("a.ndjson", workflow("w1", "completed"))
	r.tl.saveErr = errors.New("disk on fire")
	r.step(time.Second)
	r.step(2 * time.Second) // finalized: terminal again
	if n := testutil.ToFloat64(r.e.mCkptErr); n != 2 {
		t.Fatalf("%v checkpoint errors, want 2", n)
	}
	if strings.Count(r.logs.String(), "writing the checkpoint failed") != 1 {
		t.Fatalf("logged not once:\n%s", r.logs)
	}
	r.tl.saveErr = nil
	os.RemoveAll(r.state) // the directory itself is gone
	r.write("a.ndjson", bashTask("b1"))
	r.step(time.Second)
	if n := testutil.ToFloat64(r.e.mCkptErr); n != 3 {
		t.Fatalf("%v checkpoint errors, want 3", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.e.Run(ctx); err == nil {
		t.Fatal("Run: the final checkpoint failed, no error")
	}
	if err := os.Mkdir(r.state, 0o700); err != nil {
		t.Fatal(err)
	}
	ok := testutil.ToFloat64(r.e.mCkpt)
	if err := r.e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(r.e.mCkpt) != ok+1 || !strings.Contains(r.logs.String(), "checkpoints written again") {
		t.Fatalf("recovery not noted:\n%s", r.logs)
	}
}

// A finished file that is replaced (same inode reused, other content) or
// truncated is new content, read from the start; a finished file that is
// gone is forgotten.
func TestEngineFinishedFiles(t *testing.T) {
	r := newRig(t, nil)
	r.write("a.ndjson", workflow("w1", "completed"))
	r.settle()
	if len(r.e.finished) != 1 {
		t.Fatalf("finished %v", r.e.finished)
	}
	if err := os.Truncate(r.path("a.ndjson"), 0); err != nil {
		t.Fatal(err)
	}
	r.write("a.ndjson", wfStart("w2")+notify("w2", "failed"))
	r.step(time.Second)
	r.settle()
	r.want("run started", 2, "agent done", 1, "run completed", 1, "run failed", 1)
	os.Remove(r.path("a.ndjson"))
	r.step(time.Second)
	if len(r.e.finished) != 0 {
		t.Fatalf("a removed file is remembered: %v", r.e.finished)
	}
}

func TestNewOptions(t *testing.T) {
	ns := func() StreamConfig { return StreamConfig{} }
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Globs: []string{"x"}, NewStream: ns, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no globs", Options{NewStream: ns}},
		{"a bad pattern", Options{Globs: []string{"["}, NewStream: ns}},
		{"no NewStream", Options{Globs: []string{"x"}}},
		{"negative MaxStreams", Options{Globs: []string{"x"}, NewStream: ns, MaxStreams: -1}},
		{"metrics registered twice", Options{Globs: []string{"x"}, NewStream: ns, Registerer: reg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// A run ending in some stream every cycle (many busy streams) does not
// cost a checkpoint per cycle: terminal checkpoints come at most one per
// terminalGap, yet each run's end is in a checkpoint within terminalGap
// plus a cycle, and a restart from it counts every run exactly once.
func TestEngineTerminalCheckpointsSpaced(t *testing.T) {
	r := newRig(t, func(o *Options) { o.CheckpointEvery = time.Hour })
	const poll = 250 * time.Millisecond
	const cycles = 40
	for i := range cycles {
		task := fmt.Sprintf("b%d", i)
		r.write(fmt.Sprintf("s%d.ndjson", i%3), bashTask(task)+notify(task, "completed"))
		r.step(poll)
	}
	n := testutil.ToFloat64(r.e.mCkpt)
	elapsed := time.Duration(cycles) * poll
	if most := float64(elapsed/terminalGap) + 1; n > most || n < most-2 {
		t.Fatalf("%v checkpoints over %s with a run ending every cycle; want about one per %s (%v)", n, elapsed, terminalGap, most)
	}
	r.step(terminalGap)
	if r.e.terminal {
		t.Fatal("a run's end is still not checkpointed a terminalGap later")
	}
	before := r.tl.totals()
	r.start() // a crash: no final checkpoint
	r.step(poll)
	if got := r.tl.totals(); !maps.Equal(got, before) {
		t.Fatalf("after a restart from the spaced checkpoints: %v, want %v", got, before)
	}
}
