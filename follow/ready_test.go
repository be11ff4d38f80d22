package follow

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// /readyz says why: the checkpoint is being restored, or a directory to
// follow does not exist (yet); ready once both are over.
func TestNotReadyReasons(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	e, err := New(Options{Globs: []string{filepath.Join(dir, "*.cbcspool*")}, NewStream: func() StreamConfig { return StreamConfig{} }, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.NotReady(); err == nil || !strings.Contains(err.Error(), "restoring") {
		t.Errorf("before Run: %v, want restoring", err)
	}
	e.ready.Store(true)
	if err := e.NotReady(); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing directory: %v, want it named", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.NotReady(); err != nil {
		t.Errorf("with the directory: %v, want ready", err)
	}
}
