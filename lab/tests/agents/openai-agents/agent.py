"""The OpenAI Agents SDK, driven by a scripted Model subclass (the SDK's own model interface, no
API key, tracing off), against `lab mcp --grade-client` over stdio.

    python agent.py LAB SCENARIO TIMEOUT SETTING [GRADER ARGS...]   (see ../scripted.py)

TIMEOUT sets MCPServerStdio(client_session_timeout_seconds=...) (default 5 s). SETTING:
`default`, or `max_retry_attempts=N`, the server's documented retry option (default 0): the SDK
then re-sends a failed call_tool itself, with the same arguments, after a backoff
(retry_backoff_seconds_base, set to 0.2 s here to keep a run short), before the model hears of it.
"""

import asyncio
import json
import os
import sys
import time
from importlib.metadata import version

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scripted  # noqa: E402

from agents import Agent, Runner, Usage, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.mcp import MCPServerStdio  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

set_tracing_disabled(True)
FRAMEWORK = "openai-agents"
lab, scenario, timeout, setting, grader_args = scripted.parse_argv(sys.argv)
script = scripted.Script(FRAMEWORK, scenario, {name: version(name) for name in ("openai-agents", "mcp")})


def output_text(output):
    """A function_call_output's text: a string, or the text of its input_text items."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(item.get("text", "") for item in output if isinstance(item, dict))
    return str(output)


class Scripted(Model):
    tool_calls = 0

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kw):
        last = input[-1] if isinstance(input, list) else {"role": "user", "content": input}
        outcome = None
        if last.get("type") == "function_call_output":
            text = output_text(last.get("output"))
            if scripted.tool_text_says_ticket(text):
                script.observe("result", text)
                outcome = "ticket"
            else:
                script.observe("error", text)
                outcome = "failure"
        else:
            script.observe("prompt", last.get("content"))
        action, value = script.decide(outcome)
        if action == "call":
            self.tool_calls += 1
            call = ResponseFunctionToolCall(type="function_call", call_id=f"call_{self.tool_calls}", name="create_ticket",
                                            arguments=json.dumps(value), id=f"fc_{self.tool_calls}", status="completed")
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        message = ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed",
                                        content=[ResponseOutputText(type="output_text", text=value, annotations=[])])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


async def main():
    options = {}
    if timeout is not None:
        options["client_session_timeout_seconds"] = timeout
    if setting.startswith("max_retry_attempts="):
        options["max_retry_attempts"] = int(setting.split("=", 1)[1])
        options["retry_backoff_seconds_base"] = 0.2
    elif setting != "default":
        sys.exit(f"unknown setting {setting!r}: default or max_retry_attempts=N")
    started = time.monotonic()
    try:
        async with MCPServerStdio(params={"command": lab, "args": ["mcp", "--grade-client", *grader_args]},
                                  **options) as server:
            agent = Agent(name="ticket-agent", model=Scripted(), mcp_servers=[server])
            try:
                result = await Runner.run(agent, "Create the approved ticket: title 'Printer on fire', priority urgent.",
                                          max_turns=2 * scripted.MAX_CALLS + 2)
                ended = f"answered: {result.final_output}"
            finally:
                await scripted.hold()
    except Exception as err:  # the finding is how the run ended, whatever it raised
        ended = scripted.describe_error(err)
    scripted.finish(ended, started)


asyncio.run(main())
