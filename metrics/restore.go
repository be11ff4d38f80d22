package metrics

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// This file lets a long-lived process (cbc-otel serve) survive its own
// restart with exact cumulative totals. Metrics is an
// ingest.StreamCheckpointer (what it remembers of a stream's runs in
// flight), Checkpoint an ingest.Checkpointer (the cumulative totals and the
// label values admitted), and a Cumulative gatherer adds the totals saved
// by the previous process to the live registry's.

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
// histogram (a Cumulative's base plus live) and the workflow and task_type
// label values a Metrics admitted. Restored, the totals become the
// Cumulative's base.
type Checkpoint struct {
	m *Metrics
	c *Cumulative
}

// NewCheckpoint returns the Checkpoint of m and c, a Cumulative over m's
// registry.
func NewCheckpoint(m *Metrics, c *Cumulative) *Checkpoint { return &Checkpoint{m: m, c: c} }

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
// Cumulative's base and admits the saved label values.
func (k *Checkpoint) RestoreCheckpoint(state json.RawMessage) (func(), error) {
	if len(state) == 0 {
		return func() {}, nil
	}
	var st checkpointState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("metrics: decoding the checkpoint: %w", err)
	}
	base, err := unmarshalFamilies(st.Totals)
	if err != nil {
		return nil, err
	}
	return func() {
		k.c.SetBase(base)
		k.m.restoreLabels(st.Workflows, st.TaskTypes)
		k.m.mu.Lock()
		for _, l := range st.Models {
			k.m.cost.models.seen[l] = struct{}{}
		}
		k.m.mu.Unlock()
	}, nil
}

// Cumulative is a prometheus.Gatherer exposing a live registry plus the
// totals of earlier processes (the base): every counter and histogram whose
// name starts with "cbc_" is the sum of both, series by series; gauges and
// the go_*/process_* families are the live ones. So /metrics after a restart
// shows the exact totals since the first process, and nothing goes down.
type Cumulative struct {
	live prometheus.Gatherer
	mu   sync.RWMutex
	base map[string]*dto.MetricFamily
}

// NewCumulative returns a Cumulative over live with an empty base.
func NewCumulative(live prometheus.Gatherer) *Cumulative {
	return &Cumulative{live: live, base: map[string]*dto.MetricFamily{}}
}

// cumulativeFamily reports whether a family is carried across restarts.
func cumulativeFamily(mf *dto.MetricFamily) bool {
	t := mf.GetType()
	return strings.HasPrefix(mf.GetName(), "cbc_") && (t == dto.MetricType_COUNTER || t == dto.MetricType_HISTOGRAM)
}

// SetBase replaces the base (families of other types are ignored).
func (c *Cumulative) SetBase(fams []*dto.MetricFamily) {
	base := make(map[string]*dto.MetricFamily, len(fams))
	for _, mf := range fams {
		if cumulativeFamily(mf) {
			base[mf.GetName()] = mf
		}
	}
	c.mu.Lock()
	c.base = base
	c.mu.Unlock()
}

// Gather implements prometheus.Gatherer: base plus live.
func (c *Cumulative) Gather() ([]*dto.MetricFamily, error) {
	live, err := c.live.Gather()
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*dto.MetricFamily, 0, len(live)+len(c.base))
	seen := make(map[string]bool, len(live))
	for _, mf := range live {
		seen[mf.GetName()] = true
		if b, ok := c.base[mf.GetName()]; ok && cumulativeFamily(mf) && b.GetType() == mf.GetType() {
			mf = mergeFamily(b, mf)
		}
		out = append(out, mf)
	}
	for name, b := range c.base {
		if !seen[name] {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, err
}

// BaseRuns is the workflow runs the base counts (cbc_workflow_runs_total,
// every status): those that finished before this process, as restored.
func (c *Cumulative) BaseRuns() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n float64
	for _, m := range c.base[workflowRunsFamily].GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return uint64(n)
}

// workflowRunsFamily is the counter of finished workflow runs.
const workflowRunsFamily = "cbc_workflow_runs_total"

// Totals returns the cumulative families (base plus live), to be saved and
// given to SetBase of the next process.
func (c *Cumulative) Totals() ([]*dto.MetricFamily, error) {
	fams, err := c.Gather()
	if err != nil {
		return nil, err
	}
	out := fams[:0]
	for _, mf := range fams {
		if cumulativeFamily(mf) {
			out = append(out, mf)
		}
	}
	return out, nil
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

// seriesKey identifies a series within a family by its sorted labels.
func seriesKey(m *dto.Metric) string {
	pairs := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		pairs = append(pairs, l.GetName()+"\xff"+l.GetValue())
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "\xfe")
}

// mergeFamily returns base + live for one counter or histogram family.
// live's exemplars are kept; base's created timestamp wins (it is older).
func mergeFamily(base, live *dto.MetricFamily) *dto.MetricFamily {
	out := proto.Clone(live).(*dto.MetricFamily)
	idx := make(map[string]*dto.Metric, len(out.Metric))
	for _, m := range out.Metric {
		idx[seriesKey(m)] = m
	}
	for _, bm := range base.Metric {
		lm, ok := idx[seriesKey(bm)]
		if !ok {
			out.Metric = append(out.Metric, proto.Clone(bm).(*dto.Metric))
			continue
		}
		switch out.GetType() {
		case dto.MetricType_COUNTER:
			if bm.Counter == nil || lm.Counter == nil {
				continue
			}
			lm.Counter.Value = proto.Float64(lm.Counter.GetValue() + bm.Counter.GetValue())
			if ct := bm.Counter.GetCreatedTimestamp(); ct != nil {
				lm.Counter.CreatedTimestamp = ct
			}
		case dto.MetricType_HISTOGRAM:
			if bm.Histogram == nil || lm.Histogram == nil {
				continue
			}
			mergeHistogram(bm.Histogram, lm.Histogram)
		}
	}
	sort.SliceStable(out.Metric, func(i, j int) bool { return seriesKey(out.Metric[i]) < seriesKey(out.Metric[j]) })
	return out
}

// mergeHistogram adds b into h: count, sum, classic buckets (by upper
// bound) and native buckets (at the coarser of the two schemas).
func mergeHistogram(b, h *dto.Histogram) {
	h.SampleCount = proto.Uint64(h.GetSampleCount() + b.GetSampleCount())
	h.SampleSum = proto.Float64(h.GetSampleSum() + b.GetSampleSum())
	if ct := b.GetCreatedTimestamp(); ct != nil {
		h.CreatedTimestamp = ct
	}
	h.Bucket = mergeClassic(b.Bucket, h.Bucket)
	if b.Schema != nil && h.Schema != nil {
		mergeNative(b, h)
	}
}

// cumulativeAt is the cumulative count of a classic histogram at bound ub:
// the count of the largest bucket bound not above it.
func cumulativeAt(bs []*dto.Bucket, ub float64) uint64 {
	var c uint64
	for _, x := range bs {
		if x.GetUpperBound() <= ub {
			c = x.GetCumulativeCount()
		}
	}
	return c
}

func mergeClassic(base, live []*dto.Bucket) []*dto.Bucket {
	if len(base) == 0 {
		return live
	}
	bounds := make([]float64, 0, len(base)+len(live))
	for _, x := range base {
		bounds = append(bounds, x.GetUpperBound())
	}
	for _, x := range live {
		bounds = append(bounds, x.GetUpperBound())
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	ex := make(map[float64]*dto.Exemplar)
	for _, x := range live {
		if x.Exemplar != nil {
			ex[x.GetUpperBound()] = x.Exemplar
		}
	}
	out := make([]*dto.Bucket, 0, len(bounds))
	for _, ub := range bounds {
		out = append(out, &dto.Bucket{
			UpperBound:      proto.Float64(ub),
			CumulativeCount: proto.Uint64(cumulativeAt(base, ub) + cumulativeAt(live, ub)),
			Exemplar:        ex[ub],
		})
	}
	return out
}

// nativeBuckets expands spans and deltas into absolute counts by index.
func nativeBuckets(spans []*dto.BucketSpan, deltas []int64) map[int32]int64 {
	out := map[int32]int64{}
	var idx int32
	var cur int64
	d := 0
	for i, s := range spans {
		if i == 0 {
			idx = s.GetOffset()
		} else {
			idx += s.GetOffset()
		}
		for j := uint32(0); j < s.GetLength(); j++ {
			if d < len(deltas) {
				cur += deltas[d]
				d++
			}
			out[idx] += cur
			idx++
		}
	}
	return out
}

// reduce maps bucket indices from schema from to the coarser schema to.
func reduce(b map[int32]int64, from, to int32) map[int32]int64 {
	if from == to {
		return b
	}
	out := make(map[int32]int64, len(b))
	shift := from - to
	for i, c := range b {
		out[((i-1)>>shift)+1] += c
	}
	return out
}

// encodeNative turns absolute counts by index back into spans and deltas.
func encodeNative(b map[int32]int64) ([]*dto.BucketSpan, []int64) {
	idx := make([]int32, 0, len(b))
	for i, c := range b {
		if c != 0 {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	var spans []*dto.BucketSpan
	var deltas []int64
	var prevCount int64
	var prev int32
	for n, i := range idx {
		switch {
		case n == 0:
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(i), Length: proto.Uint32(1)})
		case i == prev+1:
			spans[len(spans)-1].Length = proto.Uint32(spans[len(spans)-1].GetLength() + 1)
		default:
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(i - prev - 1), Length: proto.Uint32(1)})
		}
		deltas = append(deltas, b[i]-prevCount)
		prevCount = b[i]
		prev = i
	}
	return spans, deltas
}

func mergeNative(b, h *dto.Histogram) {
	schema := min(b.GetSchema(), h.GetSchema())
	pos := reduce(nativeBuckets(h.PositiveSpan, h.PositiveDelta), h.GetSchema(), schema)
	neg := reduce(nativeBuckets(h.NegativeSpan, h.NegativeDelta), h.GetSchema(), schema)
	for i, c := range reduce(nativeBuckets(b.PositiveSpan, b.PositiveDelta), b.GetSchema(), schema) {
		pos[i] += c
	}
	for i, c := range reduce(nativeBuckets(b.NegativeSpan, b.NegativeDelta), b.GetSchema(), schema) {
		neg[i] += c
	}
	h.Schema = proto.Int32(schema)
	h.ZeroThreshold = proto.Float64(math.Max(b.GetZeroThreshold(), h.GetZeroThreshold()))
	h.ZeroCount = proto.Uint64(b.GetZeroCount() + h.GetZeroCount())
	h.PositiveSpan, h.PositiveDelta = encodeNative(pos)
	h.NegativeSpan, h.NegativeDelta = encodeNative(neg)
	if len(h.PositiveSpan) == 0 && len(h.NegativeSpan) == 0 && h.GetZeroThreshold() == 0 {
		// The no-op span that marks a native histogram without buckets.
		h.PositiveSpan = []*dto.BucketSpan{{Offset: proto.Int32(0), Length: proto.Uint32(0)}}
	}
}
