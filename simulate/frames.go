package simulate

import (
	"fmt"
	"strings"

	"github.com/cbc-otel/cbc-otel/simulate/clitel"
)

// This file renders the lines that frame the task events: system/init,
// assistant and user messages, results. Their shapes follow the corpus
// recordings of each CLI, trimmed of fields no consumer reads.

// ClaudeVersion is the Claude Code version the simulator pretends to be:
// system/init's claude_code_version and its telemetry's service.version.
const ClaudeVersion = "2.1.328"

const (
	claudeModel = "claude-sonnet-4-5"
	cbcModel    = "default-model"
)

func (s *session) claude() bool { return s.cfg.Dialect == DialectClaude }

// emitInit starts a turn. cbc follows system/init with system/status.
func (s *session) emitInit() error {
	if s.claude() {
		return s.emit(obj{{"type", "system"}, {"subtype", "init"}, {"cwd", "/srv/sim/work"},
			{"session_id", s.sessionID},
			{"tools", []string{"Task", "Bash", "Edit", "Read", "Write", "Workflow", "TaskStop"}},
			{"mcp_servers", []string{}}, {"model", claudeModel}, {"permissionMode", "default"},
			{"apiKeySource", "none"}, {"claude_code_version", ClaudeVersion}, {"output_style", "default"},
			{"uuid", s.ids.uuid()}})
	}
	if err := s.emit(obj{{"type", "system"}, {"subtype", "init"}, {"uuid", s.sessionID},
		{"session_id", s.sessionID}, {"apiKeySource", "www.codebuddy.ai"}, {"cwd", "/srv/sim/proj"},
		{"tools", []string{"Agent", "Read", "Write", "Edit", "Bash", "PowerShell", "TaskStop", "Workflow"}},
		{"mcp_servers", []string{}}, {"model", cbcModel}, {"permissionMode", "bypassPermissions"}}); err != nil {
		return err
	}
	return s.emit(obj{{"type", "system"}, {"subtype", "status"}, {"status", nil}, {"uuid", s.ids.uuid()},
		{"session_id", s.sessionID}, {"__timestamp", isoMillis(s.clk.Now())}, {"_requestId", s.ids.hexN(32)}})
}

// emitAssistant writes an assistant message with the given content blocks.
func (s *session) emitAssistant(content []obj, outTokens int) error {
	s.msgSeq++
	usage := obj{{"input_tokens", 100}, {"output_tokens", outTokens},
		{"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}}
	if s.claude() {
		id := fmt.Sprintf("msg_sim_%04d", s.msgSeq)
		return s.emit(obj{{"type", "assistant"}, {"message", obj{{"id", id}, {"type", "message"},
			{"role", "assistant"}, {"model", claudeModel}, {"content", content}, {"stop_reason", nil},
			{"stop_sequence", nil}, {"usage", usage}, {"context_management", nil}}},
			{"parent_tool_use_id", nil}, {"session_id", s.sessionID}, {"uuid", s.ids.uuid()},
			{"timestamp", isoMillis(s.clk.Now())}, {"request_id", fmt.Sprintf("req_sim_%d", s.msgSeq)}})
	}
	id := fmt.Sprintf("chatcmpl-sim-%d", s.msgSeq)
	return s.emit(obj{{"type", "assistant"}, {"uuid", id}, {"session_id", s.sessionID},
		{"message", obj{{"id", id}, {"content", content}, {"model", cbcModel}, {"role", "assistant"},
			{"stop_reason", nil}, {"stop_sequence", nil}, {"type", "message"}, {"usage", usage}}},
		{"parent_tool_use_id", nil}, {"__timestamp", isoMillis(s.clk.Now())}, {"_requestId", s.ids.hexN(32)}})
}

func (s *session) emitAssistantText(text string) error {
	if err := s.emitAssistant([]obj{{{"type", "text"}, {"text", text}}}, 20); err != nil {
		return err
	}
	s.tel.MainCall(s.clk.Now(), clitel.Tokens{100, 20}, "end_turn") // the line's usage
	return nil
}

// emitNoise writes one large assistant message, if noise is on.
func (s *session) emitNoise() error {
	if s.cfg.Noise <= 0 {
		return nil
	}
	return s.emitAssistant([]obj{{{"type", "text"}, {"text", noiseText(s.ids, s.cfg.Noise)}}}, s.cfg.Noise/4)
}

// emitToolUse writes the assistant's tool call that launches a task.
func (s *session) emitToolUse(toolUseID, name string, input obj) error {
	if err := s.emitAssistant([]obj{{{"type", "tool_use"}, {"id", toolUseID}, {"name", name}, {"input", input}}}, 1); err != nil {
		return err
	}
	s.tel.MainCall(s.clk.Now(), clitel.Tokens{100, 1}, "tool_use")
	return nil
}

// emitToolResult writes the tool result that acknowledges a launch.
func (s *session) emitToolResult(toolUseID, text string) error {
	if s.claude() {
		return s.emit(obj{{"type", "user"}, {"message", obj{{"role", "user"}, {"content", []obj{{
			{"tool_use_id", toolUseID}, {"type", "tool_result"}, {"content", text}, {"is_error", false}}}}}},
			{"parent_tool_use_id", nil}, {"session_id", s.sessionID}, {"uuid", s.ids.uuid()},
			{"timestamp", isoMillis(s.clk.Now())}})
	}
	return s.emit(obj{{"type", "user"}, {"uuid", s.ids.uuid()}, {"session_id", s.sessionID},
		{"message", obj{{"content", []obj{{{"type", "tool_result"}, {"tool_use_id", toolUseID},
			{"content", []obj{{{"type", "text"}, {"text", text}}}}}}}, {"role", "user"}}},
		{"parent_tool_use_id", nil}, {"__timestamp", isoMillis(s.clk.Now())}})
}

// emitResult ends a turn.
func (s *session) emitResult(text string, durMS int64) error {
	usage := obj{{"input_tokens", 100}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}, {"output_tokens", 20}}
	if s.claude() {
		return s.emit(obj{{"type", "result"}, {"subtype", "success"}, {"is_error", false},
			{"duration_ms", durMS}, {"duration_api_ms", durMS / 2}, {"num_turns", 1}, {"result", text},
			{"stop_reason", "end_turn"}, {"session_id", s.sessionID}, {"total_cost_usd", 0},
			{"usage", usage}, {"permission_denials", []string{}}, {"uuid", s.ids.uuid()}})
	}
	return s.emit(obj{{"type", "result"}, {"subtype", "success"}, {"is_error", false}, {"result", text},
		{"uuid", s.ids.uuid()}, {"session_id", s.sessionID}, {"duration_ms", durMS},
		{"duration_api_ms", durMS / 2}, {"num_turns", 1}, {"total_cost_usd", 0}, {"usage", usage},
		{"permission_denials", []string{}}, {"__timestamp", isoMillis(s.clk.Now())}})
}

// emitBackgroundTasks writes Claude Code's list of running background
// tasks, which brackets every task's life.
func (s *session) emitBackgroundTasks() error {
	if !s.claude() {
		return nil
	}
	list := []obj{}
	for _, t := range s.tasks {
		if t.status != "" || (t.side != nil && t.side.foreground) {
			continue // a foreground sub-agent is not a background task
		}
		e := obj{{"task_id", t.id}, {"run_id", t.runID}, {"task_type", t.typ}}
		if t.typ == "local_agent" {
			e = append(e, kv{"subagent_type", t.side.subagentType()})
		}
		list = append(list, append(e, kv{"description", t.description}))
	}
	return s.emit(obj{{"type", "system"}, {"subtype", "background_tasks_changed"}, {"tasks", list},
		{"uuid", s.ids.uuid()}, {"session_id", s.sessionID}})
}

// outputFile is where the CLI would spool a task's output.
func (s *session) outputFile(taskID string) string {
	return "/srv/sim/tmp/" + s.sessionID + "/tasks/" + taskID + ".output"
}

// taskHead starts a task_* event with the fields every one of them has.
func (s *session) taskHead(subtype string, t *task) obj {
	o := obj{{"type", "system"}, {"subtype", subtype}, {"task_id", t.id}}
	if s.claude() {
		o = append(o, kv{"run_id", t.runID})
	}
	return o
}

// taskTail ends a task_* event.
func (s *session) taskTail(o obj) obj {
	return append(o, kv{"uuid", s.ids.uuid()}, kv{"session_id", s.sessionID})
}

// emitTaskUpdated writes a terminal task_updated patch.
func (s *session) emitTaskUpdated(t *task, status, errMsg string) error {
	patch := obj{{"status", status}, {"end_time", t.endTime}}
	if errMsg != "" {
		patch = append(patch, kv{"error", errMsg})
	}
	return s.emitTaskPatch(t, patch)
}

// emitTaskPatch writes a task_updated with patch.
func (s *session) emitTaskPatch(t *task, patch obj) error {
	return s.emit(s.taskTail(append(s.taskHead("task_updated", t), kv{"patch", patch})))
}

// emitNotification writes the task's one task_notification; u nil omits
// usage (Claude Code's stopped notification has none).
func (s *session) emitNotification(t *task, status, summary string, u *usage) error {
	o := append(s.taskHead("task_notification", t), kv{"tool_use_id", t.toolUseID}, kv{"status", status},
		kv{"output_file", s.outputFile(t.id)}, kv{"summary", summary})
	if u != nil {
		o = append(o, kv{"usage", u.obj()})
	}
	t.status = status
	return s.emit(s.taskTail(o))
}

// usage is the usage block of task_progress and task_notification.
type usage struct {
	tokens, tools, durMS int64
}

func (u usage) obj() obj {
	return obj{{"total_tokens", u.tokens}, {"tool_uses", u.tools}, {"duration_ms", u.durMS}}
}

// newTaskIDs assigns a task's ids in the dialect's shape. kind is
// "workflow", "bash", "agent" or "remote".
func (s *session) newTaskIDs(kind string) (id, runID, toolUseID string) {
	s.msgSeq++
	if !s.claude() {
		return s.ids.uuid(), "", fmt.Sprintf("call_sim_%d", s.msgSeq)
	}
	switch kind {
	case "workflow":
		id = "w" + s.ids.base36(8)
	case "bash":
		id = "b" + s.ids.base36(8)
	case "remote":
		id = "r" + s.ids.base36(8) // as Claude Code's remote_agent ids, by its prefixes (no recording has one)
	default:
		id = "a" + s.ids.hexN(16)
	}
	return id, "0m" + s.ids.base36(7) + "-" + s.ids.hexN(8), fmt.Sprintf("toolu_sim_%04d", s.msgSeq)
}

// sanitizeLabel keeps labels single-line for descriptions.
func sanitizeLabel(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
