// Tests of the snapshot fast path of the decoder (snapshot.go): it must
// decode exactly what the plain path (decodePlain) decodes, line after
// line, and decode each unchanged agent of a snapshot only once.
package streamjson

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// decodeBoth decodes lines with the fast path on and off, and fails on the
// first line where the two differ.
func decodeBoth(t *testing.T, lines [][]byte, keep bool) {
	t.Helper()
	fast := NewDecoder(DecodeOptions{KeepPreviews: keep})
	plain := NewDecoder(DecodeOptions{KeepPreviews: keep})
	plain.plainOnly = true
	for i, l := range lines {
		ev1, r1 := fast.Decode(tap.SourceStdout, l)
		got := copyEvent(ev1)
		ev2, r2 := plain.Decode(tap.SourceStdout, l)
		want := copyEvent(ev2)
		if r1 != r2 || !reflect.DeepEqual(got, want) {
			t.Fatalf("line %d %q:\nfast:  %v %+v\nplain: %v %+v", i, l, r1, got, r2, want)
		}
	}
}

func copyEvent(ev *Event) *Event {
	if ev == nil {
		return nil
	}
	c := *ev
	c.Entries = nil
	if len(ev.Entries) > 0 {
		c.Entries = append([]Entry(nil), ev.Entries...)
	}
	return &c
}

const (
	snapHead = `{"type":"system","subtype":"task_progress","task_id":"w","usage":{"total_tokens":5},"workflow_progress":`
	agent1   = `{"type":"workflow_agent","index":1,"state":"done","startedAt":5,"endedAt":9,"label":"a]}\"[","error":"e"}`
	agent2   = `{"type":"workflow_agent","index":2,"state":"start","startedAt":6,"label":"b"}`
	agent2b  = `{"type":"workflow_agent","index":2,"state":"done","startedAt":6,"endedAt":8,"label":"b"}`
	agent3   = `{"type":"workflow_agent","index":3,"state":"start","queuedAt":7,"resultPreview":"r","promptPreview":"p"}`
	phase1   = `{"type":"workflow_phase","index":1,"title":"Scan"}`
)

func snap(elems ...string) string { return snapHead + "[" + strings.Join(elems, ",") + "]}" }

// snapshotSequences are sequences of lines where the fast path's cache,
// its fallbacks and its validation all matter.
var snapshotSequences = map[string][]string{
	"grow and change":             {snap(phase1, agent1), snap(phase1, agent1, agent2), snap(phase1, agent1, agent2b), snap(phase1, agent1, agent2b, agent3)},
	"insert and remove":           {snap(agent1, agent2, agent3), snap(agent1, phase1, agent2, agent3), snap(agent1, agent3), snap(agent3), snap()},
	"whitespace":                  {snap(agent1, agent2), snapHead + "[ " + agent1 + " ,\t" + agent2 + " ] }", snapHead + "[\r\n]}"},
	"other kinds carry snapshots": {snap(agent1, agent2), strings.Replace(snap(agent1, agent2b), "task_progress", "task_updated", 1) + "", `{"type":"system","subtype":"task_updated","task_id":"w","patch":{"status":"completed"},"workflow_progress":[` + agent1 + `,{"index":"not a number"}]}`},
	"notifications carry snapshots": {snap(agent1, agent2), strings.Replace(snap(agent1, agent2b), "task_progress", "task_notification", 1), strings.Replace(snap(agent1, agent2b), `"task_id":"w"`, `"task_id":"w","resent":true`, 1),
		strings.Replace(snap(agent1, `{"type":"workflow_agent","index":2,"state":"error","endedWithRun":"stopped","error":"error","queuedAt":1,"lastProgressAt":2}`), "task_progress", "task_notification", 1)},
	"type errors": {snap(agent1, `{"type":"workflow_agent","index":"x"}`), snap(agent1, `{"type":"workflow_agent","index":"x"}`), snap(agent1, `5`, `"s"`, `null`, `[]`), snap(agent1, `5`, `"s"`, `null`, `[]`, `true`)},
	"bad fields reused": {
		snap(phase1, `{"type":"workflow_agent","index":1,"tokens":"7","label":5,"phaseIndex":1.5}`, `{"type":"workflow_agent","index":-1}`, `{"index":2}`, `{"type":"x","tokens":"bad"}`),
		snap(phase1, `{"type":"workflow_agent","index":1,"tokens":"7","label":5,"phaseIndex":1.5}`, `{"type":"workflow_agent","index":-1}`, `{"index":2}`, `{"type":"x","tokens":"bad"}`, agent2),
		snap(`{"type":"workflow_agent","index":1,"tokens":"7","label":5,"phaseIndex":1.5}`, `{"index":2}`, agent2b),
		snap(),
	},
	"syntax errors":                   {snap(agent1, agent2), snap(agent1, `{"type":}`), snapHead + "[" + agent1 + ",]}", snapHead + "[" + agent1 + "}", snapHead + "[" + agent1 + "]", snapHead + "[" + agent1 + "]}}", snapHead + "[" + agent1 + "]} x", snapHead + "[" + agent1 + agent2 + "]}"},
	"numbers are not self-delimiting": {snap(`1`, agent1), snap(`12`, agent1), snap(`1 2`, agent1), snap(`null`), snap(`nullx`)},
	"keys differing in case or escaped": {
		snap(agent1),
		strings.Replace(snap(agent1), `"workflow_progress"`, `"Workflow_Progress"`, 1),
		strings.Replace(snap(agent1), `"workflow_progress"`, `"workflow\u005fprogress"`, 1),
		strings.Replace(snap(agent1), `"workflow_progress"`, "\"workflow_progreſſ\"", 1),
		snap(agent1)[:len(snap(agent1))-1] + `,"workflow_progress":[]}`,
		snap(agent1)[:len(snap(agent1))-1] + `,"WORKFLOW_PROGRESS":null}`,
		`{"type":"system","subtype":"task_progress","workflow_progress":[` + agent1 + `],"task_id":"w"}`,
	},
	"not an array":                     {snap(agent1), strings.Replace(snap(agent1), "[", "{", 1), snapHead + `null}`, snapHead + `"[x]"}`},
	"header errors":                    {snap(agent1), strings.Replace(snap(agent1), `"task_id":"w"`, `"task_id":5`, 1), strings.Replace(snap(agent1), `"task_id":"w"`, `"task_id":"w"x`, 1), strings.Replace(snap(agent1), `"task_id":"w",`, ``, 1), strings.Replace(snap(agent1), `"usage":{"total_tokens":5}`, `"usage":{"total_tokens":5]`, 1)},
	"strings with quotes and brackets": {snap(`{"type":"workflow_agent","index":1,"label":"\\\"]}","state":"start"}`), snap(`{"type":"workflow_agent","index":1,"label":"\\\\","state":"start"}`, agent2), snap(`{"type":"workflow_agent","index":1,"label":"\\\\\"","state":"start"}`)},
	"late snapshots after the notification": {
		snap(agent1, agent2), strings.Replace(snap(agent1, agent2b), "task_progress", "task_notification", 1), snap(agent1, agent2b), snap(agent1, agent2b, agent3),
		`{"type":"system","subtype":"task_notification","task_id":"w","status":"completed"}`, snap(agent1, agent2b, agent3),
		strings.Replace(snap(agent2), `"w"`, `"x"`, 1), `{"type":"system","subtype":"task_notification","task_id":"x","status":"failed"}`, snap(agent1, agent2b, agent3),
		strings.Replace(snap(agent2b), `"w"`, `"x"`, 1), `{"type":"system","subtype":"task_notification","status":"completed","task_id":"w"}`, snap(agent1, agent2b),
	},
	"many tasks evict caches": {
		snap(agent1), strings.Replace(snap(agent2), `"w"`, `"x1"`, 1), strings.Replace(snap(agent2), `"w"`, `"x2"`, 1),
		strings.Replace(snap(agent2), `"w"`, `"x3"`, 1), strings.Replace(snap(agent2), `"w"`, `"x4"`, 1), snap(agent1, agent2), strings.Replace(snap(agent2b), `"w"`, `"x1"`, 1),
	},
}

func TestSnapshotFastPathMatchesPlain(t *testing.T) {
	for name, seq := range snapshotSequences {
		t.Run(name, func(t *testing.T) {
			lines := make([][]byte, len(seq))
			for i, s := range seq {
				lines[i] = []byte(s)
			}
			for _, keep := range []bool{false, true} {
				decodeBoth(t, lines, keep)
			}
		})
	}
}

// TestSnapshotFastPathRecordings: every recording and simulated stream of
// the repository decodes the same way on both paths.
func TestSnapshotFastPathRecordings(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*", "*.ndjson"))
	sim, _ := filepath.Glob(filepath.Join("..", "testdata", "simulate", "*.ndjson"))
	files = append(files, sim...)
	if len(files) < 2 {
		t.Fatalf("no recordings found (%d)", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			decodeBoth(t, bytes.Split(b, []byte("\n")), false)
		})
	}
}

// FuzzSnapshotDecode decodes a sequence of lines (the fuzzer's input split
// at newlines) on both paths. The seeds are the sequences above.
func FuzzSnapshotDecode(f *testing.F) {
	for _, seq := range snapshotSequences {
		f.Add([]byte(strings.Join(seq, "\n")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeBoth(t, bytes.Split(data, []byte("\n")), true)
	})
}

// growingSnapshots is a workflow of n agents in 2n snapshots, each listing
// every agent, where one agent starts or ends per snapshot.
func growingSnapshots(n int) [][]byte {
	var out [][]byte
	state := make([]int, n+1) // 0 queued, 1 running, 2 done
	row := func(i int) string {
		switch state[i] {
		case 1:
			return fmt.Sprintf(`{"type":"workflow_agent","index":%d,"state":"start","startedAt":%d,"label":"a%d"}`, i, 1000+i, i)
		case 2:
			return fmt.Sprintf(`{"type":"workflow_agent","index":%d,"state":"done","startedAt":%d,"endedAt":%d,"label":"a%d"}`, i, 1000+i, 2000+i, i)
		}
		return fmt.Sprintf(`{"type":"workflow_agent","index":%d,"state":"start","queuedAt":900,"label":"a%d"}`, i, i)
	}
	emit := func() {
		rows := []string{phase1}
		for i := 1; i <= n; i++ {
			rows = append(rows, row(i))
		}
		out = append(out, []byte(snap(rows...)))
	}
	for i := 1; i <= n; i++ {
		state[i] = 1
		emit()
		state[i] = 2
		emit()
	}
	return out
}

// TestSnapshotDecodesChangedAgentsOnly is the linear-scaling guarantee: in
// a workflow of n agents where each snapshot changes one agent, the
// decoder decodes O(n) elements in all, not O(n²), and a repeated
// snapshot costs as many allocations for 1000 agents as for 10.
func TestSnapshotDecodesChangedAgentsOnly(t *testing.T) {
	for _, n := range []int{10, 100, 300} {
		d := NewDecoder(DecodeOptions{})
		for _, l := range growingSnapshots(n) {
			if ev, r := d.Decode(tap.SourceStdout, l); r != ReasonNone || ev == nil || len(ev.Entries) != n+1 {
				t.Fatalf("n=%d: reason %v, event %v", n, r, ev != nil)
			}
		}
		// The first snapshot decodes all n+1 elements, every later one the
		// agent that changed.
		if want := (n + 1) + (2*n - 1); d.snap.decoded != want {
			t.Errorf("n=%d: decoded %d elements, want %d", n, d.snap.decoded, want)
		}
	}
	allocs := func(n int) float64 {
		rows := []string{phase1}
		for i := 1; i <= n; i++ {
			rows = append(rows, fmt.Sprintf(`{"type":"workflow_agent","index":%d,"state":"start","startedAt":%d,"label":"a%d"}`, i, 1000+i, i))
		}
		last := []byte(snap(rows...))
		d := NewDecoder(DecodeOptions{})
		d.Decode(tap.SourceStdout, last)
		return testing.AllocsPerRun(20, func() { d.Decode(tap.SourceStdout, last) })
	}
	if a10, a1000 := allocs(10), allocs(1000); a1000 > a10 {
		t.Errorf("a repeated snapshot allocates %v times with 1000 agents, %v with 10", a1000, a10)
	}
}

// TestSnapshotCachesLetGoOfEndedTasks: a stream that runs workflow after
// workflow (serve follows hundreds of them) keeps no snapshot of a task
// that has ended: after each task_notification the decoder holds the
// snapshots of the tasks still running only, whatever came before; a late
// snapshot of an ended task decodes in full, as the plain path does.
// TestSnapshotTaskAfterTaskAllocatesNothing: a stream that runs task after
// task (each with its snapshots and its notification) reuses the buffers of
// the tasks that ended: letting them go (forget) must not make every new
// task allocate its caches afresh.
func TestSnapshotTaskAfterTaskAllocatesNothing(t *testing.T) {
	d := NewDecoder(DecodeOptions{})
	task := func(id, l string) []byte { return []byte(strings.Replace(l, `"task_id":"w"`, `"task_id":"`+id+`"`, 1)) }
	var lines [][]byte
	for i := range 8 {
		id := fmt.Sprintf("t%d", i)
		lines = append(lines, task(id, snap(phase1, agent1, agent2)), task(id, snap(phase1, agent1, agent2b)),
			task(id, `{"type":"system","subtype":"task_notification","task_id":"w","status":"completed"}`))
	}
	run := func() {
		for _, l := range lines {
			d.Decode(tap.SourceStdout, l)
		}
	}
	run() // warm the caches and the string memo
	if n := testing.AllocsPerRun(20, run); n > 0 {
		t.Fatalf("%.1f allocations per %d tasks run one after another, want 0: ended tasks' buffers must be reused", n, len(lines)/3)
	}
	if held := len(d.snap.caches); held != 0 {
		t.Fatalf("%d snapshots held after every task ended, want 0", held)
	}
}

func TestSnapshotCachesLetGoOfEndedTasks(t *testing.T) {
	d := NewDecoder(DecodeOptions{})
	plain := NewDecoder(DecodeOptions{})
	plain.plainOnly = true
	decode := func(l string) {
		t.Helper()
		ev1, r1 := d.Decode(tap.SourceStdout, []byte(l))
		got := copyEvent(ev1)
		ev2, r2 := plain.Decode(tap.SourceStdout, []byte(l))
		if want := copyEvent(ev2); r1 != r2 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nfast:  %v %+v\nplain: %v %+v", l, r1, got, r2, want)
		}
	}
	task := func(id, l string) string { return strings.Replace(l, `"task_id":"w"`, `"task_id":"`+id+`"`, 1) }
	// One task that stays open throughout, beside tasks run one by one.
	decode(task("open", snap(phase1, agent1)))
	for i := range 3 * maxSnapshotCaches {
		id := fmt.Sprintf("t%d", i)
		decode(task(id, snap(phase1, agent1, agent2)))
		decode(task(id, snap(phase1, agent1, agent2b)))
		notification := task(id, `{"type":"system","subtype":"task_notification","task_id":"w","status":"completed"}`)
		if i%2 == 1 { // with its final snapshot
			notification = strings.Replace(task(id, snap(phase1, agent1, agent2b, agent3)), "task_progress", "task_notification", 1)
		}
		decode(notification)
		for _, c := range d.snap.caches {
			if string(c.key) != `"open"` {
				t.Fatalf("after the notification of %s: the decoder still holds the snapshot of %s", id, c.key)
			}
		}
		// A late snapshot of the task that ended: decoded in full.
		before := d.snap.decoded
		decode(task(id, snap(phase1, agent1, agent2b)))
		if n := d.snap.decoded - before; n != 3 {
			t.Fatalf("late snapshot of %s: %d elements decoded, want 3", id, n)
		}
		decode(task(id, `{"type":"system","subtype":"task_notification","task_id":"w","status":"completed"}`))
	}
	if len(d.snap.caches) != 1 {
		t.Fatalf("%d snapshots held, want 1 (the open task's)", len(d.snap.caches))
	}
}
