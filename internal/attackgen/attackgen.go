// Package attackgen writes the "state attack" stream of issue #17 point 5: a
// CLI (or a hostile stream) that opens workflow runs and never closes them,
// then sends one huge snapshot of a fresh run. It lives here, not in a test,
// because two programs feed it to `cbc-otel run`: the chaos suite (which
// holds the wrapper to its bounds) and the benchmark harness (which reports
// the peak RSS). Internal: a shared input, not an API.
package attackgen

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"
)

// Spec is the shape of one attack.
type Spec struct {
	// OpenRuns workflow runs are started and never notified.
	OpenRuns int
	// WorkflowNames distinct workflow names among them.
	WorkflowNames int
	// SnapshotAgents workflow_agent rows in the one big snapshot of a
	// fresh run.
	SnapshotAgents int
	// SnapshotPhases workflow_phase entries in it.
	SnapshotPhases int
}

// Default is the chaos suite's attack: 100,000 open runs over 300 names,
// then a snapshot of 20,000 agents in 8 phases (a line of 4.17 MB, just
// under the framer's 4 MiB).
func Default() Spec {
	return Spec{OpenRuns: 100_000, WorkflowNames: 300, SnapshotAgents: 20_000, SnapshotPhases: 8}
}

// Write writes the stream of the attack s to w and returns its line count
// and the size in bytes of the big snapshot's line (newline included).
//
//   - s.OpenRuns workflow runs (task_type local_workflow, distinct task
//     ids, s.WorkflowNames names), each a task_started and one small
//     task_progress (one phase, one agent), never a notification;
//   - one fresh run: its task_started and one task_progress whose
//     workflow_progress holds s.SnapshotPhases phases and s.SnapshotAgents
//     agents shaped as Claude Code writes them (agentId "v1:" + 64 hex,
//     label, state start or done, startedAt, endedAt when done,
//     phaseIndex). phaseTitle, optional in the protocol, is left out: with
//     it 20,000 such rows (211 bytes and more each) pass the framer's 4 MiB
//     line and the snapshot would be rejected as too_long instead of
//     meeting the agent cap; for the same reason half the agents are done
//     (with endedAt), half still running, and labels are "scan:00001" (the
//     rows average 209 bytes, the line is 4.17 MB of 4.19).
//
// The bytes depend on s alone: every time is counted from a fixed epoch.
func Write(w io.Writer, s Spec) (lines int, bigLine int, err error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	const base = int64(1796205994000) // epoch ms
	at := func(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }
	uuid := func(i, kind int) string { return fmt.Sprintf("%08x-%04x-4000-8000-%012x", i, kind, i) }
	agentID := func(s string) string { h := sha256.Sum256([]byte(s)); return "v1:" + hex.EncodeToString(h[:]) }
	for i := range s.OpenRuns {
		id, wf, t := uuid(i, 1), fmt.Sprintf("review-%03d", i%s.WorkflowNames), base+int64(i)*10
		fmt.Fprintf(bw, `{"type":"system","subtype":"task_started","task_id":"%s","tool_use_id":"toolu_%020d","task_type":"local_workflow","workflow_name":"%s","description":"Run workflow %s","uuid":"%s","session_id":"%s","written_at":"%s"}`+"\n",
			id, i, wf, wf, uuid(i, 2), uuid(0, 3), at(t))
		fmt.Fprintf(bw, `{"type":"system","subtype":"task_progress","task_id":"%s","tool_use_id":"toolu_%020d","description":"Run workflow %s","usage":{"total_tokens":%d,"tool_uses":1,"duration_ms":5},"workflow_progress":[{"type":"workflow_phase","index":1,"title":"Scan"},{"type":"workflow_agent","index":1,"agentId":"%s","state":"start","startedAt":%d,"label":"scan:001","phaseIndex":1}],"session_id":"%s","uuid":"%s","written_at":"%s"}`+"\n",
			id, i, wf, 1000+i%5000, agentID(id), t+2, uuid(0, 3), uuid(i, 4), at(t+5))
		lines += 2
	}
	id, t := uuid(s.OpenRuns, 1), base+int64(s.OpenRuns)*10
	fmt.Fprintf(bw, `{"type":"system","subtype":"task_started","task_id":"%s","tool_use_id":"toolu_big","task_type":"local_workflow","workflow_name":"review-000","description":"Run workflow review-000","uuid":"%s","session_id":"%s","written_at":"%s"}`+"\n",
		id, uuid(s.OpenRuns, 2), uuid(0, 3), at(t))
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"type":"system","subtype":"task_progress","task_id":"%s","tool_use_id":"toolu_big","description":"Run workflow review-000","usage":{"total_tokens":123456789,"tool_uses":40000,"duration_ms":600000},"workflow_progress":[`, id)
	for p := 1; p <= s.SnapshotPhases; p++ {
		fmt.Fprintf(&b, `{"type":"workflow_phase","index":%d,"title":"Phase %d"},`, p, p)
	}
	for i := range s.SnapshotAgents {
		if i > 0 {
			b.WriteByte(',')
		}
		st := t + 10 + int64(i)*25
		// Half the agents done, half still running: with three of four
		// done, 20,000 rows no longer fit in the 4 MiB line.
		if i%2 == 0 {
			fmt.Fprintf(&b, `{"type":"workflow_agent","index":%d,"agentId":"%s","state":"done","startedAt":%d,"endedAt":%d,"label":"scan:%05d","phaseIndex":%d}`,
				i+1, agentID(fmt.Sprint("audit", i)), st, st+20_000, i+1, 1+i*s.SnapshotPhases/s.SnapshotAgents)
		} else {
			fmt.Fprintf(&b, `{"type":"workflow_agent","index":%d,"agentId":"%s","state":"start","startedAt":%d,"label":"scan:%05d","phaseIndex":%d}`,
				i+1, agentID(fmt.Sprint("audit", i)), st, i+1, 1+i*s.SnapshotPhases/s.SnapshotAgents)
		}
	}
	fmt.Fprintf(&b, `],"session_id":"%s","uuid":"%s","written_at":"%s"}`+"\n", uuid(0, 3), uuid(s.OpenRuns, 4), at(t+600_000))
	bigLine = b.Len()
	// A bufio.Writer keeps its first error and returns it from every later
	// call: the Flush below reports any failed write above.
	bw.Write(b.Bytes())
	lines += 2
	if err := bw.Flush(); err != nil {
		return 0, 0, fmt.Errorf("write the state attack: %w", err)
	}
	return lines, bigLine, nil
}
