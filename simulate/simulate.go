// Package simulate is a protocol-faithful stand-in for the CodeBuddy CLI
// (cbc) and Claude Code in headless stream-json mode. It reads the CLI's
// stdin protocol (control_request initialize/interrupt/stop_task, user
// messages) and writes the stdout stream of a session that runs scripted
// workflows, shaped after the real recordings in testdata/corpus, so the
// wrapper, replay and demo can be exercised without a model API.
//
// Each user message is one turn: system/init, assistant noise, one run of
// the scenario (a workflow, plus plain background tasks in "mixed", and in
// "nested" what Claude Code 2.1.335 nests: sub-agents, a sub-agent's shell
// and its resume, a fork's workflow, a workflow() child, beside a remote
// agent), and
// a result line. Identifiers derive from Config.Seed; with Config.Epoch set
// the timestamps come from a virtual clock, so identical stdin gives
// byte-identical output (goldens rely on this).
package simulate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/simulate/clitel"
)

// Dialects of the stream.
const (
	DialectCBC    = "cbc"    // CodeBuddy CLI: UUID task ids, agentId v2:<sha256>, late error flips on interrupt
	DialectClaude = "claude" // Claude Code: w<base36> task ids, run_id everywhere, queued rows, flips before the notification
)

// Canaries: secrets the simulator hands out so that downstream tests can
// prove they never leak into telemetry, logs or reports.
const (
	CanaryToken  = "sim-secret-token-DO-NOT-EXPORT" // account.token of the initialize response
	CanaryEmail  = "sim-user@example.invalid"       // account e-mail of the initialize response
	CanaryPrompt = "sim-secret-prompt"              // embedded in Claude Code's task_started.prompt
)

// Config controls one simulated session.
type Config struct {
	// Scenario is the default scenario of every turn ("" = completed); a
	// [[SCENARIO:name]] marker in a user message overrides it for that turn.
	Scenario string
	// Dialect is DialectCBC ("" = cbc) or DialectClaude.
	Dialect string
	// Speed scales the scripted delays: 1 is realistic (tens to hundreds of
	// ms per agent step), 0 means no waiting at all. The simulator waits
	// each delay times Speed; without Epoch its timestamps are the wall
	// clock's, so the durations they show are the scripted ones times Speed.
	Speed float64
	// Seed derives session, task, run and agent ids and the noise text.
	Seed int64
	// Epoch, if non-zero, starts a virtual clock (epoch ms) that advances by
	// the scripted durations only, making the output reproducible. Zero uses
	// the wall clock.
	Epoch int64
	// Agents is the number of agents of the many-agents scenario (0 = 50).
	Agents int
	// Noise is the size in bytes of the large assistant messages
	// interleaved with the task events; 0 disables them.
	Noise int
	// InterruptAfter, if positive, makes the simulator interrupt itself
	// (as if an interrupt control_request without request id arrived)
	// right after the Nth agent start of the session. It is a test aid for
	// exercising the stop path without a client.
	InterruptAfter int
	// Expect, if set, receives one ExpectedRun JSON line per task run.
	Expect io.Writer
	// Getenv, if set, is how the simulator reads its environment (os.Getenv
	// in a real process): with Claude Code's telemetry switches set (see
	// clitel.Parse) it exports the CLI's own spans and log events
	// over OTLP/HTTP, never to stdout. Nil reads nothing: no telemetry, so
	// that a test's or a parent's environment cannot switch it on.
	Getenv func(string) string
	// Stderr, if set, receives the telemetry's export errors, which never
	// fail the session (the CLI's do not either).
	Stderr io.Writer
}

// inbound is one parsed stdin line.
type inbound struct {
	typ       string // "control_request", "user", ...
	requestID string
	subtype   string // control_request subtype
	sessionID string // interrupt's session_id
	taskID    string // stop_task's task_id
	reason    string // interrupt's reason
	content   string // user message text
}

// Run simulates one session: it reads stdin until EOF, answers control
// requests and runs one turn per user message, writing the CLI's stdout
// stream to stdout. It returns nil once stdin is closed and every turn has
// finished, or the context's error if ctx ends first. Stdin is read
// concurrently with emitting, so an interrupt can arrive mid-workflow; if
// Run returns because ctx ended, the goroutine reading stdin exits at the
// reader's next line or EOF.
func Run(ctx context.Context, cfg Config, stdin io.Reader, stdout io.Writer) error {
	if cfg.Scenario == "" {
		cfg.Scenario = ScenarioCompleted
	}
	sc, ok := canonicalScenario(cfg.Scenario)
	if !ok {
		return fmt.Errorf("simulate: unknown scenario %q (want one of %s)", cfg.Scenario, strings.Join(Scenarios(), ", "))
	}
	cfg.Scenario = sc
	switch cfg.Dialect {
	case "":
		cfg.Dialect = DialectCBC
	case DialectCBC, DialectClaude:
	default:
		return fmt.Errorf("simulate: unknown dialect %q (want cbc or claude)", cfg.Dialect)
	}
	if cfg.Agents == 0 {
		cfg.Agents = 50
	}
	if cfg.Speed < 0 {
		return fmt.Errorf("simulate: negative speed %v", cfg.Speed)
	}
	if _, err := newPlan(cfg.Scenario, cfg.Agents); err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	tel, err := clitel.Parse(cfg.Getenv)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}

	done := make(chan struct{})
	defer close(done)
	in := make(chan inbound, 64)
	go readInput(stdin, in, done)

	g := newIDs(cfg.Seed)
	s := &session{
		ctx: ctx, cfg: cfg, out: stdout, in: in, ids: g,
		clk:       newClock(cfg.Epoch),
		sessionID: g.uuid(),
		stopTasks: map[string]bool{},
		// Markers as the corpus writes them: [[SCENARIO:complete]] or
		// [[scenario:complete]].
		marker: regexp.MustCompile(`(?i)\[\[SCENARIO:([a-z0-9_-]+)\]\]`),
	}
	s.tel = clitel.New(tel, clitel.Options{Seed: cfg.Seed, SessionID: s.sessionID, Version: ClaudeVersion, Model: claudeModel, Errors: cfg.Stderr})
	defer s.tel.Shutdown() // the CLI's flush at exit, bounded
	return s.loop()
}

// readInput parses stdin lines onto in until EOF, then closes in. Lines that
// are not JSON objects are dropped: the CLI ignores what it cannot parse.
func readInput(r io.Reader, in chan<- inbound, done <-chan struct{}) {
	defer close(in)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if m, ok := parseInbound(line); ok {
			select {
			case in <- m:
			case <-done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// parseInbound decodes the fields the simulator acts on.
func parseInbound(line []byte) (inbound, bool) {
	var raw struct {
		Type      string `json:"type"`
		RequestID string `json:"request_id"`
		Request   struct {
			Subtype   string `json:"subtype"`
			SessionID string `json:"session_id"`
			TaskID    string `json:"task_id"`
			Reason    string `json:"reason"`
		} `json:"request"`
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if len(strings.TrimSpace(string(line))) == 0 || json.Unmarshal(line, &raw) != nil {
		return inbound{}, false
	}
	m := inbound{typ: raw.Type, requestID: raw.RequestID, subtype: raw.Request.Subtype,
		sessionID: raw.Request.SessionID, taskID: raw.Request.TaskID, reason: raw.Request.Reason}
	if raw.Type == "user" {
		m.content = contentText(raw.Message.Content)
	}
	return m, true
}

// contentText flattens a user message's content, which is either a string
// or an array of content blocks.
func contentText(c json.RawMessage) string {
	var s string
	if json.Unmarshal(c, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(c, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// clock yields epoch milliseconds. The virtual clock only moves when the
// script says time passed, which is what makes --epoch output reproducible.
// Without an epoch it is the wall clock: every time the simulator writes is
// the time it writes it, and --speed paces the script (pause waits the
// scripted delay times speed) instead of stretching the clock, so a live
// demo never dates a frame ahead of the wall (or of the wrapper, which
// stamps what has no time of its own on arrival).
type clock struct {
	virtual bool
	now     int64
}

// newClock returns the session's clock: virtual from epoch when one is
// given, else the wall clock.
func newClock(epoch int64) *clock {
	if epoch != 0 {
		return &clock{virtual: true, now: epoch}
	}
	return &clock{}
}

// Now returns the current time in epoch ms.
func (c *clock) Now() int64 {
	if c.virtual {
		return c.now
	}
	return time.Now().UnixMilli()
}

// advance moves the virtual clock forward; the wall clock moves by itself.
func (c *clock) advance(d time.Duration) {
	if c.virtual && d > 0 {
		c.now += d.Milliseconds()
	}
}

// session is the state of one simulated CLI process. Only the goroutine
// running loop touches it, so no locking is needed: stdin arrives through
// the in channel.
type session struct {
	ctx       context.Context
	cfg       Config
	out       io.Writer
	in        <-chan inbound // nil once stdin is closed
	ids       *ids
	clk       *clock
	sessionID string
	tel       *clitel.Recorder // nil: no telemetry of its own
	msgSeq    int
	queue     []string // user messages waiting for their turn
	marker    *regexp.Regexp

	// Stop requests for the current turn.
	turnActive      bool
	stopAll         bool            // an interrupt arrived during this turn
	stopTasks       map[string]bool // stop_task ids (Claude Code)
	interruptReason string
	agentStarts     int           // across the session, for InterruptAfter
	scripted        time.Duration // scripted time passed in pauses, across the session: a nested run's length
	selfInterrupted bool
	tasks           []*task // tasks of the current turn, in task_started order
}

// loop serves stdin until EOF, running queued turns in order.
func (s *session) loop() error {
	for {
		if len(s.queue) > 0 {
			content := s.queue[0]
			s.queue = s.queue[1:]
			if err := s.turn(content); err != nil {
				return err
			}
			continue
		}
		if s.in == nil {
			return nil
		}
		select {
		case <-s.ctx.Done():
			return fmt.Errorf("simulate: %w", s.ctx.Err())
		case m, ok := <-s.in:
			if !ok {
				s.in = nil
				continue
			}
			if err := s.handle(m); err != nil {
				return err
			}
		}
	}
}

// handle acts on one stdin message. Control requests are answered at once,
// even mid-workflow; user messages queue up for their turn.
func (s *session) handle(m inbound) error {
	switch m.typ {
	case "user":
		s.queue = append(s.queue, m.content)
		return nil
	case "control_request":
	default:
		return nil // unknown stdin lines are ignored, as the CLI does
	}
	switch m.subtype {
	case "initialize":
		return s.emit(controlSuccess(m.requestID, s.initializeResponse()))
	case "interrupt":
		if err := s.emit(controlSuccess(m.requestID, s.interruptAck(m))); err != nil {
			return err
		}
		if s.turnActive {
			s.stopAll = true
			if m.reason != "" {
				s.interruptReason = m.reason
			}
		}
		return nil
	case "stop_task":
		if s.cfg.Dialect != DialectClaude {
			return s.emit(controlError(m.requestID, "Unsupported control request subtype: stop_task"))
		}
		if err := s.emit(controlSuccess(m.requestID, obj{})); err != nil {
			return err
		}
		if s.turnActive {
			s.stopTasks[m.taskID] = true
		}
		return nil
	default:
		return s.emit(controlError(m.requestID, "Unsupported control request subtype: "+m.subtype))
	}
}

func controlSuccess(id string, resp obj) obj {
	return obj{{"type", "control_response"}, {"response", obj{
		{"subtype", "success"}, {"request_id", id}, {"response", resp}}}}
}

func controlError(id, msg string) obj {
	return obj{{"type", "control_response"}, {"response", obj{
		{"subtype", "error"}, {"request_id", id}, {"error", msg}}}}
}

// initializeResponse is a trimmed initialize answer with the account block
// whose token and e-mail are the canaries.
func (s *session) initializeResponse() obj {
	cmds := []obj{
		{{"name", "workflows"}, {"description", "Show background workflows"}},
		{{"name", "deep-research"}, {"description", "Deep research harness (dynamic workflow)"}},
	}
	if s.cfg.Dialect == DialectClaude {
		return obj{{"commands", cmds}, {"output_style", "default"},
			{"account", obj{{"email", CanaryEmail}, {"token", CanaryToken}, {"tokenSource", "sim"},
				{"apiKeySource", "none"}, {"apiProvider", "firstParty"}}},
			{"pid", 4242}}
	}
	return obj{{"commands", cmds}, {"output_style", "default"},
		{"models", []obj{{{"id", "default-model"}, {"name", "Default"}}}},
		{"account", obj{{"uid", "sim-uid"}, {"nickname", "sim"}, {"type", "personal"}, {"userId", "sim-user-id"},
			{"userName", "sim-user"}, {"userNickname", "sim"}, {"email", CanaryEmail},
			{"enterpriseId", "sim-enterprise"}, {"token", CanaryToken}}},
		{"currentModelId", "default-model"}}
}

// interruptAck is the body of the interrupt's control_response, per dialect.
func (s *session) interruptAck(m inbound) obj {
	if s.cfg.Dialect == DialectClaude {
		return obj{{"still_queued", []string{}}}
	}
	reason := m.reason
	if reason == "" {
		reason = "user cancel"
	}
	return obj{{"session_id", s.sessionID}, {"interrupted", true}, {"reason", reason}}
}

// emit writes one line with a single Write, so a --record copy and a
// concurrent reader never see a torn line.
func (s *session) emit(o obj) error {
	b, err := marshalLine(o)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if _, err := s.out.Write(b); err != nil {
		return fmt.Errorf("simulate: write stdout: %w", err)
	}
	return nil
}

// pause lets d of scripted time pass while serving stdin. It returns true
// early if stop reports a stop request (checked before waiting and after
// each stdin message). At speed 0 it does not wait but still serves the
// stdin messages already received.
func (s *session) pause(d time.Duration, stop func() bool) (bool, error) {
	if stop != nil && stop() {
		return true, nil
	}
	wait := time.Duration(float64(d) * s.cfg.Speed)
	began := time.Now()
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		var m inbound
		var ok bool
		if wait <= 0 {
			select {
			case <-s.ctx.Done():
				return false, fmt.Errorf("simulate: %w", s.ctx.Err())
			case m, ok = <-s.in:
			default:
				s.passed(d)
				return false, nil
			}
		} else {
			select {
			case <-s.ctx.Done():
				return false, fmt.Errorf("simulate: %w", s.ctx.Err())
			case <-timer:
				s.passed(d)
				return false, nil
			case m, ok = <-s.in:
			}
		}
		if !ok {
			s.in = nil
			continue
		}
		if err := s.handle(m); err != nil {
			return false, err
		}
		if stop != nil && stop() {
			// Scripted time passes in proportion to the real wait.
			if s.cfg.Speed > 0 {
				s.passed(min(d, time.Duration(float64(time.Since(began))/s.cfg.Speed)))
			}
			return true, nil
		}
	}
}

// stopRequested reports whether the task must stop now: stopping a run
// stops the runs it launched.
func (s *session) stopRequested(t *task) bool {
	return s.stopAll || s.stopTasks[t.id] || (t.parent != nil && s.stopRequested(t.parent))
}

// passed lets d of scripted time pass: the virtual clock moves by it (the
// wall clock moves by itself), and the session counts it.
func (s *session) passed(d time.Duration) {
	s.clk.advance(d)
	s.scripted += max(d, 0)
}

// turnScenario picks the scenario of a user message: its marker if it names
// a known scenario, else the configured default.
func (s *session) turnScenario(content string) string {
	if m := s.marker.FindStringSubmatch(content); m != nil {
		if sc, ok := canonicalScenario(m[1]); ok {
			return sc
		}
	}
	return s.cfg.Scenario
}

// turn runs one user message: init, noise, the scenario, result.
func (s *session) turn(content string) error {
	s.turnActive, s.stopAll, s.interruptReason = true, false, ""
	clear(s.stopTasks)
	s.tasks = nil
	defer func() { s.turnActive = false }()

	began := s.clk.Now()
	p, err := newPlan(s.turnScenario(content), s.cfg.Agents)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	s.tel.BeginTurn(began, content)
	if err := s.emitInit(); err != nil {
		return err
	}
	if err := s.emitNoise(); err != nil {
		return err
	}
	if _, err := s.pause(s.ids.jitter(40*time.Millisecond), nil); err != nil {
		return err
	}
	runErr := error(nil)
	if !s.stopAll {
		runErr = s.runScenario(p)
	}
	if werr := s.writeExpect(); werr != nil && runErr == nil {
		runErr = werr
	}
	if runErr != nil {
		return runErr
	}
	text := "Workflow notification received."
	if s.stopAll || len(s.stopTasks) > 0 {
		text = "Interrupted by user."
	}
	if err := s.emitAssistantText(text); err != nil {
		return err
	}
	if err := s.emitResult(text, s.clk.Now()-began); err != nil {
		return err
	}
	s.tel.EndTurn(s.clk.Now())
	return nil
}

// writeExpect writes the ground truth of this turn's tasks, abandoned ones
// included (ctx ended mid-run).
func (s *session) writeExpect() error {
	if s.cfg.Expect == nil {
		return nil
	}
	for _, t := range s.tasks {
		b, err := json.Marshal(s.expectedRun(t))
		if err != nil {
			return fmt.Errorf("simulate: expect: %w", err)
		}
		if _, err := s.cfg.Expect.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("simulate: write expect: %w", err)
		}
	}
	return nil
}
