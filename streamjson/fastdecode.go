package streamjson

import (
	"slices"
	"unsafe"

	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/tap"
)

// decodeFast decodes a trimmed line of interest with the scanner.
// handled is false when the scanner was unsure; the caller then decodes
// the line with encoding/json.
func (d *Decoder) decodeFast(src tap.Source, line []byte) (ev *Event, reason Reason, handled bool) {
	st := d.scanLine(line)
	cur := d.snap.spare
	if st != scanOK {
		if st == scanSyntax {
			return nil, ReasonInvalidJSON, true
		}
		return nil, ReasonNone, false
	}
	t := &d.top
	if t.progressOK {
		if !cur.uncached {
			d.snap.key = append(d.snap.key[:0], line[t.taskIDRaw[0]:t.taskIDRaw[1]]...)
			d.snap.store(d.snapPrev, cur)
		}
		d.fast = cur
	}
	d.fillWire()
	ev, reason = d.convert(src)
	d.fast = nil
	if ev != nil && ev.Kind == KindTaskNotification && t.taskIDRaw[1] > 0 {
		d.snap.forget(line[t.taskIDRaw[0]:t.taskIDRaw[1]])
	}
	return ev, reason, true
}

// wireField returns the number of a top-level field name, or -1.
func wireField(key []byte) int {
	switch string(key) {
	case "type":
		return fType
	case "subtype":
		return fSubtype
	case "session_id":
		return fSessionID
	case "task_id":
		return fTaskID
	case "run_id":
		return fRunID
	case "tool_use_id":
		return fToolUseID
	case "task_type":
		return fTaskType
	case "workflow_name":
		return fWorkflowName
	case "description":
		return fDescription
	case "parent_task_id":
		return fParentTaskID
	case "parent_agent_id":
		return fParentAgentID
	case "spawn_depth":
		return fSpawnDepth
	case "is_error":
		return fIsError
	case "resent":
		return fResent
	case "duration_ms":
		return fDurationMs
	case "total_cost_usd":
		return fTotalCost
	case "modelUsage":
		return fModelUsage
	case "usage":
		return fUsage
	case "workflow_progress":
		return fProgress
	case "patch":
		return fPatch
	case "status":
		return fStatus
	case "summary":
		return fSummary
	case "reason":
		return fReason
	case "request_id":
		return fRequestID
	case "request":
		return fRequest
	case "response":
		return fResponse
	case "written_at":
		return fWrittenAt
	}
	return -1
}

// scanLine scans the top-level object of line into d.top and d.w. A
// workflow_progress array is decoded into the snapshot cache's spare,
// reusing the unchanged elements of the task's previous snapshot.
func (d *Decoder) scanLine(line []byte) scanStatus {
	s, t, w := &d.scan, &d.top, &d.w
	*s = fastScan{b: line, scratch: s.scratch[:0], memo: &d.memo}
	*t = topScan{}
	w.hasUsage, w.hasPatch, w.hasRequest, w.hasResponse = false, false, false, false
	w.spawnDepth = 0
	w.isError, w.durationMs, w.cost, w.costSet, w.models = false, 0, 0, false, w.models[:0]
	w.resent = false
	d.snapPrev = nil
	var seen uint32
	end, st := s.object(0, func(key []byte, i int) (int, bool, scanStatus) {
		f := wireField(key)
		if f < 0 {
			return 0, false, scanOK
		}
		if seen&(1<<f) != 0 {
			return 0, false, scanUnsure // the last one wins: left to decodePlain
		}
		seen |= 1 << f
		var end int
		var st scanStatus
		var bad bool
		switch f {
		case fUsage:
			w.usage = wireNums{}
			end, st, bad = structField(s, i, &w.hasUsage, d.scanUsage)
		case fProgress:
			switch s.b[i] {
			case '[':
				end, st = d.scanProgress(i)
			case 'n':
				end, st = s.literal(i, "null")
			default:
				end, st = s.skip(i)
				bad = true
			}
		case fPatch:
			w.patch = wirePatch{}
			end, st, bad = structField(s, i, &w.hasPatch, d.scanPatch)
		case fRequest:
			w.request = wireStrs{}
			end, st, bad = structField(s, i, &w.hasRequest, d.scanRequest)
		case fResponse:
			w.response = wireStrs{}
			end, st, bad = structField(s, i, &w.hasResponse, d.scanResponse)
		case fSpawnDepth:
			end, st, bad = s.floatField(i, &w.spawnDepth)
		case fIsError:
			end, st, bad = s.boolField(i, &w.isError)
		case fResent:
			end, st, bad = s.boolField(i, &w.resent)
		case fDurationMs:
			end, st, bad = s.floatField(i, &w.durationMs)
		case fTotalCost:
			end, st, bad = s.floatField(i, &w.cost)
			w.costSet = !bad && s.b[i] != 'n'
		case fModelUsage:
			switch s.b[i] {
			case '{':
				end, st = d.scanModels(i)
			case 'n':
				end, st = s.literal(i, "null")
			default:
				end, st = s.skip(i)
				bad = true
			}
		default:
			end, st, bad = s.strField(i, &t.spans[f])
			if f == fTaskID {
				t.taskIDRaw = [2]int{i, end}
			}
		}
		if bad {
			t.bad |= 1 << f
		}
		return end, true, st
	})
	if st == scanOK && s.ws(end) != len(line) {
		st = scanSyntax // garbage after the object
	}
	if st != scanOK {
		t.progressOK = false
	}
	return st
}

// structField scans a value for an object field: an object (scanned by
// scan, and *has set), null (absent) or anything else (bad, skipped).
func structField(s *fastScan, i int, has *bool, scan func(i int) (int, scanStatus)) (int, scanStatus, bool) {
	switch s.b[i] {
	case '{':
		*has = true
		end, st := scan(i)
		return end, st, false
	case 'n':
		end, st := s.literal(i, "null")
		return end, st, false
	}
	end, st := s.skip(i)
	return end, st, true
}

func (d *Decoder) scanUsage(i int) (int, scanStatus) {
	s, u := &d.scan, &d.w.usage
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		var f int
		switch string(key) {
		case "total_tokens":
			f = 0
		case "tool_uses":
			f = 1
		case "duration_ms":
			f = 2
		default:
			return 0, false, scanOK
		}
		if seen&(1<<f) != 0 {
			return 0, false, scanUnsure
		}
		seen |= 1 << f
		end, st, bad := s.floatField(i, &u.num[f])
		if bad {
			u.bad |= 1 << f
		}
		return end, true, st
	})
}

func (d *Decoder) scanPatch(i int) (int, scanStatus) {
	s, p := &d.scan, &d.w.patch
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		var sp span
		var end int
		var st scanStatus
		var bad bool
		var f int
		switch string(key) {
		case "status":
			f = pStatus
			end, st, bad = s.strField(i, &sp)
			if sp.set {
				p.status = s.text(sp)
			}
		case "end_time":
			f = pEndTime
			end, st, bad = s.floatField(i, &p.endTime)
		case "error":
			f = pError
			end, st, bad = s.strField(i, &sp)
			if sp.set {
				p.err = d.errorSpan(sp)
			}
		default:
			return 0, false, scanOK
		}
		if seen&(1<<f) != 0 {
			return 0, false, scanUnsure
		}
		seen |= 1 << f
		if bad {
			p.bad |= 1 << f
		}
		return end, true, st
	})
}

// scanRequest scans a control_request's request object (requestFields).
func (d *Decoder) scanRequest(i int) (int, scanStatus) {
	return d.scanStrings(i, requestFields[:], &d.w.request)
}

// scanResponse scans a control_response's response object
// (responseFields).
func (d *Decoder) scanResponse(i int) (int, scanStatus) {
	return d.scanStrings(i, responseFields[:], &d.w.response)
}

// scanStrings scans an object whose fields of interest are all strings:
// names[k] goes to dst.str[k]; a duplicate is unsure.
func (d *Decoder) scanStrings(i int, names []string, dst *wireStrs) (int, scanStatus) {
	s := &d.scan
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		k := -1
		for j, n := range names {
			if string(key) == n {
				k = j
				break
			}
		}
		if k < 0 {
			return 0, false, scanOK
		}
		if seen&(1<<k) != 0 {
			return 0, false, scanUnsure
		}
		seen |= 1 << k
		var sp span
		end, st, bad := s.strField(i, &sp)
		if sp.set {
			dst.str[k] = s.text(sp)
		}
		if bad {
			dst.bad |= 1 << k
		}
		return end, true, st
	})
}

// errorSpan is errorText of a scanned string. Without KeepErrors only
// whether the error is empty matters, and a string is empty exactly when
// its raw contents are, so it is not unquoted.
func (d *Decoder) errorSpan(sp span) string {
	return d.scan.errorSpan(sp, d.opts.KeepErrors)
}

func (s *fastScan) errorSpan(sp span, keep bool) string {
	switch {
	case keep:
		return s.text(sp)
	case sp.end == sp.off:
		return ""
	default:
		return WithheldError
	}
}

// scanProgress decodes the workflow_progress array that opens at b[i]
// into a fresh snapshot cache (d.snap.spare), with walkArray. The cache
// key is the raw task_id when it came first, as both CLIs write it; else
// nothing is reused, which costs time only.
func (d *Decoder) scanProgress(i int) (int, scanStatus) {
	s, t := &d.scan, &d.top
	if t.taskIDRaw[1] > 0 {
		d.snapPrev = d.snap.lookup(s.b[t.taskIDRaw[0]:t.taskIDRaw[1]])
	}
	cur := d.snap.takeSpare()
	d.snap.spare = cur
	if len(s.b) > maxCachedLine {
		// Decoded, not remembered; nor compared with what was.
		cur.uncached = true
		d.snapPrev = nil
	}
	end, ok := d.walkArray(s.b, i, d.snapPrev, cur)
	if !ok {
		// A syntax error or an element the scanner was unsure of:
		// encoding/json decides.
		return 0, scanUnsure
	}
	t.progressOK = true
	return end, scanOK
}

// fillWire completes d.w from a scanned line, turning into strings only
// the fields convert reads for the line's kind.
func (d *Decoder) fillWire() {
	s, t, w := &d.scan, &d.top, &d.w
	w.str = [numWireFields]string{}
	w.bad = t.bad
	w.rawProgress = nil
	w.writtenAt = 0
	text := func(f int) { w.str[f] = s.text(t.spans[f]) }
	text(fType)
	text(fSubtype)
	text(fSessionID)
	switch w.str[fType] {
	case "system":
		text(fTaskID)
		text(fRunID)
		text(fToolUseID)
		switch w.str[fSubtype] {
		case "task_started":
			text(fTaskType)
			text(fWorkflowName)
			text(fDescription)
			text(fParentTaskID)
			text(fParentAgentID)
		case "task_notification":
			text(fStatus)
			text(fReason)
			if d.opts.KeepPreviews {
				text(fSummary)
			}
		}
	default:
		text(fRequestID)
	}
	if sp := t.spans[fWrittenAt]; sp.set {
		// The bytes are only read, not kept: no string is made.
		b := s.raw(sp)
		ms, ok := parseWrittenAt(unsafe.String(unsafe.SliceData(b), len(b)))
		if ok {
			w.writtenAt = ms
		} else {
			w.bad |= 1 << fWrittenAt
		}
	}
}

// entryField returns the number of a workflow_progress element's field
// name, or -1.
func entryField(key []byte) int {
	switch string(key) {
	case "type":
		return eType
	case "index":
		return eIndex
	case "title":
		return eTitle
	case "agentId":
		return eAgentID
	case "label":
		return eLabel
	case "state":
		return eState
	case "cached":
		return eCached
	case "phaseIndex":
		return ePhaseIndex
	case "phaseTitle":
		return ePhaseTitle
	case "queuedAt":
		return eQueuedAt
	case "startedAt":
		return eStartedAt
	case "endedAt":
		return eEndedAt
	case "lastProgressAt":
		return eLastProgressAt
	case "durationMs":
		return eDurationMs
	case "tokens":
		return eTokens
	case "toolCalls":
		return eToolCalls
	case "error":
		return eError
	case "resultPreview":
		return eResultPreview
	case "promptPreview":
		return ePromptPreview
	case "endedWithRun":
		return eEndedWithRun
	case "kind":
		return eKind
	}
	return -1
}

// scanElem decodes the workflow_progress element that starts at b[i]
// into we (zeroed by the caller) and returns the index just past it. obj
// is false when the element is not an object (it is then only
// validated).
func (d *Decoder) scanElem(b []byte, i int, we *wireEntry) (end int, st scanStatus, obj bool) {
	s := &d.elemScan
	*s = fastScan{b: b, scratch: s.scratch[:0], memo: &d.memo}
	if i >= len(b) {
		return 0, scanSyntax, false
	}
	if b[i] != '{' {
		end, st = s.skip(i)
		return end, st, false
	}
	var seen uint32
	end, st = s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		f := entryField(key)
		if f < 0 {
			return 0, false, scanOK
		}
		if seen&(1<<f) != 0 {
			return 0, false, scanUnsure
		}
		seen |= 1 << f
		var end int
		var st scanStatus
		var bad bool
		switch {
		case entryNumbers&(1<<f) != 0:
			end, st, bad = s.floatField(i, &we.num[f])
		case f == eCached:
			end, st, bad = s.boolField(i, &we.cached)
		default:
			var sp span
			end, st, bad = s.strField(i, &sp)
			if !sp.set {
				break
			}
			switch f {
			case eError:
				we.str[f] = s.errorSpan(sp, d.opts.KeepErrors)
			case eResultPreview, ePromptPreview:
				if d.opts.KeepPreviews {
					we.str[f] = s.text(sp)
				}
			case eType:
				we.hasType = true
				we.str[f] = s.text(sp)
			default:
				we.str[f] = s.text(sp)
			}
		}
		if bad {
			we.bad |= 1 << f
		}
		return end, true, st
	})
	return end, st, true
}

// maxScannedModels is how many modelUsage entries the scanner reads (a
// session uses one to three); a line with more goes to encoding/json.
const maxScannedModels = 32

// scanModels reads modelUsage into d.w.models. A model name that is
// escaped, not plain ASCII or repeated is left to encoding/json, which
// decides what it means (the last of duplicates wins there).
func (d *Decoder) scanModels(i int) (int, scanStatus) {
	s, w := &d.scan, &d.w
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		name := unsafe.String(unsafe.SliceData(key), len(key))
		if len(w.models) == maxScannedModels || !safetext.IsPlain(name) || slices.ContainsFunc(w.models, func(m wireModel) bool { return m.name == name }) {
			return 0, false, scanUnsure
		}
		m := wireModel{name: string(key)}
		var end int
		var st scanStatus
		if s.b[i] == '{' {
			end, st = d.scanModel(i, &m)
		} else {
			m.notObj = true // null included: not an object
			end, st = s.skip(i)
		}
		w.models = append(w.models, m)
		return end, true, st
	})
}

// scanModel reads one modelUsage entry's counts and cost.
func (d *Decoder) scanModel(i int, m *wireModel) (int, scanStatus) {
	s := &d.scan
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		k := slices.Index(modelNums[:], string(key))
		if k < 0 {
			return 0, false, scanOK
		}
		if seen&(1<<k) != 0 {
			return 0, false, scanUnsure
		}
		seen |= 1 << k
		end, st, bad := s.floatField(i, &m.num[k])
		switch {
		case bad:
			m.bad |= 1 << k
		case s.b[i] != 'n':
			m.set |= 1 << k
		}
		return end, true, st
	})
}
