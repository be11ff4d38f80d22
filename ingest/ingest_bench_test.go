// Micro-benchmarks of the ingest hot path: framing, decoding (lines of
// interest and the ignored bulk), the Tracker on growing snapshots, and the
// whole pipeline on a simulated many-agents stream. Run them with
//
//	go test -run '^$' -bench . ./ingest/
//
// b.SetBytes makes the MB/s column the stream throughput.
package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/ndjson"
	"github.com/cbc-otel/cbc-otel/simulate"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// manyAgentsStream returns the stdout of one simulated many-agents workflow
// with n agents (reproducible: fixed seed and epoch, no delays). Streams are
// generated once per process: the 1000-agent one is about 300 MB.
var manyAgentsStream = func() func(tb testing.TB, n, noise int) []byte {
	var mu sync.Mutex
	cache := map[[2]int][]byte{}
	return func(tb testing.TB, n, noise int) []byte {
		tb.Helper()
		mu.Lock()
		defer mu.Unlock()
		if b, ok := cache[[2]int{n, noise}]; ok {
			return b
		}
		var out bytes.Buffer
		cfg := simulate.Config{Scenario: "many-agents", Agents: n, Epoch: 1_700_000_000_000, Seed: 1, Noise: noise}
		if err := simulate.Run(context.Background(), cfg, strings.NewReader(`{"type":"user","message":{"role":"user","content":"go"}}`+"\n"), &out); err != nil {
			tb.Fatalf("simulate: %v", err)
		}
		cache[[2]int{n, noise}] = out.Bytes()
		return out.Bytes()
	}
}()

// linesOf splits a stream into its lines (without "\n").
func linesOf(stream []byte) [][]byte {
	return bytes.Split(bytes.TrimSuffix(stream, []byte("\n")), []byte("\n"))
}

// BenchmarkFramer frames a simulated stream (task events and 8 KiB
// assistant messages) written in 64 KiB chunks, as a pipe delivers it.
func BenchmarkFramer(b *testing.B) {
	stream := manyAgentsStream(b, 50, 8192)
	for _, chunk := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			n := 0
			f := ndjson.NewFramer(ndjson.DefaultMaxLine, func(ndjson.Line) { n++ })
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				for p := stream; len(p) > 0; {
					c := p[:min(chunk, len(p))]
					p = p[len(c):]
					f.Write(c)
				}
				f.Flush()
			}
			if n == 0 {
				b.Fatal("no lines framed")
			}
		})
	}
}

// BenchmarkDecode decodes one line per iteration: the ignored bulk of a
// stream and each kind of line of interest, with snapshots of 10, 100 and
// 1000 agents. "progress-repeat" decodes the same snapshot again and again
// (every agent unchanged); "progress-fresh" alternates two snapshots that
// differ in every agent, so nothing can be reused.
func BenchmarkDecode(b *testing.B) {
	type tc struct {
		name  string
		lines [][]byte
	}
	cases := []tc{
		{"ignored-assistant-8KiB", [][]byte{[]byte(`{"type":"assistant","message":{"content":"` + strings.Repeat("z", 8192) + `"}}`)}},
		{"ignored-system-status", [][]byte{[]byte(`{"type":"system","subtype":"status","status":null,"uuid":"7b1905dd-bd34-4c07-ba31-55b2bff7037b","session_id":"3f64b20e-40b6-4a84-a6f2-da9ae05c11f3"}`)}},
		// A system line of no interest: the whole line is searched for
		// markers (and, since issue 28, for escaped ASCII).
		{"ignored-system-8KiB", [][]byte{[]byte(`{"type":"system","subtype":"hook_response","hook_name":"SessionStart","stdout":"` + strings.Repeat("z", 8192) + `"}`)}},
		{"task_started", [][]byte{mustJSON(lnWorkflow("t1"))}},
		// Names written with escapes (RFC 8259 §7): decoded by encoding/json.
		{"task_started-escaped", [][]byte{[]byte(`{"type":"sys\u0074em","subtype":"task\u005fstarted","task\u005fid":"t1","task\u005ftype":"local_workflow","workflow_name":"wf-t1"}`)}},
		{"task_notification", [][]byte{mustJSON(lnNotify("t1", "completed"))}},
	}
	// Every line of testdata/corpus in turn (the CLIs' stdout and stdin,
	// and replay's expected output): a mix of real lines.
	cases = append(cases, tc{"recorded-mix", corpusLines(b)})
	for _, n := range []int{10, 100, 1000} {
		cases = append(cases,
			tc{fmt.Sprintf("progress-repeat/agents=%d", n), [][]byte{snapshotLine(n, 0)}},
			tc{fmt.Sprintf("progress-fresh/agents=%d", n), [][]byte{snapshotLine(n, 0), snapshotLine(n, 1)}})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := streamjson.NewDecoder(streamjson.DecodeOptions{})
			var size int64
			for _, l := range c.lines {
				size += int64(len(l))
			}
			b.SetBytes(size / int64(len(c.lines)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, reason := d.Decode(tap.SourceStdout, c.lines[i%len(c.lines)])
				if reason != streamjson.ReasonNone {
					b.Fatalf("rejected: %v", reason)
				}
				i++
			}
		})
	}
}

func mustJSON(o jobj) []byte { return bytes.TrimSuffix(encodeLines(o), []byte("\n")) }

// snapshotLine is a task_progress of task "t1" with n running agents whose
// token counts depend on variant, so two variants share no agent bytes.
func snapshotLine(n, variant int) []byte {
	rows := []jobj{phaseRow(1, "Scan")}
	for i := 1; i <= n; i++ {
		rows = append(rows, agentRow(i, "running",
			"agentId", fmt.Sprintf("v2:%064x", i), "label", fmt.Sprintf("scan:%04d", i),
			"phaseIndex", 1, "phaseTitle", "Scan", "startedAt", 1_700_000_000_000+int64(i),
			"tokens", 100*i+variant, "toolCalls", variant))
	}
	return mustJSON(lnProgress("t1", rows...))
}

// BenchmarkTracker feeds the Tracker one workflow whose agents start and
// finish in 100 steps (one agent at a time up to 100 agents), each change
// carried by a snapshot of every agent (as cbc writes it). Decoding is
// done before the timer starts, so this is the Tracker alone; bytes are
// the stream's. The step keeps the 1000-agent case's decoded events in
// tens of MB rather than hundreds.
func BenchmarkTracker(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			stream := growingWorkflow(n)
			d := streamjson.NewDecoder(streamjson.DecodeOptions{})
			var evs []streamjson.Event
			for _, l := range linesOf(stream) {
				ev, reason := d.Decode(tap.SourceStdout, l)
				if reason != streamjson.ReasonNone || ev == nil {
					b.Fatalf("decode: %v", reason)
				}
				c := *ev
				c.Entries = append([]streamjson.Entry(nil), ev.Entries...)
				evs = append(evs, c)
			}
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				tr := ingest.NewTracker(ingest.TrackerOptions{Grace: ingest.DefaultGrace})
				for i := range evs {
					tr.Handle(&evs[i], evs[i].Times())
				}
				tr.Close(0)
			}
		})
	}
}

// growingWorkflow is a task_started, then snapshots where the agents
// start and end, n/100 at a time (every snapshot lists all agents, queued
// ones too), then the notification.
func growingWorkflow(n int) []byte {
	step := max(1, n/100)
	const t0 = 1_700_000_000_000
	state := make([]string, n+1)
	for i := range state {
		state[i] = "start"
	}
	snap := func() jobj {
		rows := []jobj{phaseRow(1, "Scan")}
		for i := 1; i <= n; i++ {
			kv := []any{"label", fmt.Sprintf("scan:%04d", i), "phaseIndex", 1, "phaseTitle", "Scan", "queuedAt", t0}
			switch state[i] {
			case "running":
				kv = append(kv, "agentId", fmt.Sprintf("v2:%064x", i), "startedAt", t0+int64(i))
			case "done":
				kv = append(kv, "agentId", fmt.Sprintf("v2:%064x", i), "startedAt", t0+int64(i), "endedAt", t0+int64(2*i), "tokens", 100*i)
			}
			st := state[i]
			if st == "running" {
				st = "start"
			}
			rows = append(rows, agentRow(i, st, kv...))
		}
		return lnProgress("t1", rows...)
	}
	lines := []jobj{lnWorkflow("t1")}
	for i := 1; i <= n; i += step {
		for k := i; k < i+step && k <= n; k++ {
			state[k] = "running"
		}
		lines = append(lines, snap())
		for k := i; k < i+step && k <= n; k++ {
			state[k] = "done"
		}
		lines = append(lines, snap())
	}
	lines = append(lines, lnNotify("t1", "completed"))
	return encodeLines(lines...)
}

// BenchmarkPipeline is replay without output: frame, decode and track a
// simulated many-agents workflow (every snapshot lists all agents, so the
// stream grows with the square of the agent count; the time per byte must
// not grow with it).
func BenchmarkPipeline(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			stream := manyAgentsStream(b, n, 0)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			var events int64
			for b.Loop() {
				p := ingest.NewPipeline(ingest.PipelineOptions{})
				for c := stream; len(c) > 0; {
					k := min(256<<10, len(c))
					p.Write(tap.SourceStdout, c[:k])
					c = c[k:]
				}
				p.Close()
				events = p.Stats().Events()
			}
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
