#!/usr/bin/env node
// Drives one agent SDK's query() through a sequence of turns, the way an
// application would, and writes every message the SDK yields as one JSON
// line. Used by e2e/sdk_test.go; see README.md.
//
//   node drive.mjs CONFIG.json
//
// CONFIG: {
//   "sdk":       "claude" | "codebuddy",
//   "cli":       path of the stand-in CLI (a shell script that execs cbc-otel run ...),
//   "cwd":       working directory for the CLI,
//   "out":       prefix of the files receiving the yielded messages, one JSON
//                line each: OUT.K for session K,
//   "sessions":  [["completed", "failed", ...], ...]: one query() (one CLI
//                process) per session, one user turn per scenario, carrying
//                [[SCENARIO:name]]; in a "stopped" turn the script calls
//                query.interrupt() at the first task_progress of that turn's
//                workflow. The CLI sees CBC_E2E_SESSION=K in its environment.
//   "events":    file receiving the driver's own notes (interrupt results),
// }
//
// Multi-turn sessions feed the turns through streaming input (an async
// iterable: the next user message after each result). The CodeBuddy SDK
// cannot do that: its query() first drains the whole prompt iterable, then
// reads, and ends at the first result (closing stdin and killing the CLI),
// so with it every session must have exactly one turn (a string prompt).
//
// The script never calls process.exit on success: it returns from main and
// Node must exit by itself, which proves the SDK left no handle open (the Go
// test bounds the whole run with a timeout).
import fs from 'node:fs';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const events = fs.createWriteStream(cfg.events);
const note = (o) => events.write(JSON.stringify(o) + '\n');

let query;
const options = { cwd: cfg.cwd };
if (cfg.sdk === 'claude') {
  ({ query } = await import('@anthropic-ai/claude-agent-sdk'));
  options.pathToClaudeCodeExecutable = cfg.cli;
  options.stderr = (d) => process.stderr.write(d);
} else if (cfg.sdk === 'codebuddy') {
  ({ query } = await import('@tencent-ai/agent-sdk'));
  options.pathToCodebuddyCode = cfg.cli;
  // This SDK runs any path not ending in .exe through `node PATH` unless a
  // runtime is named: have /bin/sh run our wrapper script instead.
  options.executable = '/bin/sh';
  options.stderr = (d) => process.stderr.write(d);
} else {
  throw new Error(`unknown sdk ${cfg.sdk}`);
}

const userText = (sc, i) => `[[SCENARIO:${sc}]] turn ${i}: please run the workflow.`;

async function session(k, scenarios) {
  const out = fs.createWriteStream(`${cfg.out}.${k}`);
  const opts = { ...options, env: { ...process.env, CBC_E2E_SESSION: String(k) } };
  // Streaming input: a queue fed one user message per turn; null ends the
  // stream (the SDK then closes the CLI's stdin).
  const queue = [];
  let wake = null;
  const push = (m) => {
    queue.push(m);
    if (wake) {
      wake();
      wake = null;
    }
  };
  async function* prompt() {
    for (;;) {
      while (queue.length > 0) {
        const m = queue.shift();
        if (m === null) return;
        yield m;
      }
      await new Promise((r) => {
        wake = r;
      });
    }
  }
  let q;
  if (cfg.sdk === 'codebuddy') {
    if (scenarios.length !== 1) throw new Error('the CodeBuddy SDK runs one turn per query()');
    q = query({ prompt: userText(scenarios[0], 0), options: opts });
  } else {
    q = query({ prompt: prompt(), options: opts });
    push({ type: 'user', message: { role: 'user', content: userText(scenarios[0], 0) }, parent_tool_use_id: null, session_id: '' });
  }
  let turn = 0;
  let workflow = null;
  let interrupted = false;
  const pending = [];
  for await (const msg of q) {
    out.write(JSON.stringify(msg) + '\n');
    if (msg.type === 'system' && msg.subtype === 'task_started' && msg.task_type === 'local_workflow') {
      workflow = msg.task_id;
    }
    if (
      scenarios[turn] === 'stopped' &&
      !interrupted &&
      msg.type === 'system' &&
      msg.subtype === 'task_progress' &&
      msg.task_id === workflow
    ) {
      interrupted = true;
      note({ event: 'interrupt', session: k, turn, task_id: workflow });
      // Not awaited inside the loop: the SDK keeps reading stdout meanwhile.
      pending.push(
        q.interrupt().then(
          (r) => note({ event: 'interrupt_ack', session: k, turn, response: r ?? null }),
          (e) => note({ event: 'interrupt_error', session: k, turn, error: String(e) }),
        ),
      );
    }
    if (msg.type === 'result') {
      turn++;
      if (cfg.sdk !== 'codebuddy') {
        push(
          turn < scenarios.length
            ? { type: 'user', message: { role: 'user', content: userText(scenarios[turn], turn) }, parent_tool_use_id: null, session_id: '' }
            : null,
        );
      }
    }
  }
  await Promise.all(pending);
  note({ event: 'session_done', session: k, turns: turn });
  await new Promise((r) => out.end(r));
}

for (const [k, scenarios] of cfg.sessions.entries()) {
  await session(k, scenarios);
}
note({ event: 'done' });
await new Promise((r) => events.end(r));
