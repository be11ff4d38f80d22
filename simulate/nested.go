package simulate

import "time"

// The nested scenario's tasks, as Claude Code 2.1.335 writes them
// (PROTOCOL.md "Nested runs"). cbc has no recording of them: its dialect
// writes the same tasks without Claude Code's own fields (spawn_depth,
// owned_by_subagent, run_id: so no resume, which only a run_id tells).

// runNestedTasks runs them to their ends while the top-level run top
// waits between its groups. Nothing new starts once a stop was asked.
func (s *session) runNestedTasks(top *task) error {
	for _, step := range []func() error{s.nestedChain, s.nestedShell, s.nestedFork} {
		if s.stopRequested(top) {
			return nil
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// nestedChain: three sub-agents, each launched by the one before, ending
// innermost first.
func (s *session) nestedChain() error {
	t, err := s.startSide(&sideTask{kind: "agent", description: "outer sub-agent", prompt: "[[AGENT:chain2]] Launch a nested sub-agent.", tokens: 120})
	chain := []*task{t}
	for _, st := range []*sideTask{
		{kind: "agent", description: "nested sub-agent", prompt: "[[AGENT:chain1]] Launch one more, one level deeper.", foreground: true, tokens: 110},
		{kind: "agent", description: "deepest sub-agent", prompt: "[[AGENT:chain0]] Say hello at the cap.", foreground: true, tokens: 100},
	} {
		if err == nil {
			err = s.nestedPause(t)
		}
		if err == nil {
			t, err = s.startSub(st, t)
			chain = append(chain, t)
		}
	}
	for i := len(chain) - 1; i >= 0 && err == nil; i-- {
		err = s.pauseEnd(chain[i])
	}
	return err
}

// nestedShell: a sub-agent's background shell, and with Claude Code the
// sub-agent resumed when the shell ends.
func (s *session) nestedShell() error {
	owner, err := s.startSide(&sideTask{kind: "agent", description: "shell owner", prompt: "[[AGENT:spawnbash]] Start a background shell.", tokens: 120})
	var sh *task
	if err == nil {
		err = s.nestedPause(owner)
	}
	if err == nil {
		sh, err = s.startSub(&sideTask{kind: "bash", description: "nested background shell", prompt: "sleep 1"}, owner)
	}
	if err == nil {
		err = s.pauseEnd(owner)
	}
	if err == nil {
		_, err = s.pause(s.ids.jitter(900*time.Millisecond), func() bool { return s.stopRequested(sh) })
	}
	if err == nil {
		err = s.endSub(sh)
	}
	if err != nil || !s.claude() || sh.status != "completed" {
		return err
	}
	again, err := s.resume(owner)
	if err != nil {
		return err
	}
	return s.pauseEnd(again)
}

// nestedFork: a fork launches a workflow and ends; the workflow runs on.
// Its Workflow tool call is the fork's; the simulator's own telemetry
// records it as the main conversation's (clitel).
func (s *session) nestedFork() error {
	fork, err := s.startSide(&sideTask{kind: "fork", description: "forked sub-agent", prompt: "[[AGENT:forkwf]] Run a workflow.", tokens: 120})
	if err == nil {
		err = s.nestedPause(fork)
	}
	wf := s.newWorkflow(forkedPlan())
	wf.parent = fork
	if err == nil {
		err = s.announce(wf)
		wf.wf = s.tel.WorkflowLaunched(wf.id, wf.toolUseID, wf.start)
	}
	if err == nil {
		err = s.pauseEnd(fork)
	}
	if err != nil {
		return err
	}
	return s.runWorkflow(wf, nil)
}

// nestedPause lets a little scripted time pass while t runs.
func (s *session) nestedPause(t *task) error {
	_, err := s.pause(s.ids.jitter(20*time.Millisecond), func() bool { return s.stopRequested(t) })
	return err
}

// pauseEnd lets a little scripted time pass while t runs, then ends it.
func (s *session) pauseEnd(t *task) error {
	if err := s.nestedPause(t); err != nil {
		return err
	}
	return s.endSub(t)
}

// resume starts the next run of sub-agent task first: a run_id sorting
// after its first (as the CLI's do), no prompt, no parent_task_id.
func (s *session) resume(first *task) (*task, error) {
	t := &task{side: first.side, description: first.description, typ: first.typ, id: first.id, toolUseID: first.toolUseID,
		depth: first.depth, resumes: first}
	for t.runID <= first.runID {
		_, t.runID, _ = s.newTaskIDs(first.side.kind)
	}
	s.tasks = append(s.tasks, t)
	if err := s.emitBackgroundTasks(); err != nil {
		return nil, err
	}
	return t, s.emitSubStarted(t, false)
}

// endSub ends a nested task now: stopped if a stop targets it, else completed.
func (s *session) endSub(t *task) error {
	t.endTime = s.clk.Now()
	status, patch, summary, u := "completed", "completed", "Background command \""+t.description+"\" completed (exit code 0)", (*usage)(nil)
	switch {
	case s.stopRequested(t):
		status, patch, summary = "stopped", "killed", "Background task \""+t.description+"\" was stopped"
	case t.typ != "local_bash" && t.typ != "Bash":
		summary, u = "result of "+t.description, &usage{tokens: t.side.tokens, tools: 1, durMS: t.endTime - t.start}
	}
	if err := s.emitTaskUpdated(t, patch, ""); err != nil {
		return err
	}
	if err := s.emitNotification(t, status, summary, u); err != nil {
		return err
	}
	return s.emitBackgroundTasks()
}
