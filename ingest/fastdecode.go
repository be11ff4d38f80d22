package ingest

import "slices"

// The fields the scanner reads, for its case-folding check: they are the
// json tags of wire, wireUsage, wirePatch, wireRequest, wireResponse and
// wireEntry (TestFastFieldNamesMatchTags keeps them so).
var (
	wireFields     = []string{"type", "subtype", "session_id", "task_id", "run_id", "tool_use_id", "task_type", "workflow_name", "description", "parent_task_id", "usage", "workflow_progress", "patch", "status", "summary", "reason", "request_id", "request", "response"}
	usageFields    = []string{"total_tokens", "tool_uses", "duration_ms"}
	patchFields    = []string{"status", "end_time", "error"}
	requestFields  = []string{"subtype", "session_id", "task_id"}
	responseFields = []string{"subtype", "request_id"}
	entryFields    = []string{"type", "index", "title", "agentId", "label", "state", "cached", "phaseIndex", "phaseTitle", "queuedAt", "startedAt", "endedAt", "lastProgressAt", "durationMs", "tokens", "toolCalls", "error", "resultPreview", "promptPreview"}
)

// decodeFast decodes a trimmed line of interest with the scanner.
// handled is false when the scanner was unsure; the caller then decodes
// the line with encoding/json.
func (d *Decoder) decodeFast(src Source, line []byte) (ev *Event, reason Reason, handled bool) {
	s := &d.scan
	st := d.scanLine(line)
	cur := d.snap.spare
	if st != scanOK {
		if st == scanSyntax {
			return nil, ReasonInvalidJSON, true
		}
		return nil, ReasonNone, false
	}
	if s.progressOK {
		d.snap.key = append(d.snap.key[:0], line[s.taskIDRaw[0]:s.taskIDRaw[1]]...)
		d.snap.store(d.snapPrev, cur)
	}
	if s.typeErr {
		return nil, ReasonBadShape, true
	}
	d.fillWire(line)
	if s.progressOK {
		d.fast = cur
	}
	ev, reason = d.convert(src)
	d.fast = nil
	return ev, reason, true
}

// scanLine scans the top-level object of line into d.scan. A
// workflow_progress array is decoded into the snapshot cache's spare,
// reusing the unchanged elements of the task's previous snapshot.
func (d *Decoder) scanLine(line []byte) scanStatus {
	s := &d.scan
	*s = fastScan{b: line, scratch: s.scratch[:0], memo: &d.memo}
	d.snapPrev = nil
	d.w.Usage, d.w.Patch, d.w.Request, d.w.Response = nil, nil, nil, nil
	var seen uint32
	end, st := s.object(0, func(key []byte, i int) (int, bool, scanStatus) {
		f := -1
		var end int
		var st scanStatus
		switch string(key) {
		case "type":
			f = 0
			end, st = s.strField(i, &s.typ)
		case "subtype":
			f = 1
			end, st = s.strField(i, &s.subtype)
		case "session_id":
			f = 2
			if s.b[i] == 'n' {
				s.sessionID = span{}
			}
			end, st = s.strField(i, &s.sessionID)
		case "task_id":
			f = 3
			end, st = s.strField(i, &s.taskID)
			s.taskIDRaw = [2]int{i, end}
		case "run_id":
			f = 4
			end, st = s.strField(i, &s.runID)
		case "tool_use_id":
			f = 5
			end, st = s.strField(i, &s.toolUseID)
		case "task_type":
			f = 6
			end, st = s.strField(i, &s.taskType)
		case "workflow_name":
			f = 7
			end, st = s.strField(i, &s.workflowName)
		case "description":
			f = 8
			end, st = s.strField(i, &s.description)
		case "parent_task_id":
			f = 9
			end, st = s.strField(i, &s.parentTaskID)
		case "usage":
			f = 10
			end, st = structField(s, i, &d.w.Usage, &s.usage, d.scanUsage)
		case "workflow_progress":
			f = 11
			if s.b[i] == '[' {
				end, st = d.scanProgress(i)
			} else {
				end, st = s.skip(i)
			}
			s.progress = [2]int{i, end}
		case "patch":
			f = 12
			end, st = structField(s, i, &d.w.Patch, &s.patch, d.scanPatch)
		case "status":
			f = 13
			end, st = s.strField(i, &s.status)
		case "summary":
			f = 14
			end, st = s.strField(i, &s.summary)
		case "reason":
			f = 15
			end, st = s.strField(i, &s.reason)
		case "request_id":
			f = 16
			end, st = s.strField(i, &s.requestID)
		case "request":
			f = 17
			end, st = structField(s, i, &d.w.Request, &s.request, d.scanRequest)
		case "response":
			f = 18
			end, st = structField(s, i, &d.w.Response, &s.resp, d.scanResponse)
		default:
			return 0, false, scanOK
		}
		if seen&(1<<f) != 0 {
			return 0, false, scanUnsure // encoding/json merges duplicates
		}
		seen |= 1 << f
		return end, true, st
	}, wireFields...)
	if st == scanOK && s.ws(end) != len(line) {
		st = scanSyntax // garbage after the object
	}
	if st != scanOK && s.progressOK {
		s.progressOK = false
	}
	return st
}

// structField scans a value for a pointer-to-struct field: an object (into
// own, which dst then points to), null (nil) or a type error.
func structField[T any](s *fastScan, i int, dst **T, own *T, scan func(i int) (int, scanStatus)) (int, scanStatus) {
	switch s.b[i] {
	case '{':
		var zero T
		*own = zero
		*dst = own
		return scan(i)
	case 'n':
		*dst = nil
		return s.literal(i, "null")
	}
	s.typeErr = true
	return s.skip(i)
}

func (d *Decoder) scanUsage(i int) (int, scanStatus) {
	s, u := &d.scan, &d.scan.usage
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		var f uint8
		var dst *float64
		switch string(key) {
		case "total_tokens":
			f, dst = 1, &u.TotalTokens
		case "tool_uses":
			f, dst = 2, &u.ToolUses
		case "duration_ms":
			f, dst = 4, &u.DurationMs
		default:
			return 0, false, scanOK
		}
		if seen&f != 0 {
			return 0, false, scanUnsure
		}
		seen |= f
		end, st := s.floatField(i, dst)
		return end, true, st
	}, usageFields...)
}

func (d *Decoder) scanPatch(i int) (int, scanStatus) {
	s, p := &d.scan, &d.scan.patch
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		var sp span
		var end int
		var st scanStatus
		var f uint8
		switch string(key) {
		case "status":
			f = 1
			end, st = s.strField(i, &sp)
			if sp.set {
				p.Status = s.text(sp)
			}
		case "end_time":
			f = 2
			end, st = s.floatField(i, &p.EndTime)
		case "error":
			f = 4
			end, st = s.strField(i, &sp)
			if sp.set {
				p.Error = d.errorSpan(sp)
			}
		default:
			return 0, false, scanOK
		}
		if seen&f != 0 {
			return 0, false, scanUnsure
		}
		seen |= f
		return end, true, st
	}, patchFields...)
}

func (d *Decoder) scanRequest(i int) (int, scanStatus) {
	r := &d.scan.request
	return d.scanStrings(i, requestFields, []*string{&r.Subtype, &r.SessionID, &r.TaskID})
}

func (d *Decoder) scanResponse(i int) (int, scanStatus) {
	r := &d.scan.resp
	return d.scanStrings(i, responseFields, []*string{&r.Subtype, &r.RequestID})
}

// scanStrings scans an object whose fields of interest are all strings:
// names[k] goes to dsts[k] (at most 8 fields); a duplicate is unsure.
func (d *Decoder) scanStrings(i int, names []string, dsts []*string) (int, scanStatus) {
	s := &d.scan
	var seen uint8
	return s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
		k := slices.Index(names, string(key))
		if k < 0 {
			return 0, false, scanOK
		}
		f := uint8(1) << k
		if seen&f != 0 {
			return 0, false, scanUnsure
		}
		seen |= f
		var sp span
		end, st := s.strField(i, &sp)
		if sp.set {
			*dsts[k] = s.text(sp)
		}
		return end, true, st
	}, names...)
}

// errorSpan is errorText of a scanned string. Without KeepErrors only
// whether the error is empty matters, and a string is empty exactly when
// its raw contents are, so it is not unquoted.
func (d *Decoder) errorSpan(sp span) string {
	if !d.opts.KeepErrors {
		if sp.end == sp.off {
			return ""
		}
		return WithheldError
	}
	return d.scan.text(sp)
}

// scanProgress decodes the workflow_progress array that opens at b[i]
// into a fresh snapshot cache (d.snap.spare), with walkArray. The cache
// key is the raw task_id when it came first, as both CLIs write it; else
// nothing is reused, which costs time only.
func (d *Decoder) scanProgress(i int) (int, scanStatus) {
	s := &d.scan
	if s.progressOK {
		return 0, scanUnsure
	}
	if s.taskIDRaw[1] > 0 {
		d.snapPrev = d.snap.lookup(s.b[s.taskIDRaw[0]:s.taskIDRaw[1]])
	}
	cur := d.snap.takeSpare()
	d.snap.spare = cur
	end, ok := d.walkArray(s.b, i, d.snapPrev, cur)
	if !ok {
		// A syntax error or an element the scanner was unsure of:
		// encoding/json decides.
		return 0, scanUnsure
	}
	s.progressOK = true
	return end, scanOK
}

// fillWire sets d.w from a scanned line, turning into strings only the
// fields convert reads for the line's kind.
func (d *Decoder) fillWire(line []byte) {
	s := &d.scan
	w := &d.w
	usage, patch, request, response := w.Usage, w.Patch, w.Request, w.Response
	*w = wire{Usage: usage, Patch: patch, Request: request, Response: response}
	w.Type = s.text(s.typ)
	w.Subtype = s.text(s.subtype)
	if s.sessionID.set {
		s.session = s.text(s.sessionID)
		w.SessionID = &s.session
	}
	if s.progress[1] > 0 {
		w.RawProgress = line[s.progress[0]:s.progress[1]]
	}
	switch w.Type {
	case "system":
		w.TaskID = s.text(s.taskID)
		w.RunID = s.text(s.runID)
		w.ToolUseID = s.text(s.toolUseID)
		switch w.Subtype {
		case "task_started":
			w.TaskType = s.text(s.taskType)
			w.WorkflowName = s.text(s.workflowName)
			w.Description = s.text(s.description)
			w.ParentTaskID = s.text(s.parentTaskID)
		case "task_notification":
			w.Status = s.text(s.status)
			w.Reason = s.text(s.reason)
			if d.opts.KeepPreviews {
				w.Summary = s.text(s.summary)
			}
		}
	default:
		w.RequestID = s.text(s.requestID)
	}
}

// scanElem decodes the workflow_progress element that starts at b[i] into
// we like encoding/json does, and returns the index just past it.
func (d *Decoder) scanElem(b []byte, i int, we *wireEntry) (end int, st scanStatus, typeErr bool) {
	s := &d.elemScan
	*s = fastScan{b: b, scratch: s.scratch[:0], memo: &d.memo}
	if i >= len(b) {
		return 0, scanSyntax, false
	}
	switch b[i] {
	case '{':
		var seen uint32
		end, st = s.object(i, func(key []byte, i int) (int, bool, scanStatus) {
			var f int
			var sp span
			var end int
			var st scanStatus
			var dst *string
			switch string(key) {
			case "type":
				f, dst = 0, &we.Type
			case "index":
				f = 1
				end, st = s.floatField(i, &we.Index)
			case "title":
				f, dst = 2, &we.Title
			case "agentId":
				f, dst = 3, &we.AgentID
			case "label":
				f, dst = 4, &we.Label
			case "state":
				f, dst = 5, &we.State
			case "cached":
				f = 6
				end, st = s.boolField(i, &we.Cached)
			case "phaseIndex":
				f = 7
				end, st = s.floatField(i, &we.PhaseIndex)
			case "phaseTitle":
				f, dst = 8, &we.PhaseTitle
			case "queuedAt":
				f = 9
				end, st = s.floatField(i, &we.QueuedAt)
			case "startedAt":
				f = 10
				end, st = s.floatField(i, &we.StartedAt)
			case "endedAt":
				f = 11
				end, st = s.floatField(i, &we.EndedAt)
			case "lastProgressAt":
				f = 12
				end, st = s.floatField(i, &we.LastProgressAt)
			case "durationMs":
				f = 13
				end, st = s.floatField(i, &we.DurationMs)
			case "tokens":
				f = 14
				end, st = s.floatField(i, &we.Tokens)
			case "toolCalls":
				f = 15
				end, st = s.floatField(i, &we.ToolCalls)
			case "error":
				f = 16
				end, st = s.strField(i, &sp)
				if sp.set {
					if d.opts.KeepErrors {
						we.Error = s.text(sp)
					} else if sp.end > sp.off {
						// Only emptiness matters (see errorSpan).
						we.Error = WithheldError
					} else {
						we.Error = ""
					}
				}
			case "resultPreview":
				f = 17
				end, st = s.strField(i, &sp)
				if sp.set && d.opts.KeepPreviews {
					we.ResultPreview = s.text(sp)
				}
			case "promptPreview":
				f = 18
				end, st = s.strField(i, &sp)
				if sp.set && d.opts.KeepPreviews {
					we.PromptPreview = s.text(sp)
				}
			default:
				return 0, false, scanOK
			}
			if seen&(1<<f) != 0 {
				return 0, false, scanUnsure
			}
			seen |= 1 << f
			if dst != nil {
				end, st = s.strField(i, &sp)
				if sp.set {
					*dst = s.text(sp)
				}
			}
			return end, true, st
		}, entryFields...)
	case 'n':
		end, st = s.literal(i, "null")
	default:
		s.typeErr = true
		end, st = s.skip(i)
	}
	return end, st, s.typeErr
}
