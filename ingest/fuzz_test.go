// Native fuzz targets for package ingest, seeded with every line of every
// recording in ../testdata/corpus plus crafted inputs:
//
//   - FuzzFramer: any bytes written in any pieces frame to the same lines as
//     one write, and as bytes.Split on "\n" with CR trimming (prefixes for
//     lines over the cap); Len adds up to the input; nothing kept exceeds the cap.
//   - FuzzDecoder: any line decodes to an event or a reason, never both, and
//     never panics; every decoded string is valid UTF-8 without control or
//     bidi characters and within its bound; numbers and the counts of bad
//     fields and entries are never negative; At is left to the pipeline.
//   - FuzzDecoderReuse: decoding a line after another line gives the same
//     event as a fresh decoder (no state leaks between lines).
//   - FuzzTracker: the input is a program over a small alphabet of realistic
//     events (3 tasks × 3 run ids × 4 agents × every state spelling, updates
//     and notifications with every status, duplicates, interrupts, clock
//     jumps), so the fuzzer explores orderings rather than JSON syntax;
//     lifecycle invariants are checked after every step and after Close.
//
// The lifecycle invariants (invariantSink): one terminal per run (one
// RunFinished or TaskEnded, one RunFinalized, nothing after it) and a
// terminal status that never changes; agents never vanish, their states
// only move forward, each starts at most once and ends exactly once; every
// counter of Stats only grows, and each violation counted is reported to
// the sinks once. FuzzTracker checks them after every event; the framer
// and decoder targets also run their input as a stream through a whole
// Pipeline and check them there (with its line and byte counts).
//
// `go test ./ingest/` runs the seeds only; run one target at a time with
// `go test -fuzz=FuzzTracker -fuzztime=60s ./ingest/`.
package ingest_test

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/ndjson"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// ---------------------------------------------------------------- framer

type fLine struct {
	Data      string
	Len       int64
	Truncated bool
}

func frameChunks(t *testing.T, max int, chunks [][]byte) []fLine {
	var out []fLine
	f := ndjson.NewFramer(max, func(l ndjson.Line) {
		if len(l.Data) > max {
			t.Fatalf("line kept %d bytes, cap %d", len(l.Data), max)
		}
		out = append(out, fLine{string(l.Data), l.Len, l.Truncated})
	})
	for _, c := range chunks {
		f.Write(c)
	}
	f.Flush()
	if p := f.Pending(); p != 0 {
		t.Fatalf("Pending after Flush = %d", p)
	}
	return out
}

// refLines frames data with bytes.Split.
func refLines(data []byte, max int) []fLine {
	var out []fLine
	parts := bytes.Split(data, []byte("\n"))
	for i, p := range parts {
		terminated := i < len(parts)-1
		if !terminated && len(p) == 0 {
			break
		}
		l := fLine{Len: int64(len(p))}
		if terminated {
			l.Len++
		}
		switch {
		case len(p) > max:
			l.Data, l.Truncated = string(p[:max]), true
		case terminated:
			l.Data = string(bytes.TrimSuffix(p, []byte("\r")))
		default:
			l.Data = string(p)
		}
		out = append(out, l)
	}
	return out
}

func FuzzFramer(f *testing.F) {
	for i, l := range corpusLines(f) {
		f.Add(append(l, '\n'), []byte{byte(i), 3, 200, 1}, uint16(0))
		f.Add(append(l, '\r', '\n'), []byte{7, byte(i)}, uint16(64+i))
	}
	f.Add([]byte("a\r\nbb\n\nccc\r"), []byte{1, 1, 1, 1}, uint16(2))
	f.Add([]byte("abc\r\n\rx\ny\r"), []byte{0, 2}, uint16(3))
	f.Add([]byte("\n\n\r\n"), []byte{}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, cuts []byte, capSel uint16) {
		max := int(capSel)
		if max == 0 {
			max = 1 << 20
		}
		// The cut bytes choose piece lengths (0 is an empty write).
		var chunks [][]byte
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(int(cuts[i])%(2*max+3), len(rest))
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		whole := frameChunks(t, max, [][]byte{data})
		split := frameChunks(t, max, chunks)
		if !reflect.DeepEqual(whole, split) {
			t.Fatalf("split framing differs\nwhole: %+v\nsplit: %+v\nchunks: %q", whole, split, chunks)
		}
		if ref := refLines(data, max); !reflect.DeepEqual(whole, ref) {
			t.Fatalf("framing differs from bytes.Split\n got: %+v\nwant: %+v", whole, ref)
		}
		var sum int64
		for _, l := range whole {
			sum += l.Len
		}
		if sum != int64(len(data)) {
			t.Fatalf("Len sum %d, input %d", sum, len(data))
		}
		// The same pieces through a whole pipeline, at its own line cap.
		pipelineInvariants(t, chunks, refLines(data, ndjson.DefaultMaxLine))
	})
}

// ---------------------------------------------------------------- decoder

// Bounds of decode.go (maxIDLen, maxNameLen, maxTextLen, maxPreviewLen).
const (
	boundID      = 128
	boundName    = 256
	boundText    = 1024
	boundPreview = 512
)

func checkClean(t *testing.T, field, s string, bound int) {
	t.Helper()
	if len(s) > bound {
		t.Errorf("%s: %d bytes, bound %d", field, len(s), bound)
	}
	if !utf8.ValidString(s) {
		t.Errorf("%s: invalid UTF-8 %q", field, s)
	}
	if strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") || strings.Contains(s, "  ") {
		t.Errorf("%s: uncollapsed spaces %q", field, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) ||
			(r >= 0x2066 && r <= 0x2069) || r == 0x200b || r == 0x200c || r == 0x200d || r == 0x2060 || r == 0xfeff {
			t.Errorf("%s: control or bidi character %U in %q", field, r, s)
		}
	}
}

func checkEvent(t *testing.T, ev *streamjson.Event, keep bool) {
	t.Helper()
	if ev.Kind == streamjson.KindNone || ev.Kind > streamjson.KindResult {
		t.Errorf("kind %v", ev.Kind)
	}
	for name, s := range map[string]string{"SessionID": ev.SessionID, "TaskID": ev.TaskID, "RunID": ev.RunID,
		"ToolUseID": ev.ToolUseID, "TaskType": ev.TaskType, "ParentTaskID": ev.ParentTaskID, "PatchStatus": ev.PatchStatus,
		"Status": ev.Status, "Reason": ev.Reason, "RequestID": ev.RequestID, "RequestSubtype": ev.RequestSubtype} {
		checkClean(t, name, s, boundID)
	}
	checkClean(t, "WorkflowName", ev.WorkflowName, boundName)
	checkClean(t, "Description", ev.Description, boundText)
	checkClean(t, "PatchError", ev.PatchError, boundText)
	checkClean(t, "Summary", ev.Summary, boundPreview)
	checkClean(t, "ResultSubtype", ev.ResultSubtype, boundID)
	nums := []int64{ev.Usage.TotalTokens, ev.Usage.ToolUses, ev.Usage.DurationMs, ev.PatchEndTime, ev.DurationMs}
	if len(ev.Models) > streamjson.MaxResultModels {
		t.Errorf("%d models", len(ev.Models))
	}
	costs := []float64{ev.TotalCostUSD}
	for _, m := range ev.Models {
		checkClean(t, "Model", m.Model, boundID)
		if m.Model == "" {
			t.Errorf("a model without a name")
		}
		nums = append(nums, m.Tokens[:]...)
		costs = append(costs, m.CostUSD)
		// An unknown value reads 0: it can never pass for a known one.
		for k, v := range m.Tokens {
			if m.Known&(streamjson.KnownTokens<<k) == 0 && v != 0 {
				t.Errorf("%s: unknown token count %d reads %d", m.Model, k, v)
			}
		}
		if m.Known&^streamjson.KnownAll != 0 || m.Known&streamjson.KnownCost == 0 && m.CostUSD != 0 {
			t.Errorf("%s: Known %#x, cost %v", m.Model, m.Known, m.CostUSD)
		}
	}
	if !ev.HasCost && ev.TotalCostUSD != 0 {
		t.Errorf("unknown total_cost_usd reads %v", ev.TotalCostUSD)
	}
	for _, c := range costs {
		if !(c >= 0 && c <= 1e6) {
			t.Errorf("cost %v out of range", c)
		}
	}
	if !keep && ev.Summary != "" {
		t.Errorf("summary kept without KeepPreviews")
	}
	if !ev.HasProgress && len(ev.Entries) > 0 {
		t.Errorf("entries without HasProgress")
	}
	for i := range ev.Entries {
		e := &ev.Entries[i]
		checkClean(t, "Title", e.Title, boundName)
		checkClean(t, "AgentID", e.AgentID, boundID)
		checkClean(t, "Label", e.Label, boundName)
		checkClean(t, "State", e.State, boundID)
		checkClean(t, "PhaseTitle", e.PhaseTitle, boundName)
		checkClean(t, "Error", e.Error, boundText)
		checkClean(t, "ResultPreview", e.ResultPreview, boundPreview)
		checkClean(t, "PromptPreview", e.PromptPreview, boundPreview)
		if !keep && (e.ResultPreview != "" || e.PromptPreview != "") {
			t.Errorf("previews kept without KeepPreviews")
		}
		nums = append(nums, int64(e.Index), int64(e.PhaseIndex), e.QueuedAt, e.StartedAt, e.EndedAt,
			e.LastProgressAt, e.DurationMs, e.Tokens, e.ToolCalls)
	}
	for _, n := range nums {
		if n < 0 || n > 1<<53 {
			t.Errorf("number %d out of range", n)
		}
	}
	if ev.Times() < 0 {
		t.Errorf("Times %d", ev.Times())
	}
	if ev.BadFields < 0 || ev.BadEntries < 0 || ev.WrittenAt < 0 {
		t.Errorf("BadFields %d, BadEntries %d, WrittenAt %d", ev.BadFields, ev.BadEntries, ev.WrittenAt)
	}
	// Snapshots ride on task_progress and, the run's final one, on
	// task_notification (issue 28); only those two can be resent.
	snapshot := ev.Kind == streamjson.KindTaskProgress || ev.Kind == streamjson.KindTaskNotification
	if !snapshot && (ev.BadEntries != 0 || ev.HasProgress || ev.Resent) {
		t.Errorf("%v with BadEntries %d, HasProgress %v", ev.Kind, ev.BadEntries, ev.HasProgress)
	}
}

func decoderSeeds(f *testing.F) [][]byte {
	seeds := corpusLines(f)
	for _, s := range []string{
		`{"type":"system","subtype":"task_started",`,
		`hello`,
		`{"type":"system","subtype":"task_started","task_id":5}`,
		`{"type":"system","subtype":"task_updated","task_id":"w"}`,
		`{"type":"system","subtype":"task_progress","task_id":"w\u202e\u0000x  y","workflow_progress":[{"type":"workflow_agent","index":-1,"startedAt":1e300,"label":"\u001b[31mred\t\tx ","state":"done","cached":true,"resultPreview":"p"}]}`,
		`{"type":"system","subtype":"task_progress","task_id":"w","workflow_progress":null,"usage":{"total_tokens":-5,"duration_ms":"x"}}`,
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"stopped","summary":"s\u0085\u2066","usage":{"duration_ms":9007199254740993}}`,
		`{"type":"control_request","request_id":"x","request":{"subtype":"interrupt","session_id":"S"}}`,
		`{"type":"control_response","response":{"subtype":"success","request_id":"init","response":{"account":{"token":"CANARY-TOKEN"}}}}`,
		"{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"\xff\xfe\"}",
		`{"type":"system","subtype":"task_progress","task_id":"w","workflow_progress":[{"type":"workflow_phase","index":1,"title":"` + strings.Repeat("é", 300) + `"}]}`,
		// Bad fields cost themselves only; bad elements are skipped.
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"completed","usage":{"total_tokens":"9","duration_ms":1e400},"written_at":"2026-11-30T10:15:02.123Z"}`,
		`{"type":"system","subtype":"task_updated","task_id":"w","patch":"killed","written_at":"nope"}`,
		`{"type":"system","subtype":"task_progress","task_id":"w","workflow_progress":[1,"x",[],true,null,{"type":5},{"index":1},{"type":"workflow_agent","index":-1},{"type":"workflow_agent","index":1.5},{"type":"workflow_agent","index":1e20},{"type":"workflow_agent","index":"3"},{"type":"workflow_agent","index":2,"phaseIndex":-1,"tokens":"x","cached":"y"}]}`,
		`{"type":"system","subtype":"task_progress","task_id":"w","workflow_progress":{"type":"workflow_agent"}}`,
		// Names are case-sensitive.
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"completed","Status":"failed","TASK_ID":"x","SubType":"task_started","Type":"user"}`,
		`{"Type":"system","SubType":"task_notification","Task_ID":"w","Status":"completed"}`,
		// Issue 28: a notification carrying the final snapshot, resent
		// snapshots, endedWithRun, a redacted error, a restart reason.
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"stopped","reason":"worker_restart","resent":false,"workflow_progress":[{"type":"workflow_agent","index":1,"state":"error","startedAt":1796206130334,"queuedAt":1796206130329,"lastProgressAt":1796206130335,"error":"error","endedWithRun":"stopped"}]}`,
		`{"type":"system","subtype":"task_progress","task_id":"w","resent":true,"workflow_progress":[{"type":"workflow_agent","index":1,"state":"start","endedWithRun":["x"]}]}`,
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"completed","resent":"yes","workflow_progress":"x"}`,
		// Result lines: cumulative cost, a reset (a value going down), refused numbers.
		`{"type":"result","session_id":"s","total_cost_usd":0.5,"modelUsage":{"m":{"inputTokens":10,"costUSD":0.5}},"duration_ms":9}`,
		`{"type":"result","session_id":"s","total_cost_usd":0.1,"modelUsage":{"m":{"inputTokens":-1,"outputTokens":1e300,"costUSD":-2},"":{}},"duration_ms":-1,"is_error":"x"}`,
		// Absent, null and bad values are unknown, each apart (issue 28).
		`{"type":"result","session_id":"s","total_cost_usd":"0.7","modelUsage":{"m":{"inputTokens":null,"outputTokens":[2],"cacheReadInputTokens":3,"costUSD":{"v":1}},"n":"x"}}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

func FuzzDecoder(f *testing.F) {
	for _, s := range decoderSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, keep := range []bool{false, true} {
			d := streamjson.NewDecoder(streamjson.DecodeOptions{KeepPreviews: keep})
			for _, src := range []tap.Source{tap.SourceStdout, tap.SourceStdin} {
				ev, reason := d.Decode(src, line)
				switch {
				case reason != streamjson.ReasonNone && ev != nil:
					t.Fatalf("both an event and reason %v", reason)
				case reason != streamjson.ReasonNone:
					if reason != streamjson.ReasonInvalidJSON && reason != streamjson.ReasonBadShape {
						t.Fatalf("reason %v from Decode", reason)
					}
				case ev != nil:
					if ev.Source != src {
						t.Errorf("source %v, want %v", ev.Source, src)
					}
					checkEvent(t, ev, keep)
				}
			}
		}
		// Whatever the line is, a stream of it ends every run it opens once.
		l := append(bytes.TrimRight(line, "\n"), '\n')
		pipelineInvariants(t, [][]byte{l}, refLines(l, ndjson.DefaultMaxLine))
	})
}

// snapshotEvent deep-copies an event.
func snapshotEvent(ev *streamjson.Event) *streamjson.Event {
	if ev == nil {
		return nil
	}
	c := *ev
	c.Entries = append([]streamjson.Entry(nil), ev.Entries...)
	if len(c.Entries) == 0 {
		c.Entries = nil
	}
	return &c
}

func FuzzDecoderReuse(f *testing.F) {
	seeds := decoderSeeds(f)
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)])
	}
	f.Add([]byte(`{"type":"system","subtype":"task_progress","task_id":"a","workflow_progress":[{"type":"workflow_agent","index":1,"state":"done","cached":true,"error":"boom","startedAt":5,"endedAt":9}]}`),
		[]byte(`{"type":"system","subtype":"task_progress","task_id":"b","workflow_progress":[{"type":"workflow_agent","index":1,"state":"done"}]}`))
	// resent and a notification's snapshot must not leak into the next line.
	f.Add([]byte(`{"type":"system","subtype":"task_notification","task_id":"a","status":"stopped","reason":"worker_restart","resent":true,"workflow_progress":[{"type":"workflow_agent","index":1,"state":"error","endedWithRun":"stopped"}]}`),
		[]byte(`{"type":"system","subtype":"task_notification","task_id":"a","status":"completed"}`))
	f.Fuzz(func(t *testing.T, prev, line []byte) {
		fresh := streamjson.NewDecoder(streamjson.DecodeOptions{KeepPreviews: true})
		ev, r := fresh.Decode(tap.SourceStdout, line)
		want := snapshotEvent(ev)
		reused := streamjson.NewDecoder(streamjson.DecodeOptions{KeepPreviews: true})
		reused.Decode(tap.SourceStdout, prev)
		ev2, r2 := reused.Decode(tap.SourceStdout, line)
		got := snapshotEvent(ev2)
		if r != r2 || !reflect.DeepEqual(want, got) {
			t.Fatalf("decoding after %q changed the result\nfresh:  %+v %v\nreused: %+v %v", prev, want, r, got, r2)
		}
		// The two lines as a stream: one terminal per run, counters monotonic.
		stream := append(append(append([]byte(nil), prev...), '\n'), line...)
		pipelineInvariants(t, [][]byte{prev, []byte("\n"), line}, refLines(stream, ndjson.DefaultMaxLine))
	})
}

// ---------------------------------------------------------------- tracker

var (
	fzTasks    = [...]string{"wA", "wB", "tC"}
	fzRuns     = [...]string{"", "r1", "r2"}
	fzTypes    = [...]string{"local_workflow", "local_workflow", "local_workflow", "Bash", "local_agent", "Agent"}
	fzStatuses = [...]string{"completed", "failed", "stopped", "killed", "cancelled", "aborted", "running", "paused", "pending", "exploded"}
	fzSessions = [...]string{"S1", "S2", ""}
)

// agentKey identifies an agent: the Tracker's run pointer and the index.
type agentKey struct {
	run *ingest.Run
	idx int
}

// invariantSink checks the lifecycle as it is emitted: one terminal per
// run (RunFinished or TaskEnded once, then RunFinalized once, nothing
// after), a terminal status that never changes, agents that never vanish
// and whose states only move forward, one AgentStarted and one AgentEnded
// per agent (never started after it ended), and one ViolationSeen per
// counted violation.
type invariantSink struct {
	t          *testing.T
	runs       []*ingest.Run // in order of first appearance
	seen       map[*ingest.Run]bool
	finished   map[*ingest.Run]int
	terminal   map[*ingest.Run]ingest.RunStatus // status at RunFinished/TaskEnded
	finalized  map[*ingest.Run]int
	started    map[agentKey]int
	ended      map[agentKey]int
	state      map[agentKey]ingest.AgentState
	nAgents    map[*ingest.Run]int
	violations map[ingest.Violation]int64
	final      map[*ingest.Run]ingest.Run // copy at RunFinalized
	spare      []int64                    // checkCounters' other buffer
	calls      int                        // ModelCallSeen emitted
	runCalls   map[*ingest.Run]int64      // ... of them carrying their open run
	heldBack   map[[2]string]int64        // ... of a run whose RunStarted is held back (no Run on them)
	stalled    map[*ingest.Run]bool       // between RunStalled and RunResumed
	agentStall map[agentKey]bool          // between AgentStalled and AgentResumed
	parentOf   map[[2]string][2]string    // a nested run's launcher, by task and run id
	events     int                        // lifecycle events observed
	known      map[[2]string]bool         // every run seen, by task and run id
	links      map[[2]string][2][2]string // a run's ParentLink and Resumes, by task and run id
}

func newInvariantSink(t *testing.T) *invariantSink {
	return &invariantSink{t: t, seen: map[*ingest.Run]bool{}, finished: map[*ingest.Run]int{},
		terminal: map[*ingest.Run]ingest.RunStatus{}, finalized: map[*ingest.Run]int{},
		started: map[agentKey]int{}, ended: map[agentKey]int{}, state: map[agentKey]ingest.AgentState{},
		nAgents: map[*ingest.Run]int{}, violations: map[ingest.Violation]int64{}, final: map[*ingest.Run]ingest.Run{},
		runCalls: map[*ingest.Run]int64{}, heldBack: map[[2]string]int64{}, stalled: map[*ingest.Run]bool{}, agentStall: map[agentKey]bool{}, parentOf: map[[2]string][2]string{},
		known: map[[2]string]bool{}, links: map[[2]string][2][2]string{}}
}

// checkParent: a nested run's launcher is set once, is never the run
// itself, and the launchers never form a cycle.
func (s *invariantSink) checkParent(r *ingest.Run) {
	t, me := s.t, [2]string{r.TaskID, r.RunID}
	if r.SpawnDepth < 0 || r.SpawnDepth > streamjson.MaxSpawnDepth {
		t.Fatalf("run %s/%s: spawn depth %d", r.TaskID, r.RunID, r.SpawnDepth)
	}
	defer func() { s.known[me] = true }()
	// Every run named (launcher, linked launcher, resumed run, and their
	// roots) is one the stream made (seen by the sink, or fed to the
	// Tracker: see FuzzTracker), and is not this one; a link, once set,
	// stays.
	deref := func(p *ingest.AgentRef) ingest.AgentRef {
		if p == nil {
			return ingest.AgentRef{}
		}
		if p.TaskID == "" {
			t.Fatalf("run %s/%s: a link without a task: %+v", r.TaskID, r.RunID, *p)
		}
		return *p
	}
	linked, resumed := deref(r.ParentLink), deref(r.Resumes)
	for _, ref := range []ingest.AgentRef{r.Parent, linked, resumed} {
		if ref.TaskID == "" {
			continue
		}
		for _, k := range [][2]string{{ref.TaskID, ref.RunID}, {ref.RootTask, ref.RootRun}} {
			if k == me || !s.known[k] {
				t.Fatalf("run %s/%s names run %v, never seen before it (%+v)", r.TaskID, r.RunID, k, ref)
			}
		}
	}
	links := [2][2]string{{linked.TaskID, linked.RunID}, {resumed.TaskID, resumed.RunID}}
	// (An adopted run learns its links from a task_started that comes
	// after its first snapshot: unset to set is fine, never a change.)
	for i, prev := range s.links[me] {
		if prev != ([2]string{}) && prev != links[i] {
			t.Fatalf("run %s/%s: links %v became %v", r.TaskID, r.RunID, s.links[me], links)
		}
	}
	s.links[me] = links
	if r.Parent.TaskID == "" {
		if _, had := s.parentOf[me]; had {
			t.Fatalf("run %s/%s lost its launcher", r.TaskID, r.RunID)
		}
		return
	}
	p := [2]string{r.Parent.TaskID, r.Parent.RunID}
	if prev, had := s.parentOf[me]; had && prev != p {
		t.Fatalf("run %s/%s: launcher %v became %v", r.TaskID, r.RunID, prev, p)
	}
	if p == me || (r.Parent.RootTask == r.TaskID && r.Parent.RootRun == r.RunID) {
		t.Fatalf("run %s/%s launched by itself: %+v", r.TaskID, r.RunID, r.Parent)
	}
	s.parentOf[me] = p
	for k, n := p, 0; ; n++ {
		next, ok := s.parentOf[k]
		if !ok {
			break
		}
		if k == me || n > len(s.parentOf) {
			t.Fatalf("run %s/%s: its launchers form a cycle", r.TaskID, r.RunID)
		}
		k = next
	}
}

func (s *invariantSink) Observe(l ingest.Lifecycle) {
	t := s.t
	s.events++
	checkLifecycleText(t, l)
	if l.Kind == ingest.ViolationSeen {
		s.violations[l.Violation]++
	}
	if l.Kind == ingest.ModelCallSeen {
		s.calls++
		switch c := l.Call; {
		case l.Run != nil:
			s.runCalls[l.Run]++
		case c.Scope == ingest.CallWorkflow && !c.Late:
			s.heldBack[[2]string{c.TaskID, c.RunID}]++
		}
	}
	if l.Turn != nil {
		s.checkTurn(l.Turn)
	}
	r := l.Run
	if r == nil {
		return
	}
	if !s.seen[r] {
		s.seen[r] = true
		s.runs = append(s.runs, r)
	}
	if s.finalized[r] > 0 {
		t.Fatalf("%v for run %s/%s after its RunFinalized", l.Kind, r.TaskID, r.RunID)
	}
	// A terminal status is final: no later event changes it.
	if st, ok := s.terminal[r]; ok && r.Status != st {
		t.Fatalf("run %s/%s: terminal status %v became %v (%v)", r.TaskID, r.RunID, st, r.Status, l.Kind)
	}
	// Agents never vanish (their indices are unique, so the count is
	// enough); their states only move forward; a final state never changes.
	if len(r.Agents) < s.nAgents[r] {
		t.Fatalf("run %s/%s: %d agents, %d before (%v)", r.TaskID, r.RunID, len(r.Agents), s.nAgents[r], l.Kind)
	}
	s.nAgents[r] = len(r.Agents)
	s.checkParent(r)
	stalledN := 0
	for i := range r.Agents {
		a := &r.Agents[i]
		k := agentKey{r, a.Index}
		// An agent is stalled exactly between its AgentStalled and its
		// AgentResumed, and the run counts its stalled agents.
		if a.Stalled {
			stalledN++
		}
		if a.Stalled != s.agentStall[k] && (l.Agent == nil || l.Agent.Index != a.Index || (l.Kind != ingest.AgentStalled && l.Kind != ingest.AgentResumed)) {
			t.Fatalf("run %s agent %d: stalled=%v, the sink saw %v (%v)", r.TaskID, a.Index, a.Stalled, s.agentStall[k], l.Kind)
		}
		if prev, ok := s.state[k]; ok {
			if prev.Final() && a.State != prev {
				t.Fatalf("run %s agent %d: final state %v became %v (%v)", r.TaskID, a.Index, prev, a.State, l.Kind)
			}
			if !prev.Final() && !a.State.Final() && a.State < prev {
				t.Fatalf("run %s agent %d: %v went back to %v", r.TaskID, a.Index, prev, a.State)
			}
		}
		s.state[k] = a.State
	}
	if stalledN != r.AgentsStalled {
		t.Fatalf("run %s/%s: %d agents stalled, AgentsStalled %d (%v)", r.TaskID, r.RunID, stalledN, r.AgentsStalled, l.Kind)
	}
	switch l.Kind {
	case ingest.AgentStalled, ingest.AgentResumed:
		// Agent stalls alternate with resumes, a stall only of a started,
		// live agent of an unfinished run, and neither after its end.
		a := l.Agent
		if a == nil {
			t.Fatalf("%v without an agent", l.Kind)
		}
		k := agentKey{r, a.Index}
		stall := l.Kind == ingest.AgentStalled
		if s.agentStall[k] == stall || s.ended[k] > 0 || (stall && (r.Finished || a.State != ingest.AgentRunning)) {
			t.Fatalf("run %s agent %d: %v while stalled=%v, ended=%d, state %v, run finished=%v", r.TaskID, a.Index, l.Kind, s.agentStall[k], s.ended[k], a.State, r.Finished)
		}
		s.agentStall[k] = stall
	case ingest.RunFinished, ingest.TaskEnded:
		if r.AgentsStalled != 0 {
			t.Fatalf("run %s/%s finished with %d agents stalled", r.TaskID, r.RunID, r.AgentsStalled)
		}
		if l.Kind == ingest.RunFinished != r.Workflow {
			t.Fatalf("%v for a run with Workflow=%v", l.Kind, r.Workflow)
		}
		if s.finished[r]++; s.finished[r] > 1 {
			t.Fatalf("run %s/%s finished twice", r.TaskID, r.RunID)
		}
		if r.Status == ingest.StatusRunning {
			t.Fatalf("run %s/%s finished with status running", r.TaskID, r.RunID)
		}
		s.terminal[r] = r.Status
	case ingest.RunStalled, ingest.RunResumed:
		// Stalls alternate with resumes, only while the run is unfinished.
		if s.stalled[r] == (l.Kind == ingest.RunStalled) || (l.Kind == ingest.RunStalled && r.Finished) {
			t.Fatalf("run %s/%s: %v while stalled=%v, finished=%v", r.TaskID, r.RunID, l.Kind, s.stalled[r], r.Finished)
		}
		s.stalled[r] = l.Kind == ingest.RunStalled
	case ingest.RunFinalized:
		if s.stalled[r] {
			t.Fatalf("run %s/%s finalized while stalled", r.TaskID, r.RunID)
		}
		delete(s.parentOf, [2]string{r.TaskID, r.RunID}) // its ids may start another run
		s.finalized[r]++
		// A run's cost is exactly the calls attributed to it while open,
		// and the sum of its agents'.
		var agents int64
		for i := range r.Agents {
			agents += r.Agents[i].Cost.Calls
		}
		k := [2]string{r.TaskID, r.RunID}
		attributed := s.runCalls[r] + s.heldBack[k]
		delete(s.heldBack, k)
		if r.Cost.Calls != attributed || agents != r.Cost.Calls {
			t.Fatalf("run %s/%s: cost of %d calls, %d attributed to it, %d on its agents", r.TaskID, r.RunID, r.Cost.Calls, attributed, agents)
		}
		if s.finished[r] != 1 {
			t.Fatalf("run %s/%s finalized after %d RunFinished", r.TaskID, r.RunID, s.finished[r])
		}
		if r.Status == ingest.StatusRunning || !r.Finished || !r.Finalized {
			t.Fatalf("run %s/%s finalized with status %v finished=%v", r.TaskID, r.RunID, r.Status, r.Finished)
		}
		for i := range r.Agents {
			a := &r.Agents[i]
			if !a.State.Final() {
				t.Fatalf("run %s agent %d finalized in state %v", r.TaskID, a.Index, a.State)
			}
		}
		s.final[r] = r.Clone()
	case ingest.AgentEnded:
		if l.Agent == nil || !l.Agent.State.Final() {
			t.Fatalf("AgentEnded without a final agent: %+v", l.Agent)
		}
		k := agentKey{r, l.Agent.Index}
		if s.agentStall[k] {
			t.Fatalf("run %s agent %d ended while stalled", r.TaskID, l.Agent.Index)
		}
		if s.ended[k]++; s.ended[k] > 1 {
			t.Fatalf("run %s agent %d ended twice", r.TaskID, l.Agent.Index)
		}
	case ingest.AgentStarted:
		if l.Agent == nil || l.Agent.Start <= 0 {
			t.Fatalf("AgentStarted without a start: %+v", l.Agent)
		}
		k := agentKey{r, l.Agent.Index}
		if s.started[k]++; s.started[k] > 1 {
			t.Fatalf("run %s agent %d started twice", r.TaskID, l.Agent.Index)
		}
		if s.ended[k] > 0 {
			t.Fatalf("run %s agent %d started after it ended", r.TaskID, l.Agent.Index)
		}
	}
}

// checkClosed checks, after the tracker's Close, that every run seen ended
// exactly once and every agent of it exactly once.
// checkCalls: after Close every model call handed to the Tracker was
// emitted exactly once.
func (s *invariantSink) checkCalls(handed int) {
	if s.calls != handed {
		s.t.Fatalf("%d model calls handed, %d emitted", handed, s.calls)
	}
}

func (s *invariantSink) checkClosed() {
	t := s.t
	for _, r := range s.runs {
		if s.finalized[r] != 1 {
			t.Fatalf("run %s/%s finalized %d times after Close", r.TaskID, r.RunID, s.finalized[r])
		}
		fr := s.final[r]
		for _, a := range fr.Agents {
			if n := s.ended[agentKey{r, a.Index}]; n != 1 {
				t.Fatalf("run %s agent %d: AgentEnded %d times", r.TaskID, a.Index, n)
			}
		}
	}
}

// checkCounters checks that no counter of st went down since last (and
// returns the new reading), and that each violation counted was also
// reported to the sinks once.
func (s *invariantSink) checkCounters(st *ingest.Stats, last []int64) []int64 {
	t := s.t
	cur := counters(st, s.spare)
	for i := range cur {
		if last != nil && cur[i] < last[i] {
			t.Fatalf("counter %d went down: %d → %d", i, last[i], cur[i])
		}
	}
	s.spare = last
	for _, v := range ingest.Violations() {
		if n := st.Violations(v); n != s.violations[v] {
			t.Fatalf("violation %v: counted %d, reported %d", v, n, s.violations[v])
		}
	}
	return cur
}

// counters reads every counter of st into buf (reused: targets read them
// after every step).
func counters(st *ingest.Stats, buf []int64) []int64 {
	c := append(buf[:0], st.Events())
	for _, v := range ingest.Violations() {
		c = append(c, st.Violations(v))
	}
	for _, r := range streamjson.Reasons() {
		c = append(c, st.Rejected(r))
	}
	for _, src := range []tap.Source{tap.SourceStdout, tap.SourceStdin} {
		c = append(c, st.Lines(src), st.Bytes(src), st.Dropped(src))
	}
	return c
}

// pipelineInvariants runs data, written in the given pieces, as a stream's
// stdout through a whole Pipeline (framer, decoder, tracker) with an
// invariantSink: the lifecycle invariants hold for any bytes, counters
// never go down, and the line and byte counts are the framer's.
func pipelineInvariants(t *testing.T, chunks [][]byte, want []fLine) {
	inv := newInvariantSink(t)
	st := new(ingest.Stats)
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Grace: 5 * time.Second, Sinks: []ingest.Sink{inv}, Stats: st}})
	last := inv.checkCounters(st, nil)
	var n int64
	for _, c := range chunks {
		p.Write(tap.SourceStdout, c)
		n += int64(len(c))
		last = inv.checkCounters(st, last)
	}
	p.Close()
	inv.checkCounters(st, last)
	if got := len(p.Tracker().Open()); got != 0 {
		t.Fatalf("%d runs open after Close", got)
	}
	inv.checkClosed()
	if st.Bytes(tap.SourceStdout) != n || st.Lines(tap.SourceStdout) != int64(len(want)) {
		t.Fatalf("pipeline counted %d lines, %d bytes; framer %d lines, %d bytes",
			st.Lines(tap.SourceStdout), st.Bytes(tap.SourceStdout), len(want), n)
	}
}

// fzProgram interprets fuzz bytes as tracker operations.
type fzProgram struct {
	b     []byte
	i     int
	now   int64
	calls int // model calls handed to the Tracker
}

func (p *fzProgram) next() byte {
	if p.i < len(p.b) {
		c := p.b[p.i]
		p.i++
		return c
	}
	return 0
}

// agentRowJSON renders agent idx in the state chosen by c, with times
// around now.
func agentRowJSON(idx int, c byte, now int64) string {
	start := now - int64(idx)*100
	base := fmt.Sprintf(`{"type":"workflow_agent","index":%d,"label":"agent-%d","phaseIndex":%d,"phaseTitle":"P%d","queuedAt":%d`,
		idx, idx, 1+idx%2, 1+idx%2, start-50)
	id := fmt.Sprintf(`,"agentId":"v1:%d"`, idx)
	switch c % 12 {
	case 1:
		return base + `,"state":"start"}`
	case 2:
		return base + id + fmt.Sprintf(`,"state":"start","startedAt":%d,"tokens":%d}`, start, c)
	case 3:
		if c >= 128 {
			// lastProgressAt fixed by c: the same byte again is no
			// progress, another may be (the stall clock of an agent).
			return base + id + fmt.Sprintf(`,"state":"running","startedAt":%d,"lastProgressAt":%d}`, start, T0+int64(c)*1000)
		}
		return base + id + fmt.Sprintf(`,"state":"running","startedAt":%d}`, start)
	case 4:
		return base + id + fmt.Sprintf(`,"state":"done","startedAt":%d,"durationMs":%d,"tokens":7}`, start, 10+int(c))
	case 5:
		return base + id + fmt.Sprintf(`,"state":"error","startedAt":%d,"endedAt":%d,"error":"%s","resultPreview":"%[3]s"}`, start, now, fzNames[int(c/12)%len(fzNames)])
	case 6:
		return base + id + `,"state":"cached"}`
	case 7:
		return base + id + `,"state":"done","cached":true}`
	case 8:
		return base + id + fmt.Sprintf(`,"state":"exploded","startedAt":%d}`, start)
	case 9:
		return base + id + fmt.Sprintf(`,"state":"error","startedAt":%d,"durationMs":5}`, start)
	case 10:
		// Ended by the run's outcome while still live (issue 28).
		return base + id + fmt.Sprintf(`,"state":"progress","startedAt":%d,"lastProgressAt":%d,"endedWithRun":"stopped"}`, start, now)
	case 11:
		// The CLI's persisted copy: the error redacted to the word.
		return base + id + fmt.Sprintf(`,"state":"error","startedAt":%d,"error":"error","endedWithRun":"stopped"}`, start)
	}
	return ""
}

// snapshotJSON is a workflow_progress member of four agents in the states
// the program's next bytes choose, with a phase row when a says so.
func (p *fzProgram) snapshotJSON(a byte) string {
	var rows []string
	if a&0x80 != 0 {
		rows = append(rows, `{"type":"workflow_phase","index":1,"title":"P1"}`, `{"type":"workflow_note","index":9}`)
	}
	for idx := 1; idx <= 4; idx++ {
		if r := agentRowJSON(idx, p.next(), p.now); r != "" {
			rows = append(rows, r)
		}
	}
	return `"workflow_progress":[` + strings.Join(rows, ",") + `]`
}

// line returns the next operation as a stream line for the tracker ("" for
// a clock-only operation, handled here).
func (p *fzProgram) line(tr *ingest.Tracker) (line string, src tap.Source) {
	op := p.next()
	p.now += 40
	task := fzTasks[int(p.next())%len(fzTasks)]
	a := p.next()
	run := fzRuns[int(a)%len(fzRuns)]
	runField := ""
	if run != "" {
		runField = `,"run_id":"` + run + `"`
	}
	head := fmt.Sprintf(`{"type":"system","task_id":"%s"%s,"session_id":"%s"`, task, runField, fzSessions[int(a/3)%len(fzSessions)])
	switch op % 14 {
	case 13:
		// A result line: cumulative values that grow with the clock, at
		// times bad, absent or lower (a reset).
		v := func(k int64) string {
			return [...]string{`"x"`, "null", "1", "[]", fmt.Sprint((p.now-T0)/1000 + k)}[min(p.next()%8, 4)]
		}
		return fmt.Sprintf(`{"type":"result","session_id":"%s","total_cost_usd":%s,"modelUsage":{"m":{"inputTokens":%s,"outputTokens":%s,"costUSD":%s},"n":{"cacheReadInputTokens":%s}}}`,
			fzSessions[int(a/3)%len(fzSessions)], v(0), v(1), v(2), v(3), v(4)), 0
	case 12:
		// A model call of the CLI's own telemetry: an agent's (of some
		// run, or named by no run), or the main conversation's.
		c := ingest.ModelCall{Cost: cost.Model{Model: "m", CostUSD: 1, Tokens: cost.Tokens{1, 1, 0, 0}}}
		if a%5 != 0 {
			c.AgentID = fmt.Sprintf("v1:%d", 1+int(a)%5)
		}
		if a&0x40 != 0 {
			c.ToolUseID = "tu"
		}
		tr.HandleCall(c, p.now)
		p.calls++
		return "", 0
	case 0, 1:
		typ := fzTypes[int(p.next())%len(fzTypes)]
		nest := ""
		if a&0x20 != 0 {
			// A nested run: launched by some agent of some task, or by a task.
			b := p.next()
			nest = fmt.Sprintf(`,"spawn_depth":%d,"parent_task_id":"%s"`, 1+b%4, fzTasks[int(b/4)%len(fzTasks)])
			if b&0x40 != 0 {
				nest += fmt.Sprintf(`,"parent_agent_id":"v1:%d"`, 1+int(b/16)%5)
			}
		}
		name := fzNames[int(a/5)%len(fzNames)]
		return head + fmt.Sprintf(`,"subtype":"task_started","task_type":"%s","workflow_name":"%s","description":"%s","tool_use_id":"tu"%s}`, typ, name, name, nest), 0
	case 2, 3, 4:
		// op 4: a snapshot sent again after a reconnect (issue 28).
		resent := ""
		if op%13 == 4 && a&2 != 0 {
			resent = `,"resent":true`
		}
		return head + fmt.Sprintf(`,"subtype":"task_progress","usage":{"total_tokens":%d,"tool_uses":1,"duration_ms":%d},%s%s}`,
			op, p.now-T0, p.snapshotJSON(a), resent), 0
	case 5:
		return head + fmt.Sprintf(`,"subtype":"task_progress","usage":{"total_tokens":%d,"tool_uses":2,"duration_ms":%d}}`, op, p.now-T0), 0
	case 6:
		end := ""
		if a&1 != 0 {
			end = fmt.Sprintf(`,"end_time":%d`, p.now)
		}
		return head + fmt.Sprintf(`,"subtype":"task_updated","patch":{"status":"%s"%s,"error":"e"}}`,
			fzStatuses[int(p.next())%len(fzStatuses)], end), 0
	case 7, 8:
		u := ""
		if a&1 != 0 {
			u = fmt.Sprintf(`,"usage":{"total_tokens":1,"tool_uses":1,"duration_ms":%d}`, p.now-T0)
		}
		// The run's final snapshot may ride on it, and it may be resent
		// (issue 28); a restart's reason.
		if a&2 != 0 {
			u += "," + p.snapshotJSON(a)
		}
		if a&4 != 0 {
			u += `,"resent":true`
		}
		if a&8 != 0 {
			u += `,"reason":"worker_restart"`
		}
		if a&16 != 0 {
			u += fmt.Sprintf(`,"summary":"%s"`, fzNames[int(a/32)%len(fzNames)])
		}
		return head + fmt.Sprintf(`,"subtype":"task_notification","status":"%s"%s}`, fzStatuses[int(p.next())%len(fzStatuses)], u), 0
	case 9:
		// Clock jump: up to ~25 s forward, or a little backwards.
		j := p.next()
		if j&0x80 != 0 {
			p.now -= int64(j&0x7f) * 10
		} else {
			p.now += int64(j) * 200
		}
		tr.Advance(p.now)
		return "", 0
	case 10:
		if a&1 != 0 {
			return fmt.Sprintf(`{"type":"control_request","request_id":"i","request":{"subtype":"stop_task","task_id":"%s"}}`, task), tap.SourceStdin
		}
		return fmt.Sprintf(`{"type":"control_request","request_id":"i","request":{"subtype":"interrupt","session_id":"%s"}}`,
			fzSessions[int(a/3)%len(fzSessions)]), tap.SourceStdin
	default:
		return "dup", 0 // repeat the previous line
	}
}

// checkTurn: what a result line adds is never negative, whatever its
// values (bad, absent, lower: issue 28), and lists a model once.
func (s *invariantSink) checkTurn(tr *ingest.Turn) {
	if !(tr.CostUSD >= 0) {
		s.t.Fatalf("turn of %s: cost grew by %v", tr.SessionID, tr.CostUSD)
	}
	for i, d := range tr.Delta {
		if !(d.CostUSD >= 0) || slices.ContainsFunc(d.Tokens[:], func(v int64) bool { return v < 0 }) ||
			slices.ContainsFunc(tr.Delta[:i], func(o cost.Model) bool { return o.Model == d.Model }) {
			s.t.Fatalf("turn of %s: delta %+v of %+v", tr.SessionID, d, tr.Delta)
		}
	}
}

func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 0, 0, 1, 2, 0, 0, 6, 0, 1, 3, 8, 0, 0, 2, 11, 2, 0, 0, 5, 5, 5, 5, 9, 0, 0, 100})
	f.Add([]byte{0, 1, 1, 0, 3, 1, 1, 2, 3, 4, 5, 10, 1, 4, 7, 1, 1, 3, 11, 9, 0, 0, 30, 2, 1, 1, 5, 5, 5, 5})
	f.Add([]byte{0, 2, 0, 3, 0, 0, 1, 0, 7, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 127, 7, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 1, 2, 2, 1, 2, 4, 9, 9, 7, 1, 2, 3, 6, 2, 5, 1, 11, 9, 1, 2, 40}, 4))
	// Result lines (op 13): good values, then bad, absent and lower ones,
	// the clock moving between them.
	f.Add([]byte{13, 0, 0, 4, 4, 4, 4, 4, 9, 0, 0, 50, 13, 0, 0, 4, 0, 1, 4, 4, 9, 0, 0, 50, 13, 0, 0, 4, 4, 4, 4, 4, 13, 0, 0, 2, 2, 2, 2, 3})
	// Agent stalls (issue 31): agents 1 and 3 (lastProgressAt fixed by
	// the byte) say the same row across 4 s while agent 2 moves; then 3's
	// lastProgressAt advances, a resent frame changes 1's row (no
	// progress), 1 ends, and the run ends.
	f.Add([]byte{0, 0, 0, 0, 2, 0, 0, 3, 3, 135, 0, 9, 0, 0, 10, 2, 0, 0, 3, 2, 135, 0, 9, 0, 0, 10, 2, 0, 0, 3, 14, 147, 0,
		4, 0, 6, 2, 26, 147, 0, 9, 0, 0, 10, 2, 0, 0, 4, 38, 147, 0, 9, 0, 0, 30, 7, 0, 0, 0})
	for _, l := range corpusLines(f) {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 1024 {
			prog = prog[:1024]
		}
		inv := newInvariantSink(t)
		st := new(ingest.Stats)
		tr := ingest.NewTracker(ingest.TrackerOptions{Grace: 5 * time.Second, Sinks: []ingest.Sink{inv}, Stats: st, AttributeCalls: true, StallAfter: 3 * time.Second})
		// Kept previews and errors (an odd program) carry hostile text too.
		keep := len(prog)%2 == 1
		dec := streamjson.NewDecoder(streamjson.DecodeOptions{KeepPreviews: keep, KeepErrors: keep})
		p := &fzProgram{b: prog, now: T0}
		prev, prevSrc := "", tap.SourceStdout
		last := inv.checkCounters(st, nil)
		var handled int64
		for p.i < len(p.b) {
			line, src := p.line(tr)
			if line == "dup" {
				line, src = prev, prevSrc
			}
			if line != "" {
				ev, reason := dec.Decode(src, []byte(line))
				if reason != streamjson.ReasonNone || ev == nil {
					t.Fatalf("generated line rejected (%v): %s", reason, line)
				}
				if ev.Resent && ev.Kind == streamjson.KindTaskProgress {
					// A resent snapshot is the same state: once the clock
					// has moved (which may end grace windows and start
					// stalls by itself), handling it emits nothing and
					// moves no counter but the events'.
					tr.Advance(p.now)
					before, n := counters(st, nil), inv.events
					tr.Handle(ev, p.now)
					after := counters(st, nil)
					if inv.events != n || !slices.Equal(before[1:], after[1:]) {
						t.Fatalf("a resent snapshot moved the lifecycle (%d → %d events) or counters %v → %v: %s", n, inv.events, before, after, line)
					}
					handled++
					prev, prevSrc = line, src
					last = inv.checkCounters(st, last)
					continue
				}
				if ev.Kind == streamjson.KindTaskStarted || ((ev.Kind == streamjson.KindTaskProgress || ev.Kind == streamjson.KindTaskNotification) && ev.HasProgress) {
					// The runs these can make (an adopted run's RunStarted
					// is held back: the sink may not have seen it yet).
					inv.known[[2]string{ev.TaskID, ev.RunID}] = true
				}
				tr.Handle(ev, p.now)
				handled++
				prev, prevSrc = line, src
			}
			last = inv.checkCounters(st, last)
			if st.Events() != handled {
				t.Fatalf("events counter %d after %d events", st.Events(), handled)
			}
		}
		tr.Close(p.now + 1)
		inv.checkCounters(st, last)
		if n := len(tr.Open()); n != 0 {
			t.Fatalf("%d runs open after Close", n)
		}
		inv.checkClosed()
		inv.checkCalls(p.calls)
	})
}
