package simulate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// kv is one member of an ordered JSON object.
type kv struct {
	k string
	v any
}

// obj is a JSON object that keeps its members in insertion order. The real
// CLIs are JavaScript programs whose output keeps property order, and
// goldens must be byte-stable; a Go map would sort the keys instead.
type obj []kv

// MarshalJSON writes the members in order. HTML escaping is off because
// JSON.stringify does not escape <, > and & and the output must look like
// the real CLIs' (error strings contain "<anonymous>").
func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeValue(&b, f.k); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := encodeValue(&b, f.v); err != nil {
			return nil, fmt.Errorf("member %q: %w", f.k, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// encodeValue appends v as compact JSON without HTML escaping.
func encodeValue(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	b.Truncate(b.Len() - 1) // Encode appends a newline
	return nil
}

// marshalLine renders one ndjson line including its terminating newline.
func marshalLine(o obj) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeValue(&b, o); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// ids derives every identifier from one seeded generator so that a given
// --seed always yields the same session, task and agent ids.
type ids struct {
	rng *rand.Rand
}

func newIDs(seed int64) *ids {
	s := uint64(seed)
	return &ids{rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))}
}

// uuid returns a random (version 4 shaped) UUID.
func (g *ids) uuid() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(g.rng.UintN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

const base36 = "0123456789abcdefghijklmnopqrstuvwxyz"

// base36 returns n random base-36 characters, the alphabet of Claude Code's
// task ids and run ids.
func (g *ids) base36(n int) string {
	var sb strings.Builder
	for range n {
		sb.WriteByte(base36[g.rng.IntN(36)])
	}
	return sb.String()
}

// hexN returns n random hex digits.
func (g *ids) hexN(n int) string {
	var sb strings.Builder
	for range n {
		sb.WriteByte("0123456789abcdef"[g.rng.IntN(16)])
	}
	return sb.String()
}

// jitter scales d by a factor in [0.8, 1.2) so runs with different seeds
// differ while staying in the scripted range.
func (g *ids) jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*g.rng.Float64()))
}

// contentHash is the content address of an agent: reruns of the same work
// get the same agentId, which is what makes a cached agent recognisable.
func contentHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// isoMillis formats epoch milliseconds the way both CLIs print timestamps.
func isoMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// noiseText builds about size bytes of assistant prose that exercises a
// consumer's JSON decoder: quotes, backslashes, newlines, tabs and
// multi-byte runes, as large model answers do.
func noiseText(g *ids, size int) string {
	fragments := []string{
		"Here is the file you asked for:\n\n```go\nfunc main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n```\n",
		"The path is C:\\Users\\sim\\project\\main.go and the regex is `^\\d+\\s*$`. ",
		"Unicode check: naïve café — “smart quotes” ‘single’ … emoji 🚀✅ and CJK 数据流 観測. ",
		"A JSON snippet inside text: {\"type\":\"system\",\"subtype\":\"task_progress\"} is NOT an event. ",
		"Tabs\tand\ttabs, a form feed \f and <html>&amp;</html> markup. ",
		"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt. ",
	}
	var sb strings.Builder
	for sb.Len() < size {
		sb.WriteString(fragments[g.rng.IntN(len(fragments))])
	}
	s := sb.String()
	// Cut at a rune boundary so the text stays valid UTF-8.
	if len(s) > size && size > 0 {
		s = s[:size]
		for len(s) > 0 && !utf8ValidTail(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// utf8ValidTail reports whether s does not end inside a multi-byte rune.
func utf8ValidTail(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s
}
