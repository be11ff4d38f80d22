package follow

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/spool"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

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
	for _, bad := range []string{"{", `{"version":99}`, `{"version":1}`, `{"version":2,"streams":[{"offset":-1,"ino":1}]}`} {
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

// A spool stream feeds its pipeline through the spool Reader: around a gap
// record nothing is decoded as invalid JSON (the stdout line cut by the
// gap, ended with RS by the writer, is discarded, and so is the tail after
// the gap: an empty line from a current writer, the raw fragment from an
// older one), gaps are counted, and stamped and unstamped stdin records
// both reach the Tracker.
func TestStreamGapAndStdinStamp(t *testing.T) {
	data := "\x1ecbcspool 1\n" +
		`{"type":"system","subtype":"init","session_id":"s"}` + "\n" +
		`{"type":"assistant","message":{"content":"cut he` + "\x1e\n" +
		"\x1egap stdout 100\n" +
		"\n" +
		"\x1estdin 1764680000123456789 " + `{"type":"control_request","request_id":"r","request":{"subtype":"interrupt"}}` + "\n" +
		`{"type":"assistant","message":{"content":"whole"}}` + "\n" +
		"\x1egap stdout 7\n" +
		`"},"session_id":"s"}` + "\n" + // an older writer's fragment after a gap
		"\x1estdin " + `{"type":"control_request","request_id":"q","request":{"subtype":"interrupt"}}` + "\n" +
		"\x1egap stdin 9\n" +
		"\x1estdin 12 " + `{"type":"control_request","request_id":"t","request":{"subtype":"stop_task","task_id":"w"}}` + "\n" +
		"\x1egap stdout 3\n\n" + // lost bytes that ended a line: the next line is whole
		`{"type":"system","subtype":"task_progress","task_id":"w"}` + "\n"
	for _, size := range []int{1, 2, 3, 5, 7, 64, len(data)} {
		st := new(ingest.Stats)
		e, err := New(Options{Globs: []string{"x"}, NewStream: func() StreamConfig {
			return StreamConfig{Pipeline: ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Stats: st}}}
		}})
		if err != nil {
			t.Fatal(err)
		}
		s := e.newStream(nil, "x"+spool.DoneSuffix, fileID{})
		for i := 0; i < len(data); i += size {
			s.rd.Write([]byte(data[i:min(i+size, len(data))]))
		}
		if s.offset() != int64(len(data)) {
			t.Fatalf("chunks of %d: offset %d, want %d", size, s.offset(), len(data))
		}
		for _, r := range []streamjson.Reason{streamjson.ReasonInvalidJSON, streamjson.ReasonTooLong, streamjson.ReasonBadShape} {
			if n := st.Rejected(r); n != 0 {
				t.Fatalf("chunks of %d: %d lines rejected as %v", size, n, r)
			}
		}
		if st.Lines(tap.SourceStdin) != 3 || st.Events() != 5 {
			t.Fatalf("chunks of %d: stdin lines %d, events %d; want 3, 5", size, st.Lines(tap.SourceStdin), st.Events())
		}
		if g, d := testutil.ToFloat64(e.mGapRecords), st.Dropped(tap.SourceStdout); g != 4 || d != 110 {
			t.Fatalf("chunks of %d: %v gap records, %d stdout bytes dropped; want 4, 110", size, g, d)
		}
	}
}

// Past MaxStreams, matching files wait without a descriptor and are
// followed, in order, as followed ones are finalized: every file is read
// exactly once.
func TestMaxStreams(t *testing.T) {
	for _, tc := range []struct {
		name          string
		files, max    int
		wantFirstOpen int
	}{
		{"under the cap", 2, 4, 2},
		{"at the cap", 3, 3, 3},
		{"over the cap", 7, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range tc.files {
				line := `{"type":"system","subtype":"task_started","task_id":"t` + string(rune('a'+i)) + `","task_type":"local_bash"}` + "\n"
				if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('a'+i))+".ndjson"), []byte(line), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Unix(1_800_000_000, 0)
			st := new(ingest.Stats)
			e, err := New(Options{
				Globs: []string{filepath.Join(dir, "*.ndjson")}, IdleTimeout: time.Second, MaxStreams: tc.max,
				NewStream: func() StreamConfig {
					return StreamConfig{Pipeline: ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Stats: st}}}
				},
				Now: func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			e.cycle()
			if len(e.streams) != tc.wantFirstOpen {
				t.Fatalf("first cycle: %d streams, want %d", len(e.streams), tc.wantFirstOpen)
			}
			if got, want := testutil.ToFloat64(e.mWaiting), float64(tc.files-tc.wantFirstOpen); got != want {
				t.Fatalf("first cycle: %v waiting, want %v", got, want)
			}
			for i := 0; i < 2*tc.files && (len(e.streams) > 0 || len(e.finished) < tc.files); i++ {
				now = now.Add(2 * time.Second) // past the idle timeout: the followed files are finalized
				e.cycle()
				if len(e.streams) > tc.max {
					t.Fatalf("%d streams followed, cap %d", len(e.streams), tc.max)
				}
			}
			if len(e.finished) != tc.files || st.Lines(tap.SourceStdout) != int64(tc.files) {
				t.Fatalf("%d files finished, %d lines read; want %d of each", len(e.finished), st.Lines(tap.SourceStdout), tc.files)
			}
			if got := testutil.ToFloat64(e.mWaiting); got != 0 {
				t.Fatalf("%v files still waiting", got)
			}
		})
	}
}

// encodeState, which writes a checkpoint a stream at a time, decodes to
// what json.Marshal of the whole State decodes to, whichever of its parts
// are empty.
func TestEncodeStateAsMarshal(t *testing.T) {
	ss := func(path string, ino uint64) StreamState {
		return StreamState{
			FileState:  FileState{Path: path, Dev: 7, Ino: ino, FP: "ab", FPLen: 2, Size: 99},
			Tracker:    ingest.TrackerState{Now: 5, Tombstones: [][2]string{{"t", "r"}}},
			Sinks:      map[string]json.RawMessage{"memo": json.RawMessage(`{"a":[1,2]}`)},
			LastGrowth: 4,
		}
	}
	for _, tc := range []struct {
		name string
		s    State
	}{
		{"empty", State{}},
		{"sinks only", State{SavedAt: 3, Sinks: map[string]json.RawMessage{"m": json.RawMessage(`{"x":"<&>"}`)}}},
		{"one stream", State{SavedAt: 3, Streams: []StreamState{ss("/a", 1)}}},
		{"all", State{SavedAt: 3, Sinks: map[string]json.RawMessage{"m": json.RawMessage(`1`), "n": json.RawMessage(`"s"`)},
			Streams:  []StreamState{ss("/a", 1), ss("/b\"\n", 2), ss("/c", 3)},
			Finished: []FileState{{Path: "/d", Dev: 1, Ino: 4, Size: 8}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.s
			want.Version = stateVersion
			wb, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := SaveState(dir, tc.s); err != nil {
				t.Fatal(err)
			}
			gb, err := os.ReadFile(filepath.Join(dir, StateFile))
			if err != nil {
				t.Fatal(err)
			}
			var got, exp State
			if err := json.Unmarshal(gb, &got); err != nil {
				t.Fatalf("streamed checkpoint does not decode: %v\n%s", err, gb)
			}
			if err := json.Unmarshal(wb, &exp); err != nil {
				t.Fatal(err)
			}
			if len(exp.Streams) == 0 {
				exp.Streams = got.Streams[:0:0] // null and [] are both no stream
				if len(got.Streams) != 0 {
					t.Fatalf("streams %v, want none", got.Streams)
				}
			}
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("streamed checkpoint decodes to\n%+v\nwant\n%+v\n(%s)", got, exp, gb)
			}
		})
	}
	// A stream whose state fails leaves the previous checkpoint in place.
	dir := t.TempDir()
	if err := SaveState(dir, State{SavedAt: 1}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := writeAtomic(dir, StateFile, func(w io.Writer) error {
		return encodeState(w, State{SavedAt: 2}, func(yield func(StreamState) error) error {
			if err := yield(ss("/a", 1)); err != nil {
				return err
			}
			return boom
		})
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if st, err := LoadState(dir); err != nil || st.SavedAt != 1 {
		t.Fatalf("after a failed write: %+v %v, want the previous checkpoint", st, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}
