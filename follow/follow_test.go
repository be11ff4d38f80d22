package follow

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/spool"
)

// The spool splitter gives the same lines, sources and line-boundary
// offsets however the bytes are chunked by reads.
func TestSplitterChunking(t *testing.T) {
	data := "\x1ecbcspool 1\n" +
		`{"type":"system","subtype":"init","session_id":"s"}` + "\n" +
		"\x1estdin " + `{"type":"control_request","request_id":"r","request":{"subtype":"interrupt"}}` + "\n" +
		"\x1estdout \x1enot json\n" +
		"\x1egap stdout 12\n" +
		"\x1efuture whatever\n" +
		`{"partial":`
	for _, size := range []int{1, 2, 3, 7, 64, len(data)} {
		var gaps int64
		st := new(ingest.Stats)
		s := &stream{kind: spool.Done, stats: st,
			pipe: ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Stats: st}}),
			onRecord: func(_ *stream, r spool.Record) {
				if r.Kind == spool.RecordGap {
					gaps += r.Dropped
				}
			}}
		for i := 0; i < len(data); i += size {
			s.feed([]byte(data[i:min(i+size, len(data))]))
		}
		if want := int64(len(data) - len(`{"partial":`)); s.offset != want || s.readPos != int64(len(data)) {
			t.Fatalf("chunks of %d: offset %d readPos %d, want %d %d", size, s.offset, s.readPos, want, len(data))
		}
		if st.Lines(ingest.SourceStdout) != 2 || st.Lines(ingest.SourceStdin) != 1 || gaps != 12 {
			t.Fatalf("chunks of %d: stdout lines %d stdin %d gaps %d", size, st.Lines(ingest.SourceStdout), st.Lines(ingest.SourceStdin), gaps)
		}
		if st.Events() != 2 { // init and the interrupt reached the Tracker
			t.Fatalf("chunks of %d: events %d, want 2", size, st.Events())
		}
	}
}

func TestStateRoundTripAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	if s, err := LoadState(dir); err != nil || len(s.Streams) != 0 {
		t.Fatalf("missing state: %+v %v", s, err)
	}
	want := State{Streams: []StreamState{{FileState: FileState{Path: "/x", Dev: 1, Ino: 2, Size: 10}}}}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || len(got.Streams) != 1 || got.Streams[0].Size != 10 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"{", `{"version":99}`, `{"version":1,"streams":[{"offset":-1,"ino":1}]}`} {
		os.WriteFile(filepath.Join(dir, StateFile), []byte(bad), 0o600)
		if _, err := LoadState(dir); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%q: %v, want ErrCorrupt", bad, err)
		}
	}
	if err := CheckStateDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing state dir passed")
	}
	if err := CheckStateDir(dir); err != nil {
		t.Error(err)
	}
}
