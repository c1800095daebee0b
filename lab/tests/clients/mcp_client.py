"""Drives `lab mcp` with the official MCP Python SDK, a client nobody in this project wrote.

Usage:
  mcp_client.py stdio LAB_BINARY DATABASE
  mcp_client.py http URL TOKEN OTHER_TOKEN

Over stdio it starts `LAB_BINARY mcp` itself (several, on one DATABASE file, for the concurrent
sessions); over HTTP it talks to a `lab mcp --transport http --faults` the test started, as the
caller of TOKEN, and checks that the caller of OTHER_TOKEN sees none of those tickets.

Prints a transcript (lines starting with "->" and "<-") and, last, "PASS: N checks". Any broken
expectation raises, which exits non-zero with a traceback.
"""

import asyncio
import contextlib
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        raise AssertionError(what)
    CHECKS += 1


def say(line):
    print(line, flush=True)


@contextlib.asynccontextmanager
async def stdio_session(lab, args):
    params = StdioServerParameters(command=lab, args=["mcp", *args])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@contextlib.asynccontextmanager
async def http_session(url, token):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session, name, arguments, timeout=None):
    say(f"-> tools/call {name} {json.dumps(arguments, sort_keys=True)}")
    result = await session.call_tool(name, arguments, read_timeout_seconds=timeout)
    say(
        f"<- isError={str(bool(result.is_error)).lower()} "
        f"structuredContent={json.dumps(result.structured_content, sort_keys=True)}"
    )
    return result


def check_listing(tools, faults_listed):
    by_name = {tool.name: tool for tool in tools}
    say(f"<- tools/list {sorted(by_name)}")
    public = {"create_ticket", "get_ticket", "list_tickets"}
    expected = public | ({"lab_create_ticket_without_key"} if faults_listed else set())
    check(set(by_name) == expected, f"listed tools {sorted(by_name)}, expected {sorted(expected)}")
    create = by_name["create_ticket"]
    hints = create.annotations
    check(hints.read_only_hint is False, "create_ticket: readOnlyHint false")
    check(hints.destructive_hint is False, "create_ticket: destructiveHint false")
    check(hints.idempotent_hint is True, "create_ticket: idempotentHint true")
    check(hints.open_world_hint is False, "create_ticket: openWorldHint false")
    check(
        set(create.input_schema["required"]) == {"operation_key", "title"},
        "create_ticket requires operation_key and title",
    )
    check(
        set(create.output_schema["required"]) == {"ticket_id", "replayed"},
        "create_ticket's output schema names ticket_id and replayed",
    )
    check("same operation_key" in create.description.lower().replace("\n", " ")
          or "same operation_key" in create.description, "the description says to reuse the key")
    for name in ("get_ticket", "list_tickets"):
        check(by_name[name].annotations.read_only_hint is True, f"{name}: readOnlyHint true")
        check(by_name[name].annotations.open_world_hint is False, f"{name}: openWorldHint false")


async def exercise(open_session, concurrent_session, faults_listed):
    """The same checks over either transport; `open_session()` opens one initialised session."""
    async with open_session() as session:
        check_listing((await session.list_tools()).tools, faults_listed)

        ticket = {"operation_key": "py-ticket-001", "title": "Queue backlog", "priority": "normal"}
        first = await call(session, "create_ticket", ticket)
        check(not first.is_error, "the first create succeeds")
        ticket_id = first.structured_content["ticket_id"]
        check(first.structured_content["replayed"] is False, "the first create is not a replay")

        again = await call(session, "create_ticket", ticket)
        check(again.structured_content == {"ticket_id": ticket_id, "replayed": True},
              "the retry with the same key replays the same ticket")

        changed = await call(session, "create_ticket", {**ticket, "priority": "urgent"})
        check(changed.is_error and changed.structured_content["code"] == "conflict",
              "the same key with another payload is a conflict")

        bad_key = await call(session, "create_ticket", {**ticket, "operation_key": " padded"})
        check(bad_key.is_error and bad_key.structured_content["code"] == "invalid_key",
              "a key with a leading space is refused with invalid_key")

        say("-> tools/call no_such_tool {}")
        try:
            await session.call_tool("no_such_tool", {})
            check(False, "an unknown tool is a protocol error")
        except MCPError as err:
            say(f"<- JSON-RPC error {err.error.code}: {err.error.message}")
            check(True, "an unknown tool is a protocol error")

        listed = await call(session, "list_tickets", {})
        ids = [t["ticket_id"] for t in listed.structured_content["tickets"]]
        check(ids == [ticket_id], f"one ticket is stored after create, retry and conflict: {ids}")

    # A lost reply: the server commits and never answers. Over HTTP the SDK's transport fails
    # the whole session when the connection closes, so the call gets its own session.
    lost_call = {"operation_key": "py-lost-001", "title": "Lost reply", "lab_fault": "lose-reply"}

    async def lose():
        async with open_session() as session:
            say(f"-> tools/call create_ticket {json.dumps(lost_call, sort_keys=True)}")
            return await session.call_tool("create_ticket", lost_call, read_timeout_seconds=3)

    try:
        # The SDK's own 3 s read timeout ends the call; this bound only stops a hang, and is
        # generous so that a slow session start on a loaded machine never ends it instead.
        result = await asyncio.wait_for(lose(), timeout=60)
        check(False, f"the lost reply never arrives, got {result}")
    except Exception as err:  # the SDK's timeout or transport error: the outcome is unknown
        causes = getattr(err, "exceptions", None)
        name = type(causes[0] if causes else err).__name__
        say(f"<- no reply ({name}): outcome unknown, retry with the same key")
        check(True, "the lost reply never arrives")

    # A new session, as an agent that timed out would open: the retry carries the same key.
    async with open_session() as session:
        retry = {"operation_key": "py-lost-001", "title": "Lost reply"}
        replayed = await call(session, "create_ticket", retry)
        check(replayed.structured_content["replayed"] is True,
              "the retry after the lost reply replays the committed ticket")
        listed = await call(session, "list_tickets", {})
        lost_ids = [t["ticket_id"] for t in listed.structured_content["tickets"]
                    if t["payload"]["title"] == "Lost reply"]
        check(lost_ids == [replayed.structured_content["ticket_id"]],
              f"the lost reply made one ticket, the one the retry names: {lost_ids}")

    # Sixteen sessions at once, one key: one ticket, one id.
    same = {"operation_key": "py-concurrent-001", "title": "Sixteen callers"}

    async def one():
        async with concurrent_session() as session:
            result = await session.call_tool("create_ticket", same)
            return result

    results = await asyncio.gather(*(one() for _ in range(16)))
    check(all(not r.is_error for r in results), "every concurrent call succeeds")
    returned = {r.structured_content["ticket_id"] for r in results}
    created = sum(1 for r in results if r.structured_content["replayed"] is False)
    say(f"<- 16 concurrent sessions on one key: ticket ids {sorted(returned)}, created {created}")
    check(len(returned) == 1 and created == 1, "16 sessions on one key make one ticket")
    async with open_session() as session:
        listed = await session.call_tool("list_tickets", {})
        titles = [t["payload"]["title"] for t in listed.structured_content["tickets"]]
        check(titles.count("Sixteen callers") == 1, "one ticket is stored for the 16 sessions")


async def main():
    transport = sys.argv[1]
    if transport == "stdio":
        lab, database = sys.argv[2], sys.argv[3]
        async with stdio_session(lab, ["--database", database + ".plain"]) as plain:
            tools = (await plain.list_tools()).tools
            check({t.name for t in tools} == {"create_ticket", "get_ticket", "list_tickets"},
                  "without --faults and --admin-token only the three ticket tools are listed")
        server = ["--faults", "--database", database]
        await exercise(lambda: stdio_session(lab, server), lambda: stdio_session(lab, server), True)
    elif transport == "http":
        url, token, other = sys.argv[2], sys.argv[3], sys.argv[4]
        await exercise(lambda: http_session(url, token), lambda: http_session(url, token), True)
        async with http_session(url, other) as session:
            listed = await call(session, "list_tickets", {})
            check(listed.structured_content["tickets"] == [],
                  "another caller's token sees none of these tickets")
            reused = await call(session, "create_ticket",
                                {"operation_key": "py-ticket-001", "title": "Other caller"})
            check(reused.structured_content["replayed"] is False,
                  "the same key from another caller is that caller's own operation")
    else:
        raise SystemExit(f"unknown transport {transport!r}")
    say(f"PASS: {CHECKS} checks")


asyncio.run(main())
