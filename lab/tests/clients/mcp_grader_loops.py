"""Retrying loops on the official MCP Python SDK, driven against `lab mcp --grade-client`.

Usage:
  mcp_grader_loops.py LOOP LAB_BINARY DATABASE REPORT [http]

LOOP is one of:
  keep-key          makes one key per intention and resends it, with the same arguments, after a
                    timeout (two intentions, one session)
  new-key           the same loop, but it mints a new key for every attempt
  reconnect-keep    after a timeout it closes the session (the server process ends), starts a new
                    one on the same database and resends the same key and arguments
  reconnect-replan  after a timeout it starts a new session and plans the call again: another
                    title, and a new key

Each session starts `LAB_BINARY mcp --grade-client --database DATABASE --report REPORT --json`;
the grader loses the first reply of every intention (its default), or follows the schedule in
the environment variable GRADER_SCHEDULE (more grader options, split on spaces, such as
`--in-progress first` or `--drop-connection first`). With `http` last, the script
starts one grader with `--transport http --port 0` instead, each session is a Streamable HTTP
session to the URL it printed (a reconnect is a new session on the same server), and at the end
the script stops the grader with SIGTERM, which writes REPORT. The script prints what it sent
and got; the test reads the grader's report from REPORT. It asserts nothing about the grade: the
grade is the grader's to give.
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

# Set by main() for `http`: the URL of the one grader every session connects to.
HTTP_URL = None

TIMEOUT = 2
ATTEMPTS = 3
SCHEDULE = os.environ.get("GRADER_SCHEDULE", "").split()


def say(line):
    print(line, flush=True)


@contextlib.asynccontextmanager
async def session(lab, database, report):
    if HTTP_URL is not None:
        async with streamable_http_client(HTTP_URL) as streams:
            async with ClientSession(streams[0], streams[1]) as opened:
                await opened.initialize()
                yield opened
        return
    args = ["mcp", "--grade-client", "--database", database, "--report", report, "--json", *SCHEDULE]
    params = StdioServerParameters(command=lab, args=args)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as opened:
            await opened.initialize()
            yield opened


async def create(opened, arguments):
    """One create_ticket call; the ticket id, or None when no answer came in time."""
    say(f"-> create_ticket {json.dumps(arguments, sort_keys=True)}")
    try:
        result = await opened.call_tool("create_ticket", arguments, read_timeout_seconds=TIMEOUT)
    except MCPError as err:
        say(f"<- no answer ({err.error.message})")
        return None
    except Exception as err:  # noqa: BLE001: a dropped connection surfaces as what the transport raises
        say(f"<- no answer ({type(err).__name__}: {err})")
        return None
    say(f"<- {json.dumps(result.structured_content, sort_keys=True)}")
    if result.is_error:
        return None
    return result.structured_content["ticket_id"]


TICKETS = [
    {"title": "Queue backlog", "priority": "normal"},
    {"title": "Disk almost full", "priority": "urgent"},
]


async def in_one_session(lab, database, report, fresh_key_per_attempt):
    async with session(lab, database, report) as opened:
        for fields in TICKETS:
            key = f"host-{uuid.uuid4()}"
            for _ in range(ATTEMPTS):
                if fresh_key_per_attempt:
                    key = f"attempt-{uuid.uuid4()}"
                if await create(opened, {"operation_key": key, **fields}) is not None:
                    break


async def reconnecting(lab, database, report, replan):
    fields = dict(TICKETS[0])
    key = f"host-{uuid.uuid4()}"
    for attempt in range(ATTEMPTS):
        say(f"-- session {attempt + 1}")
        async with session(lab, database, report) as opened:
            if await create(opened, {"operation_key": key, **fields}) is not None:
                return
        if replan:
            # A new conversation: the model plans the ticket again, in other words, with a key
            # of its own.
            fields = {"title": "Queue backlog is growing", "priority": "normal"}
            key = f"replanned-{uuid.uuid4()}"


async def main():
    global HTTP_URL
    loop, lab, database, report = sys.argv[1:5]
    grader = None
    if sys.argv[5:] == ["http"]:
        args = ["mcp", "--grade-client", "--transport", "http", "--port", "0", "--database", database,
                "--report", report, "--json", *SCHEDULE]
        grader = subprocess.Popen([lab, *args], stdout=subprocess.PIPE, text=True)
        HTTP_URL = grader.stdout.readline().strip()
        say(f"-- grader at {HTTP_URL}")
    try:
        await run(loop, lab, database, report)
    finally:
        if grader is not None:
            grader.send_signal(signal.SIGTERM)
            grader.wait(timeout=20)
    say("DONE")


async def run(loop, lab, database, report):
    if loop == "keep-key":
        await in_one_session(lab, database, report, fresh_key_per_attempt=False)
    elif loop == "new-key":
        await in_one_session(lab, database, report, fresh_key_per_attempt=True)
    elif loop == "reconnect-keep":
        await reconnecting(lab, database, report, replan=False)
    elif loop == "reconnect-replan":
        await reconnecting(lab, database, report, replan=True)
    else:
        raise SystemExit(f"unknown loop {loop!r}")


asyncio.run(main())
