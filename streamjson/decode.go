package streamjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/tap"
)

// Reason is why a line was rejected. The set is closed so that it can be a
// metric label.
type Reason uint8

// Rejection reasons.
const (
	ReasonNone        Reason = iota
	ReasonInvalidJSON        // not a JSON object
	ReasonTooLong            // a line of interest over the per-line cap
	ReasonBadShape           // valid JSON whose identity (type, subtype, task_id, request, response) cannot be read
	NumReasons               // the number of reasons, for arrays indexed by Reason
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

func cleanID(s string) string { return safetext.Clean(s, maxIDLen) }

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
	// MaxElements bounds the workflow_progress elements read of one line:
	// the rest are skipped unread and counted (Event.ElementsOverCap), so
	// that a hostile snapshot cannot make the decoder build more rows
	// than the Tracker would keep. 0 means no bound.
	MaxElements int
}

// WithheldError stands for the text of an error field that the decoder did
// not keep (DecodeOptions.KeepErrors off): the error is still known to
// exist, so states and statuses are unchanged.
const WithheldError = "error text withheld (--capture-errors keeps it)"

// RedactedError stands for an error field whose text the CLI itself
// redacted to the string "error" (its persisted copy of a row does): kept
// with KeepErrors instead of the word, which would read as a message.
const RedactedError = "error text redacted by the CLI"

// errorText is what the decoder keeps of an error field.
func (d *Decoder) errorText(s string) string {
	switch {
	case s == "":
		return ""
	case d.opts.KeepErrors:
		if s = safetext.Clean(s, maxTextLen); s == "error" {
			// The CLI's persisted copy of a row redacts the text so: the
			// agent still ended in error, the word says nothing more.
			return RedactedError
		}
		return s
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
	// A result line has it as its type's value whatever its key order;
	// Claude Code writes "type" late, after the result text.
	markerResult = []byte(`"result"`)
)

// Interesting reports whether line may be a message the Tracker consumes.
// It is the cheap prefilter in front of Decode. A name or value written
// with escapes is the same name ("task\u005fid" is "task_id", RFC 8259
// §7) but hides the markers, so a line that holds an escaped printable
// ASCII character is decoded too (escapedASCII).
func Interesting(line []byte) bool {
	return markedAtStart(line) || bytes.Contains(line, markerTask) || bytes.Contains(line, markerControl) || bytes.Contains(line, markerInit) ||
		bytes.Contains(line, markerResult) || escapedASCII(line)
}

// escapedASCII reports whether line holds a \u escape of a printable
// ASCII character (\u0020 to \u007f), the only way to write a marker's
// bytes differently. No common encoder writes one (they escape control
// characters, and at most non-ASCII), so real streams pay one search for
// `\u00`, on the lines with no marker that leadingType did not dismiss. A
// false positive (an escaped backslash before "u00...", text quoting an
// escape) costs a decode only.
func escapedASCII(line []byte) bool {
	for {
		i := bytes.Index(line, escPrefix)
		if i < 0 || i+len(escPrefix) >= len(line) {
			return false
		}
		if c := line[i+len(escPrefix)]; '2' <= c && c <= '7' {
			return true
		}
		line = line[i+len(escPrefix):]
	}
}

var escPrefix = []byte(`\u00`)

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
		case strings.HasPrefix(typ, "control_") || typ == "result":
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

// markedAtStart reports that the line's leading type (and subtype) hold a
// marker, so the search through the whole line, 6 % of replay's CPU (its
// markers open with JSON's commonest byte), is skipped. False says nothing.
func markedAtStart(line []byte) bool {
	const sub = `{"type":"system","subtype":"`
	if typ, ok := leadingType(line); !ok {
		return false
	} else if string(typ) == "result" || bytes.HasPrefix(typ, []byte("control_")) {
		return true
	}
	rest, ok := bytes.CutPrefix(line, []byte(sub[:len(sub)-1]))
	return ok && (bytes.HasPrefix(rest, markerTask) || bytes.HasPrefix(rest, markerInit))
}

// MaxEntryIndex is the largest index a workflow_progress element, or an
// agent's phaseIndex, may carry. The Tracker keys phases and agents by
// index, so a broken writer's 1e20 must neither wrap in a float-to-int
// conversion nor become a row; real workflows number agents in thousands.
const MaxEntryIndex = 1 << 20

// maxCount bounds counts and epoch-ms times: 2^53, beyond which a float64
// (a JSON number as JavaScript writes it) no longer holds every integer.
const maxCount = 1 << 53

// The top-level fields the decoder reads. A field's number is its bit in
// wire.bad and its index in wire.str and wireFields.
const (
	fType = iota
	fSubtype
	fSessionID
	fTaskID
	fRunID
	fToolUseID
	fTaskType
	fWorkflowName
	fDescription
	fParentTaskID
	fUsage
	fProgress
	fPatch
	fStatus
	fSummary
	fReason
	fRequestID
	fRequest
	fResponse
	fWrittenAt
	fParentAgentID
	fSpawnDepth
	fIsError
	fDurationMs
	fTotalCost
	fModelUsage
	fResent
	numWireFields
)

// wireFields are the names of the top-level fields, by number. Names are
// matched exactly: JSON names are case-sensitive, and "Status" written
// after "status" must not override it.
var wireFields = [numWireFields]string{"type", "subtype", "session_id", "task_id", "run_id", "tool_use_id", "task_type",
	"workflow_name", "description", "parent_task_id", "usage", "workflow_progress", "patch", "status", "summary",
	"reason", "request_id", "request", "response", "written_at", "parent_agent_id", "spawn_depth",
	"is_error", "duration_ms", "total_cost_usd", "modelUsage", "resent"}

// The fields of usage, patch, request and response, by number (their bit
// in the bad mask and index in the value arrays).
var (
	usageFields    = [...]string{"total_tokens", "tool_uses", "duration_ms"}
	patchFields    = [...]string{"status", "end_time", "error"}
	requestFields  = [...]string{"subtype", "session_id", "task_id"}
	responseFields = [...]string{"subtype", "request_id"}
)

const (
	pStatus = iota
	pEndTime
	pError
)

// The fields of a workflow_progress element, numbered like the top-level
// ones.
const (
	eType = iota
	eIndex
	eTitle
	eAgentID
	eLabel
	eState
	eCached
	ePhaseIndex
	ePhaseTitle
	eQueuedAt
	eStartedAt
	eEndedAt
	eLastProgressAt
	eDurationMs
	eTokens
	eToolCalls
	eError
	eResultPreview
	ePromptPreview
	eEndedWithRun
	eKind
	numEntryFields
)

var entryFields = [numEntryFields]string{"type", "index", "title", "agentId", "label", "state", "cached", "phaseIndex",
	"phaseTitle", "queuedAt", "startedAt", "endedAt", "lastProgressAt", "durationMs", "tokens", "toolCalls", "error",
	"resultPreview", "promptPreview", "endedWithRun", "kind"}

const (
	// entryNumbers are the element fields that are JSON numbers; cached
	// is the one bool; the rest are strings.
	entryNumbers = 1<<eIndex | 1<<ePhaseIndex | 1<<eQueuedAt | 1<<eStartedAt | 1<<eEndedAt | 1<<eLastProgressAt |
		1<<eDurationMs | 1<<eTokens | 1<<eToolCalls
	// agentReads are the fields of a workflow_agent whose bad value costs
	// one bad field (a bad index costs the element instead); a
	// workflow_phase reads only its title.
	agentReads = 1<<eAgentID | 1<<eLabel | 1<<eState | 1<<eCached | 1<<ePhaseIndex | 1<<ePhaseTitle | 1<<eQueuedAt |
		1<<eStartedAt | 1<<eEndedAt | 1<<eLastProgressAt | 1<<eDurationMs | 1<<eTokens | 1<<eToolCalls | 1<<eError |
		1<<eResultPreview | 1<<ePromptPreview | 1<<eEndedWithRun
	phaseReads = 1<<eTitle | 1<<eKind
)

// readFields is the set of top-level fields an event of kind k reads,
// whose bad value counts in BadFields. The fields of identity (type,
// subtype, task_id, request, response) are not in it: a bad one makes the
// line bad_shape. A field an event does not read costs nothing, whatever
// its value: it is as good as unknown. Previews count whatever the
// options: whether a line breaks the protocol does not depend on them.
func readFields(k Kind) uint32 {
	const (
		always = 1 << fWrittenAt
		task   = always | 1<<fSessionID | 1<<fRunID | 1<<fToolUseID | 1<<fUsage
	)
	switch k {
	case KindInit:
		return always | 1<<fSessionID
	case KindTaskStarted:
		return task | 1<<fTaskType | 1<<fWorkflowName | 1<<fDescription | 1<<fParentTaskID | 1<<fParentAgentID | 1<<fSpawnDepth
	case KindTaskProgress:
		return task | 1<<fProgress | 1<<fResent
	case KindTaskUpdated:
		return task | 1<<fPatch
	case KindTaskNotification:
		// The run's final snapshot may ride on it (PROTOCOL.md, "What the
		// Claude Agent SDK's own stream reader accepts").
		return task | 1<<fStatus | 1<<fSummary | 1<<fReason | 1<<fProgress | 1<<fResent
	case KindControlRequest:
		return always | 1<<fRequestID
	case KindControlResponse:
		return always | 1<<fSessionID
	case KindResult:
		return always | 1<<fSessionID | 1<<fSubtype | 1<<fIsError | 1<<fDurationMs | 1<<fTotalCost | 1<<fModelUsage
	}
	return 0
}

// wire is what the two decoding paths (the scanner of fastdecode.go and
// decodePlain) make of a line, before convert turns it into an Event.
// Values are typed and finite but not yet range-checked; a value of the
// wrong type is not stored and sets its field's bit in bad. null is
// absent. Fields not named here (prompt, message bodies, the initialize
// response's account block) are skipped without being stored.
type wire struct {
	str       [numWireFields]string // the string fields, by number
	bad       uint32                // 1<<f: field f present with an unusable value
	writtenAt int64
	// spawnDepth is task_started's spawn_depth, a number.
	spawnDepth float64
	// A result line's fields (Decoder.result): is_error, duration_ms,
	// total_cost_usd (costSet: present, not null, a number) and the
	// entries of modelUsage.
	isError          bool
	resent           bool // resent: a snapshot sent again after a reconnect
	durationMs, cost float64
	costSet          bool
	models           []wireModel
	usage            wireNums
	patch            wirePatch
	request          wireStrs // subtype, session_id, task_id
	response         wireStrs // subtype, request_id
	// Whether usage, patch, request and response were objects.
	hasUsage, hasPatch, hasRequest, hasResponse bool
	// rawProgress is the workflow_progress array on the plain path; the
	// fast path decodes it while scanning (Decoder.fast).
	rawProgress []byte
}

// wireNums is the usage object: total_tokens, tool_uses, duration_ms.
type wireNums struct {
	num [len(usageFields)]float64
	bad uint8
}

type wirePatch struct {
	status, err string
	endTime     float64
	bad         uint8 // 1<<pStatus, 1<<pEndTime, 1<<pError
}

// wireStrs is an object whose fields of interest are all strings.
type wireStrs struct {
	str [3]string
	bad uint8
}

// wireEntry is a workflow_progress element that is an object.
type wireEntry struct {
	str     [numEntryFields]string
	num     [numEntryFields]float64
	cached  bool
	hasType bool // type was a string
	bad     uint32
}

// Decoder decodes lines into Events. It reuses its buffers, so an Event it
// returns is valid until the next call. It remembers the last
// workflow_progress snapshot of up to four tasks (the elements' bytes and
// what they decoded to, at most one line each) so that only the agents
// that changed since are decoded again (see snapshot.go).
type Decoder struct {
	opts DecodeOptions
	w    wire
	ev   Event
	own  []Entry // the plain path's Entries buffer
	snap snapshotState
	// plainOnly turns the fast path (fastdecode.go) off: tests compare
	// the two.
	plainOnly bool
	scan      fastScan       // the line's scanner
	elemScan  fastScan       // a workflow_progress element's scanner
	top       topScan        // what the line's scanner found
	snapPrev  *snapshotCache // the cache the line's snapshot was compared with
	memo      stringMemo     // recent strings, shared by both scanners
	// fast is the snapshot the fast path decoded the line's
	// workflow_progress into (see snapshot.go), nil on the plain path.
	fast *snapshotCache
	// The plain path's buffers: an object's members, the elements of
	// workflow_progress and the element being converted.
	obj, sub map[string]json.RawMessage
	elems    []json.RawMessage
	pe       wireEntry
}

// NewDecoder returns a decoder.
func NewDecoder(opts DecodeOptions) *Decoder { return &Decoder{opts: opts} }

// Decode decodes one line from src. It returns (nil, ReasonNone) for lines
// that are not of interest (including blank lines), an Event for messages
// the Tracker consumes, or a rejection reason. Only a line whose identity
// cannot be read is bad_shape (see convert); any other unusable value
// costs only its field (Event.BadFields) or its workflow_progress element
// (Event.BadEntries).
func (d *Decoder) Decode(src tap.Source, line []byte) (*Event, Reason) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, ReasonNone
	}
	if line[0] != '{' || line[len(line)-1] != '}' {
		return nil, ReasonInvalidJSON
	}
	if typ, ok := leadingType(line); ok && string(typ) != "system" && string(typ) != "result" && !bytes.HasPrefix(typ, []byte("control_")) {
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

// decodePlain decodes a trimmed line of interest with encoding/json, one
// object level at a time into a map of raw members, and converts each
// field it reads itself. Unmarshalling into tagged structs would match
// names without regard to case and fail the whole line on one field of
// the wrong type; a map matches names exactly (the last of duplicates
// wins) and leaves each value to its field. It is the reference the fast
// path must agree with.
func (d *Decoder) decodePlain(src tap.Source, line []byte) (*Event, Reason) {
	if err := plainObject(line, &d.obj); err != nil {
		if _, ok := errors.AsType[*json.SyntaxError](err); ok {
			return nil, ReasonInvalidJSON
		}
		return nil, ReasonBadShape // not reached: the line is an object
	}
	w := &d.w
	*w = wire{}
	for f, name := range wireFields {
		raw, ok := d.obj[name]
		if !ok || isNull(raw) {
			continue
		}
		good := true
		switch f {
		case fUsage:
			if good = plainObject(raw, &d.sub) == nil; good {
				w.hasUsage = true
				w.usage.bad = plainMembers(d.sub, usageFields[:], w.usage.num[:], memberNum)
			}
		case fPatch:
			if good = plainObject(raw, &d.sub) == nil; good {
				w.hasPatch = true
				p, ok := &w.patch, false
				if p.status, ok = memberStr(d.sub, patchFields[pStatus]); !ok {
					p.bad |= 1 << pStatus
				}
				if p.endTime, ok = memberNum(d.sub, patchFields[pEndTime]); !ok {
					p.bad |= 1 << pEndTime
				}
				if p.err, ok = memberStr(d.sub, patchFields[pError]); !ok {
					p.bad |= 1 << pError
				}
			}
		case fRequest:
			if good = plainObject(raw, &d.sub) == nil; good {
				w.hasRequest = true
				w.request.bad = plainMembers(d.sub, requestFields[:], w.request.str[:], memberStr)
			}
		case fResponse:
			if good = plainObject(raw, &d.sub) == nil; good {
				w.hasResponse = true
				w.response.bad = plainMembers(d.sub, responseFields[:], w.response.str[:], memberStr)
			}
		case fProgress:
			if good = raw[0] == '['; good {
				w.rawProgress = raw
			}
		case fWrittenAt:
			var s string
			if s, good = plainString(raw); good {
				w.writtenAt, good = parseWrittenAt(s)
			}
		case fSpawnDepth:
			w.spawnDepth, good = plainNumber(raw)
		case fIsError:
			good = json.Unmarshal(raw, &w.isError) == nil
		case fResent:
			good = json.Unmarshal(raw, &w.resent) == nil
		case fDurationMs:
			w.durationMs, good = plainNumber(raw)
		case fTotalCost:
			w.cost, good = plainNumber(raw)
			w.costSet = good
		case fModelUsage:
			good = d.plainModels(raw)
		default:
			w.str[f], good = plainString(raw)
		}
		if !good {
			w.bad |= 1 << f
		}
	}
	return d.convert(src)
}

// plainObject decodes the JSON object raw into *m, cleared first (made if
// nil).
func plainObject(raw []byte, m *map[string]json.RawMessage) error {
	if raw[0] != '{' {
		return errNotObject
	}
	if *m == nil {
		*m = make(map[string]json.RawMessage)
	}
	clear(*m)
	if err := json.Unmarshal(raw, m); err != nil {
		return fmt.Errorf("decode object: %w", err)
	}
	return nil
}

var errNotObject = errors.New("not a JSON object")

func isNull(raw []byte) bool { return raw[0] == 'n' }

// plainString converts a JSON string; ok is false for any other value.
func plainString(raw []byte) (s string, ok bool) {
	if raw[0] != '"' {
		return "", false
	}
	return s, json.Unmarshal(raw, &s) == nil
}

// plainNumber converts a JSON number to a float64; ok is false for any
// other value and for one that overflows a float64 (1e400).
func plainNumber(raw []byte) (f float64, ok bool) {
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, false // ±Inf: out of range
	}
	return f, true
}

// member reads the member name of m with conv; ok is false when it is
// present, not null and not what conv reads.
func member[T any](m map[string]json.RawMessage, name string, conv func([]byte) (T, bool)) (v T, ok bool) {
	raw, found := m[name]
	if !found || isNull(raw) {
		return v, true
	}
	return conv(raw)
}

// memberStr reads a string member; memberNum a number member.
func memberStr(m map[string]json.RawMessage, name string) (string, bool) {
	return member(m, name, plainString)
}
func memberNum(m map[string]json.RawMessage, name string) (float64, bool) {
	return member(m, name, plainNumber)
}

// plainMembers reads the members names of m into dst with get (memberStr,
// memberNum) and returns the bad mask of those present with another type.
func plainMembers[T any](m map[string]json.RawMessage, names []string, dst []T, get func(map[string]json.RawMessage, string) (T, bool)) (bad uint8) {
	for k, name := range names {
		var ok bool
		if dst[k], ok = get(m, name); !ok {
			bad |= 1 << k
		}
	}
	return bad
}

// plainEntry converts a workflow_progress element on the plain path; ok
// is false when it is not an object.
func (d *Decoder) plainEntry(raw []byte, we *wireEntry) (ok bool) {
	*we = wireEntry{}
	if plainObject(raw, &d.sub) != nil {
		return false
	}
	for f, name := range entryFields {
		v, ok := d.sub[name]
		if !ok || isNull(v) {
			continue
		}
		var good bool
		switch {
		case entryNumbers&(1<<f) != 0:
			we.num[f], good = plainNumber(v)
		case f == eCached:
			good = json.Unmarshal(v, &we.cached) == nil // true or false (null was skipped)
		default:
			we.str[f], good = plainString(v)
			we.hasType = we.hasType || f == eType && good
		}
		if !good {
			we.bad |= 1 << f
		}
	}
	return true
}

// parseWrittenAt converts a written_at value (RFC 3339, as Claude Code
// writes it: "2026-11-30T10:15:02.123Z") to epoch ms. ok is false for
// anything else, and for a time before 1970: an epoch-ms time is never
// negative.
func parseWrittenAt(s string) (ms int64, ok bool) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, false
	}
	ms = t.UnixMilli()
	if ms < 0 || ms > maxCount {
		return 0, false
	}
	return ms, true
}

// count converts a finite JSON number that is a count or an epoch-ms
// time, truncating toward zero. One that cannot be (negative, above 2^53)
// reads 0 and counts in *bad.
func count(f float64, bad *int) int64 {
	if f < 0 || f > maxCount {
		*bad++
		return 0
	}
	return int64(f)
}

// entryIndex converts an element's index or an agent's phaseIndex: an
// integer in [0, MaxEntryIndex].
func entryIndex(f float64) (int, bool) {
	if f < 0 || f > MaxEntryIndex || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// convert turns d.w into an Event. Only a line whose identity cannot be
// read is bad_shape: type present but not a string; for a system line,
// subtype present but not a string; for the task_* subtypes, task_id
// missing, empty or not a string; for control_request and
// control_response, request or response not an object. Any other field
// the event reads that is unusable reads as absent and counts in
// BadFields, so that one bad value (a task_notification's usage) cannot
// cost the event (its status, which ends the run).
func (d *Decoder) convert(src tap.Source) (*Event, Reason) {
	w := &d.w
	ev := &d.ev
	// Not ev.Entries: after the fast path it is a snapshot cache's.
	*ev = Event{Source: src, Entries: d.own[:0]}
	if w.bad&(1<<fType) != 0 {
		return nil, ReasonBadShape
	}
	switch w.str[fType] {
	case "system":
		if w.bad&(1<<fSubtype) != 0 {
			return nil, ReasonBadShape
		}
		switch w.str[fSubtype] {
		case "init":
			ev.Kind = KindInit
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
		if ev.Kind != KindInit && w.str[fTaskID] == "" {
			return nil, ReasonBadShape
		}
	case "control_request":
		if !w.hasRequest {
			return nil, ReasonBadShape
		}
		ev.Kind = KindControlRequest
	case "control_response":
		if !w.hasResponse {
			return nil, ReasonBadShape
		}
		ev.Kind = KindControlResponse
	case "result":
		ev.Kind = KindResult
	default:
		return nil, ReasonNone
	}
	ev.WrittenAt = w.writtenAt
	ev.BadFields = bits.OnesCount32(w.bad & readFields(ev.Kind))
	switch ev.Kind {
	case KindInit:
		ev.SessionID = cleanID(w.str[fSessionID])
		return ev, ReasonNone
	case KindControlRequest:
		r := &w.request
		ev.RequestID = cleanID(w.str[fRequestID])
		ev.RequestSubtype = safetext.Clean(r.str[0], maxIDLen)
		ev.SessionID = cleanID(r.str[1])
		ev.TaskID = cleanID(r.str[2])
		ev.BadFields += bits.OnesCount8(r.bad)
		return ev, ReasonNone
	case KindControlResponse:
		r := &w.response
		ev.SessionID = cleanID(w.str[fSessionID])
		ev.RequestSubtype = safetext.Clean(r.str[0], maxIDLen)
		ev.RequestID = cleanID(r.str[1])
		ev.BadFields += bits.OnesCount8(r.bad)
		return ev, ReasonNone
	case KindResult:
		d.result(ev)
		return ev, ReasonNone
	}

	ev.SessionID = cleanID(w.str[fSessionID])
	ev.TaskID = cleanID(w.str[fTaskID])
	ev.RunID = cleanID(w.str[fRunID])
	ev.ToolUseID = cleanID(w.str[fToolUseID])
	if w.hasUsage {
		u := &w.usage
		ev.HasUsage = true
		ev.BadFields += bits.OnesCount8(u.bad)
		ev.Usage = Usage{
			TotalTokens: count(u.num[0], &ev.BadFields),
			ToolUses:    count(u.num[1], &ev.BadFields),
			DurationMs:  count(u.num[2], &ev.BadFields),
		}
	}
	switch ev.Kind {
	case KindTaskStarted:
		ev.TaskType = safetext.Clean(w.str[fTaskType], maxIDLen)
		ev.WorkflowName = safetext.Clean(w.str[fWorkflowName], maxNameLen)
		ev.Description = safetext.Clean(w.str[fDescription], maxTextLen)
		ev.ParentTaskID = cleanID(w.str[fParentTaskID])
		ev.ParentAgentID = cleanID(w.str[fParentAgentID])
		ev.SpawnDepth = int(min(count(w.spawnDepth, &ev.BadFields), MaxSpawnDepth))
	case KindTaskProgress, KindTaskNotification:
		ev.Resent = w.resent
		switch {
		case d.fast != nil:
			ev.HasProgress = true
			// The cache's entries are not written again before they are
			// recycled two snapshots later, after this event is gone.
			ev.Entries = d.fast.entries
			ev.BadFields += d.fast.badFields
			ev.BadEntries = d.fast.badEntries
			ev.ElementsOverCap = d.fast.overCap
		case w.rawProgress != nil:
			d.plainProgress(ev)
		}
		if ev.Kind == KindTaskProgress {
			break
		}
		ev.Status = safetext.Clean(w.str[fStatus], maxIDLen)
		ev.Reason = safetext.Clean(w.str[fReason], maxIDLen)
		if d.opts.KeepPreviews {
			ev.Summary = safetext.Clean(w.str[fSummary], maxPreviewLen)
		}
	case KindTaskUpdated:
		// A patch that is not an object is a bad field: the event still
		// applies, as an update that changes nothing.
		if w.hasPatch {
			p := &w.patch
			ev.BadFields += bits.OnesCount8(p.bad)
			ev.PatchStatus = safetext.Clean(p.status, maxIDLen)
			ev.PatchEndTime = count(p.endTime, &ev.BadFields)
			ev.PatchError = d.errorText(p.err)
		}
	}
	return ev, ReasonNone
}

// plainProgress converts the workflow_progress array of the plain path.
func (d *Decoder) plainProgress(ev *Event) {
	if err := json.Unmarshal(d.w.rawProgress, &d.elems); err != nil {
		// Not reached: the line is valid JSON and this is an array.
		ev.BadFields++
		return
	}
	ev.HasProgress = true
	for k, raw := range d.elems {
		if d.opts.MaxElements > 0 && k >= d.opts.MaxElements {
			ev.ElementsOverCap = len(d.elems) - k
			break
		}
		if !d.plainEntry(raw, &d.pe) {
			ev.BadEntries++
			continue
		}
		en, out, bad := d.entry(&d.pe)
		ev.BadFields += bad
		switch out {
		case entryApplied:
			ev.Entries = append(ev.Entries, en)
		case entrySkipped:
			ev.BadEntries++
		}
	}
	d.own = ev.Entries
}

// entryOutcome is what becomes of a workflow_progress element.
type entryOutcome uint8

const (
	entryApplied entryOutcome = iota // an Entry
	entryIgnored                     // an unknown type: additive evolution, not an error
	entrySkipped                     // no readable type or index: a bad entry
)

// entry converts an element that is an object. badFields counts its bad
// fields (those the element's type reads); a skipped element counts as a
// bad entry only.
func (d *Decoder) entry(w *wireEntry) (e Entry, out entryOutcome, badFields int) {
	if !w.hasType {
		return Entry{}, entrySkipped, 0
	}
	var reads uint32
	switch w.str[eType] {
	case "workflow_phase":
		reads = phaseReads
	case "workflow_agent":
		reads = agentReads
	default:
		return Entry{}, entryIgnored, 0
	}
	index, ok := entryIndex(w.num[eIndex])
	if !ok || w.bad&(1<<eIndex) != 0 {
		return Entry{}, entrySkipped, 0
	}
	badFields = bits.OnesCount32(w.bad & reads)
	if reads == phaseReads {
		return Entry{Phase: true, Index: index, Title: safetext.Clean(w.str[eTitle], maxNameLen), Child: w.str[eKind] == "child"}, entryApplied, badFields
	}
	phase, ok := entryIndex(w.num[ePhaseIndex])
	if !ok {
		badFields++
	}
	e = Entry{
		Index:          index,
		AgentID:        cleanID(w.str[eAgentID]),
		Label:          safetext.Clean(w.str[eLabel], maxNameLen),
		State:          safetext.Clean(w.str[eState], maxIDLen),
		Cached:         w.cached,
		PhaseIndex:     phase,
		PhaseTitle:     safetext.Clean(w.str[ePhaseTitle], maxNameLen),
		QueuedAt:       count(w.num[eQueuedAt], &badFields),
		StartedAt:      count(w.num[eStartedAt], &badFields),
		EndedAt:        count(w.num[eEndedAt], &badFields),
		LastProgressAt: count(w.num[eLastProgressAt], &badFields),
		DurationMs:     count(w.num[eDurationMs], &badFields),
		Tokens:         count(w.num[eTokens], &badFields),
		ToolCalls:      count(w.num[eToolCalls], &badFields),
		Error:          d.errorText(w.str[eError]),
		EndedWithRun:   safetext.Clean(w.str[eEndedWithRun], maxIDLen) != "",
	}
	if d.opts.KeepPreviews {
		e.ResultPreview = safetext.Clean(w.str[eResultPreview], maxPreviewLen)
		e.PromptPreview = safetext.Clean(w.str[ePromptPreview], maxPreviewLen)
	}
	return e, entryApplied, badFields
}
