package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestInstall copies the built binary the way the chart's init container
// does: the copy is identical, executable, runs, and a rerun (a restarted
// init container) replaces it without leaving temporary files.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if out, err := exec.Command(wrapperBin, "install", dir).CombinedOutput(); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
	}
	want, _ := os.ReadFile(wrapperBin)
	dst := filepath.Join(dir, "cbc-otel")
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed copy differs from the binary (%v)", err)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left: %v", ents)
	}
	if out, err := exec.Command(dst, "version").Output(); err != nil || !bytes.HasPrefix(out, []byte("cbc-otel ")) {
		t.Errorf("installed copy does not run: %q %v", out, err)
	}
	if err := exec.Command(wrapperBin, "install", filepath.Join(dir, "missing")).Run(); err == nil {
		t.Error("install into a missing directory succeeded")
	}
	if err := exec.Command(wrapperBin, "install").Run(); err == nil {
		t.Error("install without DIR succeeded")
	}
}
