package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestSimulatorGroundTruth replays every simulator golden stream and
// compares the runs with the simulator's own record of what it played (its
// --expect output): two independent derivations of the same runs.
func TestSimulatorGroundTruth(t *testing.T) {
	streams, err := filepath.Glob("../testdata/simulate/*.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range streams {
		if strings.HasSuffix(s, ".expect.ndjson") {
			continue
		}
		n++
		t.Run(filepath.Base(s), func(t *testing.T) {
			runs, stats := replay(t, s)
			var got bytes.Buffer
			if err := WriteJSON(&got, runs, nil); err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(s, ".ndjson") + ".expect.ndjson")
			if err != nil {
				t.Fatal(err)
			}
			compareJSONLines(t, sortByTask(t, got.Bytes()), sortByTask(t, want))
			st := StatsOf(stats)
			if len(st.Rejected) != 0 || len(st.Violations) != 0 {
				t.Errorf("simulator stream rejected %v, violations %v", st.Rejected, st.Violations)
			}
		})
	}
	if n == 0 {
		t.Fatal("no simulator streams in testdata/simulate")
	}
}

// sortByTask orders JSON lines by task_id then run_id: the simulator lists
// runs as they start, replay as they are finalized.
func sortByTask(t *testing.T, b []byte) []byte {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	key := func(l []byte) string {
		var k struct {
			TaskID string `json:"task_id"`
			RunID  string `json:"run_id"`
		}
		if err := json.Unmarshal(l, &k); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		return k.TaskID + "\x00" + k.RunID
	}
	sort.SliceStable(lines, func(i, j int) bool { return key(lines[i]) < key(lines[j]) })
	return append(bytes.Join(lines, []byte("\n")), '\n')
}
