"""pydantic-ai with its OpenTelemetry instrumentation, against `lab mcp --grade-client` over stdio,
its spans written as OTLP JSON lines for `lab audit`.

    python agent.py TRACE LAB SCENARIO TIMEOUT [GRADER ARGS...]

TRACE is the file the spans go to: one line per span, each line one ExportTraceServiceRequest as
OTLP/JSON (`{"resourceSpans": ...}`), as the OpenTelemetry Collector's file exporter writes them.
LAB, SCENARIO, TIMEOUT and the grader's arguments are as in ../../agents/scripted.py, whose
scripted model this script shares: SCENARIO decides what the model does after a failed call
(retry-same-key, replan-new-key, give-up), and so which operation_key it sends. The framework runs
with its default setting (see ../../agents/pydantic-ai/agent.py, which this script follows).

The spans come from the software itself: pydantic-ai's instrumentation (the `Instrumentation`
capability with `InstrumentationSettings(include_content=True)`, so a tool call's span carries its
arguments and its result), and the MCP client's own spans (fastmcp, the MCP SDK), which write to the
global provider; this script only chooses where they go. The encoding is the OpenTelemetry SDK's
own (the OTLP exporters' `encode_spans`, then protobuf's JSON mapping), with the two changes the
OTLP/JSON specification makes to protobuf's mapping: trace and span ids are hex, not base64, and
enums are integers.
"""

import asyncio
import base64
import json
import os
import sys
import threading
import time
from importlib.metadata import version

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "agents"))
import scripted  # noqa: E402

from fastmcp.client.transports import StdioTransport  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import Instrumentation  # noqa: E402
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
from pydantic_ai.models.instrumented import InstrumentationSettings  # noqa: E402

FRAMEWORK = "pydantic-ai"
PACKAGES = (
    "pydantic-ai-slim",
    "fastmcp-slim",
    "mcp",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-common",
    "opentelemetry-proto",
    "protobuf",
)

if len(sys.argv) < 5:
    sys.exit(f"usage: {sys.argv[0]} TRACE LAB {'|'.join(scripted.SCENARIOS)} default|SECONDS [GRADER ARGS...]")
trace_path = sys.argv[1]
lab, scenario, timeout, _, grader_args = scripted.parse_argv([sys.argv[0], *sys.argv[2:5], "default", *sys.argv[5:]])
script = scripted.Script(FRAMEWORK, scenario, {name: version(name) for name in PACKAGES})
tool_calls = 0

# The OTLP/JSON fields protobuf's mapping writes as base64 (bytes) that the specification wants
# as hex.
ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids(value):
    """`value` (a dict from MessageToDict) with every trace and span id turned from base64 to hex."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex() if key in ID_FIELDS and isinstance(item, str) else hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [hex_ids(item) for item in value]
    return value


class OtlpJsonLines(SpanExporter):
    """Writes each export as one OTLP/JSON line, flushed at once: a run the test has to end still
    leaves every span that had ended by then."""

    def __init__(self, path):
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def export(self, spans):
        request = encode_spans(spans)
        line = json.dumps(hex_ids(MessageToDict(request, use_integers_for_enums=True)), separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self):
        with self._lock:
            self._file.close()


provider = TracerProvider(resource=Resource.create({"service.name": "audit-otlp-agent"}))
provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLines(trace_path)))
# The global provider too, as a host's set-up does (`logfire.configure()`, `opentelemetry-instrument`):
# then the MCP client writes its own spans beside pydantic-ai's (fastmcp's `tools/call create_ticket`,
# inside pydantic-ai's span of the same call, and the MCP SDK's `MCP send tools/call`), as in a real
# host's trace.
trace.set_tracer_provider(provider)


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
    toolset = MCPToolset(StdioTransport(command=lab, args=["mcp", "--grade-client", *grader_args]), **options)
    # This version takes instrumentation as a capability (`Agent(instrument=...)` is gone); the
    # settings are the documented ones, content included (the default, said here for the reader).
    instrument = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider, include_content=True))
    agent = Agent(FunctionModel(model), toolsets=[toolset], capabilities=[instrument])
    started = time.monotonic()
    try:
        async with agent:
            result = await agent.run("Create the approved ticket: title 'Printer on fire', priority urgent.")
            ended = f"answered: {result.output}"
    except Exception as err:  # the finding is how the run ended, whatever it raised
        ended = scripted.describe_error(err)
    provider.shutdown()
    scripted.finish(ended, started)


asyncio.run(main())
