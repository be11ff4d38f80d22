package ingest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// TestSnapshotSharedEncodesAsSnapshot: the checkpoint serve writes from
// SnapshotShared is byte for byte the one Snapshot's deep copy gives, at
// every line of every recording (each into the array of the one before),
// and taking it changes nothing the Tracker does next.
func TestSnapshotSharedEncodesAsSnapshot(t *testing.T) {
	files, _ := filepath.Glob("../testdata/simulate/*.ndjson")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".expect.ndjson") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		shared, plain := &Recorder{}, &Recorder{}
		var reuse []RunSnapshot
		p := NewPipeline(PipelineOptions{Tracker: TrackerOptions{Sinks: []Sink{shared}}})
		q := NewPipeline(PipelineOptions{Tracker: TrackerOptions{Sinks: []Sink{plain}}})
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			p.Write(tap.SourceStdout, l)
			q.Write(tap.SourceStdout, l)
			st := p.Tracker().SnapshotShared(reuse)
			if st.Runs != nil {
				reuse = st.Runs // as serve passes it on, stream after stream
			}
			got, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(p.Tracker().Snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: SnapshotShared encodes\n%s\nSnapshot\n%s", filepath.Base(f), got, want)
			}
			n++
		}
		p.Close()
		q.Close()
		if a, b := keysOf(shared), keysOf(plain); !slices.Equal(a, b) {
			t.Fatalf("%s: taking snapshots changed the lifecycle events:\n got %v\nwant %v", filepath.Base(f), a, b)
		}
	}
	if n == 0 {
		t.Fatal("no recordings found")
	}
}
