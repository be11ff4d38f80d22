package report

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// replay runs one recording through a fresh pipeline, as `cbc-otel replay`
// does, and returns the finalized runs and counters.
func replay(t *testing.T, path string) ([]ingest.Run, *ingest.Stats) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var col Collector
	// Errors are kept: the expectations check their text is reconstructed.
	p := ingest.NewPipeline(ingest.PipelineOptions{Decode: streamjson.DecodeOptions{KeepErrors: true}, Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{&col}, Grace: ingest.DefaultGrace}})
	if err := ingest.Feed(context.Background(), p, tap.SourceStdout, f); err != nil {
		t.Fatal(err)
	}
	p.Close()
	return col.Runs, p.Stats()
}

// TestCorpus replays every real recording and compares the result, object by
// object, with the expectations written by reading the recordings
// (testdata/corpus/EXPECTED.md says how).
func TestCorpus(t *testing.T) {
	recs, err := filepath.Glob("../testdata/corpus/*/*.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if strings.HasSuffix(rec, ".stdin.ndjson") || strings.HasSuffix(rec, ".expected.ndjson") {
			continue
		}
		n++
		name := strings.TrimPrefix(rec, "../testdata/corpus/")
		t.Run(name, func(t *testing.T) {
			runs, stats := replay(t, rec)
			var got bytes.Buffer
			if err := WriteJSON(&got, runs, stats); err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(rec, ".ndjson") + ".expected.ndjson")
			if err != nil {
				t.Fatal(err)
			}
			compareJSONLines(t, got.Bytes(), want)

			var wf bytes.Buffer
			if err := WriteWaterfall(&wf, runs, stats, WaterfallOptions{Width: 100}); err != nil {
				t.Fatal(err)
			}
			// -update rewrites the waterfall golden, never the hand-written
			// expectations above.
			golden.Assert(t, strings.TrimSuffix(rec, ".ndjson")+".waterfall.golden", wf.Bytes())
		})
	}
	if n < 11 {
		t.Fatalf("found %d recordings, want the 11 of the corpus", n)
	}
}

// compareJSONLines compares two JSON-lines documents object by object,
// ignoring key order and formatting.
func compareJSONLines(t *testing.T, got, want []byte) {
	t.Helper()
	g := bytes.Split(bytes.TrimSpace(got), []byte("\n"))
	w := bytes.Split(bytes.TrimSpace(want), []byte("\n"))
	if len(g) != len(w) {
		t.Errorf("got %d objects, want %d\n--- got\n%s\n--- want\n%s", len(g), len(w), got, want)
		return
	}
	for i := range g {
		var gv, wv any
		if err := json.Unmarshal(g[i], &gv); err != nil {
			t.Fatalf("got line %d: %v", i+1, err)
		}
		if err := json.Unmarshal(w[i], &wv); err != nil {
			t.Fatalf("want line %d: %v", i+1, err)
		}
		if !reflect.DeepEqual(gv, wv) {
			t.Errorf("object %d differs\n got: %s\nwant: %s", i+1, g[i], w[i])
		}
	}
}
