package attackgen

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/cbc-otel/cbc-otel/ndjson"
)

// smallSpec is an attack small enough for a unit test, with every feature
// of the real one (names cycling, done and running agents, several phases).
func smallSpec() Spec {
	return Spec{OpenRuns: 50, WorkflowNames: 7, SnapshotAgents: 40, SnapshotPhases: 3}
}

// smallSum pins the bytes of the small attack: the chaos suite's bounds and
// the benchmark's figures were taken on this stream, and a change of its
// bytes must be a deliberate one.
const smallSum = "2b318a22760137394e301df2495ccd630ef17fe23323e10d637e590b469e63e0"

// TestWrite checks the shape of the stream: two lines per open run and two
// for the big one, every line valid JSON, the reported size of the big
// line, and the same bytes on every call.
func TestWrite(t *testing.T) {
	small := smallSpec()
	var a, b bytes.Buffer
	lines, big, err := Write(&a, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Write(&b, small); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two calls, different bytes")
	}
	if sum := sha256.Sum256(a.Bytes()); hex.EncodeToString(sum[:]) != smallSum {
		t.Errorf("sha256 of the small attack is %x, pinned %s", sum, smallSum)
	}
	if want := 2*small.OpenRuns + 2; lines != want {
		t.Fatalf("%d lines, want %d", lines, want)
	}
	sc := bufio.NewScanner(bytes.NewReader(a.Bytes()))
	sc.Buffer(nil, 1<<20)
	var n, last int
	var agents int
	for sc.Scan() {
		n++
		last = len(sc.Bytes()) + 1
		var l struct {
			Subtype  string `json:"subtype"`
			TaskType string `json:"task_type"`
			Progress []struct {
				Type string `json:"type"`
			} `json:"workflow_progress"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if l.Subtype == "task_notification" {
			t.Fatalf("line %d closes a run", n)
		}
		agents = 0
		for _, p := range l.Progress {
			if p.Type == "workflow_agent" {
				agents++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != lines || last != big || agents != small.SnapshotAgents {
		t.Fatalf("%d lines, last of %d bytes with %d agents; reported %d lines, big line %d bytes, want %d agents", n, last, agents, lines, big, small.SnapshotAgents)
	}
}

// TestDefaultSnapshotFits checks that the default attack's snapshot stays
// under the framer's line limit: over it, the line would be rejected as
// too long and the agent cap never met.
func TestDefaultSnapshotFits(t *testing.T) {
	if testing.Short() {
		t.Skip("writes the whole default attack (about 90 MB)")
	}
	var w counter
	_, big, err := Write(&w, Default())
	if err != nil {
		t.Fatal(err)
	}
	if big > ndjson.DefaultMaxLine {
		t.Fatalf("the snapshot line is %d bytes, over the framer's %d", big, ndjson.DefaultMaxLine)
	}
}

// counter is an io.Writer that only counts.
type counter struct{ n int64 }

// Write counts p.
func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
