package metrics

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/safetext"
)

// This file lets a long-lived process (cbc-otel serve) survive its own
// restart with exact cumulative totals. Metrics is an
// ingest.StreamCheckpointer (what it remembers of a stream's runs in
// flight) and Checkpoint an ingest.Checkpointer (the cumulative totals and
// the label values admitted). The totals themselves are kept by a Totals
// (exposition.Cumulative: the families saved by the previous process plus
// the live registry's), which this package knows only by its methods.

// CheckpointName is the name the metrics' state is saved under, in a
// checkpoint and in each of its streams.
const CheckpointName = "metrics"

var (
	_ ingest.StreamCheckpointer = (*Metrics)(nil)
	_ ingest.Checkpointer       = (*Checkpoint)(nil)
)

// runMark is what a Metrics remembers of a run between its first event and
// its RunFinalized: the label it was counted under, whether it is in
// cbc_workflow_runs_active, whether its terminal status was counted and
// which agents were.
type runMark struct {
	Label    string `json:"label"`
	Workflow bool   `json:"workflow,omitempty"`
	Active   bool   `json:"active,omitempty"`
	Finished bool   `json:"finished,omitempty"`
	// Timed is set once the run's duration was observed (at RunFinalized,
	// when its times are final).
	Timed  bool  `json:"timed,omitempty"`
	Agents []int `json:"agents,omitempty"`
}

// streamMark is a runMark and the run's position in the stream's open runs.
type streamMark struct {
	Run  int     `json:"run"`
	Mark runMark `json:"mark"`
}

// SaveStream implements ingest.StreamCheckpointer: the marks of the open
// runs m has seen (nil when none).
func (m *Metrics) SaveStream(open []*ingest.Run) (json.RawMessage, error) {
	var marks []streamMark
	for i, r := range open {
		if mk, ok := m.markOf(r); ok {
			marks = append(marks, streamMark{Run: i, Mark: mk})
		}
	}
	if len(marks) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(marks)
	if err != nil {
		return nil, fmt.Errorf("metrics: encoding run marks: %w", err)
	}
	return b, nil
}

// RestoreStream implements ingest.StreamCheckpointer. The commit makes m
// remember the marked runs without counting anything again (the counters
// come from the totals Checkpoint restores); only the gauge
// cbc_workflow_runs_active, which is not cumulative, is raised for the runs
// that were active. A mark of a run that is not open is an error: the marks
// and the Tracker's state were saved at the same instant.
func (m *Metrics) RestoreStream(state json.RawMessage, open []*ingest.Run) (func(), error) {
	var marks []streamMark
	if len(state) > 0 {
		if err := json.Unmarshal(state, &marks); err != nil {
			return nil, fmt.Errorf("metrics: decoding run marks: %w", err)
		}
	}
	for _, sm := range marks {
		if sm.Run < 0 || sm.Run >= len(open) {
			return nil, fmt.Errorf("metrics: a run mark of run %d, but %d runs are open", sm.Run, len(open))
		}
		if err := checkLabels("run mark", sm.Mark.Label); err != nil {
			return nil, err
		}
	}
	return func() {
		for _, sm := range marks {
			m.restoreRun(open[sm.Run], sm.Mark)
		}
	}, nil
}

// markOf returns what m remembers of r; ok is false when m never saw it.
// Call it from the goroutine feeding r's Tracker (r must not change).
func (m *Metrics) markOf(r *ingest.Run) (mk runMark, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.runs[r]
	if !ok {
		return runMark{}, false
	}
	mk = runMark{Label: st.label, Workflow: r.Workflow, Active: st.active, Finished: st.finished, Timed: st.timed}
	for i := range st.agents {
		mk.Agents = append(mk.Agents, i)
	}
	slices.Sort(mk.Agents)
	return mk, true
}

// restoreRun makes m remember r (a run restored into a Tracker) as mk says.
func (m *Metrics) restoreRun(r *ingest.Run, mk runMark) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[r]; ok {
		return
	}
	lc := &m.taskTypes
	if mk.Workflow {
		lc = &m.workflows
	}
	if mk.Label == "" {
		mk.Label = LabelUnknown
	}
	// The run keeps the label it was counted under; a label the current
	// allow-list rejects is not admitted for new runs, though.
	if _, ok := lc.seen[mk.Label]; !ok && lc.allows(mk.Label) {
		lc.seen[mk.Label] = struct{}{}
	}
	st := &runState{label: mk.Label, active: mk.Active, finished: mk.Finished, timed: mk.Timed}
	if len(mk.Agents) > 0 {
		st.agents = make(map[int]struct{}, len(mk.Agents))
		for _, i := range mk.Agents {
			st.agents[i] = struct{}{}
		}
	}
	m.runs[r] = st
	if mk.Active && mk.Workflow {
		m.runsActive.WithLabelValues(mk.Label).Inc()
	}
}

// labels returns the workflow and task_type label values admitted so far,
// sorted, so that a restarted process admits the same ones first.
func (m *Metrics) labels() (workflows, taskTypes []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range m.workflows.seen {
		workflows = append(workflows, l)
	}
	for l := range m.taskTypes.seen {
		taskTypes = append(taskTypes, l)
	}
	slices.Sort(workflows)
	slices.Sort(taskTypes)
	return workflows, taskTypes
}

// restoreLabels admits label values saved by labels, without counting an
// overflow: they were admitted (or were "other") before the restart. A
// workflow value the current allow-list rejects is not admitted again:
// its new runs count as "other" (its series restored from the totals stay,
// counters never go down), and it frees its place under the cap.
func (m *Metrics) restoreLabels(workflows, taskTypes []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range workflows {
		if m.workflows.allows(l) {
			m.workflows.seen[l] = struct{}{}
		}
	}
	for _, l := range taskTypes {
		m.taskTypes.seen[l] = struct{}{}
	}
}

// Checkpoint is the process-wide state of the metrics, an
// ingest.Checkpointer: the cumulative totals of every cbc_* counter and
// histogram (a Totals' base plus live) and the workflow and task_type
// label values a Metrics admitted. Restored, the totals become the
// Totals' base.
type Checkpoint struct {
	m *Metrics
	c Totals
	// baseRuns is what the restored totals count in
	// cbc_workflow_runs_total (see BaseRuns).
	baseRuns atomic.Uint64
}

// Totals keeps the cumulative families of a process across its restarts:
// exposition.Cumulative, over the Metrics' registry. It is an interface so
// that the sink does not depend on how its registry is exposed.
type Totals interface {
	// Totals returns the cumulative families (the base plus live) to save.
	Totals() ([]*dto.MetricFamily, error)
	// SetBase makes fams, saved by an earlier process, the base.
	SetBase(fams []*dto.MetricFamily)
}

// NewCheckpoint returns the Checkpoint of m and c, the Totals over m's
// registry.
func NewCheckpoint(m *Metrics, c Totals) *Checkpoint { return &Checkpoint{m: m, c: c} }

// BaseRuns is the workflow runs the restored totals count
// (cbc_workflow_runs_total, every status): those that finished before this
// process. 0 until a restore's commit.
func (k *Checkpoint) BaseRuns() uint64 { return k.baseRuns.Load() }

// countRuns sums cbc_workflow_runs_total in fams.
func countRuns(fams []*dto.MetricFamily) uint64 {
	var n float64
	for _, mf := range fams {
		if mf.GetName() != workflowRunsFamily || mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return uint64(n)
}

// workflowRunsFamily is the counter of finished workflow runs.
const workflowRunsFamily = "cbc_workflow_runs_total"

// checkpointState is what a Checkpoint saves.
type checkpointState struct {
	// Totals are the cumulative families, protobuf JSON (marshalFamilies).
	Totals    json.RawMessage `json:"totals,omitempty"`
	Workflows []string        `json:"workflows,omitempty"`
	TaskTypes []string        `json:"task_types,omitempty"`
	Models    []string        `json:"models,omitempty"`
}

// SaveCheckpoint implements ingest.Checkpointer.
func (k *Checkpoint) SaveCheckpoint() (json.RawMessage, error) {
	totals, err := k.c.Totals()
	if err != nil {
		return nil, fmt.Errorf("metrics: gathering the totals: %w", err)
	}
	st := checkpointState{}
	if st.Totals, err = marshalFamilies(totals); err != nil {
		return nil, err
	}
	st.Workflows, st.TaskTypes = k.m.labels()
	k.m.mu.Lock()
	st.Models = k.m.cost.modelLabels()
	k.m.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("metrics: encoding the checkpoint: %w", err)
	}
	return b, nil
}

// RestoreCheckpoint implements ingest.Checkpointer: the commit sets the
// Totals' base and admits the saved label values.
func (k *Checkpoint) RestoreCheckpoint(state json.RawMessage) (func(), error) {
	if len(state) == 0 {
		return func() {}, nil
	}
	var st checkpointState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("metrics: decoding the checkpoint: %w", err)
	}
	for what, ls := range map[string][]string{"workflow": st.Workflows, "task_type": st.TaskTypes, "model": st.Models} {
		if err := checkLabels(what, ls...); err != nil {
			return nil, err
		}
	}
	base, err := unmarshalFamilies(st.Totals)
	if err != nil {
		return nil, err
	}
	runs := countRuns(base)
	return func() {
		k.c.SetBase(base)
		k.baseRuns.Store(runs)
		k.m.restoreLabels(st.Workflows, st.TaskTypes)
		k.m.mu.Lock()
		for _, l := range st.Models {
			k.m.cost.models.seen[l] = struct{}{}
		}
		k.m.mu.Unlock()
	}, nil
}

// checkLabels refuses label values read back from a checkpoint that are
// not clean text within maxLabelLen: what this package saved was (ingest
// cleaned it, resolve cut it), so such a value means the file was changed,
// and the sink cuts but never cleans.
func checkLabels(what string, labels ...string) error {
	for _, l := range labels {
		if !safetext.IsClean(l, maxLabelLen) {
			return fmt.Errorf("metrics: a %s label in the checkpoint is not clean text: %q", what, l)
		}
	}
	return nil
}

// marshalFamilies encodes families to JSON (protobuf JSON mapping, one
// object per family), the form a checkpoint stores.
func marshalFamilies(fams []*dto.MetricFamily) (json.RawMessage, error) {
	parts := make([]json.RawMessage, 0, len(fams))
	for _, mf := range fams {
		b, err := protojson.Marshal(mf)
		if err != nil {
			return nil, fmt.Errorf("metrics: encoding %s: %w", mf.GetName(), err)
		}
		parts = append(parts, b)
	}
	return json.Marshal(parts)
}

// unmarshalFamilies decodes what marshalFamilies wrote.
func unmarshalFamilies(b json.RawMessage) ([]*dto.MetricFamily, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return nil, fmt.Errorf("metrics: decoding families: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(parts))
	for i, p := range parts {
		mf := new(dto.MetricFamily)
		if err := protojson.Unmarshal(p, mf); err != nil {
			return nil, fmt.Errorf("metrics: decoding family %d: %w", i, err)
		}
		out = append(out, mf)
	}
	return out, nil
}
