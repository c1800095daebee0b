"""The scripted model's decisions, shared by the Python frameworks' scripts (one per folder).

Every script is run as

    python agent.py LAB SCENARIO TIMEOUT SETTING [GRADER ARGS...]

LAB is the lab binary; the script starts `LAB mcp --grade-client GRADER ARGS...` over stdio
through the framework's own MCP client. SCENARIO is what the scripted model does when a
create_ticket call fails or times out:

- retry-same-key: it calls again with the same arguments and the same operation_key;
- replan-new-key: it calls again with the same fields and a NEW operation_key;
- give-up: it stops and answers in text.

It stops after MAX_CALLS calls of its own either way. TIMEOUT is the client's per-call timeout in
seconds, or `default` for the framework's own; SETTING is `default` or the framework's retry
option (each script says which it takes). The model's observations go to stderr with a time
stamp. stdout is JSON lines, one event each, written as it happens (so a run the test has to kill
still says what it did): `start` (the framework and its installed versions), `saw` (what the
model was shown, each turn), `call` (each create_ticket call the model asked for: what the
framework sent beyond these it sent by itself), `ended` (how the run ended). lab/tests/it/agents.rs reads them.

AGENT_HOLD_SECONDS (default 0) is how long the host keeps the MCP session open after the agent's
run has ended, as a long-lived host does: a reply the grader holds back is then delivered into a
live session whose client no longer waits for it, instead of being cut off by the close.
"""

import asyncio
import json
import os
import sys
import time

SCENARIOS = ("retry-same-key", "replan-new-key", "give-up")
TITLE = "Printer on fire"
PRIORITY = "urgent"
MAX_CALLS = 3
# What the model is shown of one tool outcome in the findings: enough to tell a timeout from a
# refusal, short enough to diff.
SHOWN = 160


def parse_argv(argv):
    """(lab, scenario, timeout or None, setting, grader args) from the command line."""
    if len(argv) < 5 or argv[2] not in SCENARIOS:
        sys.exit(f"usage: {argv[0]} LAB {'|'.join(SCENARIOS)} default|SECONDS default|SETTING [GRADER ARGS...]")
    timeout = None if argv[3] == "default" else float(argv[3])
    return argv[1], argv[2], timeout, argv[4], argv[5:]


async def hold():
    """Keeps the session open for AGENT_HOLD_SECONDS after the run, as a long-lived host would."""
    seconds = float(os.environ.get("AGENT_HOLD_SECONDS") or 0)
    if seconds > 0:
        log(f"the host keeps the session open {seconds:g} s more")
        await asyncio.sleep(seconds)


def log(*parts):
    print(f"[{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d}]", *parts, file=sys.stderr, flush=True)


class Script:
    """The model's side of the conversation: the first create, then a reaction to each outcome."""

    def __init__(self, framework, scenario, versions):
        emit({"event": "start", "framework": framework, "versions": versions})
        self.prefix = f"op-{framework}"
        self.scenario = scenario
        self.calls = 0
        self.key_number = 1

    def arguments(self):
        return {"operation_key": f"{self.prefix}-{self.key_number}", "title": TITLE, "priority": PRIORITY}

    def observe(self, kind, text=""):
        """Records what the model was shown: `prompt`, `result` (a tool result) or `error`."""
        text = " ".join(str(text).split())
        shown = kind if not text else f"{kind}: {text[:SHOWN]}"
        emit({"event": "saw", "what": shown})
        log("model sees", shown)

    def decide(self, outcome):
        """`outcome` is None (no tool outcome yet), 'ticket' or 'failure'. Returns ('call',
        arguments) or ('answer', text)."""
        if outcome == "ticket":
            return self.answer("done: the ticket was created")
        if outcome == "failure":
            if self.scenario == "give-up":
                return self.answer("I could not create the ticket")
            if self.calls >= MAX_CALLS:
                return self.answer(f"I could not create the ticket after {self.calls} calls")
            if self.scenario == "replan-new-key":
                self.key_number += 1
        self.calls += 1
        arguments = self.arguments()
        log("model calls create_ticket", json.dumps(arguments))
        emit({"event": "call", "key": arguments["operation_key"]})
        return ("call", arguments)

    def answer(self, text):
        log("model answers", repr(text))
        return ("answer", text)


def tool_text_says_ticket(text):
    """Whether a tool result's text is a ticket (created or replayed), not a refusal: a JSON object
    with a ticket_id, or one that wraps it (a content block's `text`, its `structuredContent`, a
    list of blocks), as the adapters hand it on."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return False
    return _says_ticket(value)


def _says_ticket(value):
    if isinstance(value, list):
        return any(_says_ticket(item) for item in value)
    if not isinstance(value, dict) or value.get("isError"):
        return False
    if "ticket_id" in value:
        return True
    if isinstance(value.get("text"), str) and tool_text_says_ticket(value["text"]):
        return True
    return "structuredContent" in value and _says_ticket(value["structuredContent"])


def describe_error(err):
    return f"raised {type(err).__name__}: {' '.join(str(err).split())[:SHOWN]}"


def emit(event):
    print(json.dumps(event), flush=True)


def finish(ended, started):
    log(f"run ended after {time.monotonic() - started:.1f} s:", ended)
    emit({"event": "ended", "ended": ended})
