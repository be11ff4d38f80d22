package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestDiff(t *testing.T) {
	for _, c := range []struct {
		name, want, got string
		diff            string // "" when equal
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"one line", "a\nb\nc\n", "a\nB\nc\n", "line 2:\n  want \"b\"\n  got  \"B\"\n"},
		{"trailing space shows", "a\n", "a \n", "line 1:\n  want \"a\"\n  got  \"a \"\n"},
		{"got longer", "a\n", "a\nb\n", "want 2 lines, got 3\nline 2:\n  want \"\"\n  got  \"b\"\nline 3:\n  want (no line)\n  got  \"\"\n"},
		{"want longer", "a\nb", "a", "want 2 lines, got 1\nline 2:\n  want \"b\"\n  got  (no line)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d := Diff(c.want, c.got); d != c.diff {
				t.Errorf("Diff(%q, %q) =\n%s\nwant\n%s", c.want, c.got, d, c.diff)
			}
		})
	}
}

func TestDiffShowsTenLinesAndCountsTheRest(t *testing.T) {
	var w, g strings.Builder
	for i := range 25 {
		fmt.Fprintf(&w, "w%d\n", i)
		fmt.Fprintf(&g, "g%d\n", i)
	}
	d := Diff(w.String(), g.String())
	if n := strings.Count(d, "line "); n != 10 {
		t.Errorf("%d lines shown, want 10:\n%s", n, d)
	}
	if !strings.Contains(d, "and 15 more differing lines") {
		t.Errorf("the rest is not counted:\n%s", d)
	}
}

// recorder is a testing.TB that keeps what Assert reports; Fatal ends the
// goroutine as the real one does.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with a fresh recorder in its own goroutine (Fatal ends it).
func run(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// setUpdate sets the flag for one test.
func setUpdate(t *testing.T, v bool) {
	old := *Update
	*Update = v
	t.Cleanup(func() { *Update = old })
}

func TestAssert(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.golden")

	setUpdate(t, false)
	if r := run(func(tb testing.TB) { Assert(tb, path, []byte("a\n")) }); !strings.Contains(r.fatal, "-update") {
		t.Errorf("missing golden: fatal %q, want a hint at -update", r.fatal)
	}

	setUpdate(t, true)
	if r := run(func(tb testing.TB) { Assert(tb, path, []byte("a\nb\n")) }); r.fatal != "" || len(r.errors) > 0 {
		t.Fatalf("-update: fatal %q, errors %q", r.fatal, r.errors)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "a\nb\n" {
		t.Fatalf("-update wrote %q, %v", b, err)
	}

	setUpdate(t, false)
	if r := run(func(tb testing.TB) { Assert(tb, path, []byte("a\nb\n")) }); r.fatal != "" || len(r.errors) > 0 {
		t.Errorf("equal: fatal %q, errors %q", r.fatal, r.errors)
	}
	r := run(func(tb testing.TB) { Assert(tb, path, []byte("a\nc\n")) })
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "line 2:") || !strings.Contains(r.errors[0], path) {
		t.Errorf("stale: errors %q, want one naming %s and line 2", r.errors, path)
	}
	if b, _ := os.ReadFile(path); string(b) != "a\nb\n" {
		t.Errorf("a comparison rewrote the golden: %q", b)
	}
}
