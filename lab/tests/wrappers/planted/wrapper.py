"""A ticket MCP server over stdio that WRAPS an HTTP ticket API (the lab's `lab serve` contract) and
stores nothing itself, on the official Python SDK (mcp, pinned in lab/tests/clients/requirements.txt),
with a bug planted on request: the negative controls of the hop check (`lab check --target` with an
`[upstream]` section), where the lab serves the API and records what the wrapper sends it.

Usage:
  wrapper.py --api URL --token TOKEN [--bug BUG] [--retries N]
             [--create-path PATH] [--token-header NAME] [--key-header NAME] [--id-field NAME]
             [--key-in-body MEMBER] [--check-token PATH] [--read-after-create PATH]
             [--openapi-names]

--create-path, --token-header, --key-header and --id-field make it a wrapper of another API than
the lab's (the hop check plays that API with [upstream.create]): its create route, the header that
carries the token bare (instead of `Authorization: Bearer`), the header that carries the key, and
the member that names a create; --key-in-body sends the key as a member of the JSON body instead,
as some APIs read it (Square's idempotency_key). --check-token and --read-after-create make it call two more routes
of that API, as many wrappers do (the hop check answers them as [[upstream.routes]] declares): a
GET at its start that must answer 2xx (a token check; it exits 1 otherwise), and a GET of the new
thing after each create ({id} in PATH is the create's id), whose id_field it then names.

URL is the API's base (`http://127.0.0.1:PORT`, as `{{upstream}}` gives it); TOKEN the caller's bearer
token (the environment's API_TOKEN when --token is absent). HTTP goes through the standard library
only, one connection per request, 5 s per attempt.

Tools:
  create_ticket(title, priority, idempotency_key)
      POST {URL}/tickets, body {"title": ..., "priority": ...}, headers `Authorization: Bearer TOKEN`
      and `Idempotency-Key: <idempotency_key>` verbatim (the agent writes the RFC 8941 sf-string,
      quotes included, e.g. "\\"3f1c...\\""). A 200 or 201 comes back as structuredContent
      {"ticket_id": N} and the same JSON as text. Any other answer comes back with isError, the text
      naming the status and the API's problem body (structuredContent {"status", "problem"}). A 5xx,
      a timeout or a lost connection after the request was sent comes back with isError and a text
      saying the outcome is unknown and to retry with the same idempotency_key.
  list_tickets()
      GET {URL}/tickets: what the API says, as structuredContent and text.

--openapi-names lists the tools as a generic OpenAPI-to-MCP wrapper names them: first `openapi()`,
which returns a description of the API (not marked read-only), then `createTicket(Idempotency-Key,
body)` in place of create_ticket, the key under its header's name and the fields in a `body` object
({"title", "priority"}), and list_tickets. What createTicket sends and answers is create_ticket's.

With --retries N (default 0: no retry) a request that got 503, 429 or a connection error is sent
again, up to N more times, each time with the SAME key and body, after Retry-After (at most 1 s).

BUG (one per run) breaks exactly one thing a wrapper can get wrong across the hop:
  none                 correct
  drops-key            the key argument is accepted and listed (required), but never sent upstream:
                       no Idempotency-Key header
  unlisted-key         the key is sent upstream when given, but the argument is NOT in the tool's
                       input schema, so an agent reading the schema never knows to send it
  session-key          a key fixed at start (a random UUID, sf-string quoted) is sent on every create,
                       whatever the argument says
  mints-key            a fresh key (a random UUID, sf-string quoted) for every tools/call, the argument
                       ignored, so an agent's retry carries a new key (resends within one call keep it)
  retry-new-key        resends as with --retries 2 (or the --retries given), but each resend carries a
                       fresh key; the first send carries the agent's key
  conflict-as-success  a 422 or 409 from the API comes back as a normal result (not isError), text
                       "ticket created" and no ticket id
  error-as-success     every error result (an API 4xx or 5xx, a transport failure) comes back with
                       the same text and structuredContent, but as a normal result, isError false
  empty-error          any API error or transport failure comes back with isError and an empty text
                       (and no structuredContent)
  rewraps-body         the body is sent as {"ticket": {"title": ..., "priority": ...}} instead of the
                       fields themselves
  reencodes-body       every second create sent upstream (the 2nd, 4th, ... POST of the process,
                       resends included) has its string values upper-cased, so a retry of the same
                       call differs and the API refuses it as a changed payload (422)
  in-flight-new-key    a call whose key another call of the process is still sending goes out under a
                       fresh key (a wrapper that treats a key as a lock on one request at a time), so
                       calls sent together make one effect each; one at a time, nothing is wrong
"""

import argparse
import email.utils
import http.client
import inspect
import json
import os
import threading
import time
import urllib.parse
import uuid
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

BUGS = (
    "none",
    "drops-key",
    "unlisted-key",
    "session-key",
    "mints-key",
    "retry-new-key",
    "conflict-as-success",
    "error-as-success",
    "empty-error",
    "rewraps-body",
    "reencodes-body",
    "in-flight-new-key",
)

HTTP_TIMEOUT = 5.0  # seconds per attempt: connect, send, and wait for the answer
RETRY_AFTER_CAP = 1.0  # seconds: the longest wait before a resend

parser = argparse.ArgumentParser()
parser.add_argument("--api", required=True, help="the API's base URL, e.g. http://127.0.0.1:8080")
parser.add_argument("--token", default=os.environ.get("API_TOKEN"), help="the bearer token (default: $API_TOKEN)")
parser.add_argument("--bug", choices=BUGS, default="none")
parser.add_argument("--retries", type=int, metavar="N", help="resends after 503, 429 or a connection error (default 0)")
# Another API's conventions, for the hop check's declared routes ([upstream.create]):
parser.add_argument("--create-path", default="/tickets", help="the create route's path (default /tickets)")
parser.add_argument("--token-header", help="send the token bare in this header (default: Authorization: Bearer)")
parser.add_argument("--key-header", default="Idempotency-Key", help="the header the key goes in (default Idempotency-Key)")
parser.add_argument("--key-in-body", metavar="MEMBER", help="send the key as this member of the JSON body, not in a header (as Square's idempotency_key)")
parser.add_argument("--id-field", default="ticket_id", help="the member of a create's answer that names it (default ticket_id)")
# Routes of that API besides the create, which [[upstream.routes]] declares:
parser.add_argument("--check-token", metavar="PATH", help="GET PATH with the token at start, and exit 1 unless it answers 2xx")
parser.add_argument("--read-after-create", metavar="PATH", help="after a create, GET PATH ({id}: the new id) and name what it answers")
parser.add_argument("--openapi-names", action="store_true", help="list openapi() and createTicket(Idempotency-Key, body), as a generic OpenAPI wrapper names them")
options = parser.parse_args()
if not options.token:
    parser.error("--token (or API_TOKEN) is required")
if options.retries is not None and options.retries < 0:
    parser.error("--retries must be 0 or more")
RETRIES = options.retries if options.retries is not None else (2 if options.bug == "retry-new-key" else 0)

API = urllib.parse.urlsplit(options.api)
if API.scheme not in ("http", "https") or not API.hostname:
    parser.error(f"--api must be an http(s) URL, not {options.api!r}")
BASE_PATH = API.path.rstrip("/")

SESSION_KEY = f'"{uuid.uuid4()}"'  # only the session-key bug sends it
sends = 0  # creates sent upstream by this process, for reencodes-body
sends_lock = threading.Lock()
in_flight = set()  # the keys of the creates being sent, for in-flight-new-key

server = MCPServer("planted-ticket-wrapper")


def fresh_key():
    return f'"{uuid.uuid4()}"'


class Reply:
    """An HTTP answer."""

    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError:
            return None

    def text(self):
        return self.body.decode("utf-8", errors="replace")


class Failure:
    """No answer: `sent` tells whether the request may have reached the API."""

    def __init__(self, sent, error):
        self.sent, self.error = sent, error


def header_safe(value):
    return not any(c in value for c in "\r\n\0") and all(ord(c) < 256 for c in value)


def exchange(method, path, headers, body):
    """One attempt, on a connection of its own."""
    kind = http.client.HTTPSConnection if API.scheme == "https" else http.client.HTTPConnection
    connection = kind(API.hostname, API.port, timeout=HTTP_TIMEOUT)
    try:
        try:
            connection.connect()
        except OSError as exc:
            return Failure(False, f"cannot connect to {options.api}: {exc or type(exc).__name__}")
        try:
            connection.request(method, BASE_PATH + path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            return Failure(True, f"no answer from {method} {path}: {type(exc).__name__}: {exc}")
        return Reply(response.status, response.reason, response.headers, data)
    finally:
        connection.close()


def retry_wait(outcome, attempt):
    if isinstance(outcome, Reply):
        value = (outcome.headers.get("Retry-After") or "").strip()
        if value.isdigit():
            return min(float(value), RETRY_AFTER_CAP)
        if value:
            try:
                when = email.utils.parsedate_to_datetime(value).timestamp()
                return max(0.0, min(when - time.time(), RETRY_AFTER_CAP))
            except (TypeError, ValueError):
                pass
    return min(0.1 * 2**attempt, RETRY_AFTER_CAP)


def call_api(method, path, attempt_request):
    """Send, resending after 503, 429 or a connection error up to RETRIES times.

    attempt_request(n) gives the (headers, body) of the n-th send (0 first). Returns the last
    outcome and whether any send's outcome is unknown (sent, then no answer or a 5xx)."""
    unknown = False
    for attempt in range(RETRIES + 1):
        headers, body = attempt_request(attempt)
        outcome = exchange(method, path, headers, body)
        if isinstance(outcome, Failure):
            unknown = unknown or outcome.sent
        elif outcome.status >= 500:
            unknown = True
        retryable = isinstance(outcome, Failure) or outcome.status in (429, 503)
        if not retryable or attempt == RETRIES:
            return outcome, unknown
        time.sleep(retry_wait(outcome, attempt))
    raise AssertionError("unreachable")


def base_headers():
    headers = {"Accept": "application/json", "User-Agent": "planted-ticket-wrapper/1"}
    if options.token_header:
        headers[options.token_header] = options.token
    else:
        headers["Authorization"] = f"Bearer {options.token}"
    return headers


def error(text, structured=None):
    if options.bug == "empty-error":
        return CallToolResult(content=[TextContent(type="text", text="")], is_error=True)
    if options.bug == "error-as-success":
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured, is_error=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured, is_error=True)


def failed(method, path, outcome, unknown):
    """The result for anything but a good answer; `unknown` only for a create."""
    retry = "The outcome is unknown: the ticket may or may not exist. Retry with the same idempotency_key."
    if isinstance(outcome, Failure):
        if unknown:
            return error(f"{outcome.error}. {retry}", {"status": None, "outcome": "unknown", "error": outcome.error})
        tail = "" if outcome.sent else " Nothing was sent."
        return error(f"{outcome.error}.{tail}", {"status": None, "error": outcome.error})
    problem = outcome.json()
    text = f"{method} {path} answered {outcome.status} {outcome.reason}: {outcome.text()}"
    structured = {"status": outcome.status, "problem": problem if problem is not None else outcome.text()}
    if unknown:
        structured["outcome"] = "unknown"
        return error(f"{text}\n{retry}", structured)
    if method == "POST" and outcome.status in (409, 429):
        text += "\nNothing was written by this request. Retry later with the same idempotency_key."
    return error(text, structured)


def create(title, priority, idempotency_key):
    fields = {"title": title, "priority": priority}
    if options.bug == "drops-key":
        keys = lambda n: None  # noqa: E731
    elif options.bug == "session-key":
        keys = lambda n: SESSION_KEY  # noqa: E731
    elif options.bug == "mints-key":
        minted = fresh_key()
        keys = lambda n: minted  # noqa: E731
    elif options.bug == "retry-new-key":
        keys = lambda n: idempotency_key if n == 0 else fresh_key()  # noqa: E731
    else:
        keys = lambda n: idempotency_key  # noqa: E731
    if keys(0) is not None and not header_safe(keys(0)):
        return error("idempotency_key cannot be sent as an HTTP header value (CR, LF, NUL or a character above U+00FF). Nothing was sent.")

    def attempt_request(n):
        global sends
        with sends_lock:
            sends += 1
            number = sends
        body = dict(fields)
        if options.bug == "reencodes-body" and number % 2 == 0:
            body = {name: value.upper() if isinstance(value, str) else value for name, value in body.items()}
        if options.bug == "rewraps-body":
            body = {"ticket": body}
        headers = base_headers()
        headers["Content-Type"] = "application/json"
        key = keys(n)
        if key is not None and options.key_in_body:
            body[options.key_in_body] = key
        elif key is not None:
            headers[options.key_header] = key
        return headers, json.dumps(body).encode("utf-8")

    path = options.create_path
    outcome, unknown = call_api("POST", path, attempt_request)
    if isinstance(outcome, Reply) and outcome.status in (200, 201):
        answer = outcome.json()
        named = answer.get(options.id_field) if isinstance(answer, dict) else None
        if options.read_after_create and isinstance(named, (int, str)) and not isinstance(named, bool):
            read = options.read_after_create.replace("{id}", urllib.parse.quote(str(named), safe=""))
            fetched, _ = call_api("GET", read, lambda n: (base_headers(), None))
            if not (isinstance(fetched, Reply) and fetched.status == 200 and isinstance(fetched.json(), dict)):
                return failed("GET", read, fetched, False)
            named = fetched.json().get(options.id_field)
        if isinstance(named, (int, str)) and not isinstance(named, bool):
            content = {"ticket_id": named}
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(content))], structured_content=content)
        return error(f"POST {path} answered {outcome.status} without a {options.id_field}: {outcome.text()}", {"status": outcome.status, "problem": outcome.text()})
    if options.bug == "conflict-as-success" and isinstance(outcome, Reply) and outcome.status in (409, 422):
        return CallToolResult(content=[TextContent(type="text", text="ticket created")])
    return failed("POST", path, outcome, unknown)


def create_one_at_a_time(title, priority, idempotency_key):
    """in-flight-new-key: a key another call is still sending is swapped for a fresh one."""
    with sends_lock:
        busy = idempotency_key in in_flight
        if not busy:
            in_flight.add(idempotency_key)
    if busy:
        return create(title, priority, fresh_key())
    try:
        return create(title, priority, idempotency_key)
    finally:
        with sends_lock:
            in_flight.discard(idempotency_key)


CREATE = create_one_at_a_time if options.bug == "in-flight-new-key" else create

DESCRIPTION = (
    "Create a ticket. idempotency_key names this one intended ticket, as an RFC 8941 string with its "
    'double quotes, e.g. "\\"8e03978e-40d5-43e8-bc93-6894a57f9324\\"": make a new one for each new ticket, '
    "and send the same one again when you retry a call whose outcome you do not know."
)
ANNOTATIONS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=True)

if options.bug == "unlisted-key":

    def create_ticket(title: str, priority: str, idempotency_key: SkipJsonSchema[str | None] = None) -> CallToolResult:
        return CREATE(title, priority, idempotency_key)

else:

    def create_ticket(title: str, priority: str, idempotency_key: str) -> CallToolResult:
        return CREATE(title, priority, idempotency_key)



class TicketBody(BaseModel):
    title: str
    priority: str


def create_ticket_by_header_name(**arguments) -> CallToolResult:
    body = arguments["body"]
    if isinstance(body, BaseModel):
        body = body.model_dump()
    return CREATE(body["title"], body["priority"], arguments["Idempotency-Key"])


# The key's argument is named as the header is, which is no Python name: the schema comes from this
# signature, and the call's arguments arrive under their JSON names.
create_ticket_by_header_name.__signature__ = inspect.Signature(
    [
        inspect.Parameter("idempotency_key", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[str, Field(alias="Idempotency-Key")]),
        inspect.Parameter("body", inspect.Parameter.KEYWORD_ONLY, annotation=TicketBody),
    ]
)

if options.openapi_names:

    @server.tool(name="openapi")
    def openapi() -> str:
        """Describe the API this server wraps: its routes and their parameters."""
        return json.dumps({"openapi": "3.1.0", "paths": {options.create_path: {"post": {"operationId": "createTicket"}}}})

    server.tool(name="createTicket", description=DESCRIPTION, annotations=ANNOTATIONS)(create_ticket_by_header_name)
else:
    server.tool(name="create_ticket", description=DESCRIPTION, annotations=ANNOTATIONS)(create_ticket)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=True))
def list_tickets() -> CallToolResult:
    """List your tickets, as the API has them."""
    outcome, _ = call_api("GET", "/tickets", lambda n: (base_headers(), None))
    if isinstance(outcome, Reply) and outcome.status == 200:
        answer = outcome.json()
        structured = answer if isinstance(answer, dict) else {"answer": answer}
        return CallToolResult(content=[TextContent(type="text", text=outcome.text())], structured_content=structured)
    return failed("GET", "/tickets", outcome, False)


if __name__ == "__main__":
    if options.check_token:
        checked, _ = call_api("GET", options.check_token, lambda n: (base_headers(), None))
        if not (isinstance(checked, Reply) and 200 <= checked.status < 300):
            said = checked.error if isinstance(checked, Failure) else f"{checked.status}: {checked.text()}"
            raise SystemExit(f"wrapper.py: the token check GET {options.check_token} failed: {said}")
    server.run("stdio")
