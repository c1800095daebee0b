"""A ticket MCP server on the official Python SDK (mcp, pinned in lab/tests/clients/requirements.txt),
over stdio, with a bug planted on request: the negative controls of `lab check --target` on MCP.

Usage:
  server.py --state FILE --caller NAME [--bug BUG] [--http PORT] [--refusals FORM] [--request-ids]

BUG is one of:
  none                     keys work: a replay names the first ticket, other arguments get conflict
  ignores-key              every call creates a ticket, the key is read and dropped
  replays-other-id         a replay creates nothing but names another ticket than the first
  accepts-changed-payload  the same key with other arguments replays the first ticket
  blocks-other-caller      a key another caller used is refused (conflict), as a lock on the
                           bare key would refuse it

FORM is how a refusal comes back: structured (the default: isError, the code in
structuredContent), json-text (a result NOT marked isError whose text is {"error": {"code": ...}}),
or plain-text (a result NOT marked isError whose text is "Error [CODE]: message"), as servers
that refuse inside plain results do.

With --request-ids every result also carries a request_id of its own (a new one on a replay too),
the value a target file must not take for the ticket's identity.

With --http it serves Streamable HTTP at http://127.0.0.1:PORT/mcp, the SDK's defaults (sessions,
answers as event streams), every call acting for NAME; without, stdio.

Every process of a run shares FILE (a reconnect is a new process), under an exclusive lock, so
the tickets and keys outlive a process as a database would. A caller's keys are its own.
"""

import argparse
import fcntl
import json
import os
import threading
import uuid

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

BUGS = ("none", "ignores-key", "replays-other-id", "accepts-changed-payload", "blocks-other-caller")

parser = argparse.ArgumentParser()
parser.add_argument("--state", required=True)
parser.add_argument("--caller", required=True)
parser.add_argument("--bug", choices=BUGS, default="none")
parser.add_argument("--http", type=int, metavar="PORT")
parser.add_argument("--refusals", choices=("structured", "json-text", "plain-text"), default="structured")
parser.add_argument("--request-ids", action="store_true")
options = parser.parse_args()

server = MCPServer("planted-tickets")
in_process = threading.Lock()


class State:
    """The shared file, locked for the whole of one call."""

    def __enter__(self):
        in_process.acquire()
        self.handle = open(options.state, "a+")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        self.handle.seek(0)
        text = self.handle.read()
        self.data = json.loads(text) if text else {"tickets": [], "keys": {}}
        return self.data

    def __exit__(self, *exc):
        self.handle.seek(0)
        self.handle.truncate()
        json.dump(self.data, self.handle)
        self.handle.flush()
        os.fsync(self.handle.fileno())
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        in_process.release()


def answer(ticket_id, replayed):
    content = {"ticket_id": ticket_id, "replayed": replayed}
    if options.request_ids:
        content["request_id"] = f"req-{uuid.uuid4().hex[:12]}"
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(content))], structured_content=content)


def failure(code, message):
    content = {"code": code, "message": message}
    if options.refusals == "json-text":
        text = json.dumps({"error": content})
        return CallToolResult(content=[TextContent(type="text", text=text)])
    if options.refusals == "plain-text":
        return CallToolResult(content=[TextContent(type="text", text=f"Error [{code}]: {message}")])
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(content))], structured_content=content, is_error=True
    )


@server.tool(
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
)
def create_ticket(operation_key: str, title: str, priority: str = "normal") -> CallToolResult:
    """Create a ticket. Retry a call whose outcome you do not know with the same operation_key."""
    if not operation_key or operation_key != operation_key.strip() or len(operation_key) > 255:
        return failure("invalid_key", "the key is empty, padded or too long")
    payload = {"title": title, "priority": priority}
    scoped = f"{options.caller}\n{operation_key}"
    with State() as state:
        if options.bug == "blocks-other-caller" and any(
            held.split("\n", 1)[1] == operation_key and not held.startswith(f"{options.caller}\n")
            for held in state["keys"]
        ):
            return failure("conflict", "this key is in use")
        record = state["keys"].get(scoped)
        if record is not None and options.bug != "ignores-key":
            if record["payload"] != payload and options.bug != "accepts-changed-payload":
                return failure("conflict", "this key was first used with other arguments")
            if options.bug == "replays-other-id":
                return answer(record["ticket_id"] + 1000, True)
            return answer(record["ticket_id"], True)
        ticket_id = len(state["tickets"]) + 1
        state["tickets"].append({"ticket_id": ticket_id, "caller": options.caller, "payload": payload})
        state["keys"][scoped] = {"payload": payload, "ticket_id": ticket_id}
        return answer(ticket_id, False)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def list_tickets() -> CallToolResult:
    """List your own tickets."""
    with State() as state:
        mine = [t for t in state["tickets"] if t["caller"] == options.caller]
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(mine))], structured_content={"tickets": mine})


if __name__ == "__main__":
    if options.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
