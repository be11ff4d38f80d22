package supervise

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// ErrStdinClosed is returned by Injector.Send when nothing can reach the
// child's stdin any more: there is no Stdin, it reached EOF (the child's
// stdin is closed), or the child stopped reading it.
var ErrStdinClosed = errors.New("the child's stdin is closed")

// ErrRequestPending is returned by Injector.Send while an earlier request
// has not been answered.
var ErrRequestPending = errors.New("an injected request is still unanswered")

// responseType marks a control_response line. Where it stands in the line
// is not relied on: Claude Code writes "type" first on its
// control_response lines but not on its result lines, so key order is not
// a contract.
var responseType = []byte(`"type":"control_response"`)

// maxHeld bounds a held line: an interrupt's acknowledgement is ~150 bytes,
// so a longer line is not it and is passed on as it streams.
const maxHeld = 64 << 10

// Injector lets the caller write a line of its own to the child's stdin,
// between two whole lines of Config.Stdin (never inside one: if Stdin is
// mid-line the line waits for that line's newline), and keeps the child's
// control_response to it from Config.Stdout, since whoever feeds Stdin
// never asked. Every other byte passes as without it. One request is
// outstanding at a time. Set it in Config.Inject; nil changes nothing.
type Injector struct {
	// mu orders the writes to the child's stdin: the stdin pump's and the
	// injected line's.
	mu      sync.Mutex
	dst     io.Writer // the child's stdin; nil until Run starts it, or without Stdin
	tap     func([]byte) bool
	count   func(int)
	atStart bool // Stdin's last byte was a newline (or none came yet)
	closed  bool
	pending []byte

	// fmu guards the stdout side. A separate lock: the stdout pump must
	// never wait for a stdin write, which may wait for a child that is
	// itself waiting for its stdout to be read.
	fmu      sync.Mutex
	needle   []byte      // `"request_id":"<id>"` of the awaited response
	answer   chan []byte // gets the withheld response line
	withheld int64
}

// NewInjector returns an Injector to set in Config.Inject.
func NewInjector() *Injector { return &Injector{atStart: true} }

// Send writes line (one JSON object; a newline is added) to the child's
// stdin at the next line boundary of Stdin: at once when Stdin is between
// lines, else right after the newline that ends its current line. The
// stdout line that is a control_response ("type":"control_response") and
// carries "request_id":"<requestID>" is withheld from Stdout and sent, once, on the
// returned channel. If Stdin stays mid-line the line waits, with no bound
// of its own: the caller bounds its wait for the answer (it may never come).
// The line is tapped (StdinTap) and counted like Stdin's bytes.
func (j *Injector) Send(line []byte, requestID string) (<-chan []byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.dst == nil || j.closed {
		return nil, ErrStdinClosed
	}
	j.fmu.Lock()
	if j.needle != nil {
		j.fmu.Unlock()
		return nil, ErrRequestPending
	}
	j.needle = []byte(`"request_id":"` + requestID + `"`)
	ans := make(chan []byte, 1)
	j.answer = ans
	j.fmu.Unlock()
	l := append(append(make([]byte, 0, len(line)+1), line...), '\n')
	if !j.atStart {
		j.pending = l
		return ans, nil
	}
	if err := j.emit(l); err != nil {
		return nil, err
	}
	return ans, nil
}

// Withheld is how many stdout bytes were kept from Stdout (the responses).
func (j *Injector) Withheld() int64 {
	j.fmu.Lock()
	defer j.fmu.Unlock()
	return j.withheld
}

// attach connects the injector to the child's stdin pump.
func (j *Injector) attach(dst io.Writer, tap func([]byte) bool, count func(int)) {
	j.mu.Lock()
	j.dst, j.tap, j.count = dst, tap, count
	j.mu.Unlock()
}

// emit taps b and writes it to the child's stdin; j.mu is held.
func (j *Injector) emit(b []byte) error {
	if !j.tap(b) {
		j.closed = true
		return ErrStdinClosed
	}
	if _, err := j.dst.Write(b); err != nil {
		j.closed = true
		return err
	}
	j.count(len(b))
	return nil
}

// pass writes a chunk of Stdin to the child's stdin, with a pending line
// right after the chunk's first newline.
func (j *Injector) pass(b []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending != nil {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			if err := j.emit(b[:i+1]); err != nil {
				return err
			}
			l := j.pending
			j.pending = nil
			j.atStart = true
			if err := j.emit(l); err != nil {
				return err
			}
			b = b[i+1:]
		}
	}
	if len(b) == 0 {
		return nil
	}
	j.atStart = b[len(b)-1] == '\n'
	return j.emit(b)
}

// close marks the child's stdin closed: a pending line is dropped (Stdin
// ended mid-line: nothing may follow a partial line).
func (j *Injector) close() {
	j.mu.Lock()
	j.closed, j.pending = true, nil
	j.mu.Unlock()
}

// armed reports whether a response is awaited.
func (j *Injector) armed() bool {
	j.fmu.Lock()
	defer j.fmu.Unlock()
	return j.needle != nil
}

// take reports whether line (whole, with its newline) is the awaited
// response, and if so hands it over and disarms.
func (j *Injector) take(line []byte) bool {
	j.fmu.Lock()
	defer j.fmu.Unlock()
	if j.needle == nil || len(line) == 0 || line[0] != '{' || !bytes.Contains(line, j.needle) || !bytes.Contains(line, responseType) {
		return false
	}
	j.answer <- bytes.Clone(line)
	j.needle, j.answer = nil, nil
	j.withheld += int64(len(line))
	return true
}

// respFilter is Stdout when an Injector is set: byte-exact passthrough, one
// Write per Write, while no response is awaited; while one is (from the
// request's writing to its answer: the CLI acknowledges at once), each
// line is held until its newline, at most maxHeld bytes, and the awaited
// one is withheld. A CLI writes a line in one write, so holding it delays
// nothing in practice.
type respFilter struct {
	w       io.Writer
	j       *Injector
	atStart bool
	holding bool
	hold    []byte
}

func newRespFilter(w io.Writer, j *Injector) *respFilter {
	if w == nil {
		w = io.Discard
	}
	return &respFilter{w: w, j: j, atStart: true}
}

// Write passes p on, less the awaited response line. A chunk read before
// the request was armed cannot hold its answer (the request was not yet
// written), so an unarmed Write is passed on whole.
func (f *respFilter) Write(p []byte) (int, error) {
	n := len(p)
	if !f.holding && !f.j.armed() {
		if n == 0 {
			return 0, nil
		}
		f.atStart = p[n-1] == '\n'
		return f.w.Write(p)
	}
	for len(p) > 0 {
		if !f.holding && f.atStart && f.j.armed() {
			f.holding = true
		}
		i := bytes.IndexByte(p, '\n')
		take := p
		if i >= 0 {
			take = p[:i+1]
		}
		p = p[len(take):]
		if !f.holding {
			if _, err := f.w.Write(take); err != nil {
				return n - len(p) - len(take), err
			}
			f.atStart = take[len(take)-1] == '\n'
			continue
		}
		f.hold = append(f.hold, take...)
		switch {
		case i >= 0 && f.j.take(f.hold):
			f.hold, f.holding, f.atStart = f.hold[:0], false, true
		case i >= 0 || len(f.hold) > maxHeld:
			f.atStart = i >= 0
			if err := f.flushHeld(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// flushHeld writes out a held line that turned out not to be the awaited
// response, or the partial line at EOF.
func (f *respFilter) flushHeld() error {
	f.holding = false
	if len(f.hold) == 0 {
		return nil
	}
	_, err := f.w.Write(f.hold)
	f.hold = f.hold[:0]
	return err
}

// flushHeld flushes what a respFilter holds at the end of the stream.
func flushHeld(w io.Writer) bool {
	if f, ok := w.(*respFilter); ok {
		return f.flushHeld() == nil
	}
	return true
}
