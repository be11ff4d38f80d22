// A peer of `cbc-otel replay` for the benchmark (bench/harness): the
// reference consumer of the protocol spec (section 4.4; PROTOCOL.md) reading a
// recording instead of a live CLI. It JSON.parses every line, keeps the task
// map the way the reference does (task_started of local_workflow opens an
// entry, task_progress replaces the snapshot, task_updated merges the status,
// task_notification sets the terminal status), and prints one JSON line:
// the terminal status counts of the notified workflow tasks, lines and bytes.
// Plain Node 20, no npm dependencies.
//
//   node bench/peers/consumer.mjs FILE
import { createReadStream } from 'node:fs';

const file = process.argv[2];
if (!file) {
  console.error('usage: node consumer.mjs FILE');
  process.exit(2);
}

const tasks = new Map(); // task_id -> { workflow_progress, status, notified }
let sessionId;
let lines = 0;
let bytes = 0;
let malformed = 0;

function handle(line) {
  lines++;
  if (!line.trim()) return;
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    malformed++;
    return;
  }
  if (msg.type === 'system' && msg.subtype === 'init') sessionId = msg.session_id;
  if (msg.type !== 'system') return;
  if (msg.subtype === 'task_started' && msg.task_type === 'local_workflow') {
    tasks.set(msg.task_id, { workflow_progress: [], status: 'running', notified: false });
  }
  if (msg.subtype === 'task_progress' && Array.isArray(msg.workflow_progress)) {
    const t = tasks.get(msg.task_id);
    if (t) t.workflow_progress = msg.workflow_progress; // authoritative snapshot
  }
  if (msg.subtype === 'task_updated') {
    const t = tasks.get(msg.task_id);
    if (t && msg.patch?.status) t.status = msg.patch.status;
  }
  if (msg.subtype === 'task_notification') {
    const t = tasks.get(msg.task_id);
    if (t) {
      t.status = msg.status;
      t.notified = true;
    }
  }
}

// Lines are cut by scanning for '\n' from where the last chunk ended, rather
// than the reference's buf.split on the whole buffer at every chunk, which is
// quadratic on multi-megabyte lines: the peer should be a competent consumer.
let pending = [];
const stream = createReadStream(file, { encoding: 'utf8', highWaterMark: 1 << 20 });
stream.on('data', (chunk) => {
  bytes += Buffer.byteLength(chunk, 'utf8');
  let start = 0;
  for (let nl = chunk.indexOf('\n'); nl !== -1; nl = chunk.indexOf('\n', start)) {
    let line = chunk.slice(start, nl);
    if (pending.length) {
      pending.push(line);
      line = pending.join('');
      pending = [];
    }
    handle(line);
    start = nl + 1;
  }
  if (start < chunk.length) pending.push(chunk.slice(start));
});
stream.on('end', () => {
  if (pending.length) handle(pending.join(''));
  const counts = {};
  for (const t of tasks.values()) {
    if (t.notified) counts[t.status] = (counts[t.status] ?? 0) + 1;
  }
  process.stdout.write(JSON.stringify({ counts, lines, bytes, malformed, session_id: sessionId ?? '' }) + '\n');
});
stream.on('error', (err) => {
  console.error('consumer:', err.message);
  process.exit(1);
});
