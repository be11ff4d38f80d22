package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// headLines cuts whole lines (a partial last line is left out), as many
// as the source has when it has fewer, and reuses a cut it made before.
func TestHeadLines(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("a\nb\nc\npartial"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n     int
		want  string
		lines int64
	}{
		{0, "", 0},
		{2, "a\nb\n", 2},
		{3, "a\nb\nc\n", 3},
		{10, "a\nb\nc\n", 3},
	} {
		dst := filepath.Join(dir, "head"+strings.Repeat("x", tc.n))
		for range 2 { // the second call reuses the file
			got, err := headLines(src, dst, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(dst)
			if got != tc.lines || string(b) != tc.want {
				t.Errorf("headLines(%d) = %d lines %q, want %d %q", tc.n, got, b, tc.lines, tc.want)
			}
		}
	}
}

// pipeline connects the commands and reports either one failing.
func TestPipeline(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dst := exec.Command("cat")
	dst.Stdout = f
	if err := pipeline(exec.Command("echo", "through"), dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "through\n" {
		t.Errorf("got %q", b)
	}
	if err := pipeline(exec.Command("false"), exec.Command("cat")); err == nil {
		t.Error("a failing source was not reported")
	}
	if err := pipeline(exec.Command("echo"), exec.Command("false")); err == nil {
		t.Error("a failing destination was not reported")
	}
}
