package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// gappyStats is what a pipeline counts over a stream whose tap dropped
// 5000 bytes in the middle of a line, after a line of interest over the cap.
func gappyStats(t *testing.T) (st *ingest.Stats, tooLong int) {
	t.Helper()
	p := ingest.NewPipeline(ingest.PipelineOptions{MaxLine: 1024})
	long := `{"type":"system","subtype":"task_progress","task_id":"t","pad":"` + strings.Repeat("x", 3000) + "\"}\n"
	p.Write(tap.SourceStdout, []byte(long))
	p.Write(tap.SourceStdout, []byte(`{"type":"assistant","message":"`+strings.Repeat("y", 70)))
	p.Gap(tap.SourceStdout)
	p.Stats().AddDropped(tap.SourceStdout, 5000)
	p.Write(tap.SourceStdout, []byte("rest\n{}\n"))
	p.Close()
	return p.Stats(), len(long)
}

// Issue 29.3: the summary, the --summary.json stats line and the step summary say
// when bytes were dropped or lines rejected, and how much; with nothing
// lost they say nothing of it.
func TestOutputsSayWhatTheTelemetryMissed(t *testing.T) {
	st, tooLong := gappyStats(t)
	s := StatsOf(st)
	if s.DroppedBytes != 5000 || s.IncompleteBytes != 101+5 || s.Bytes != int64(tooLong)+3 || s.RejectedBytes["too_long"] != int64(tooLong) {
		t.Fatalf("StatsOf = %+v", s)
	}
	drops := fmt.Sprintf("telemetry incomplete: %s dropped (it fell behind), %s in lines the drops cut", bytesText(5000), bytesText(106))
	rejected := fmt.Sprintf("rejected too_long=1 (%s)", bytesText(int64(tooLong)))
	clean := ingest.NewPipeline(ingest.PipelineOptions{})
	clean.Write(tap.SourceStdout, []byte("{}\n"))
	clean.Close()
	for _, tc := range []struct {
		name  string
		stats *ingest.Stats
		want  []string // all present; with clean stats, none of the words
	}{
		{"gaps", st, []string{drops, rejected}},
		{"clean", clean.Stats(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wf, md, js bytes.Buffer
			if err := WriteWaterfall(&wf, nil, tc.stats, WaterfallOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := WriteStepSummary(&md, nil, nil, StepSummaryOptions{Stats: tc.stats}); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, nil, tc.stats); err != nil {
				t.Fatal(err)
			}
			for name, out := range map[string]string{"waterfall": wf.String(), "step summary": md.String()} {
				for _, w := range tc.want {
					if !strings.Contains(out, mdEscapeIf(name, w)) {
						t.Errorf("%s lacks %q:\n%s", name, w, out)
					}
				}
				if tc.want == nil && (strings.Contains(out, "incomplete") || strings.Contains(out, "rejected")) {
					t.Errorf("%s speaks of losses with none:\n%s", name, out)
				}
			}
			wantJSON := []string{`"dropped_bytes":5000`, `"incomplete_bytes":106`, fmt.Sprintf(`"rejected_bytes":{"too_long":%d}`, tooLong)}
			for _, w := range wantJSON {
				if got := strings.Contains(js.String(), w); got != (tc.want != nil) {
					t.Errorf("JSON stats has %s: %v, want %v:\n%s", w, got, tc.want != nil, js.String())
				}
			}
			if !strings.Contains(md.String(), "> **Warning:**") == (tc.want != nil) {
				t.Errorf("step summary warning present = %v, want %v", !(tc.want != nil), tc.want != nil)
			}
		})
	}
}

// mdEscapeIf is w as the step summary writes it.
func mdEscapeIf(out, w string) string {
	if out == "step summary" {
		return mdEscape(w, 400)
	}
	return w
}
