package streamgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestMixed(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
		seed uint64
	}{
		{"small", 64 << 10, 1},
		{"several large lines", 8 << 20, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b bytes.Buffer
			n, err := Mixed(&a, tc.size, tc.seed)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(a.Len()) || n < tc.size {
				t.Fatalf("reported %d bytes, wrote %d, asked %d", n, a.Len(), tc.size)
			}
			if _, err := Mixed(&b, tc.size, tc.seed); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatal("same seed, different bytes")
			}
			sc := bufio.NewScanner(&a)
			sc.Buffer(nil, 8<<20)
			lines := 0
			for sc.Scan() {
				lines++
				if !json.Valid(sc.Bytes()) {
					t.Fatalf("line %d is not valid JSON: %.80q", lines, sc.Bytes())
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			if lines == 0 {
				t.Fatal("no lines")
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int64
		wantErr bool
	}{
		{"minimal", 128, false},
		{"three pools and a bit", 3<<20 + 17, false},
		{"too short", 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			n, err := OneLine(&b, tc.size, 1)
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.size || int64(b.Len()) != tc.size {
				t.Fatalf("wrote %d (reported %d), want %d", b.Len(), n, tc.size)
			}
			if bytes.Count(b.Bytes(), []byte{'\n'}) != 1 || b.Bytes()[b.Len()-1] != '\n' {
				t.Fatal("not exactly one newline-terminated line")
			}
			if !json.Valid(b.Bytes()) {
				t.Fatal("not valid JSON")
			}
		})
	}
}

// TestInterleave checks that Interleave keeps every line of its input in
// order and byte for byte, adds only valid JSON lines that are not task
// events, puts about half of its bytes in them, and is deterministic.
func TestInterleave(t *testing.T) {
	var in bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&in, `{"type":"system","subtype":"task_progress","task_id":"t%d","description":"%s"}`+"\n", i%13, strings.Repeat("d", i%200))
	}
	// A line longer than the reader's buffer goes through in pieces.
	fmt.Fprintf(&in, `{"type":"system","subtype":"task_progress","task_id":"big","description":"%s"}`+"\n", strings.Repeat("b", 3<<20))
	var a, b bytes.Buffer
	n, err := Interleave(&a, bytes.NewReader(in.Bytes()), 5)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(a.Len()) {
		t.Fatalf("reported %d bytes, wrote %d", n, a.Len())
	}
	if _, err := Interleave(&b, bytes.NewReader(in.Bytes()), 5); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("same seed, different bytes")
	}
	var kept bytes.Buffer
	var added int64
	sc := bufio.NewScanner(&a)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		l := sc.Bytes()
		if !json.Valid(l) {
			t.Fatalf("line is not valid JSON: %.80q", l)
		}
		if bytes.Contains(l, []byte(`"subtype":"task_`)) {
			kept.Write(l)
			kept.WriteByte('\n')
			continue
		}
		added += int64(len(l)) + 1
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kept.Bytes(), in.Bytes()) {
		t.Fatal("the input's lines did not come through unchanged and in order")
	}
	if share := float64(added) / float64(n); share < 0.45 || share > 0.55 {
		t.Fatalf("added lines are %.2f of the bytes, want about half", share)
	}
}

// TestInterleaveNoFinalNewline checks that an input whose last line has no
// newline ends the output with that line, unglued.
func TestInterleaveNoFinalNewline(t *testing.T) {
	in := strings.Repeat(`{"type":"system","subtype":"task_progress","task_id":"t"}`+"\n", 2000) + `{"type":"system"}`
	var out bytes.Buffer
	if _, err := Interleave(&out, strings.NewReader(in), 1); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(out.Bytes(), []byte("\n"+`{"type":"system"}`)) {
		t.Fatalf("output ends %q", out.Bytes()[max(0, out.Len()-40):])
	}
}
