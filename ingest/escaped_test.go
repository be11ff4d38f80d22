package ingest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/jsonesc"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// TestEscapedRecordings (issue 28): every recording, with every character
// of every JSON string written as a \u escape ("task\u005fid" is
// "task_id", RFC 8259 §7), gives the Tracker's consumers exactly the
// lifecycle of the recording as written, and the same stats.
func TestEscapedRecordings(t *testing.T) {
	clock := func() time.Time { return time.UnixMilli(T0) }
	feed := func(b []byte) *pipeRig {
		r := newPipeRig(ingest.PipelineOptions{Now: clock})
		r.p.Write(tap.SourceStdout, b)
		r.p.Close()
		return r
	}
	sim, _ := filepath.Glob(filepath.Join("..", "testdata", "simulate", "*.ndjson"))
	n := 0
	for _, f := range append(corpusFiles(t), sim...) {
		if strings.HasSuffix(f, ".expected.ndjson") || strings.HasSuffix(f, ".expect.ndjson") || strings.HasSuffix(f, ".stdin.ndjson") {
			continue // not a CLI's stdout
		}
		n++
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var esc []byte
		for _, l := range bytes.SplitAfter(b, []byte("\n")) {
			esc = append(esc, jsonesc.Strings(l, false, func(byte) bool { return true })...)
		}
		want, got := feed(b), feed(esc)
		if len(want.rec.Events) == 0 {
			t.Fatalf("%s: no lifecycle", f)
		}
		if !reflect.DeepEqual(got.rec.Events, want.rec.Events) {
			t.Errorf("%s: escaped, %d events (%s)\nwant %d (%s)", f, len(got.rec.Events), kindsOf(got.rec), len(want.rec.Events), kindsOf(want.rec))
		}
		if got.stats.Events() != want.stats.Events() || !reflect.DeepEqual(violationCounts(got.stats), violationCounts(want.stats)) {
			t.Errorf("%s: escaped, %d events %v; want %d %v", f, got.stats.Events(), violationCounts(got.stats), want.stats.Events(), violationCounts(want.stats))
		}
		for _, r := range streamjson.Reasons() {
			if got.stats.Rejected(r) != want.stats.Rejected(r) {
				t.Errorf("%s: escaped, %d %v, want %d", f, got.stats.Rejected(r), r, want.stats.Rejected(r))
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d streams", n)
	}
}
