package streamgen

import (
	"bufio"
	"bytes"
	"encoding/json"
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
