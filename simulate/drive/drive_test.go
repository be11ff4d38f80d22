package drive

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/simulate"
)

// TestDriveNested: the driver's turn ends with the top-level workflow's
// notification, not with that of the workflow a fork sub-agent launched
// (it has a parent_task_id), nor with any task's.
func TestDriveNested(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		err := simulate.Run(ctx, simulate.Config{Scenario: simulate.ScenarioCompleted, Dialect: simulate.DialectClaude, Epoch: 1796205994000, Seed: 7}, inR, outW)
		outW.CloseWithError(err)
		ran <- err
	}()
	// Each line is one Write on the pipe and the driver reads line by line,
	// so seen ends with the line it returned on.
	var seen bytes.Buffer
	if err := Run(ctx, Options{Scenarios: []string{simulate.ScenarioNested}}, inW, io.TeeReader(outR, &seen)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var top, lastSubtype, lastTask string
	forked := false
	for _, l := range strings.Split(strings.TrimSpace(seen.String()), "\n") {
		var e struct {
			Subtype      string  `json:"subtype"`
			TaskID       string  `json:"task_id"`
			TaskType     string  `json:"task_type"`
			ParentTaskID *string `json:"parent_task_id"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		lastSubtype, lastTask = e.Subtype, e.TaskID
		if e.Subtype == "task_started" && e.TaskType == "local_workflow" {
			if e.ParentTaskID == nil {
				top = e.TaskID
			} else {
				forked = true
			}
		}
	}
	if !forked || top == "" || lastSubtype != "task_notification" || lastTask != top {
		t.Errorf("Run returned after %s of %s; want the notification of the top-level workflow %s (a forked workflow seen: %v)",
			lastSubtype, lastTask, top, forked)
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	if err := <-ran; err != nil {
		t.Fatalf("simulate.Run: %v", err)
	}
}
