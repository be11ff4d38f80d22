// Package streamgen writes synthetic stream-json for the benchmarks: a mixed
// stream (mostly large messages, small progress events in between) and a
// single huge line, both from fixed seeds so every run measures the same bytes,
// and the lines of the workflow runs that grow the files serve follows
// (FollowLine); CountTaskEvents counts the task events of such a stream, the
// unit the CPU figures are divided by.
package streamgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
)

// alphabet is JSON-safe: no quote, backslash or control character, so any
// slice of the pool can sit inside a JSON string.
const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_/()[]{}=+*#@"

// pool returns n JSON-safe bytes: generating every byte afresh would make the
// generator, not the pipe under test, the slow part.
func pool(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return p
}

// Mixed writes about size bytes (whole lines, so slightly more) of a mixed
// stream to w: 70 % small task_progress events of 0.1–1 KiB and 30 % large
// user tool results of 16 KiB–4 MiB, every line valid JSON. It returns the
// number of bytes written.
func Mixed(w io.Writer, size int64, seed uint64) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := pool(rng, 8<<20)
	var written int64
	line := make([]byte, 0, 5<<20)
	for seq := 0; written < size; seq++ {
		var n int
		suffix := `"}`
		if rng.IntN(10) < 7 {
			n = 100 + rng.IntN(900)
			line = fmt.Appendf(line[:0], `{"type":"system","subtype":"task_progress","task_id":"t%d","session_id":"s1","seq":%d,"description":"`, seq%97, seq)
		} else {
			n = 16<<10 + rng.IntN(4<<20)
			line = fmt.Appendf(line[:0], `{"type":"user","session_id":"s1","seq":%d,"message":{"role":"user","content":[{"type":"tool_result","content":"`, seq)
			suffix = `"}]}}`
		}
		off := rng.IntN(len(p) - 1)
		for k := n; k > 0; {
			chunk := min(k, len(p)-off)
			line = append(line, p[off:off+chunk]...)
			k -= chunk
			off = 0
		}
		line = append(line, suffix...)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return written, fmt.Errorf("write mixed stream: %w", err)
		}
		written += int64(len(line))
	}
	if err := bw.Flush(); err != nil {
		return written, fmt.Errorf("flush mixed stream: %w", err)
	}
	return written, nil
}

// OneLine writes a single JSON line of exactly size bytes (newline included,
// size at least 64) to w: an assistant message whose text is one string. It
// returns the number of bytes written.
func OneLine(w io.Writer, size int64, seed uint64) (int64, error) {
	const head = `{"type":"assistant","session_id":"s1","message":{"role":"assistant","content":[{"type":"text","text":"`
	const tail = "\"}]}}\n"
	if size < int64(len(head)+len(tail)) {
		return 0, fmt.Errorf("one line of %d bytes: too short", size)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := pool(rng, 1<<20)
	var written int64
	put := func(b []byte) error {
		n, err := w.Write(b)
		written += int64(n)
		if err != nil {
			return fmt.Errorf("write one line: %w", err)
		}
		return nil
	}
	if err := put([]byte(head)); err != nil {
		return written, err
	}
	for body := size - int64(len(head)+len(tail)); body > 0; {
		n := min(body, int64(len(p)))
		if err := put(p[:n]); err != nil {
			return written, err
		}
		body -= n
	}
	return written, put([]byte(tail))
}

// Interleave copies the lines of r to w unchanged and in order, and between
// them writes large conversation lines (assistant text and user tool
// results of 4–64 KiB, valid JSON, drawn from seed) so that about half of
// the bytes written are not r's: a session whose task events sit among the
// messages, as in a real CLI's stream, where a consumer must parse or skip
// big lines that carry no task. A final line of r without a newline ends
// the output (nothing can follow it on a line of its own). It returns the
// number of bytes written.
func Interleave(w io.Writer, r io.Reader, seed uint64) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	br := bufio.NewReaderSize(r, 1<<20)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := pool(rng, 1<<20)
	var written, own, other int64
	next := interleaveSize(rng)
	line := make([]byte, 0, 80<<10)
	for seq := 0; ; {
		// ReadSlice hands out pieces of a line longer than the buffer;
		// they are copied as they come.
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if _, werr := bw.Write(chunk); werr != nil {
				return written, fmt.Errorf("write interleaved stream: %w", werr)
			}
			written += int64(len(chunk))
			own += int64(len(chunk))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return written, fmt.Errorf("read interleaved stream: %w", err)
		}
		// A whole line of r is out: the messages it is owed follow.
		for own-other >= next {
			line = conversationLine(line[:0], rng, p, seq, int(next))
			seq++
			if _, err := bw.Write(line); err != nil {
				return written, fmt.Errorf("write interleaved stream: %w", err)
			}
			written += int64(len(line))
			other += int64(len(line))
			next = interleaveSize(rng)
		}
	}
	if err := bw.Flush(); err != nil {
		return written, fmt.Errorf("flush interleaved stream: %w", err)
	}
	return written, nil
}

// interleaveSize draws the size of Interleave's next message line.
func interleaveSize(rng *rand.Rand) int64 { return 4<<10 + rng.Int64N(60<<10) }

// conversationLine appends to line one assistant text or user tool result
// (a coin toss) of about size bytes, newline included, whose text is a
// slice of the pool p.
func conversationLine(line []byte, rng *rand.Rand, p []byte, seq, size int) []byte {
	const suffix = "\"}]}}\n"
	if rng.IntN(2) == 0 {
		line = fmt.Appendf(line, `{"type":"assistant","session_id":"s1","seq":%d,"message":{"role":"assistant","content":[{"type":"text","text":"`, seq)
	} else {
		line = fmt.Appendf(line, `{"type":"user","session_id":"s1","seq":%d,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_bench_%d","content":"`, seq, seq)
	}
	n := max(0, size-len(line)-len(suffix))
	off := rng.IntN(len(p) - n)
	line = append(line, p[off:off+n]...)
	return append(line, suffix...)
}
