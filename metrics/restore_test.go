package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// canonical renders the cumulative cbc_* families of g without what
// legitimately differs between processes (exemplars, created timestamps,
// gauges, build info), native histograms included.
func canonical(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := cbcFamilies(g).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if t := mf.GetType(); t != dto.MetricType_COUNTER && t != dto.MetricType_HISTOGRAM {
			continue
		}
		mf = proto.Clone(mf).(*dto.MetricFamily)
		var native []string
		for _, m := range mf.Metric {
			if c := m.Counter; c != nil {
				c.CreatedTimestamp, c.Exemplar = nil, nil
			}
			if h := m.Histogram; h != nil {
				h.CreatedTimestamp, h.Exemplars = nil, nil
				// Float sums depend on the order of additions; native
				// spans may or may not keep empty buckets inside: the
				// counts by bucket index are compared instead.
				h.SampleSum = proto.Float64(math.Round(h.GetSampleSum()*1e6) / 1e6)
				native = append(native, fmt.Sprint(nativeCounts(h.PositiveSpan, h.PositiveDelta), nativeCounts(h.NegativeSpan, h.NegativeDelta)))
				h.PositiveSpan, h.PositiveDelta, h.NegativeSpan, h.NegativeDelta = nil, nil, nil, nil
				for _, bk := range h.Bucket {
					bk.Exemplar = nil
				}
			}
		}
		b.WriteString(prototext.Format(mf))
		for _, n := range native {
			b.WriteString("native " + n + "\n")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// nativeCounts is a native histogram's non-empty buckets by index (fmt
// prints a map sorted by key).
func nativeCounts(spans []*dto.BucketSpan, deltas []int64) map[int32]int64 {
	out := map[int32]int64{}
	var idx int32
	var count int64
	for _, s := range spans {
		idx += s.GetOffset() // the first offset is an index, the others gaps
		for range s.GetLength() {
			if len(deltas) > 0 {
				count += deltas[0]
				deltas = deltas[1:]
			}
			if count != 0 {
				out[idx] = count
			}
			idx++
		}
	}
	return out
}

func lines(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(data, []byte("\n"))
}

// TestCumulativeRestartIsExact processes two recordings in one process, and
// again with a restart in the middle of the second one (the tracker
// snapshot, and through the checkpoint interfaces the run marks, labels and
// totals): the cumulative families must be identical, histograms (classic
// and native) included.
func TestCumulativeRestartIsExact(t *testing.T) {
	s1 := lines(t, "../testdata/simulate/mixed-cbc.ndjson")
	s2 := lines(t, "../testdata/simulate/many-agents-claude-interrupt10.ndjson")
	feed := func(m *Metrics, st *ingest.Stats, ls [][]byte) *ingest.Pipeline {
		p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m}, Stats: st, Grace: ingest.DefaultGrace}})
		for _, l := range ls {
			p.Write(tap.SourceStdout, l)
		}
		return p
	}
	wholeStats := new(ingest.Stats)
	whole := newTest(t, Options{Stats: wholeStats})
	feed(whole, wholeStats, s1).Close()
	feed(whole, wholeStats, s2).Close()
	want := canonical(t, whole.Registry())

	for _, cut := range []int{0, 1, len(s2) / 3, len(s2) / 2, len(s2) - 3, len(s2)} {
		st1 := new(ingest.Stats)
		m1 := newTest(t, Options{Stats: st1})
		c1 := exposition.NewCumulative(m1.Registry(), "cbc_")
		feed(m1, st1, s1).Close()
		p := feed(m1, st1, s2[:cut])
		snap := p.Tracker().Snapshot()
		marks, err := m1.SaveStream(p.Tracker().Open())
		if err != nil {
			t.Fatal(err)
		}
		saved, err := NewCheckpoint(m1, c1).SaveCheckpoint()
		if err != nil {
			t.Fatal(err)
		}

		// The next process.
		st2 := new(ingest.Stats)
		m2 := newTest(t, Options{Stats: st2})
		c2 := exposition.NewCumulative(m2.Registry(), "cbc_")
		q := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m2}, Stats: st2, Grace: ingest.DefaultGrace}})
		if err := q.Tracker().Restore(snap, snap.Now); err != nil {
			t.Fatal(err)
		}
		k2 := NewCheckpoint(m2, c2)
		commitTotals, err := k2.RestoreCheckpoint(saved)
		if err != nil {
			t.Fatal(err)
		}
		commitMarks, err := m2.RestoreStream(marks, q.Tracker().Open())
		if err != nil {
			t.Fatal(err)
		}
		if n := k2.BaseRuns(); n != 0 {
			t.Fatalf("BaseRuns before the commit: %d", n)
		}
		commitTotals()
		commitMarks()
		// The runs page counts the runs finished before the restart from it.
		if got, want := k2.BaseRuns(), uint64(sumValues(series(t, c1, "cbc_workflow_runs_total"))); got != want || want == 0 {
			t.Fatalf("restart after line %d: BaseRuns %d, want the %d runs the saved totals count", cut, got, want)
		}
		for _, l := range s2[cut:] {
			q.Write(tap.SourceStdout, l)
		}
		q.Close()
		if got := canonical(t, c2); got != want {
			t.Fatalf("restart after line %d of %d: cumulative families differ\n got:\n%s\nwant:\n%s", cut, len(s2), got, want)
		}
		// Nothing is active any more: the restored gauge went back to 0.
		if v := series(t, m2.Registry(), "cbc_workflow_runs_active"); sumValues(v) != 0 {
			t.Fatalf("restart after line %d: runs_active %v", cut, v)
		}
	}
}

// Restoring is two-phase: a Restore changes nothing until its commit runs,
// and a state that cannot be used is an error, never half applied.
func TestRestoreIsTwoPhase(t *testing.T) {
	s := lines(t, "../testdata/simulate/many-agents-claude-interrupt10.ndjson")
	st1 := new(ingest.Stats)
	m1 := newTest(t, Options{Stats: st1})
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m1}, Stats: st1, Grace: ingest.DefaultGrace}})
	for _, l := range s[:len(s)/2] {
		p.Write(tap.SourceStdout, l)
	}
	open := p.Tracker().Open()
	marks, err := m1.SaveStream(open)
	if err != nil || marks == nil {
		t.Fatalf("marks %s, %v", marks, err)
	}
	saved, err := NewCheckpoint(m1, exposition.NewCumulative(m1.Registry(), "cbc_")).SaveCheckpoint()
	if err != nil {
		t.Fatal(err)
	}

	st2 := new(ingest.Stats)
	m2 := newTest(t, Options{Stats: st2})
	c2 := exposition.NewCumulative(m2.Registry(), "cbc_")
	q := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m2}, Stats: st2, Grace: ingest.DefaultGrace}})
	snap := p.Tracker().Snapshot()
	if err := q.Tracker().Restore(snap, snap.Now); err != nil {
		t.Fatal(err)
	}
	commitMarks, err := m2.RestoreStream(marks, q.Tracker().Open())
	if err != nil {
		t.Fatal(err)
	}
	commitTotals, err := NewCheckpoint(m2, c2).RestoreCheckpoint(saved)
	if err != nil {
		t.Fatal(err)
	}
	runs := func() float64 { return sumValues(series(t, c2, "cbc_workflow_runs_started_total")) }
	if a, r := sumValues(series(t, m2.Registry(), "cbc_workflow_runs_active")), runs(); a != 0 || r != 0 {
		t.Fatalf("before the commits: runs_active %v, runs_started %v; want nothing", a, r)
	}
	if wf, _ := m2.labels(); len(wf) != 0 {
		t.Fatalf("labels admitted before the commit: %v", wf)
	}
	commitMarks()
	commitTotals()
	if a, r := sumValues(series(t, m2.Registry(), "cbc_workflow_runs_active")), runs(); a == 0 || r == 0 {
		t.Fatalf("after the commits: runs_active %v, runs_started %v; want the saved ones", a, r)
	}
	if got, want := fmt.Sprint(m2.labels()), fmt.Sprint(m1.labels()); got != want {
		t.Fatalf("labels %s, want %s", got, want)
	}

	for _, tc := range []struct {
		name, state string
		stream      bool
	}{
		{"checkpoint not JSON", `{`, false},
		{"totals not a list", `{"totals":5}`, false},
		{"a family not a family", `{"totals":[{"name":5}]}`, false},
		{"marks not JSON", `[`, true},
		{"a mark past the open runs", `[{"run":99,"mark":{"label":"x"}}]`, true},
		{"a negative mark", `[{"run":-1,"mark":{"label":"x"}}]`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.stream {
				_, err = m2.RestoreStream(json.RawMessage(tc.state), q.Tracker().Open())
			} else {
				_, err = NewCheckpoint(m2, c2).RestoreCheckpoint(json.RawMessage(tc.state))
			}
			if err == nil {
				t.Fatalf("%s restored", tc.state)
			}
		})
	}
	// Nothing saved: nothing to do.
	for _, f := range []func() (func(), error){
		func() (func(), error) { return m2.RestoreStream(nil, nil) },
		func() (func(), error) { return NewCheckpoint(m2, c2).RestoreCheckpoint(nil) },
	} {
		if commit, err := f(); err != nil || commit == nil {
			t.Fatalf("nil state: %v", err)
		}
	}
	if b, err := newTest(t, Options{}).SaveStream(open); b != nil || err != nil {
		t.Fatalf("marks of runs never seen: %s %v", b, err)
	}
}

// TestRestoreRefusesUncleanLabels: a checkpoint is input too. A label
// value read back that is not clean text (controls, bidirectional marks,
// runs of spaces, beyond the bound) is refused as a changed file, in the
// stream's run marks and in the process's label lists alike; the sink
// never cleans it.
func TestRestoreRefusesUncleanLabels(t *testing.T) {
	run := []*ingest.Run{{TaskID: "t", Workflow: true, Name: "wf"}}
	for _, bad := range []string{`evil\u0000\u001b[31m`, `\u202eenod`, `two  spaces`, ` lead`, strings.Repeat("x", maxLabelLen+1)} {
		m := newTest(t, Options{})
		if _, err := m.RestoreStream(json.RawMessage(`[{"run":0,"mark":{"label":"`+bad+`","workflow":true,"active":true}}]`), run); err == nil {
			t.Errorf("run mark label %q restored", bad)
		}
		for _, field := range []string{"workflows", "task_types", "models"} {
			k := NewCheckpoint(m, exposition.NewCumulative(m.Registry(), "cbc_"))
			if _, err := k.RestoreCheckpoint(json.RawMessage(`{"` + field + `":["ok","` + bad + `"]}`)); err == nil {
				t.Errorf("%s label %q restored", field, bad)
			}
		}
	}
	m := newTest(t, Options{})
	if _, err := m.RestoreStream(json.RawMessage(`[{"run":0,"mark":{"label":"wf","workflow":true,"active":true}}]`), run); err != nil {
		t.Errorf("a clean mark refused: %v", err)
	}
	if _, err := NewCheckpoint(m, exposition.NewCumulative(m.Registry(), "cbc_")).RestoreCheckpoint(json.RawMessage(`{"workflows":["wf","名前 ok"],"models":["claude-x"]}`)); err != nil {
		t.Errorf("clean labels refused: %v", err)
	}
}
