"""By-hand probe of an MCP wrapper of the lab's HTTP API, over stdio, with the standard library
only (Python 3.11+, for tomllib). It starts the wrapper exactly as FOLDER/target.toml says (its
[mcp] command and env, one caller's args and env, {{upstream}} = URL, {{dir}} = a fresh temporary
folder; a command word with a "/" is FOLDER's, a bare one is looked up on PATH; run in FOLDER),
speaks JSON-RPC lines to it, and calls the target's create tool:

  1. key K1, the target's fields
  2. key K1, the same fields                  (a retry: the API should replay call 1)
  3. key K2, the same fields                  (a new operation: a second ticket)
  4. key K1, another title                    (a reused key with another body: the API says 422)

A target without mcp.tool.key_argument makes the same four calls without a key, then a fifth
with the key smuggled in as an argument named after the API's key header.

With --together N it sends N calls with key K1 and the target's fields at once, without waiting
for any answer (JSON-RPC ids 1..N on one stdin), then reads the N answers: run it with
logproxy.py --hold-first so the first create is still in flight while the others arrive.

With --retry, for the fault runs (logproxy.py --lose-first / --answer-first), it makes two calls
instead: key K1, the target's fields, then the agent's retry, key K1 and the same fields again;
each call's line also gives "seconds", how long the wrapper took to answer it.

Usage (from anywhere; a Python wrapper's venv first on PATH, as its target.toml expects):
  python3 by_hand.py FOLDER URL [CALLER]     e.g. python3 by_hand.py fastmcp http://127.0.0.1:40222
  python3 by_hand.py --retry FOLDER URL [CALLER]
  python3 by_hand.py --together N FOLDER URL [CALLER]

FOLDER is a folder next to this file (or a path); URL is where the wrapper reaches the API (the
logging proxy, logproxy.py); CALLER is a [[mcp.callers]] name (default: the first). Prints the
create tool's tools/list entry (fields picked out), one JSON line per call (the key sent, isError,
the text content, structuredContent), then GET URL/tickets with the caller's token. The wrapper's
stderr is left in the temporary folder (its path is printed last).
"""

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def fill(value, marks):
    """Placeholders in every string of a TOML/JSON value."""
    if isinstance(value, str):
        for mark, text in marks.items():
            value = value.replace("{{" + mark + "}}", text)
        return value
    if isinstance(value, list):
        return [fill(v, marks) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, marks) for k, v in value.items()}
    return value


def render(template, fields):
    """The tool's arguments: a string that is exactly "{{field}}" becomes the field's value."""
    if isinstance(template, str):
        for name, value in fields.items():
            if template == "{{" + name + "}}":
                return value
        return fill(template, {k: str(v) for k, v in fields.items()})
    if isinstance(template, list):
        return [render(v, fields) for v in template]
    if isinstance(template, dict):
        return {k: render(v, fields) for k, v in template.items()}
    return template


class Wrapper:
    def __init__(self, argv, cwd, env, stderr, timeout):
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.timeout = timeout
        self.lines = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method, params):
        return self.requests(method, [params])[0]

    def requests(self, method, many):
        """Sends every request of `many` before reading any answer; the answers in that order."""
        idents = []
        for params in many:
            self.next_id += 1
            idents.append(self.next_id)
            self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        answers = {}
        while len(answers) < len(idents):
            try:
                line = self.lines.get(timeout=self.timeout)
            except queue.Empty:
                raise SystemExit(f"no answer to {method} within {self.timeout} s")
            if line is None:
                raise SystemExit(f"the wrapper closed stdout before answering {method}")
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a log line on stdout
            if "method" in message and "id" in message:  # the server asks the client
                result = {"roots": []} if message["method"] == "roots/list" else {}
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
            elif message.get("id") in idents:
                answers[message["id"]] = message
        return [answers[ident] for ident in idents]

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main():
    retry_mode = "--retry" in sys.argv[1:]
    argv_in = [sys.argv[0]] + [word for word in sys.argv[1:] if word != "--retry"]
    together = 0
    if "--together" in argv_in:
        at = argv_in.index("--together")
        try:
            together = int(argv_in[at + 1])
        except (IndexError, ValueError):
            sys.exit(__doc__)
        del argv_in[at:at + 2]
    if len(argv_in) not in (3, 4):
        sys.exit(__doc__)
    folder = os.path.join(HERE, argv_in[1]) if not os.path.isabs(argv_in[1]) else argv_in[1]
    url = argv_in[2].rstrip("/")
    with open(os.path.join(folder, "target.toml"), "rb") as file:
        target = tomllib.load(file)
    mcp, upstream = target["mcp"], target.get("upstream", {})
    callers = mcp.get("callers", [{"name": "agent"}])
    caller = callers[0] if len(argv_in) == 3 else next(
        c for c in callers if c["name"] == argv_in[3])
    run_dir = tempfile.mkdtemp(prefix="hop-by-hand-")
    marks = {"upstream": url, "dir": run_dir}

    argv = fill(mcp["command"], marks) + fill(caller.get("args", []), marks)
    if "/" in argv[0]:
        argv[0] = os.path.join(folder, argv[0])
    env = dict(os.environ)
    env.update(fill(mcp.get("env", {}), marks))
    env.update(fill(caller.get("env", {}), marks))
    stderr = open(os.path.join(run_dir, "stderr.txt"), "w")
    wrapper = Wrapper(argv, folder, env, stderr, mcp.get("timeout_ms", 10000) / 1000 + 20)

    tool = mcp["tool"]
    key_argument = tool.get("key_argument")
    header = upstream.get("key_header", "Idempotency-Key")
    sf_string = upstream.get("key_form", "sf-string") == "sf-string"

    def new_key():
        key = str(uuid.uuid4())
        return f'"{key}"' if sf_string else key

    wrapper.request("initialize", {"protocolVersion": "2025-06-18",
                                   "capabilities": {"roots": {"listChanged": False}},
                                   "clientInfo": {"name": "hop-by-hand", "version": "0"}})
    wrapper.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    listed = wrapper.request("tools/list", {})["result"]["tools"]
    for entry in listed:
        if entry["name"] == tool["name"]:
            schema = entry.get("inputSchema", {})
            print(json.dumps({"tool": entry["name"], "required": schema.get("required"),
                              "properties": {name: {k: v for k, v in prop.items()
                                                    if k in ("type", "x-parameter-location")}
                                             for name, prop in schema.get("properties", {}).items()},
                              "additionalProperties": schema.get("additionalProperties"),
                              "annotations": entry.get("annotations")}))
    if not any(entry["name"] == tool["name"] for entry in listed):
        print(json.dumps({"tools": [entry["name"] for entry in listed]}))
        raise SystemExit(f"no tool {tool['name']!r}")

    fields = dict(tool.get("fields", {}))
    other = dict(fields, title=str(fields.get("title", "")) + " (another body)")
    first, second = new_key(), new_key()
    calls = [("first", first, fields), ("same key, same body", first, fields),
             ("new key, same body", second, fields), ("same key, another body", first, other)]
    if key_argument is None:
        calls = [("first", None, fields), ("the same again", None, fields),
                 ("the same again", None, fields), ("another body", None, other)]
        calls.append(("key smuggled in as an argument", new_key(), fields))
    if retry_mode:
        calls = [("first", first, fields), ("the agent's retry, same key", first, fields)]
        if key_argument is None:
            calls = [("first", None, fields), ("the agent's retry", None, fields)]
    if together:
        arguments = dict(render(tool["arguments"], fields), **{key_argument or header: first})
        answers = wrapper.requests("tools/call", [{"name": tool["name"], "arguments": arguments}] * together)
        calls = []
        for number, answer in enumerate(answers, 1):
            result = answer.get("result") or {}
            texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
            print(json.dumps({"call": number, "what": f"{together} sent together", "key": first,
                              "isError": result.get("isError", False), "error": answer.get("error"),
                              "text": texts[0] if len(texts) == 1 else texts}, ensure_ascii=False))
    for number, (what, key, values) in enumerate(calls, 1):
        arguments = render(tool["arguments"], values)
        if key is not None:
            arguments = dict(arguments, **{key_argument or header: key})
        started = time.monotonic()
        answer = wrapper.request("tools/call", {"name": tool["name"], "arguments": arguments})
        took = {"seconds": round(time.monotonic() - started, 2)} if retry_mode else {}
        result = answer.get("result")
        if result is None:
            print(json.dumps({"call": number, "what": what, "key": key, "error": answer.get("error"),
                              **took}))
            continue
        texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
        print(json.dumps({"call": number, "what": what, "key": key,
                          "isError": result.get("isError", False),
                          "text": texts[0] if len(texts) == 1 else texts,
                          "structuredContent": result.get("structuredContent"), **took},
                         ensure_ascii=False))
    wrapper.close()

    token = upstream.get("tokens", {}).get(caller["name"])
    listing = urllib.request.Request(url + "/tickets", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(listing, timeout=30) as reply:
            print(json.dumps({"GET /tickets": json.loads(reply.read())}))
    except urllib.error.HTTPError as err:
        print(json.dumps({"GET /tickets": err.code, "answer": err.read().decode()}))
    print(json.dumps({"stderr": stderr.name}))


if __name__ == "__main__":
    main()
