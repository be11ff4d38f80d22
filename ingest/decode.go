package ingest

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Reason is why a line was rejected. The set is closed so that it can be a
// metric label.
type Reason uint8

// Rejection reasons.
const (
	ReasonNone        Reason = iota
	ReasonInvalidJSON        // not a JSON object
	ReasonTooLong            // a line of interest over the per-line cap
	ReasonBadShape           // valid JSON, wrong types or missing required fields
	numReasons
)

var reasonNames = [...]string{"none", "invalid_json", "too_long", "bad_shape"}

func (r Reason) String() string { return reasonNames[r] }

// Reasons lists every rejection reason, for exporters that pre-create series.
func Reasons() []Reason { return []Reason{ReasonInvalidJSON, ReasonTooLong, ReasonBadShape} }

// Bounds on kept strings. Untrusted text is cut to these lengths (in bytes,
// on a rune boundary) after control characters are stripped.
const (
	maxIDLen      = 128
	maxNameLen    = 256
	maxTextLen    = 1024
	maxPreviewLen = 512
)

// DecodeOptions tunes the decoder.
type DecodeOptions struct {
	// KeepPreviews keeps resultPreview, promptPreview and summary (opt-in
	// content). Off by default: they are user and model text.
	KeepPreviews bool
	// KeepErrors keeps the text of error fields (task_updated patch.error,
	// an agent's error). Off by default: an error can quote anything the
	// agent saw, tokens included, so only the fact that there was one is
	// kept, as WithheldError.
	KeepErrors bool
}

// WithheldError stands for the text of an error field that the decoder did
// not keep (DecodeOptions.KeepErrors off): the error is still known to
// exist, so states and statuses are unchanged.
const WithheldError = "error text withheld (--capture-errors keeps it)"

// errorText is what the decoder keeps of an error field.
func (d *Decoder) errorText(s string) string {
	switch {
	case s == "":
		return ""
	case d.opts.KeepErrors:
		return Clean(s, maxTextLen)
	default:
		return WithheldError
	}
}

// Markers that a line of interest must contain. The prefilter looks for them
// before any JSON decoding, so the bulk of a stream (assistant and user
// messages) costs one scan for a few bytes, never a decode. A false positive
// (the marker inside a string) only costs a full decode.
var (
	markerTask    = []byte(`"task_`)
	markerInit    = []byte(`"init"`)
	markerControl = []byte(`"control_`)
)

// Interesting reports whether line may be a message the Tracker consumes.
// It is the cheap prefilter in front of Decode.
func Interesting(line []byte) bool {
	return bytes.Contains(line, markerTask) || bytes.Contains(line, markerControl) || bytes.Contains(line, markerInit)
}

// LongLineOfInterest reports whether the prefix of an over-long line is a
// message the Tracker consumes. The marker prefilter is not enough here: a
// long assistant message quoting a task event contains the markers too. So
// the prefix's top-level "type" and "subtype" are read with a token
// decoder, skipping other values; a prefix that ends before they are known
// does not count.
func LongLineOfInterest(prefix []byte) bool {
	known, interesting := classify(prefix)
	return known && interesting
}

// classify reads the top-level "type" (and for system messages "subtype")
// of a line or of its prefix. known is false when the prefix ends, or is
// not JSON, before they could be read.
func classify(prefix []byte) (known, interesting bool) {
	if b := bytes.TrimLeft(prefix, " \t\r"); len(b) > 0 && b[0] != '{' {
		return true, false // not a JSON object: nothing to decode
	}
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false, false
	}
	var typ, sub string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return false, false
		}
		key, _ := k.(string)
		switch key {
		case "type", "subtype":
			v, err := dec.Token()
			if err != nil {
				return false, false
			}
			s, _ := v.(string)
			if key == "type" {
				typ = s
			} else {
				sub = s
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return false, false
			}
		}
		switch {
		case strings.HasPrefix(typ, "control_"):
			return true, true
		case typ != "" && typ != "system":
			return true, false
		case typ == "system" && sub != "":
			return true, sub == "init" || strings.HasPrefix(sub, "task_")
		}
	}
	if _, err := dec.Token(); err == nil {
		return true, false // the object closed without a type we consume
	}
	return false, false
}

// WorthBuffering is the framer's early test on the first bytes of a line
// still being received: false when they already show a message the Tracker
// ignores (an assistant message carrying a whole file), so the framer stops
// buffering it.
func WorthBuffering(prefix []byte) bool {
	known, interesting := classify(prefix)
	return !known || interesting
}

// leadingType returns the value of a "type" key that opens the object, as
// both CLIs write it ({"type":"assistant",...}). ok is false when the line
// does not start so; the caller then falls back to the marker scan.
func leadingType(line []byte) (typ []byte, ok bool) {
	const open = `{"type":"`
	if !bytes.HasPrefix(line, []byte(open)) {
		return nil, false
	}
	rest := line[len(open):]
	rest = rest[:min(len(rest), 64)]
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return nil, false
	}
	return rest[:i], true
}

// wire is the union of the fields we read. Fields not named here (prompt,
// message bodies, the initialize response's account block) are skipped by
// encoding/json without being stored.
type wire struct {
	Type         string          `json:"type"`
	Subtype      string          `json:"subtype"`
	SessionID    *string         `json:"session_id"`
	TaskID       string          `json:"task_id"`
	RunID        string          `json:"run_id"`
	ToolUseID    string          `json:"tool_use_id"`
	TaskType     string          `json:"task_type"`
	WorkflowName string          `json:"workflow_name"`
	Description  string          `json:"description"`
	ParentTaskID string          `json:"parent_task_id"`
	Usage        *wireUsage      `json:"usage"`
	RawProgress  json.RawMessage `json:"workflow_progress"`
	Patch        *wirePatch      `json:"patch"`
	Status       string          `json:"status"`
	Summary      string          `json:"summary"`
	Reason       string          `json:"reason"`
	RequestID    string          `json:"request_id"`
	Request      *wireRequest    `json:"request"`
	Response     *wireResponse   `json:"response"`
}

type wireUsage struct {
	TotalTokens float64 `json:"total_tokens"`
	ToolUses    float64 `json:"tool_uses"`
	DurationMs  float64 `json:"duration_ms"`
}

type wirePatch struct {
	Status  string  `json:"status"`
	EndTime float64 `json:"end_time"`
	Error   string  `json:"error"`
}

type wireRequest struct {
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	TaskID    string `json:"task_id"`
}

type wireResponse struct {
	Subtype   string `json:"subtype"`
	RequestID string `json:"request_id"`
}

type wireEntry struct {
	Type           string  `json:"type"`
	Index          float64 `json:"index"`
	Title          string  `json:"title"`
	AgentID        string  `json:"agentId"`
	Label          string  `json:"label"`
	State          string  `json:"state"`
	Cached         bool    `json:"cached"`
	PhaseIndex     float64 `json:"phaseIndex"`
	PhaseTitle     string  `json:"phaseTitle"`
	QueuedAt       float64 `json:"queuedAt"`
	StartedAt      float64 `json:"startedAt"`
	EndedAt        float64 `json:"endedAt"`
	LastProgressAt float64 `json:"lastProgressAt"`
	DurationMs     float64 `json:"durationMs"`
	Tokens         float64 `json:"tokens"`
	ToolCalls      float64 `json:"toolCalls"`
	Error          string  `json:"error"`
	ResultPreview  string  `json:"resultPreview"`
	PromptPreview  string  `json:"promptPreview"`
}

// Decoder decodes lines into Events. It reuses its buffers, so an Event it
// returns is valid until the next call. It remembers the last
// workflow_progress snapshot of up to four tasks (the elements' bytes and
// what they decoded to, at most one line each) so that only the agents
// that changed since are decoded again (see snapshot.go).
type Decoder struct {
	opts    DecodeOptions
	w       wire
	entries []wireEntry
	ev      Event
	own     []Entry // the plain path's Entries buffer
	snap    snapshotState
	// plainOnly turns the fast path (fastdecode.go) off: tests compare
	// the two.
	plainOnly bool
	scan      fastScan       // the line's scanner
	elemScan  fastScan       // a workflow_progress element's scanner
	snapPrev  *snapshotCache // the cache the line's snapshot was compared with
	memo      stringMemo     // recent strings, shared by both scanners
	// fast is the snapshot the fast path decoded the line's
	// workflow_progress into (see snapshot.go), nil on the plain path.
	fast *snapshotCache
}

// NewDecoder returns a decoder.
func NewDecoder(opts DecodeOptions) *Decoder { return &Decoder{opts: opts} }

// Decode decodes one line from src. It returns (nil, ReasonNone) for lines
// that are not of interest (including blank lines), an Event for messages
// the Tracker consumes, or a rejection reason.
func (d *Decoder) Decode(src Source, line []byte) (*Event, Reason) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, ReasonNone
	}
	if line[0] != '{' || line[len(line)-1] != '}' {
		return nil, ReasonInvalidJSON
	}
	if typ, ok := leadingType(line); ok && string(typ) != "system" && !bytes.HasPrefix(typ, []byte("control_")) {
		// Both CLIs write "type" first: an assistant or user message, the
		// bulk of the bytes, is dismissed without a scan.
		return nil, ReasonNone
	}
	if !Interesting(line) {
		return nil, ReasonNone
	}
	if !d.plainOnly {
		if ev, reason, ok := d.decodeFast(src, line); ok {
			return ev, reason
		}
	}
	return d.decodePlain(src, line)
}

// decodePlain decodes a trimmed line of interest with encoding/json alone.
// It is the reference the snapshot fast path must agree with.
func (d *Decoder) decodePlain(src Source, line []byte) (*Event, Reason) {
	d.w = wire{}
	if err := json.Unmarshal(line, &d.w); err != nil {
		var syn *json.SyntaxError
		if asSyntax(err, &syn) {
			return nil, ReasonInvalidJSON
		}
		return nil, ReasonBadShape
	}
	return d.convert(src)
}

func asSyntax(err error, target **json.SyntaxError) bool {
	s, ok := err.(*json.SyntaxError)
	if ok {
		*target = s
	}
	return ok
}

func (d *Decoder) convert(src Source) (*Event, Reason) {
	w := &d.w
	ev := &d.ev
	// Not ev.Entries: after the fast path it is a snapshot cache's.
	*ev = Event{Source: src, Entries: d.own[:0]}
	if w.SessionID != nil {
		ev.SessionID = cleanID(*w.SessionID)
	}
	switch w.Type {
	case "system":
		switch w.Subtype {
		case "init":
			ev.Kind = KindInit
			return ev, ReasonNone
		case "task_started":
			ev.Kind = KindTaskStarted
		case "task_progress":
			ev.Kind = KindTaskProgress
		case "task_updated":
			ev.Kind = KindTaskUpdated
		case "task_notification":
			ev.Kind = KindTaskNotification
		default:
			return nil, ReasonNone
		}
		if w.TaskID == "" {
			return nil, ReasonBadShape
		}
		ev.TaskID = cleanID(w.TaskID)
		ev.RunID = cleanID(w.RunID)
		ev.ToolUseID = cleanID(w.ToolUseID)
	case "control_request":
		if w.Request == nil {
			return nil, ReasonBadShape
		}
		ev.Kind = KindControlRequest
		ev.RequestID = cleanID(w.RequestID)
		ev.RequestSubtype = Clean(w.Request.Subtype, maxIDLen)
		ev.SessionID = cleanID(w.Request.SessionID)
		ev.TaskID = cleanID(w.Request.TaskID)
		return ev, ReasonNone
	case "control_response":
		if w.Response == nil {
			return nil, ReasonBadShape
		}
		ev.Kind = KindControlResponse
		ev.RequestID = cleanID(w.Response.RequestID)
		ev.RequestSubtype = Clean(w.Response.Subtype, maxIDLen)
		return ev, ReasonNone
	default:
		return nil, ReasonNone
	}

	if w.Usage != nil {
		ev.HasUsage = true
		ev.Usage = Usage{TotalTokens: num(w.Usage.TotalTokens), ToolUses: num(w.Usage.ToolUses), DurationMs: num(w.Usage.DurationMs)}
	}
	switch ev.Kind {
	case KindTaskStarted:
		ev.TaskType = Clean(w.TaskType, maxIDLen)
		ev.WorkflowName = Clean(w.WorkflowName, maxNameLen)
		ev.Description = Clean(w.Description, maxTextLen)
		ev.ParentTaskID = cleanID(w.ParentTaskID)
	case KindTaskProgress:
		if d.fast != nil {
			if d.fast.typeErr {
				return nil, ReasonBadShape
			}
			ev.HasProgress = true
			// The cache's entries are not written again before they are
			// recycled two snapshots later, after this event is gone.
			ev.Entries = d.fast.entries
		} else if len(w.RawProgress) > 0 && !bytes.Equal(w.RawProgress, []byte("null")) {
			// encoding/json decodes into the slice's old elements without
			// zeroing absent fields: clear them, or one run's error text
			// would leak into the next snapshot's agents.
			clear(d.entries[:cap(d.entries)])
			d.entries = d.entries[:0]
			if err := json.Unmarshal(w.RawProgress, &d.entries); err != nil {
				return nil, ReasonBadShape
			}
			ev.HasProgress = true
			for i := range d.entries {
				if en, ok := d.entry(&d.entries[i]); ok {
					ev.Entries = append(ev.Entries, en)
				}
			}
			d.own = ev.Entries
		}
	case KindTaskUpdated:
		if w.Patch == nil {
			return nil, ReasonBadShape
		}
		ev.PatchStatus = Clean(w.Patch.Status, maxIDLen)
		ev.PatchEndTime = num(w.Patch.EndTime)
		ev.PatchError = d.errorText(w.Patch.Error)
	case KindTaskNotification:
		ev.Status = Clean(w.Status, maxIDLen)
		ev.Reason = Clean(w.Reason, maxIDLen)
		if d.opts.KeepPreviews {
			ev.Summary = Clean(w.Summary, maxPreviewLen)
		}
	}
	return ev, ReasonNone
}

func (d *Decoder) entry(w *wireEntry) (Entry, bool) {
	switch w.Type {
	case "workflow_phase":
		return Entry{Phase: true, Index: int(num(w.Index)), Title: Clean(w.Title, maxNameLen)}, true
	case "workflow_agent":
		e := Entry{
			Index:          int(num(w.Index)),
			AgentID:        cleanID(w.AgentID),
			Label:          Clean(w.Label, maxNameLen),
			State:          Clean(w.State, maxIDLen),
			Cached:         w.Cached,
			PhaseIndex:     int(num(w.PhaseIndex)),
			PhaseTitle:     Clean(w.PhaseTitle, maxNameLen),
			QueuedAt:       num(w.QueuedAt),
			StartedAt:      num(w.StartedAt),
			EndedAt:        num(w.EndedAt),
			LastProgressAt: num(w.LastProgressAt),
			DurationMs:     num(w.DurationMs),
			Tokens:         num(w.Tokens),
			ToolCalls:      num(w.ToolCalls),
			Error:          d.errorText(w.Error),
		}
		if d.opts.KeepPreviews {
			e.ResultPreview = Clean(w.ResultPreview, maxPreviewLen)
			e.PromptPreview = Clean(w.PromptPreview, maxPreviewLen)
		}
		return e, true
	default:
		// Additive evolution: new entry types are ignored.
		return Entry{}, false
	}
}

// num converts a JSON number to int64, clamping what cannot be a count or an
// epoch-ms time (negative, NaN, absurdly large) to 0.
func num(f float64) int64 {
	if !(f > 0) || f > 1<<53 {
		return 0
	}
	return int64(f)
}
