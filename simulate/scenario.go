package simulate

import (
	"fmt"
	"strings"
	"time"
)

// Scenario names accepted by --scenario and by [[SCENARIO:name]] markers.
const (
	ScenarioCompleted  = "completed"   // 2 phases, 4 agents (2 parallel, 1 with a tool call); completed
	ScenarioFailed     = "failed"      // one agent errors, the script throws; failed with patch.error
	ScenarioStopped    = "stopped"     // slow agents wait for an interrupt; complete after 30 s of scripted time without one
	ScenarioCached     = "cached"      // a rerun of completed: the first phase's agents are cached
	ScenarioManyAgents = "many-agents" // --agents N agents across 3 phases, 8 at a time; snapshots grow
	ScenarioMixed      = "mixed"       // completed plus a background shell and a background sub-agent task
	ScenarioSpellings  = "spellings"   // completed with cbc's alternative spellings (state "running", workflow_name "path:...")
	ScenarioNested     = "nested"      // what Claude Code 2.1.335 nests: sub-agents 3 deep, a sub-agent's shell and its resume, a fork's workflow, a workflow() child; beside a remote agent task
)

// Scenarios lists every scenario name, in documentation order.
func Scenarios() []string {
	return []string{ScenarioCompleted, ScenarioFailed, ScenarioStopped, ScenarioCached,
		ScenarioManyAgents, ScenarioMixed, ScenarioSpellings, ScenarioNested}
}

// scenarioAliases maps the names the corpus recordings use in their
// [[SCENARIO:...]] markers onto ours, so a recording's stdin can drive the
// simulator unchanged.
func canonicalScenario(name string) (string, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	switch n {
	case "complete":
		n = ScenarioCompleted
	case "fail":
		n = ScenarioFailed
	case "interrupt":
		n = ScenarioStopped
	case "agent", "bash":
		n = ScenarioMixed
	}
	for _, s := range Scenarios() {
		if s == n {
			return n, true
		}
	}
	return "", false
}

// stallTimeout is the scripted duration of a "slow" agent: the stopped
// scenario waits this long (times --speed) for an interrupt before the slow
// agents complete normally, so an unattended run still terminates.
const stallTimeout = 30 * time.Second

// agentPlan scripts one sub-agent.
type agentPlan struct {
	label  string
	prompt string
	phase  int // 1-based phase index
	group  int // agents of one group run concurrently; groups run in order
	dur    time.Duration
	cached bool
	errMsg string // non-empty: the agent ends in state error
	tokens int64
	tools  int64  // tool calls; >0 also produces a mid-run usage tick
	tool   string // the tool's one-line summary
	slow   bool   // runs for stallTimeout: the window for an interrupt
}

// sideTask scripts a background task that is not a workflow.
type sideTask struct {
	kind        string // "bash", "agent", "fork" or "remote"
	description string
	prompt      string
	startIn     int   // starts as this workflow group begins; 0 = before the workflow
	endAfter    int   // ends after this workflow group; 0 = after the workflow
	foreground  bool  // is_backgrounded false, not in background_tasks_changed (nested.go)
	tokens      int64 // its notification's usage (nested.go)
}

// plan scripts one scenario run.
type plan struct {
	scenario    string
	name        string // meta.name
	description string
	phases      []string
	agents      []agentPlan
	concurrency int
	failErr     string // non-empty: the script throws after its agents
	sides       []sideTask
	pathName    bool // cbc: workflow_name "path:<basename>.workflow.js"
	running     bool // cbc: state spelled "running" instead of "start"
	childPhase  int  // the phase (1-based) that is a workflow() call: a row of kind child
	nestAfter   int  // the group after which the nested scenario's tasks run (nested.go)
}

// newPlan builds the scripted run of a scenario. nAgents only matters for
// many-agents.
func newPlan(scenario string, nAgents int) (*plan, error) {
	review := func() []agentPlan {
		return []agentPlan{
			{label: "reader:alpha", prompt: "[[AGENT:alpha]] Read part A and report.", phase: 1, group: 1, dur: 180 * time.Millisecond, tokens: 1210},
			{label: "reader:beta", prompt: "[[AGENT:beta]] Read part B and report.", phase: 1, group: 1, dur: 240 * time.Millisecond, tokens: 1534},
			{label: "summarize", prompt: "[[AGENT:gamma]] Summarize the readers' results.", phase: 2, group: 2, dur: 120 * time.Millisecond, tokens: 880},
			{label: "check", prompt: "[[AGENT:tooldelta]] Double-check the summary with a shell command.", phase: 2, group: 3, dur: 300 * time.Millisecond, tokens: 640, tools: 1, tool: "echo checked"},
		}
	}
	p := &plan{scenario: scenario, name: "sim-review", phases: []string{"Gather", "Summarize"}, concurrency: 2,
		description: "Simulated two-phase review workflow"}
	switch scenario {
	case ScenarioCompleted:
		p.agents = review()
	case ScenarioSpellings:
		p.agents = review()
		p.pathName, p.running = true, true
	case ScenarioMixed:
		p.agents = review()
		p.sides = []sideTask{
			{kind: "bash", description: "background build", prompt: "sleep 1; make -j4", endAfter: 1},
			{kind: "agent", description: "sim sub-agent", prompt: "[[AGENT:solo]] Say hello."},
		}
	case ScenarioCached:
		p.agents = review()
		p.agents[0].cached, p.agents[1].cached = true, true
		p.description = "Rerun of the simulated review workflow (resumed from cache)"
	case ScenarioFailed:
		p.name, p.description = "sim-review-fail", "Simulated workflow where an agent errors and the script throws"
		p.agents = []agentPlan{
			{label: "reader:alpha", prompt: "[[AGENT:alpha]] Read part A and report.", phase: 1, group: 1, dur: 160 * time.Millisecond, tokens: 1190},
			{label: "reader:failbeta", prompt: "[[AGENT:failbeta]] Read part B and report.", phase: 1, group: 1, dur: 110 * time.Millisecond,
				errMsg: "API Error: 400 sim: agent failbeta is rejected"},
			{label: "summarize", prompt: "[[AGENT:gamma]] Summarize the readers' results.", phase: 2, group: 2, dur: 90 * time.Millisecond, tokens: 700},
		}
		p.failErr = "Error: sim failure: reader:failbeta returned null\n    at <anonymous> (workflow.js:9:40)\n    at <anonymous> (evalmachine.<anonymous>:1:42)"
	case ScenarioStopped:
		p.name, p.description = "sim-slow", "Simulated workflow with slow agents, to be interrupted"
		p.agents = []agentPlan{
			{label: "reader:alpha", prompt: "[[AGENT:alpha]] Read part A slowly.", phase: 1, group: 1, dur: stallTimeout, slow: true, tokens: 2100},
			{label: "reader:slowbeta", prompt: "[[AGENT:slowbeta]] Read part B slowly.", phase: 1, group: 1, dur: stallTimeout + 500*time.Millisecond, slow: true, tokens: 1900},
			{label: "reader:gamma", prompt: "[[AGENT:gamma]] Read part C.", phase: 1, group: 1, dur: 200 * time.Millisecond, tokens: 1500},
			{label: "summarize", prompt: "[[AGENT:delta]] Summarize the readers' results.", phase: 2, group: 2, dur: 150 * time.Millisecond, tokens: 800},
		}
	case ScenarioManyAgents:
		if nAgents < 3 {
			return nil, fmt.Errorf("many-agents needs at least 3 agents, got %d", nAgents)
		}
		p.name, p.description = "sim-fanout", fmt.Sprintf("Simulated fan-out over %d agents", nAgents)
		p.phases = []string{"Scan", "Analyze", "Report"}
		p.concurrency = 8
		counts := []int{nAgents / 2, nAgents / 3, nAgents - nAgents/2 - nAgents/3}
		for ph, n := range counts {
			for i := range n {
				a := agentPlan{
					label:  fmt.Sprintf("%s:%03d", strings.ToLower(p.phases[ph]), i+1),
					prompt: fmt.Sprintf("[[AGENT:%s-%d]] Handle shard %d of phase %s.", p.phases[ph], i+1, i+1, p.phases[ph]),
					phase:  ph + 1, group: ph + 1,
					dur:    time.Duration(60+(i*37)%340) * time.Millisecond,
					tokens: int64(300 + (i*131)%1700),
				}
				if i%7 == 3 {
					a.tools, a.tool = 2, "rg --count TODO"
				}
				p.agents = append(p.agents, a)
			}
		}
	case ScenarioNested:
		return nestedPlan(), nil
	default:
		return nil, fmt.Errorf("unknown scenario %q (want one of %s)", scenario, strings.Join(Scenarios(), ", "))
	}
	return p, nil
}

// nestedPlan scripts what Claude Code 2.1.335 nests: a top-level workflow
// whose script runs a saved workflow with workflow() (a phase row of kind
// child), and after its first group the sub-agents' tasks of nested.go,
// beside a remote agent task. No workflow agent launches anything.
func nestedPlan() *plan {
	return &plan{scenario: ScenarioNested, name: "sim-nested", phases: []string{"Plan", "Inline", "▸ sim-nested-inline"}, concurrency: 2,
		description: "Simulated workflow that runs a saved workflow inline", childPhase: 3, nestAfter: 1,
		agents: []agentPlan{
			{label: "planner", prompt: "[[AGENT:planner]] Plan the work.", phase: 1, group: 1, dur: 400 * time.Millisecond, tokens: 960, tools: 1, tool: "ls"},
			{label: "leaf", prompt: "[[AGENT:leaf]] Report from inside the inline workflow.", phase: 3, group: 2, dur: 150 * time.Millisecond, tokens: 520},
		},
		sides: []sideTask{{kind: "remote", description: "sim remote agent", prompt: "[[AGENT:remote]] Review the plan remotely.",
			startIn: 1, endAfter: 1}}}
}

// forkedPlan is the workflow a fork sub-agent launches (nested.go).
func forkedPlan() *plan {
	return &plan{scenario: ScenarioNested, name: "sim-nested-forked", phases: []string{"Dig"}, concurrency: 2,
		description: "Workflow launched by a fork sub-agent",
		agents: []agentPlan{
			{label: "leaf:a", prompt: "[[AGENT:leafa]] Dig into part A.", phase: 1, group: 1, dur: 160 * time.Millisecond, tokens: 380},
			{label: "leaf:b", prompt: "[[AGENT:leafb]] Dig into part B.", phase: 1, group: 1, dur: 200 * time.Millisecond, tokens: 410},
		}}
}

// script renders the fake workflow source that Claude Code puts in
// task_started.prompt. It embeds CanaryPrompt: downstream must never export
// the prompt, and tests grep for the canary to prove it.
func (p *plan) script() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "// %s: this source must never leave the machine\n", CanaryPrompt)
	fmt.Fprintf(&sb, "export const meta = {\n  name: '%s',\n  description: '%s',\n  phases: [", p.name, strings.ReplaceAll(p.description, "'", "\\'"))
	for i, ph := range p.phases {
		if i+1 == p.childPhase {
			continue // workflow()'s row, not a phase of the script's
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "{ title: '%s' }", ph)
	}
	sb.WriteString("],\n}\n")
	for i, ph := range p.phases {
		if i+1 == p.childPhase {
			fmt.Fprintf(&sb, "await workflow('%s')\n", strings.TrimPrefix(ph, "▸ "))
			continue
		}
		fmt.Fprintf(&sb, "phase('%s')\n", ph)
		for _, a := range p.agents {
			if a.phase == i+1 {
				fmt.Fprintf(&sb, "await agent(%q, { label: '%s' })\n", a.prompt, a.label)
			}
		}
	}
	if p.failErr != "" {
		sb.WriteString("throw new Error('sim failure')\n")
	}
	sb.WriteString("return 'ok'\n")
	return sb.String()
}
