package ingest

import (
	"bytes"
	"encoding/json"
)

// Incremental decoding of workflow_progress snapshots.
//
// Every task_progress (and task_updated) of a workflow carries all of its
// agents, and usually only one of them changed since the previous snapshot:
// decoding each snapshot in full makes a workflow of n agents cost O(n²)
// decode work, and encoding/json is the whole of that cost. So the decoder
// remembers the raw bytes of each element of the last snapshot of a task
// together with the Entry they decoded to. An element of a new snapshot
// whose bytes equal a remembered element is not decoded again: decoding is
// a pure function of the element's bytes (and the decoder's options), so
// the cached Entry is exactly what decoding would give. Comparing bytes in
// place (bytes.HasPrefix) needs no tokenizing: a JSON object ends at its
// closing brace, so a complete remembered element that is a prefix of the
// rest of the line is that element.
//
// Everything else is still checked by encoding/json: the line outside the
// array (with the array replaced by null) and every element that is new.
// Anything unusual (escaped or case-folded keys, a duplicate key, a
// syntax error) makes the fast path give up, and the line is decoded by
// the plain path, which is the reference: FuzzSnapshotDecode checks that
// both agree.

// maxSnapshotCaches bounds how many tasks' last snapshots are kept; each
// holds at most one line's array (MaxLine bytes).
const maxSnapshotCaches = 4

var (
	keyWorkflowProgress = []byte("workflow_progress")
	keyTaskID           = []byte("task_id")
	markerProgress      = []byte(`"workflow_progress"`)
	jsonNull            = []byte("null")
)

// cachedElem is one element of a remembered snapshot.
type cachedElem struct {
	off, end int  // the element's bytes in snapshotCache.buf
	entry    int  // what it decoded to: an index in snapshotCache.entries, or -1 (an ignored type or null)
	typeErr  bool // valid JSON of the wrong shape (a bad_shape task_progress)
}

// snapshotCache is the last workflow_progress array seen for one task.
type snapshotCache struct {
	key     []byte // the raw task_id value; only a lookup key
	buf     []byte
	elems   []cachedElem
	entries []Entry // the agents and phases, in order: the Event's Entries
	typeErr bool    // some element has the wrong shape
	used    uint64  // for least-recently-used eviction
}

func (c *snapshotCache) elem(j int) []byte {
	e := &c.elems[j]
	return c.buf[e.off:e.end]
}

// snapshotState is the Decoder's memory of recent snapshots.
type snapshotState struct {
	caches  []*snapshotCache
	spare   *snapshotCache // the buffers the next snapshot is built in
	clock   uint64
	scratch []byte // the line with its array replaced by null
	key     []byte
	we      wireEntry
	decoded int // elements decoded with encoding/json, for tests of the reuse
}

// lookup returns the cache of key, or nil.
func (s *snapshotState) lookup(key []byte) *snapshotCache {
	for _, c := range s.caches {
		if bytes.Equal(c.key, key) {
			return c
		}
	}
	return nil
}

// store makes next the cache of its key, replacing prev (the old cache of
// the same key, or nil), and recycles the replaced buffers.
func (s *snapshotState) store(prev, next *snapshotCache) {
	s.clock++
	next.used = s.clock
	next.key = append(next.key[:0], s.key...)
	if prev != nil {
		for i, c := range s.caches {
			if c == prev {
				s.caches[i] = next
			}
		}
		s.spare = prev
		return
	}
	if len(s.caches) < maxSnapshotCaches {
		s.caches = append(s.caches, next)
		s.spare = nil
		return
	}
	oldest := 0
	for i, c := range s.caches {
		if c.used < s.caches[oldest].used {
			oldest = i
		}
	}
	s.spare = s.caches[oldest]
	s.caches[oldest] = next
}

func (s *snapshotState) takeSpare() *snapshotCache {
	c := s.spare
	if c == nil {
		c = new(snapshotCache)
	}
	s.spare = nil
	c.buf = c.buf[:0]
	c.elems = c.elems[:0]
	clear(c.entries) // drop the strings
	c.entries = c.entries[:0]
	c.typeErr = false
	return c
}

// decodeSnapshot is the fast path of Decode for lines with a top-level
// workflow_progress array. handled is false when it gave up; the caller
// then decodes the line the plain way. On success d.w holds the line's
// fields but for the array, and cur its elements.
func (d *Decoder) decodeSnapshot(line []byte) (cur *snapshotCache, reason Reason, handled bool) {
	s := &d.snap
	cur = s.takeSpare()
	prev, arrStart, arrEnd, ok := d.walkLine(line, cur)
	if !ok {
		s.spare = cur
		return nil, ReasonNone, false
	}
	s.scratch = append(append(append(s.scratch[:0], line[:arrStart]...), jsonNull...), line[arrEnd:]...)
	d.w = wire{}
	if err := json.Unmarshal(s.scratch, &d.w); err != nil {
		s.spare = cur
		var syn *json.SyntaxError
		if asSyntax(err, &syn) {
			return nil, ReasonNone, false // the plain path names the reason
		}
		return nil, ReasonBadShape, true
	}
	if !bytes.Equal(d.w.RawProgress, jsonNull) {
		// The null we put in is not what encoding/json read as
		// workflow_progress: we misread the line's structure.
		s.spare = cur
		return nil, ReasonNone, false
	}
	s.store(prev, cur)
	return cur, ReasonNone, true
}

// walkLine walks the top-level object of line, decodes the value of its
// one "workflow_progress" key, an array, into cur and returns the array's
// span. The other values are only skipped: encoding/json decodes them
// afterwards. prev is the cache the array was compared with, chosen by the
// raw task_id value when it comes before the array (as both CLIs write
// it). ok is false for any line the fast path does not handle.
func (d *Decoder) walkLine(line []byte, cur *snapshotCache) (prev *snapshotCache, start, end int, ok bool) {
	s := &d.snap
	s.key = s.key[:0]
	i := skipWS(line, 0)
	if i >= len(line) || line[i] != '{' {
		return nil, 0, 0, false
	}
	i = skipWS(line, i+1)
	start = -1
	for i < len(line) && line[i] != '}' {
		if line[i] != '"' {
			return nil, 0, 0, false
		}
		kEnd, ok := skipString(line, i)
		if !ok {
			return nil, 0, 0, false
		}
		key := line[i+1 : kEnd-1]
		i = skipWS(line, kEnd)
		if i >= len(line) || line[i] != ':' {
			return nil, 0, 0, false
		}
		i = skipWS(line, i+1)
		vStart := i
		var vEnd int
		switch {
		case bytes.Equal(key, keyWorkflowProgress):
			if start >= 0 || i >= len(line) || line[i] != '[' {
				return nil, 0, 0, false // a duplicate, or not an array
			}
			prev = s.lookup(s.key)
			vEnd, ok = d.walkArray(line, vStart, prev, cur)
			start, end = vStart, vEnd
		case !plainKey(key), bytes.EqualFold(key, keyWorkflowProgress):
			// encoding/json unescapes keys and matches them without
			// regard to case: such a key could be workflow_progress too.
			return nil, 0, 0, false
		default:
			vEnd, ok = skipValue(line, i)
			if ok && start < 0 && bytes.Equal(key, keyTaskID) {
				s.key = append(s.key[:0], line[vStart:vEnd]...)
			}
		}
		if !ok {
			return nil, 0, 0, false
		}
		i = skipWS(line, vEnd)
		if i < len(line) && line[i] == ',' {
			i = skipWS(line, i+1)
			if i < len(line) && line[i] == '}' {
				return nil, 0, 0, false // a trailing comma
			}
		}
	}
	if start < 0 {
		return nil, 0, 0, false
	}
	return prev, start, end, true
}

// walkArray decodes the elements of the array that opens at line[start]
// into cur, reusing the elements of prev (the task's previous snapshot)
// that did not change, and returns the index just past the array. ok is
// false when the array is not well-formed JSON.
//
// Elements are matched by position: agents keep their place from one
// snapshot to the next and new ones are appended. After a changed element
// both the same position and the next one are tried, so one element
// inserted or removed costs one decode, not the rest of the array.
func (d *Decoder) walkArray(line []byte, start int, prev, cur *snapshotCache) (end int, ok bool) {
	i := skipWS(line, start+1)
	j := 0 // candidate position in prev
	if i < len(line) && line[i] == ']' {
		return i + 1, true
	}
	for {
		if i >= len(line) {
			return 0, false
		}
		var hit *cachedElem
		var hitBytes []byte
		if prev != nil {
			for k := j; k < j+2 && k < len(prev.elems); k++ {
				if b := prev.elem(k); bytes.HasPrefix(line[i:], b) {
					hit, hitBytes, j = &prev.elems[k], b, k+1
					break
				}
			}
		}
		off := len(cur.buf)
		if hit != nil {
			cur.buf = append(cur.buf, hitBytes...)
			el := cachedElem{off: off, end: len(cur.buf), entry: -1, typeErr: hit.typeErr}
			if hit.entry >= 0 {
				el.entry = len(cur.entries)
				cur.entries = append(cur.entries, prev.entries[hit.entry])
			}
			cur.elems = append(cur.elems, el)
			i += len(hitBytes)
		} else {
			vEnd, ok := skipValue(line, i)
			if !ok || !d.decodeElem(line[i:vEnd], cur) {
				return 0, false
			}
			cur.buf = append(cur.buf, line[i:vEnd]...)
			el := &cur.elems[len(cur.elems)-1]
			el.off, el.end = off, len(cur.buf)
			i = vEnd
		}
		cur.typeErr = cur.typeErr || cur.elems[len(cur.elems)-1].typeErr
		i = skipWS(line, i)
		if i >= len(line) {
			return 0, false
		}
		switch line[i] {
		case ',':
			i = skipWS(line, i+1)
		case ']':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// decodeElem decodes one element the way the plain path decodes it as part
// of the array and appends it to cur. It returns false for a syntax error.
func (d *Decoder) decodeElem(b []byte, cur *snapshotCache) bool {
	we := &d.snap.we
	*we = wireEntry{}
	d.snap.decoded++
	if err := json.Unmarshal(b, we); err != nil {
		var syn *json.SyntaxError
		if asSyntax(err, &syn) {
			return false
		}
		// Like decoding the whole array: the element's other fields
		// still decode, but the snapshot is bad_shape.
		cur.elems = append(cur.elems, cachedElem{entry: -1, typeErr: true})
		return true
	}
	el := cachedElem{entry: -1}
	if en, ok := d.entry(we); ok {
		el.entry = len(cur.entries)
		cur.entries = append(cur.entries, en)
	}
	cur.elems = append(cur.elems, el)
	return true
}

// plainKey reports whether a raw key is printable ASCII without escapes:
// then encoding/json matches it byte for byte (but for case).
func plainKey(k []byte) bool {
	for _, c := range k {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string that opens at b[i].
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		q := j + k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}

// skipValue returns the index just past the value that starts at b[i]. It
// follows strings and nesting only; encoding/json checks the grammar of
// whatever the fast path does not take from its cache.
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			j, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			if depth == 0 {
				return j, true
			}
			i = j
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return 0, false
			}
			if depth == 0 {
				return i + 1, true
			}
		default:
			if depth == 0 {
				// A literal or a number: it runs to the next delimiter.
				j := i
				for j < len(b) && !isDelim(b[j]) {
					j++
				}
				if j == i {
					return 0, false
				}
				return j, true
			}
		}
		i++
	}
	return 0, false
}

func isDelim(c byte) bool {
	switch c {
	case ',', ':', '{', '}', '[', ']', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
