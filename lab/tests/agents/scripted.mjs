// The scripted model's decisions, shared by the JavaScript frameworks' scripts (one per folder);
// the same as scripted.py, which says how a script is run:
//
//     node agent.mjs LAB SCENARIO TIMEOUT SETTING [GRADER ARGS...]
//
// SCENARIO (on a failed or timed-out create_ticket): retry-same-key, replan-new-key or give-up.
// TIMEOUT: the client's per-call timeout in seconds, or `default`. SETTING: `default` or the
// framework's retry option. Observations go to stderr; stdout is JSON lines, one event each
// (`start` with the versions, `saw` per model turn, `call` per create_ticket the model asks for,
// `ended`), written as they happen.
// AGENT_HOLD_SECONDS (default 0): how long the host keeps the MCP session open after the run.

export const SCENARIOS = ['retry-same-key', 'replan-new-key', 'give-up'];
export const TITLE = 'Printer on fire';
export const PRIORITY = 'urgent';
export const MAX_CALLS = 3;
export const SHOWN = 160;
export const PROMPT = "Create the approved ticket: title 'Printer on fire', priority urgent.";

export function parseArgv(argv) {
  const [lab, scenario, timeout, setting, ...graderArgs] = argv.slice(2);
  if (!setting || !SCENARIOS.includes(scenario)) {
    console.error(`usage: agent.mjs LAB ${SCENARIOS.join('|')} default|SECONDS default|SETTING [GRADER ARGS...]`);
    process.exit(2);
  }
  return { lab, scenario, timeout: timeout === 'default' ? null : Number(timeout), setting, graderArgs };
}

// Keeps the session open for AGENT_HOLD_SECONDS after the run, as a long-lived host would.
// `listTools`, where given, is the host listing the server's tools as it starts to hold (as a
// host does before its next turn): a request the grader sees, so a reply it still holds goes out
// then, into the live session, instead of at a time that races the end of the hold.
export async function hold(listTools) {
  const seconds = Number(process.env.AGENT_HOLD_SECONDS || 0);
  if (seconds > 0) {
    log(`the host keeps the session open ${seconds} s more`);
    if (listTools) await listTools();
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  }
}

export function log(...parts) {
  console.error(`[${new Date().toISOString().slice(11, 23)}]`, ...parts);
}

const oneLine = (text) => String(text).split(/\s+/).filter(Boolean).join(' ');

export class Script {
  constructor(framework, scenario, versions) {
    emit({ event: 'start', framework, versions });
    this.prefix = `op-${framework}`;
    this.scenario = scenario;
    this.calls = 0;
    this.keyNumber = 1;
  }

  arguments() {
    return { operation_key: `${this.prefix}-${this.keyNumber}`, title: TITLE, priority: PRIORITY };
  }

  // What the model was shown: `prompt`, `result` (a tool result) or `error`.
  observe(kind, text = '') {
    const line = oneLine(text);
    const shown = line ? `${kind}: ${line.slice(0, SHOWN)}` : kind;
    emit({ event: 'saw', what: shown });
    log('model sees', shown);
  }

  // outcome: null (no tool outcome yet), 'ticket' or 'failure'; returns ['call', args] or
  // ['answer', text].
  decide(outcome) {
    if (outcome === 'ticket') return this.answer('done: the ticket was created');
    if (outcome === 'failure') {
      if (this.scenario === 'give-up') return this.answer('I could not create the ticket');
      if (this.calls >= MAX_CALLS) return this.answer(`I could not create the ticket after ${this.calls} calls`);
      if (this.scenario === 'replan-new-key') this.keyNumber += 1;
    }
    this.calls += 1;
    const args = this.arguments();
    log('model calls create_ticket', JSON.stringify(args));
    emit({ event: 'call', key: args.operation_key });
    return ['call', args];
  }

  answer(text) {
    log('model answers', JSON.stringify(text));
    return ['answer', text];
  }
}

// Whether a tool result's text is a ticket (created or replayed), not a refusal: a JSON object
// with a ticket_id, or one that wraps it (a content block's `text`, its `structuredContent`, a
// list of blocks), as the adapters hand it on.
export function textSaysTicket(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  return saysTicket(value);
}

function saysTicket(value) {
  if (Array.isArray(value)) return value.some(saysTicket);
  if (value === null || typeof value !== 'object' || value.isError) return false;
  if ('ticket_id' in value) return true;
  if (typeof value.text === 'string' && textSaysTicket(value.text)) return true;
  return value.structuredContent !== undefined && saysTicket(value.structuredContent);
}

export function describeError(err) {
  return `raised ${err?.constructor?.name ?? 'error'}: ${oneLine(err?.message ?? err).slice(0, SHOWN)}`;
}

export function emit(event) {
  // Writes to a pipe are synchronous on Linux: an event is out before the next line runs.
  process.stdout.write(JSON.stringify(event) + '\n');
}

export function finish(ended, started) {
  log(`run ended after ${((Date.now() - started) / 1000).toFixed(1)} s:`, ended);
  emit({ event: 'ended', ended });
}

// The version of an installed package, from its package.json.
export async function versionOf(folder, name) {
  const { readFile } = await import('node:fs/promises');
  const text = await readFile(new URL(`./node_modules/${name}/package.json`, folder), 'utf8');
  return JSON.parse(text).version;
}
