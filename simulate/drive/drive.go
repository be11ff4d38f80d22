// Package drive plays an agent SDK against a CLI in headless stream-json
// mode (cbc-otel demo drives the simulator with it): the client side of
// the protocol, apart from package simulate, which plays the CLI.
package drive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// driveMsg is what the driver reads of the child's stdout lines.
type driveMsg struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	TaskID    string `json:"task_id"`
	TaskType  string `json:"task_type"`
	// ParentTaskID is set on a nested run, which the driver does not wait
	// for: the turn ends with its top-level workflow.
	ParentTaskID string `json:"parent_task_id"`
}

// Options says what Run asks of the simulator.
type Options struct {
	// Scenarios run in order, one workflow each.
	Scenarios []string
	// Live goes round the scenarios until the context ends, pausing Pace
	// between two workflows.
	Live bool
	Pace time.Duration
}

// Run plays an SDK against a simulator whose stdin is w and stdout r:
// initialize, then per scenario a user message and a wait for that turn's
// workflow notification. For "stopped" it sends an interrupt once the
// workflow shows progress. Live, it goes round the scenarios until ctx
// ends: then it interrupts the workflow running, waits for its
// notification and returns nil. The caller closes w afterwards, which
// ends the simulator.
func Run(ctx context.Context, cfg Options, w io.Writer, r io.Reader) error {
	if len(cfg.Scenarios) == 0 {
		return errors.New("drive: a scenario is needed")
	}
	d := &driver{w: w, r: bufio.NewReaderSize(r, 64<<10), done: ctx.Done()}
	if err := d.send(jmap{"type": "control_request", "request_id": "init", "request": jmap{"subtype": "initialize", "hooks": jmap{}, "capabilities": jmap{}, "hasPrompt": true}}); err != nil {
		return err
	}
	if !cfg.Live {
		ctx = context.Background() // a demo of fixed length runs every scenario
		d.done = nil
	}
	stop := context.AfterFunc(ctx, d.interrupt)
	defer stop()
	for i := 0; cfg.Live || i < len(cfg.Scenarios); i++ {
		if ctx.Err() != nil {
			return nil
		}
		if err := d.turn(i, cfg.Scenarios[i%len(cfg.Scenarios)]); err != nil {
			return err
		}
		if cfg.Live {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(cfg.Pace):
			}
		}
	}
	return nil
}

// jmap is a JSON object the driver sends.
type jmap = map[string]any

// driver is the SDK side of a session. send may be called
// from the goroutine that interrupts; the rest only from the driver's.
type driver struct {
	w    io.Writer
	r    *bufio.Reader
	done <-chan struct{} // the end of a live demo; nil otherwise

	mu       sync.Mutex // serialises writes, guards session and workflow
	session  string
	workflow string // the workflow of the turn running, "" between turns
	stopped  bool   // an interrupt was sent for it
}

func (d *driver) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err = d.w.Write(append(b, '\n'))
	return err
}

// interrupt stops the workflow running, as a user's cancel does.
func (d *driver) interrupt() {
	d.mu.Lock()
	wf, session, sent := d.workflow, d.session, d.stopped
	d.stopped = d.stopped || wf != ""
	d.mu.Unlock()
	if wf != "" && !sent {
		_ = d.send(jmap{"type": "control_request", "request_id": "stop-" + wf, "request": jmap{"subtype": "interrupt", "session_id": session, "reason": "user cancel"}})
	}
}

// turn sends scenario sc's user message and reads the stream until the
// notification of its workflow.
func (d *driver) turn(i int, sc string) error {
	d.mu.Lock()
	session := d.session
	d.workflow, d.stopped = "", false
	d.mu.Unlock()
	msg := jmap{"type": "user", "message": jmap{"role": "user", "content": fmt.Sprintf("[[SCENARIO:%s]] demo turn %d", sc, i+1)}, "parent_tool_use_id": nil, "session_id": session}
	if err := d.send(msg); err != nil {
		return err
	}
	for {
		line, err := d.r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("scenario %s: simulator output ended: %w", sc, err)
		}
		var m driveMsg
		if json.Unmarshal(line, &m) != nil || m.Type != "system" {
			continue
		}
		d.mu.Lock()
		switch m.Subtype {
		case "init":
			d.session = m.SessionID
		case "task_started":
			if m.TaskType == "local_workflow" && m.ParentTaskID == "" {
				d.workflow = m.TaskID
			}
		}
		wf := d.workflow
		d.mu.Unlock()
		select {
		case <-d.done: // the demo ended before this workflow started
			d.interrupt()
		default:
		}
		switch {
		case m.Subtype == "task_progress" && sc == "stopped" && m.TaskID == wf:
			d.interrupt()
		case m.Subtype == "task_notification" && m.TaskID == wf:
			d.mu.Lock()
			d.workflow = ""
			d.mu.Unlock()
			return nil
		}
	}
}
