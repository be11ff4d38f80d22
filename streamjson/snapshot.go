package streamjson

import "bytes"

// Incremental decoding of workflow_progress snapshots.
//
// Every task_progress (and task_updated, and a task_notification carrying
// the final snapshot) of a workflow carries all of its agents, and usually
// only one of them changed since the previous snapshot:
// decoding each snapshot in full makes a workflow of n agents cost O(n²)
// decode work, and decoding is the whole of that cost. So the decoder
// remembers the raw bytes of each element of the last snapshot of a task
// together with the Entry they decoded to. An element of a new snapshot
// whose bytes equal a remembered element is not decoded again: decoding is
// a pure function of the element's bytes (and the decoder's options), so
// the cached Entry, and the cached count of its bad fields or whether it
// was a bad entry, are exactly what decoding would give. Comparing bytes in
// place (bytes.HasPrefix) needs no tokenizing: a JSON object ends at its
// closing brace, so a complete remembered element that is a prefix of the
// rest of the line is that element.
//
// The rest of the line and every element that is new are read by the
// scanner of fastscan.go. Anything unusual (escaped keys, a duplicate
// key, a syntax error inside the array) makes the fast path give up, and the line is decoded by the plain path, which is the reference:
// FuzzSnapshotDecode and FuzzFastDecode check that both agree.

// maxSnapshotCaches bounds how many tasks' last snapshots are kept; each
// holds at most one line's array (MaxLine bytes).
const maxSnapshotCaches = 4

// cachedElem is one element of a remembered snapshot.
type cachedElem struct {
	off, end  int  // the element's bytes in snapshotCache.buf
	entry     int  // what it decoded to: an index in snapshotCache.entries, or -1 (ignored or skipped)
	badFields int  // its fields that were unusable (Event.BadFields)
	badEntry  bool // skipped whole: not an object, no readable type or index (Event.BadEntries)
}

// snapshotCache is the last workflow_progress array seen for one task.
type snapshotCache struct {
	key     []byte // the raw task_id value; only a lookup key
	buf     []byte
	elems   []cachedElem
	entries []Entry // the agents and phases, in order: the Event's Entries
	// The sums over elems of badFields and badEntry: the Event's counts.
	badFields, badEntries int
	overCap               int    // elements beyond DecodeOptions.MaxElements
	uncached              bool   // a line too long to remember: buf holds nothing
	used                  uint64 // for least-recently-used eviction
}

// maxCachedLine is the longest line whose snapshot is remembered. A
// thousand-agent workflow writes snapshots of about 300 KiB; a longer line
// is rare, and keeping a copy of it (up to MaxLine) beside the framer's
// would double what one line costs in memory.
const maxCachedLine = 1 << 20

// maxSpareEntries bounds the Entry capacity a recycled cache keeps: after
// one huge snapshot, its buffers go back to the garbage collector rather
// than stay held for the rest of the stream.
const maxSpareEntries = 4096

func (c *snapshotCache) elem(j int) []byte {
	e := &c.elems[j]
	return c.buf[e.off:e.end]
}

// snapshotState is the Decoder's memory of recent snapshots.
type snapshotState struct {
	caches []*snapshotCache
	spare  *snapshotCache // the buffers the next snapshot is built in
	// spent holds the buffers of a task that ended while there was a
	// spare already: the next task takes them instead of allocating.
	// Dropped, a stream running task after task allocated a cache per
	// task (replay of the task-heavy stream: 22 MB allocated instead of
	// 15, CPU 0.09 -> 0.11 s); kept, it is one cache, not the
	// maxSnapshotCaches - 1 of ended tasks held before forget.
	spent   *snapshotCache
	clock   uint64
	key     []byte
	we      wireEntry
	decoded int // elements decoded (not taken from a cache), for tests of the reuse
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

// forget drops the cache of key, the task_id of a task_notification: the
// task has ended, and a stream that runs task after task (serve follows
// hundreds) would otherwise hold the last snapshots of maxSnapshotCaches
// tasks that are over. A late snapshot of the task (within the Tracker's
// grace window) is then decoded in full: the same Event, as decoding is a
// pure function of the bytes. Its buffers become the spare if there is
// none, else the spent cache (the Event just decoded may still read its
// entries: both are only cleared when the next line's takeSpare takes them).
func (s *snapshotState) forget(key []byte) {
	for i, c := range s.caches {
		if bytes.Equal(c.key, key) {
			last := len(s.caches) - 1
			s.caches[i] = s.caches[last]
			s.caches[last] = nil
			s.caches = s.caches[:last]
			if s.spare == nil {
				s.spare = c
			} else {
				s.spent = c
			}
			return
		}
	}
}

func (s *snapshotState) takeSpare() *snapshotCache {
	c := s.spare
	if c == nil {
		c, s.spent = s.spent, nil
	}
	if c == nil {
		c = new(snapshotCache)
	}
	s.spare = nil
	if cap(c.entries) > maxSpareEntries || cap(c.buf) > maxCachedLine {
		c = new(snapshotCache)
	}
	c.buf = c.buf[:0]
	c.elems = c.elems[:0]
	clear(c.entries) // drop the strings
	c.entries = c.entries[:0]
	c.badFields, c.badEntries, c.overCap, c.uncached = 0, 0, 0, false
	return c
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
	for n := 0; ; n++ {
		if i >= len(line) {
			return 0, false
		}
		if max := d.opts.MaxElements; max > 0 && n >= max {
			// Beyond the bound: validated, not decoded, not cached.
			s := &d.elemScan
			*s = fastScan{b: line, scratch: s.scratch[:0], memo: &d.memo}
			vEnd, st := s.skip(i)
			if st != scanOK {
				return 0, false
			}
			cur.overCap++
			var done bool
			if i, done, ok = afterElem(line, vEnd); done || !ok {
				return i, ok
			}
			continue
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
		if cur.uncached {
			vEnd, ok := d.decodeElem(line, i, cur)
			if !ok {
				return 0, false
			}
			i = vEnd
		} else if hit != nil {
			cur.buf = append(cur.buf, hitBytes...)
			el := cachedElem{off: off, end: len(cur.buf), entry: -1, badFields: hit.badFields, badEntry: hit.badEntry}
			if hit.entry >= 0 {
				el.entry = len(cur.entries)
				cur.entries = append(cur.entries, prev.entries[hit.entry])
			}
			cur.elems = append(cur.elems, el)
			i += len(hitBytes)
		} else {
			vEnd, ok := d.decodeElem(line, i, cur)
			if !ok {
				return 0, false
			}
			cur.buf = append(cur.buf, line[i:vEnd]...)
			el := &cur.elems[len(cur.elems)-1]
			el.off, el.end = off, len(cur.buf)
			i = vEnd
		}
		el := &cur.elems[len(cur.elems)-1]
		cur.badFields += el.badFields
		if el.badEntry {
			cur.badEntries++
		}
		var done bool
		if i, done, ok = afterElem(line, i); done || !ok {
			return i, ok
		}
	}
}

// afterElem reads what follows an array element ending at line[i]: a comma
// (i is then the next element's start) or the closing bracket (done, i
// just past it). ok is false for anything else.
func afterElem(line []byte, i int) (next int, done, ok bool) {
	i = skipWS(line, i)
	if i >= len(line) {
		return 0, false, false
	}
	switch line[i] {
	case ',':
		return skipWS(line, i+1), false, true
	case ']':
		return i + 1, true, true
	}
	return 0, false, false
}

// decodeElem decodes the element that starts at line[i] the way the plain
// path decodes it as part of the array, appends it to cur and returns the
// index just past it. ok is false for a syntax error, or when the scanner
// is unsure of the element: then encoding/json decodes the whole line.
func (d *Decoder) decodeElem(line []byte, i int, cur *snapshotCache) (end int, ok bool) {
	we := &d.snap.we
	*we = wireEntry{}
	d.snap.decoded++
	end, st, obj := d.scanElem(line, i, we)
	if st != scanOK {
		return 0, false
	}
	el := cachedElem{entry: -1, badEntry: !obj}
	if obj {
		en, out, bad := d.entry(we)
		el.badFields = bad
		switch out {
		case entryApplied:
			el.entry = len(cur.entries)
			cur.entries = append(cur.entries, en)
		case entrySkipped:
			el.badEntry = true
		}
	}
	cur.elems = append(cur.elems, el)
	return end, true
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
