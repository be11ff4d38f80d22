// A reference decoder for the rules of issue #17, written from scratch on
// json.Decoder with UseNumber into generic values (maps match names
// exactly; the last of duplicate keys wins), and a differential fuzz test
// of both real decoding paths against it.
package streamjson

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/tap"
)

// refEntry is what the comparison checks of an Entry.
type refEntry struct {
	Phase, Child       bool
	Index, PhaseIndex  int
	AgentID, State     string
	Cached             bool
	StartedAt, EndedAt int64
	Tokens             int64
	// Issue 28: the row fields the SDK's reader knows.
	QueuedAt, LastProgressAt, DurationMs, ToolCalls int64
	EndedWithRun                                    bool
	Error                                           string
}

// refEvent is what the comparison checks of a decoded line.
type refEvent struct {
	Reason                Reason
	Kind                  Kind
	TaskID, RunID, SessID string
	Status, PatchStatus   string
	RequestSubtype        string
	PatchEndTime          int64
	Usage                 Usage
	HasUsage, HasProgress bool
	Entries               []refEntry
	BadFields, BadEntries int
	WrittenAt             int64
	SpawnDepth            int
	ParentAgentID         string
	// Issue 28: a snapshot sent again, a notification's reason.
	Resent     bool
	StopReason string
	// result
	ResultSubtype    string
	IsError, HasCost bool
	DurationMs       int64
	TotalCostUSD     float64
	Models           []ResultModel
}

// fromEvent projects a decoder's result onto refEvent.
func fromEvent(ev *Event, r Reason) refEvent {
	if ev == nil {
		return refEvent{Reason: r}
	}
	out := refEvent{Reason: r, Kind: ev.Kind, TaskID: ev.TaskID, RunID: ev.RunID, SessID: ev.SessionID,
		Status: ev.Status, PatchStatus: ev.PatchStatus, RequestSubtype: ev.RequestSubtype, PatchEndTime: ev.PatchEndTime,
		Usage: ev.Usage, HasUsage: ev.HasUsage, HasProgress: ev.HasProgress,
		BadFields: ev.BadFields, BadEntries: ev.BadEntries, WrittenAt: ev.WrittenAt,
		ResultSubtype: ev.ResultSubtype, IsError: ev.IsError, HasCost: ev.HasCost, DurationMs: ev.DurationMs,
		TotalCostUSD: ev.TotalCostUSD, Models: slices.Clone(ev.Models), SpawnDepth: ev.SpawnDepth, ParentAgentID: ev.ParentAgentID,
		Resent: ev.Resent, StopReason: ev.Reason}
	for _, e := range ev.Entries {
		out.Entries = append(out.Entries, refEntry{Phase: e.Phase, Child: e.Child, Index: e.Index, PhaseIndex: e.PhaseIndex, AgentID: e.AgentID,
			State: e.State, Cached: e.Cached, StartedAt: e.StartedAt, EndedAt: e.EndedAt, Tokens: e.Tokens,
			QueuedAt: e.QueuedAt, LastProgressAt: e.LastProgressAt, DurationMs: e.DurationMs, ToolCalls: e.ToolCalls,
			EndedWithRun: e.EndedWithRun, Error: e.Error})
	}
	return out
}

// refReader reads members of generic objects and counts the bad ones.
type refReader struct {
	bad        int
	keepErrors bool // DecodeOptions.KeepErrors
}

func (r *refReader) str(m map[string]any, k string) string {
	v := m[k]
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.bad++
	}
	return s
}

// num reads a count or an epoch-ms time.
func (r *refReader) num(m map[string]any, k string) int64 {
	v := m[k]
	if v == nil {
		return 0
	}
	n, ok := v.(json.Number)
	if !ok {
		r.bad++
		return 0
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || f > 9007199254740992 {
		r.bad++
		return 0
	}
	return int64(f)
}

func (r *refReader) boolean(m map[string]any, k string) bool {
	v := m[k]
	if v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		r.bad++
	}
	return b
}

// cost reads a cost in USD: a number in [0, 1e6]; ok is false when it is
// absent or bad.
func (r *refReader) cost(m map[string]any, k string) (float64, bool) {
	v := m[k]
	if v == nil {
		return 0, false
	}
	n, ok := v.(json.Number)
	if !ok {
		r.bad++
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || f > 1e6 {
		r.bad++
		return 0, false
	}
	return f, true
}

func (r *refReader) obj(m map[string]any, k string) map[string]any {
	v := m[k]
	if v == nil {
		return nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		r.bad++
	}
	return o
}

// refIndex reads an index: an integer in [0, 2^20]; absent is 0.
func refIndex(v any) (int, bool) {
	if v == nil {
		return 0, true
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || f > 1<<20 || math.Floor(f) != f {
		return 0, false
	}
	return int(f), true
}

// refEscapedASCII finds a \u escape of a printable ASCII character.
var refEscapedASCII = regexp.MustCompile(`\\u00[2-7]`)

// refDecode decodes one line by the rules, from scratch.
func refDecode(line []byte, opts DecodeOptions) refEvent {
	none := refEvent{}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return none
	}
	if line[0] != '{' || line[len(line)-1] != '}' {
		return refEvent{Reason: ReasonInvalidJSON}
	}
	// The cheap dismissals in front of decoding: a leading plain "type"
	// that is neither system nor control_*, then the markers.
	if rest, ok := bytes.CutPrefix(line, []byte(`{"type":"`)); ok {
		rest = rest[:min(len(rest), 64)]
		if q := bytes.IndexByte(rest, '"'); q >= 0 && !bytes.Contains(rest[:q], []byte(`\`)) {
			if t := string(rest[:q]); t != "system" && t != "result" && !strings.HasPrefix(t, "control_") {
				return none
			}
		}
	}
	// Or an escaped printable ASCII character, which may hide them.
	if !bytes.Contains(line, []byte(`"task_`)) && !bytes.Contains(line, []byte(`"control_`)) && !bytes.Contains(line, []byte(`"init"`)) &&
		!bytes.Contains(line, []byte(`"result"`)) && !refEscapedASCII.Match(line) {
		return none
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || len(bytes.TrimSpace(line[dec.InputOffset():])) > 0 {
		return refEvent{Reason: ReasonInvalidJSON}
	}
	m := v.(map[string]any)
	badShape := refEvent{Reason: ReasonBadShape}

	var ev refEvent
	typ, ok := m["type"].(string)
	if !ok {
		if m["type"] != nil {
			return badShape
		}
		return none
	}
	switch typ {
	case "system":
		sub, ok := m["subtype"].(string)
		if !ok && m["subtype"] != nil {
			return badShape
		}
		kinds := map[string]Kind{"init": KindInit, "task_started": KindTaskStarted, "task_progress": KindTaskProgress,
			"task_updated": KindTaskUpdated, "task_notification": KindTaskNotification}
		if ev.Kind = kinds[sub]; ev.Kind == KindNone {
			return none
		}
		if ev.Kind != KindInit {
			if id, _ := m["task_id"].(string); id == "" {
				return badShape
			}
		}
	case "control_request", "control_response":
		k := map[string]string{"control_request": "request", "control_response": "response"}[typ]
		if _, ok := m[k].(map[string]any); !ok {
			return badShape
		}
		ev.Kind = map[string]Kind{"control_request": KindControlRequest, "control_response": KindControlResponse}[typ]
	case "result":
		ev.Kind = KindResult
	default:
		return none
	}

	r := refReader{keepErrors: opts.KeepErrors}
	if s := r.str(m, "written_at"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if ms := t.UnixMilli(); err != nil || ms < 0 {
			r.bad++
		} else {
			ev.WrittenAt = ms
		}
	} else if _, isStr := m["written_at"].(string); isStr {
		r.bad++ // "" is no time either
	}
	switch ev.Kind {
	case KindResult:
		refResult(m, &ev, &r)
	case KindInit:
		ev.SessID = r.str(m, "session_id")
	case KindControlRequest:
		r.str(m, "request_id")
		req := m["request"].(map[string]any)
		ev.RequestSubtype = r.str(req, "subtype")
		ev.SessID = r.str(req, "session_id")
		ev.TaskID = r.str(req, "task_id")
	case KindControlResponse:
		ev.SessID = r.str(m, "session_id")
		resp := m["response"].(map[string]any)
		ev.RequestSubtype = r.str(resp, "subtype")
		r.str(resp, "request_id")
	default:
		ev.TaskID = m["task_id"].(string)
		ev.SessID = r.str(m, "session_id")
		ev.RunID = r.str(m, "run_id")
		r.str(m, "tool_use_id")
		if u := r.obj(m, "usage"); u != nil {
			ev.HasUsage = true
			ev.Usage = Usage{TotalTokens: r.num(u, "total_tokens"), ToolUses: r.num(u, "tool_uses"), DurationMs: r.num(u, "duration_ms")}
		}
	}
	switch ev.Kind {
	case KindTaskStarted:
		for _, k := range []string{"task_type", "workflow_name", "description", "parent_task_id"} {
			r.str(m, k)
		}
		ev.ParentAgentID = r.str(m, "parent_agent_id")
		ev.SpawnDepth = int(min(r.num(m, "spawn_depth"), MaxSpawnDepth))
	case KindTaskUpdated:
		if p := r.obj(m, "patch"); p != nil {
			ev.PatchStatus = r.str(p, "status")
			ev.PatchEndTime = r.num(p, "end_time")
			r.str(p, "error")
		}
	case KindTaskNotification:
		ev.Status = r.str(m, "status")
		ev.StopReason = safetext.Clean(r.str(m, "reason"), maxIDLen)
		r.str(m, "summary")
	}
	// A notification may carry the run's final snapshot; either may be a
	// snapshot sent again after a reconnect.
	switch ev.Kind {
	case KindTaskProgress, KindTaskNotification:
		ev.Resent = r.boolean(m, "resent")
		switch p := m["workflow_progress"].(type) {
		case nil:
		case []any:
			ev.HasProgress = true
			for _, el := range p {
				e, ok := refElement(el, &r)
				switch {
				case !ok:
					ev.BadEntries++
				case e != nil:
					ev.Entries = append(ev.Entries, *e)
				}
			}
		default:
			r.bad++
		}
	}
	ev.BadFields = r.bad
	// The decoder's strings are sanitized and bounded.
	for _, s := range []*string{&ev.TaskID, &ev.RunID, &ev.SessID, &ev.Status, &ev.PatchStatus, &ev.RequestSubtype} {
		*s = safetext.Clean(*s, maxIDLen)
	}
	return ev
}

// refResult reads a result line: the cumulative cost and modelUsage, whose
// models are taken in name order, at most MaxResultModels, each an object
// with a non-empty name once cleaned (else a bad field).
func refResult(m map[string]any, ev *refEvent, r *refReader) {
	ev.SessID = r.str(m, "session_id")
	ev.ResultSubtype = safetext.Clean(r.str(m, "subtype"), maxIDLen)
	ev.IsError = r.boolean(m, "is_error")
	ev.DurationMs = r.num(m, "duration_ms")
	ev.TotalCostUSD, ev.HasCost = r.cost(m, "total_cost_usd")
	mu := r.obj(m, "modelUsage")
	for _, name := range slices.Sorted(maps.Keys(mu)) {
		o, isObj := mu[name].(map[string]any)
		model := safetext.Clean(name, maxIDLen)
		dup := slices.ContainsFunc(ev.Models, func(x ResultModel) bool { return x.Model == model })
		if !isObj || model == "" || dup || len(ev.Models) == MaxResultModels {
			r.bad++
			continue
		}
		// Known: each value a usable number; absent, null, bad or out of
		// range is unknown (and reads 0).
		rm := ResultModel{Model: model}
		for k, name := range []string{"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens"} {
			bad := r.bad
			if rm.Tokens[k] = r.num(o, name); o[name] != nil && r.bad == bad {
				rm.Known |= 1 << k
			}
		}
		var ok bool
		if rm.CostUSD, ok = r.cost(o, "costUSD"); ok {
			rm.Known |= 1 << 4
		}
		ev.Models = append(ev.Models, rm)
	}
}

// refElement converts one workflow_progress element: ok is false for a
// bad entry, e is nil for an ignored one.
func refElement(v any, r *refReader) (e *refEntry, ok bool) {
	o, isObj := v.(map[string]any)
	if !isObj {
		return nil, false
	}
	typ, isStr := o["type"].(string)
	if !isStr {
		return nil, false
	}
	if typ != "workflow_phase" && typ != "workflow_agent" {
		return nil, true
	}
	idx, ok := refIndex(o["index"])
	if !ok {
		return nil, false
	}
	if typ == "workflow_phase" {
		r.str(o, "title")
		return &refEntry{Phase: true, Index: idx, Child: r.str(o, "kind") == "child"}, true
	}
	e = &refEntry{Index: idx}
	e.AgentID = safetext.Clean(r.str(o, "agentId"), maxIDLen)
	e.State = safetext.Clean(r.str(o, "state"), maxIDLen)
	for _, k := range []string{"label", "phaseTitle", "resultPreview", "promptPreview"} {
		r.str(o, k)
	}
	// An error's text is kept only when asked for; the word "error" alone
	// is the CLI's redaction.
	switch raw := r.str(o, "error"); {
	case r.keepErrors:
		if e.Error = safetext.Clean(raw, maxTextLen); e.Error == "error" {
			e.Error = RedactedError
		}
	case raw != "":
		e.Error = WithheldError
	}
	e.EndedWithRun = safetext.Clean(r.str(o, "endedWithRun"), maxIDLen) != ""
	e.Cached = r.boolean(o, "cached")
	if e.PhaseIndex, ok = refIndex(o["phaseIndex"]); !ok {
		r.bad++
	}
	e.StartedAt = r.num(o, "startedAt")
	e.EndedAt = r.num(o, "endedAt")
	e.Tokens = r.num(o, "tokens")
	e.QueuedAt = r.num(o, "queuedAt")
	e.LastProgressAt = r.num(o, "lastProgressAt")
	e.DurationMs = r.num(o, "durationMs")
	e.ToolCalls = r.num(o, "toolCalls")
	return e, true
}

// compareReference decodes lines in order with the fast path, the plain
// path and the reference, and fails on the first disagreement.
func compareReference(t *testing.T, lines [][]byte) {
	t.Helper()
	for _, opts := range []DecodeOptions{{}, {KeepPreviews: true, KeepErrors: true}} {
		fast, plain := NewDecoder(opts), NewDecoder(opts)
		plain.plainOnly = true
		for i, l := range lines {
			want := refDecode(l, opts)
			ev, r := fast.Decode(tap.SourceStdout, l)
			if got := fromEvent(ev, r); !reflect.DeepEqual(got, want) {
				t.Fatalf("fast path, options %+v, line %d %q:\ngot:       %+v\nreference: %+v", opts, i, l, got, want)
			}
			ev, r = plain.Decode(tap.SourceStdout, l)
			if got := fromEvent(ev, r); !reflect.DeepEqual(got, want) {
				t.Fatalf("plain path, options %+v, line %d %q:\ngot:       %+v\nreference: %+v", opts, i, l, got, want)
			}
		}
	}
}

// referenceSeeds are the table cases, the tricky lines, the snapshot
// sequences (one input each) and every line of the recordings.
func referenceSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, c := range fieldCases {
		seeds = append(seeds, []byte(c.line))
	}
	for _, l := range trickyLines {
		seeds = append(seeds, []byte(l))
	}
	for _, seq := range snapshotSequences {
		seeds = append(seeds, []byte(strings.Join(seq, "\n")))
	}
	seen := map[string]bool{}
	for _, l := range corpusLines(tb) {
		if !seen[string(l)] {
			seen[string(l)] = true
			seeds = append(seeds, l)
		}
	}
	return seeds
}

func TestDecodeReference(t *testing.T) {
	for _, s := range referenceSeeds(t) {
		compareReference(t, bytes.Split(s, []byte("\n")))
	}
	// And the recordings as streams: the snapshot caches see them whole.
	compareReference(t, corpusLines(t))
}

// FuzzDecodeReference splits its input at newlines and decodes the lines
// in order with both decoding paths and the reference decoder.
func FuzzDecodeReference(f *testing.F) {
	for _, s := range referenceSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareReference(t, bytes.Split(data, []byte("\n")))
	})
}
