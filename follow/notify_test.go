package follow

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// chanSink passes the runs that start and finish to the test goroutine.
type chanSink chan string

func (c chanSink) Observe(l ingest.Lifecycle) {
	var ev string
	switch l.Kind {
	case ingest.RunStarted:
		ev = "started " + l.Run.TaskID
	case ingest.RunFinished:
		ev = "finished " + l.Run.TaskID
	default:
		return
	}
	select {
	case c <- ev:
	default:
	}
}

func (c chanSink) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-c:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("no %q within 20s", want)
		}
	}
}

// Run notices a followed file written and a new file created: with change
// notification by the watch alone (the sweep is an hour away, and the
// cycles that read only the written files are counted), and without it
// (NoNotify, or a directory that is a pattern itself, which cannot be
// watched) by polling every file every cycle.
func TestRunNotifyAndPollingFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sub    string // directory of the files, under the test's
		glob   string // its name in the glob
		notify bool
		mod    func(*Options)
		log    string
	}{
		{name: "inotify", sub: "d", glob: "d", notify: true},
		{name: "NoNotify", sub: "d", glob: "d", mod: func(o *Options) { o.NoNotify = true }},
		{name: "pattern directory", sub: "d1", glob: "d*", log: "a followed directory is a pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, tc.sub)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write := func(name, data string) {
				f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, err := f.WriteString(data); err != nil {
					t.Fatal(err)
				}
			}
			write("a.ndjson", wfStart("a1"))
			events := make(chanSink, 64)
			logs := &syncBuffer{mu: make(chan struct{}, 1)}
			opts := Options{
				Globs: []string{filepath.Join(root, tc.glob, "*.ndjson")},
				Poll:  5 * time.Millisecond,
				Sweep: time.Hour,
				NewStream: func() StreamConfig {
					return StreamConfig{Pipeline: ingest.PipelineOptions{Tracker: ingest.TrackerOptions{
						Sinks: []ingest.Sink{events}, Stats: new(ingest.Stats)}}}
				},
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
			}
			if tc.mod != nil {
				tc.mod(&opts)
			}
			e, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			events.await(t, "started a1")
			write("a.ndjson", agent("a1", 1, "done")+notify("a1", "completed"))
			events.await(t, "finished a1")
			write("b.ndjson", workflow("b1", "completed"))
			events.await(t, "finished b1")
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if tc.notify {
				// The start, the creation of b (and maybe its first write
				// seen apart): a few full cycles, not one per tick.
				if e.writtenCycles == 0 || e.fullCycles > 4 {
					t.Fatalf("%d full cycles, %d of the written files only: want the written a.ndjson read without a full cycle", e.fullCycles, e.writtenCycles)
				}
			} else if e.writtenCycles != 0 {
				t.Fatalf("%d cycles of written files without change notification", e.writtenCycles)
			}
			if tc.log != "" && !strings.Contains(logs.String(), tc.log) {
				t.Fatalf("log %q does not say %q", logs.String(), tc.log)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer the engine's goroutine writes and the
// test reads.
type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func (s *syncBuffer) lock() { s.mu <- struct{}{} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.lock()
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.lock()
	defer func() { <-s.mu }()
	return s.b.String()
}
