package simulate

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestDriveNested: the driver's turn ends with the top-level workflow's
// notification, not with the first nested run's.
func TestDriveNested(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		err := Run(ctx, Config{Scenario: ScenarioCompleted, Dialect: DialectClaude, Epoch: testEpoch, Seed: 7}, inR, outW)
		outW.CloseWithError(err)
		ran <- err
	}()
	// Each line is one Write on the pipe and the driver reads line by line,
	// so seen ends with the line it returned on.
	var seen bytes.Buffer
	err := Drive(ctx, DriveOptions{Scenarios: []string{ScenarioNested}}, inW, io.TeeReader(outR, &seen))
	if err != nil {
		t.Fatalf("Drive: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(seen.String()), "\n")
	ns := readNested(t, []byte(strings.Join(lines, "\n")))
	last := ns.evs[len(ns.evs)-1]
	if last.Subtype != "task_notification" || last.TaskID != ns.byName["sim-nested"] || last.line != len(lines)-1 {
		t.Errorf("Drive returned after %s of %s, want the notification of sim-nested (%s)", last.Subtype, last.TaskID, ns.byName["sim-nested"])
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
