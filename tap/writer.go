package tap

import "io"

// Join returns a writer tapping into both a and b, either of which may be
// nil (then it is the other, and nil when both are): what a pump writes
// the bytes it passes on to, when the pipeline and the spool both want
// them. A Tap's Write never fails nor blocks, so neither can the pair.
//
// The pump gives a tap nothing but Write: it taps a read before passing it
// on, which stamps the bytes before anyone can answer them. Lending the
// pump the tap's buffers (no second copy) and tee(2) into a pipe (no copy
// through user space, but bytes that reach the consumer before they are
// tapped, which took a protocol of stamps between pump, tap and merge)
// were measured and removed: BENCHMARKS.md, "Removed".
func Join(a, b *Tap) io.Writer {
	switch {
	case a == nil && b == nil:
		return nil
	case b == nil:
		return a
	case a == nil:
		return b
	}
	return io.MultiWriter(a, b)
}
