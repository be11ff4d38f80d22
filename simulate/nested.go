package simulate

import "time"

// The nested scenario's tasks, as Claude Code 2.1.335 nests them
// (PROTOCOL.md "Nested runs", corpus/claude-code-2.1.335-nested): a
// sub-agent launches a sub-agent that launches one more (spawn_depth 1 to
// 3, the cap; the nested calls run in the foreground); a sub-agent starts
// a background shell it owns, ends, and is resumed when the shell ends
// (same task_id, a later run_id); a fork sub-agent launches a workflow
// (parent_task_id, no spawn_depth) and ends before it does. cbc has no
// recording of any of it: its dialect writes the same tasks without
// Claude Code's own fields (spawn_depth, owned_by_subagent, run_id), so
// without the resume, which only a run_id can tell from a duplicate.

// runNestedTasks runs the nested scenario's tasks to their ends, while
// the top-level run top waits between its groups. Nothing new starts once
// a stop was asked.
func (s *session) runNestedTasks(top *task) error {
	steps := []func() error{s.nestedChain, s.nestedShell, s.nestedFork}
	for _, step := range steps {
		if s.stopRequested(top) {
			return nil
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// nestedChain: three sub-agents, each launched by the one before.
func (s *session) nestedChain() error {
	outer, err := s.startSide(&sideTask{kind: "agent", description: "outer sub-agent", prompt: "[[AGENT:chain2]] Launch a nested sub-agent.", tokens: 120})
	if err != nil {
		return err
	}
	chain := []*task{outer}
	for _, st := range []*sideTask{
		{kind: "agent", description: "nested sub-agent", prompt: "[[AGENT:chain1]] Launch one more, one level deeper.", foreground: true, tokens: 110},
		{kind: "agent", description: "deepest sub-agent", prompt: "[[AGENT:chain0]] Say hello at the cap.", foreground: true, tokens: 100},
	} {
		if err := s.nestedPause(chain[len(chain)-1]); err != nil {
			return err
		}
		t, err := s.startSub(st, chain[len(chain)-1])
		if err != nil {
			return err
		}
		chain = append(chain, t)
	}
	for i := len(chain) - 1; i >= 0; i-- { // innermost first: each waits for its child
		if err := s.pauseEnd(chain[i]); err != nil {
			return err
		}
	}
	return nil
}

// nestedShell: a sub-agent's background shell, and the sub-agent resumed
// when the shell ends.
func (s *session) nestedShell() error {
	owner, err := s.startSide(&sideTask{kind: "agent", description: "shell owner", prompt: "[[AGENT:spawnbash]] Start a background shell.", tokens: 120})
	if err != nil {
		return err
	}
	if err := s.nestedPause(owner); err != nil {
		return err
	}
	sh, err := s.startSub(&sideTask{kind: "bash", description: "nested background shell", prompt: "sleep 1"}, owner)
	if err != nil {
		return err
	}
	if err := s.pauseEnd(owner); err != nil {
		return err
	}
	if _, err := s.pause(s.ids.jitter(900*time.Millisecond), func() bool { return s.stopRequested(sh) }); err != nil {
		return err
	}
	if err := s.endSub(sh); err != nil {
		return err
	}
	if !s.claude() || sh.status != "completed" {
		return nil
	}
	again, err := s.resume(owner)
	if err != nil {
		return err
	}
	return s.pauseEnd(again)
}

// nestedFork: a fork launches a workflow and ends; the workflow runs on.
func (s *session) nestedFork() error {
	fork, err := s.startSide(&sideTask{kind: "fork", description: "forked sub-agent", prompt: "[[AGENT:forkwf]] Run a workflow.", tokens: 120})
	if err != nil {
		return err
	}
	if err := s.nestedPause(fork); err != nil {
		return err
	}
	wf := s.newWorkflow(forkedPlan())
	wf.parent = fork
	if err := s.announce(wf); err != nil {
		return err
	}
	// Its Workflow tool call is the fork's; the simulator's telemetry
	// records it as the main conversation's (clitel).
	wf.wf = s.tel.WorkflowLaunched(wf.id, wf.toolUseID, wf.start)
	if err := s.pauseEnd(fork); err != nil {
		return err
	}
	return s.runWorkflow(wf, nil)
}

// nestedPause lets a little scripted time pass while t runs; a stop of t
// is taken by its end.
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

// resume starts the next run of sub-agent task first: the same task, a
// run_id that sorts after its first (the CLI's run ids sort in the order
// the runs opened), no prompt and no parent_task_id.
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

// endSub ends a nested task now: stopped when a stop targets it, else
// completed, with a sub-agent's usage.
func (s *session) endSub(t *task) error {
	t.endTime = s.clk.Now()
	if s.stopRequested(t) {
		if err := s.emitTaskUpdated(t, "killed", ""); err != nil {
			return err
		}
		if err := s.emitNotification(t, "stopped", "Background task \""+t.description+"\" was stopped", nil); err != nil {
			return err
		}
	} else {
		if err := s.emitTaskUpdated(t, "completed", ""); err != nil {
			return err
		}
		summary, u := "Background command \""+t.description+"\" completed (exit code 0)", (*usage)(nil)
		if t.typ != "local_bash" && t.typ != "Bash" {
			summary, u = "result of "+t.description, &usage{tokens: t.side.tokens, tools: 1, durMS: t.endTime - t.start}
		}
		if err := s.emitNotification(t, "completed", summary, u); err != nil {
			return err
		}
	}
	return s.emitBackgroundTasks()
}
