// LangChain.js (langchain's createAgent on LangGraph, with @langchain/mcp-adapters'
// MultiServerMCPClient), driven by a scripted subclass of @langchain/core's own FakeChatModel
// (`@langchain/core/utils/testing`; its fake models replay fixed lists and cannot react to a tool
// result, so _generate is overridden), against `lab mcp --grade-client` over stdio.
//
//     node agent.mjs LAB SCENARIO TIMEOUT SETTING [GRADER ARGS...]   (see ../scripted.mjs)
//
// TIMEOUT sets the adapters' `defaultToolTimeout` (passed to the MCP TypeScript SDK's callTool;
// the default is the SDK's own, 60 s). SETTING: `default`, or `toolRetryMiddleware:maxRetries=N`,
// langchain's documented retry option (opt-in middleware: re-runs a failed tool call with the
// same arguments, after a backoff, before the model hears of it; 0.2 s here to keep runs short).
// A tool error reaches the model as a ToolMessage with status "error" (createAgent's default).
import { createAgent, toolRetryMiddleware } from 'langchain';
import { AIMessage, ToolMessage } from '@langchain/core/messages';
import { FakeChatModel } from '@langchain/core/utils/testing';
import { MultiServerMCPClient } from '@langchain/mcp-adapters';
import * as scripted from '../scripted.mjs';

const FRAMEWORK = 'langchain-js';
const { lab, scenario, timeout, setting, graderArgs } = scripted.parseArgv(process.argv);
const here = new URL('./', import.meta.url);
const versions = {};
for (const name of ['langchain', '@langchain/core', '@langchain/langgraph', '@langchain/mcp-adapters', '@modelcontextprotocol/sdk']) {
  versions[name] = await scripted.versionOf(here, name);
}
const script = new scripted.Script(FRAMEWORK, scenario, versions);

const textOf = (content) => (typeof content === 'string'
  ? content
  : content.map((block) => block.text ?? '').join(''));

let toolCalls = 0;
class ScriptedChatModel extends FakeChatModel {
  _llmType() {
    return 'scripted';
  }

  bindTools() {
    return this;
  }

  async _generate(messages) {
    const last = messages[messages.length - 1];
    let outcome = null;
    if (ToolMessage.isInstance(last)) {
      const text = textOf(last.content);
      const ticket = last.status !== 'error' && scripted.textSaysTicket(text);
      script.observe(ticket ? 'result' : 'error', text);
      outcome = ticket ? 'ticket' : 'failure';
    } else {
      script.observe('prompt', textOf(last.content));
    }
    const [action, value] = script.decide(outcome);
    const message = action === 'call'
      ? new AIMessage({ content: '', tool_calls: [{ name: 'create_ticket', args: value, id: `call-${++toolCalls}`, type: 'tool_call' }] })
      : new AIMessage({ content: value });
    return { generations: [{ text: typeof message.content === 'string' ? message.content : '', message }] };
  }
}

const middleware = [];
if (setting.startsWith('toolRetryMiddleware:maxRetries=')) {
  middleware.push(toolRetryMiddleware({ maxRetries: Number(setting.split('=')[1]), initialDelayMs: 200, jitter: false }));
} else if (setting !== 'default') {
  console.error(`unknown setting ${setting}: default or toolRetryMiddleware:maxRetries=N`);
  process.exit(2);
}
const client = new MultiServerMCPClient({
  mcpServers: { lab: { transport: 'stdio', command: lab, args: ['mcp', '--grade-client', ...graderArgs] } },
  ...(timeout === null ? {} : { defaultToolTimeout: timeout * 1000 }),
});
const started = Date.now();
let ended;
try {
  const tools = await client.getTools();
  const agent = createAgent({ model: new ScriptedChatModel({}), tools, middleware });
  const result = await agent.invoke(
    { messages: [{ role: 'user', content: scripted.PROMPT }] },
    { recursionLimit: 4 * scripted.MAX_CALLS + 4 },
  );
  ended = `answered: ${textOf(result.messages[result.messages.length - 1].content)}`;
} catch (err) {
  ended = scripted.describeError(err);
} finally {
  await scripted.hold();
  await client.close();
}
scripted.finish(ended, started);
