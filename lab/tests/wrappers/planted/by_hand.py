"""Drive wrapper.py by hand, once per bug, and show what crossed the hop.

Usage (with a python that has mcp==2.3.0, e.g. /tmp/hopvenv/bin/python):
  by_hand.py [BUG ...] [--retries N]

For each BUG (default: every one in wrapper.py's BUGS) it starts a fresh `lab serve` ($LAB_BIN,
default target/debug/lab in this repository) with the caller alice=alice-token, puts a small recorder in
front of it (it logs every request the wrapper sends and can inject one fault into the next POST),
runs `wrapper.py --api RECORDER --token alice-token --bug BUG [--retries N]` over stdio with
JSON-RPC lines, and acts as an agent that follows the tool's schema (it sends idempotency_key only
when the schema lists it):

  1 new key K1        2 retry K1 (same args)     3 new key K2 (another ticket)
  4 K1 with another title (a conflict)
  5 new key K3, the recorder loses the reply after the API committed     6 retry K3
  7 new key K4, the recorder answers 503 without forwarding               8 retry K4
  9 new key K5, the recorder answers 409 (in progress) without forwarding 10 retry K5
  11 (only when the schema hides the key) new key K6, the key sent anyway

It prints each result, the recorder's log and the API's tickets (GET /tickets, bearer token).
The wrapper runs under $WRAPPER_PYTHON (default: this python). Every wait is bounded; every
process started here is stopped before the next bug.
"""

import http.client
import http.server
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
LAB_BIN = os.environ.get(
    "LAB_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "target", "debug", "lab")
)
PYTHON = os.environ.get("WRAPPER_PYTHON", sys.executable)
TOKEN = "alice-token"
STEP_TIMEOUT = 30.0


def wrapper_bugs():
    text = open(os.path.join(HERE, "wrapper.py")).read()
    block = re.search(r"^BUGS = \((.*?)\n\)", text, re.S | re.M).group(1)
    return re.findall(r'"([a-z-]+)"', block)


class Recorder(http.server.ThreadingHTTPServer):
    """A logging reverse proxy in front of the API, with one-shot faults for the next POST."""

    daemon_threads = True

    def __init__(self, upstream):
        super().__init__(("127.0.0.1", 0), RecorderHandler)
        self.upstream = urllib.parse.urlsplit(upstream)
        self.log = []
        self.fault = None  # "lose-reply", "503" or "409", for the next POST only
        self.lock = threading.Lock()


class RecorderHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.relay()

    def do_POST(self):
        self.relay()

    def relay(self):
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with server.lock:
            fault = None
            if self.command == "POST":
                fault, server.fault = server.fault, None
            entry = {"method": self.command, "path": self.path, "key": self.headers.get("Idempotency-Key"),
                     "body": body.decode("utf-8", "replace"), "fault": fault}
            server.log.append(entry)
        if fault in ("503", "409"):
            status = int(fault)
            entry["status"] = f"{status} (recorder, not forwarded)"
            title = "Service Unavailable" if status == 503 else "A request with this key is in progress"
            payload = json.dumps({"title": title, "status": status}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection(server.upstream.hostname, server.upstream.port, timeout=10)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        replayed = response.getheader("Idempotent-Replayed")
        entry["status"] = f"{response.status}{' replayed' if replayed else ''} {data.decode('utf-8', 'replace')}"
        if fault == "lose-reply":
            entry["status"] += "  -> reply LOST by the recorder"
            self.close_connection = True
            return  # no answer: the wrapper sees the connection close
        self.send_response(response.status)
        for name in ("Content-Type", "Idempotent-Replayed", "Retry-After"):
            if response.getheader(name):
                self.send_header(name, response.getheader(name))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Lab:
    """`lab serve` on a port of its own, with a database in a temporary folder."""

    def __init__(self, folder):
        command = ["timeout", "600", LAB_BIN, "serve", "--port", "0", "--caller", f"alice={TOKEN}",
                   "--database", os.path.join(folder, "lab.sqlite")]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.process.stdout], daemon=True).start()
        while True:
            line = lines.get(timeout=20)
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            if found:
                self.url = found.group(0)
                return

    def tickets(self):
        parts = urllib.parse.urlsplit(self.url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        try:
            connection.request("GET", "/tickets", headers={"Authorization": f"Bearer {TOKEN}"})
            return json.loads(connection.getresponse().read())
        finally:
            connection.close()

    def stop(self):
        self.process.terminate()  # `timeout` passes the TERM on to lab serve
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class Client:
    """A stdio MCP client on JSON-RPC lines."""

    def __init__(self, command):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.messages = queue.Queue()
        self.stderr = []
        threading.Thread(target=lambda: [self.messages.put(line) for line in self.process.stdout], daemon=True).start()
        threading.Thread(target=lambda: [self.stderr.append(line) for line in self.process.stderr], daemon=True).start()
        self.next_id = 0

    def send(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            try:
                message = json.loads(self.messages.get(timeout=STEP_TIMEOUT))
            except queue.Empty:
                raise RuntimeError(f"no answer to {method} in {STEP_TIMEOUT} s; stderr: {''.join(self.stderr)[-2000:]}")
            if message.get("id") == self.next_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            if "method" in message and "id" in message:  # a request from the server: answer it plainly
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": {}})

    def close(self):
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def short(result):
    text = " | ".join(c.get("text", "") for c in result.get("content", []))
    text = text.replace("\n", " / ")
    if len(text) > 230:
        text = text[:230] + "..."
    shown = f"isError={bool(result.get('isError'))} text={text!r}"
    if result.get("structuredContent") is not None and not result.get("isError"):
        shown += f" structured={json.dumps(result['structuredContent'])}"
    return shown


def run(bug, retries):
    print(f"\n=== bug {bug}" + (f" --retries {retries}" if retries is not None else "") + " ===")
    with tempfile.TemporaryDirectory(prefix="hop-by-hand-") as folder:
        lab = Lab(folder)
        recorder = Recorder(lab.url)
        threading.Thread(target=recorder.serve_forever, daemon=True).start()
        api = f"http://127.0.0.1:{recorder.server_address[1]}"
        command = [PYTHON, os.path.join(HERE, "wrapper.py"), "--api", api, "--token", TOKEN, "--bug", bug]
        if retries is not None:
            command += ["--retries", str(retries)]
        client = Client(command)
        try:
            client.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "by-hand", "version": "0"}})
            client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            tools = {t["name"]: t for t in client.request("tools/list", {})["tools"]}
            schema = tools["create_ticket"]["inputSchema"]
            listed = "idempotency_key" in schema.get("properties", {})
            print(f"create_ticket schema: properties={sorted(schema.get('properties', {}))} required={schema.get('required')}")

            def call(label, key, title, priority, fault=None, force_key=False):
                recorder.fault = fault
                arguments = {"title": title, "priority": priority}
                if listed or force_key:
                    arguments["idempotency_key"] = key
                result = client.request("tools/call", {"name": "create_ticket", "arguments": arguments})
                sent = "idempotency_key=" + (key if "idempotency_key" in arguments else "(not sent: not in schema)")
                print(f"  {label:<34} {sent:<22} -> {short(result)}")

            call("1 new key", '"key-1"', "Printer jammed", "high")
            call("2 retry, same args", '"key-1"', "Printer jammed", "high")
            call("3 new key, other ticket", '"key-2"', "Screen flickers", "low")
            call("4 key-1 with another title", '"key-1"', "Printer on fire", "high")
            call("5 new key, reply lost after commit", '"key-3"', "Door stuck", "normal", fault="lose-reply")
            call("6 retry of 5", '"key-3"', "Door stuck", "normal")
            call("7 new key, 503 before the API", '"key-4"', "Lamp broken", "low", fault="503")
            call("8 retry of 7", '"key-4"', "Lamp broken", "low")
            call("9 new key, 409 in progress", '"key-5"', "Chair wobbles", "low", fault="409")
            call("10 retry of 9", '"key-5"', "Chair wobbles", "low")
            if not listed:
                call("11 new key, sent though unlisted", '"key-6"', "Fan noisy", "low", force_key=True)
            listed_by_wrapper = client.request("tools/call", {"name": "list_tickets", "arguments": {}})
        finally:
            client.close()
            recorder.shutdown()
            recorder.server_close()
        print("  upstream requests (recorder):")
        for entry in recorder.log:
            key = entry["key"] if entry["key"] is not None else "(no header)"
            if entry["method"] == "GET":
                print(f"    GET {entry['path']} -> {entry['status'].split(' ')[0]}")
                continue
            status = entry["status"] if len(entry["status"]) < 130 else entry["status"][:130] + "..."
            print(f"    POST key={key:<14} body={entry['body']:<50} -> {status}")
        try:
            tickets = lab.tickets()["tickets"]
        finally:
            lab.stop()
        print(f"  API tickets ({len(tickets)}): " + "; ".join(f"{t['id']}: {json.dumps(t['payload'])}" for t in tickets))
        print(f"  list_tickets via wrapper: {short(listed_by_wrapper)[:160]}")


def main():
    args = sys.argv[1:]
    retries = None
    if "--retries" in args:
        at = args.index("--retries")
        retries = int(args[at + 1])
        del args[at:at + 2]
    known = wrapper_bugs()
    for bug in args or known:
        if bug not in known:
            sys.exit(f"unknown bug {bug!r}; one of {', '.join(known)}")
        run(bug, retries)


if __name__ == "__main__":
    main()
