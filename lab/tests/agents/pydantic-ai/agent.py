"""pydantic-ai, driven by its own FunctionModel, against `lab mcp --grade-client` over stdio.

    python agent.py LAB SCENARIO TIMEOUT SETTING [GRADER ARGS...]   (see ../scripted.py)

TIMEOUT sets MCPToolset(read_timeout=...) (default 300 s). SETTING: `default`, or
`max_retries=N`, the toolset's documented retry option (how often the model may call a tool
again after a ModelRetry; default: the agent's `retries`, 1). pydantic-ai never re-sends a
call itself: a timeout or an isError result becomes a ModelRetry, shown to the model.
"""

import asyncio
import os
import sys
import time
from importlib.metadata import version

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scripted  # noqa: E402

from fastmcp.client.transports import StdioTransport  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.mcp import MCPToolset  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

FRAMEWORK = "pydantic-ai"
lab, scenario, timeout, setting, grader_args = scripted.parse_argv(sys.argv)
script = scripted.Script(FRAMEWORK, scenario, {name: version(name) for name in ("pydantic-ai-slim", "fastmcp-slim", "mcp")})
tool_calls = 0


def model(messages, info: AgentInfo) -> ModelResponse:
    global tool_calls
    outcome = None
    for part in messages[-1].parts:
        if isinstance(part, UserPromptPart):
            script.observe("prompt", part.content)
        elif isinstance(part, RetryPromptPart):
            script.observe("error", part.model_response())
            outcome = "failure"
        elif isinstance(part, ToolReturnPart):
            if getattr(part, "outcome", "success") != "success":
                script.observe(f"error ({part.outcome})", part.content)
                outcome = "failure"
            else:
                text = part.model_response_str()
                script.observe("result", text)
                outcome = "ticket" if scripted.tool_text_says_ticket(text) else "failure"
    action, value = script.decide(outcome)
    if action == "call":
        tool_calls += 1
        return ModelResponse(parts=[ToolCallPart("create_ticket", value, tool_call_id=f"call-{tool_calls}")])
    return ModelResponse(parts=[TextPart(value)])


async def main():
    options = {}
    if timeout is not None:
        options["read_timeout"] = timeout
    if setting.startswith("max_retries="):
        options["max_retries"] = int(setting.split("=", 1)[1])
    elif setting != "default":
        sys.exit(f"unknown setting {setting!r}: default or max_retries=N")
    toolset = MCPToolset(StdioTransport(command=lab, args=["mcp", "--grade-client", *grader_args]), **options)
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    started = time.monotonic()
    try:
        # The host keeps one MCP session for the agent (`async with agent`), as a server would.
        async with agent:
            try:
                result = await agent.run("Create the approved ticket: title 'Printer on fire', priority urgent.")
                ended = f"answered: {result.output}"
            finally:
                await scripted.hold()
    except Exception as err:  # the finding is how the run ended, whatever it raised
        ended = scripted.describe_error(err)
    scripted.finish(ended, started)


asyncio.run(main())
