package ingest

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ndjson"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// TestSnapshotSqueezedWhileArriving is the state attack's big snapshot (a
// workflow of 20,000 agents, a 4 MB line) arriving in the tap's 64 KiB
// chunks: the framer holds what the decoder reads (DefaultCaps' Agents +
// Phases elements), not the line, and the Tracker sees what it sees when
// the line arrives in one piece, which is framed without copying and not
// squeezed.
func TestSnapshotSqueezedWhileArriving(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"system","subtype":"task_progress","task_id":"w","session_id":"s","workflow_progress":[`)
	b.WriteString(`{"type":"workflow_phase","index":1,"title":"scan"}`)
	for i := range 20000 {
		fmt.Fprintf(&b, `,{"type":"workflow_agent","index":%d,"agentId":"v1:%052d","label":"scan:%05d","state":"done","startedAt":1796205994000,"endedAt":1796205995000,"phaseIndex":1}`, i+1, i, i)
	}
	b.WriteString("]}\n")
	snapshot := b.String()
	if len(snapshot) < 4<<20-(400<<10) || len(snapshot) > ndjson.DefaultMaxLine {
		t.Fatalf("the snapshot is %d bytes: not the state attack's, just under the framer's cap", len(snapshot))
	}
	stream := []byte(testStarted + snapshot + testComplete)

	run := func(chunk int) (*Recorder, *Stats, int) {
		var rec Recorder
		p := NewPipeline(PipelineOptions{Tracker: TrackerOptions{Sinks: []Sink{&rec}}})
		held := 0
		for off := 0; off < len(stream); off += chunk {
			p.Write(tap.SourceStdout, stream[off:min(off+chunk, len(stream))])
			held = max(held, p.framers[tap.SourceStdout].Held())
		}
		p.Close()
		return &rec, p.Stats(), held
	}
	whole, wholeStats, _ := run(len(stream))
	chunked, chunkedStats, held := run(64 << 10)

	caps := DefaultCaps()
	if limit := 1 << 20; held > limit {
		t.Errorf("the framer held %d bytes of the snapshot, want at most %d (the %d elements decoded, not the %d-byte line)", held, limit, caps.Agents+caps.Phases, len(snapshot))
	}
	if !reflect.DeepEqual(chunked.Events, whole.Events) {
		t.Errorf("the Tracker saw otherwise: kinds %v, whole %v", chunked.Kinds(), whole.Kinds())
	}
	for _, v := range Violations() {
		if a, b := chunkedStats.Violations(v), wholeStats.Violations(v); a != b {
			t.Errorf("violation %s: %d, whole %d", v, a, b)
		}
	}
	for _, r := range streamjson.Reasons() {
		if a, b := chunkedStats.Rejected(r), wholeStats.Rejected(r); a != b {
			t.Errorf("rejected %s: %d, whole %d", r, a, b)
		}
	}
	if a, b := chunkedStats.Bytes(tap.SourceStdout), wholeStats.Bytes(tap.SourceStdout); a != b || a != int64(len(stream)) {
		t.Errorf("bytes counted %d, whole %d, stream %d", a, b, len(stream))
	}
	if got := chunkedStats.Violations(ViolationOverCapacity); got != 1 {
		t.Errorf("over_capacity %d, want 1 (the agent cap met once)", got)
	}
	var agents int
	for _, e := range chunked.Events {
		if e.Kind == RunFinished {
			agents = len(e.Run.Agents)
		}
	}
	if agents != caps.Agents {
		t.Errorf("the finished run has %d agents, want the cap %d", agents, caps.Agents)
	}
}
