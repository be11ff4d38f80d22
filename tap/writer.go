package tap

import "io"

// Writer is the contract between a pump that passes a child's bytes on and
// what it taps them into. The pump's goroutine makes every call; each
// method must return at once (a tap never holds up the pipe).
//
// A round of the pump is: Lend (a buffer to read into, or nil), the read;
// for bytes passed on by tee(2) before they are read (the consumer may have
// them already), Begin before the tee and Cancel if it passed nothing;
// then Commit of the lent buffer's prefix, or Write of the pump's own
// buffer.
type Writer interface {
	// Write taps a copy of p; it does not retain p. It always returns
	// len(p), nil: a tap failing must never fail the pipe.
	io.Writer
	// Lend returns a buffer for the next read, whose prefix the pump then
	// passes to Commit, so that the bytes are tapped without a copy; nil
	// when the Writer does not lend (the pump reads into its own buffer
	// and calls Write). Calling Lend again before Commit returns the same
	// buffer.
	Lend() []byte
	// Commit taps p, a prefix of the buffer Lend returned, like Write. The
	// pump may still read p (to pass it on) but not write it, and calls
	// Lend for its next read.
	Commit(p []byte) (int, error)
	// Begin says the bytes of the next Write or Commit are being passed on
	// now, before they are tapped: they are stamped with this instant.
	Begin()
	// Cancel withdraws a Begin that no bytes followed.
	Cancel()
}

var _ Writer = (*Tap)(nil)

// Copying returns a Writer that writes a copy of every byte to w, which
// must not fail or block for long (a bytes.Buffer in a test, a hash): it
// lends nothing and needs no stamps.
func Copying(w io.Writer) Writer { return copying{w} }

type copying struct{ w io.Writer }

func (c copying) Write(p []byte) (int, error)  { return c.w.Write(p) }
func (c copying) Lend() []byte                 { return nil }
func (c copying) Commit(p []byte) (int, error) { return c.w.Write(p) }
func (c copying) Begin()                       {}
func (c copying) Cancel()                      {}

// Join returns a Writer tapping into both a and b, either of which may be
// nil (then it is the other, and nil when both are). a lends its buffers;
// b gets a copy of every byte. Both are told Begin and Cancel: each
// orders its own merge of stdin and stdout by the stamps.
func Join(a, b *Tap) Writer {
	switch {
	case a == nil && b == nil:
		return nil
	case b == nil:
		return a
	case a == nil:
		return b
	}
	return joined{a, b}
}

type joined struct{ a, b *Tap }

func (j joined) Write(p []byte) (int, error) {
	j.b.Write(p)
	return j.a.Write(p)
}

func (j joined) Lend() []byte { return j.a.Lend() }

// Commit copies p into b before a takes the buffer: once committed, it is
// a's consumer's to read and give back.
func (j joined) Commit(p []byte) (int, error) {
	j.b.Write(p)
	return j.a.Commit(p)
}

func (j joined) Begin() {
	j.a.Begin()
	j.b.Begin()
}

func (j joined) Cancel() {
	j.a.Cancel()
	j.b.Cancel()
}
