// The Vercel AI SDK (ai + @ai-sdk/mcp), driven by its own MockLanguageModelV3 (`ai/test`),
// against `lab mcp --grade-client` over stdio.
//
//     node agent.mjs LAB SCENARIO TIMEOUT SETTING [GRADER ARGS...]   (see ../scripted.mjs)
//
// TIMEOUT sets generateText's `timeout: { toolMs }`, the SDK's per-tool-execution timeout; the
// default is none, and @ai-sdk/mcp's callTool has no timeout of its own either, so a lost reply
// waits for ever (the test bounds that run and records it). SETTING: `default`, or
// `maxRetries=N`, createMCPClient's documented retry option (default 0: retries "transient MCP
// tool call failures", i.e. transport errors, never JSON-RPC errors).
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { createMCPClient } from '@ai-sdk/mcp';
import { Experimental_StdioMCPTransport } from '@ai-sdk/mcp/mcp-stdio';
import * as scripted from '../scripted.mjs';

const FRAMEWORK = 'vercel-ai';
const { lab, scenario, timeout, setting, graderArgs } = scripted.parseArgv(process.argv);
const here = new URL('./', import.meta.url);
const script = new scripted.Script(FRAMEWORK, scenario, {
  ai: await scripted.versionOf(here, 'ai'),
  '@ai-sdk/mcp': await scripted.versionOf(here, '@ai-sdk/mcp'),
});
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

function toolOutcome(part) {
  const output = part.output;
  if (output.type === 'error-text' || output.type === 'error-json') {
    script.observe('error', output.type === 'error-text' ? output.value : JSON.stringify(output.value));
    return 'failure';
  }
  const text = output.type === 'content'
    ? output.value.filter((item) => item.type === 'text').map((item) => item.text).join('')
    : typeof output.value === 'string' ? output.value : JSON.stringify(output.value);
  const ticket = scripted.textSaysTicket(text);
  script.observe(ticket ? 'result' : 'error', text);
  return ticket ? 'ticket' : 'failure';
}

let toolCalls = 0;
const model = new MockLanguageModelV3({
  doGenerate: async ({ prompt }) => {
    const last = prompt[prompt.length - 1];
    let outcome = null;
    if (last.role === 'tool') {
      for (const part of last.content) if (part.type === 'tool-result') outcome = toolOutcome(part);
    } else {
      script.observe('prompt', last.content.map((part) => part.text ?? '').join(''));
    }
    const [action, value] = script.decide(outcome);
    if (action === 'call') {
      toolCalls += 1;
      return {
        content: [{ type: 'tool-call', toolCallId: `call-${toolCalls}`, toolName: 'create_ticket', input: JSON.stringify(value) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [],
      };
    }
    return { content: [{ type: 'text', text: value }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
  },
});

const clientOptions = {};
if (setting.startsWith('maxRetries=')) clientOptions.maxRetries = Number(setting.split('=')[1]);
else if (setting !== 'default') {
  console.error(`unknown setting ${setting}: default or maxRetries=N`);
  process.exit(2);
}
const started = Date.now();
let ended;
const client = await createMCPClient({
  transport: new Experimental_StdioMCPTransport({ command: lab, args: ['mcp', '--grade-client', ...graderArgs] }),
  ...clientOptions,
});
try {
  const tools = await client.tools();
  const result = await generateText({
    model, tools, prompt: scripted.PROMPT,
    stopWhen: stepCountIs(2 * scripted.MAX_CALLS + 2),
    ...(timeout === null ? {} : { timeout: { toolMs: timeout * 1000 } }),
  });
  ended = `answered: ${result.text}`;
} catch (err) {
  ended = scripted.describeError(err);
} finally {
  // The SDK sends no sign when it gives up a call (no notifications/cancelled), so a late reply
  // held for it is released by the host's next request; the other frameworks cancel, and the
  // reply is never sent whatever the host does.
  await scripted.hold(() => client.tools());
  await client.close();
}
scripted.finish(ended, started);
