"""A ticket service with an idempotency layer, stdlib only, for lab/tests/it/check_vocab.rs.

Each flag makes it a service the target-file vocabulary must be able to describe, or plants one
bug: --uuid-only (keys that are not UUIDs get a 500), --enum (priority must be low, med or high),
--replay-status N (a replay answered N with the stored body), --key-optional (no key: a plain
request), --accept-malformed (the raw header is the key, malformed or not), --overwrite (another
payload under a used key overwrites the ticket in place and replays), --loose (payloads compared
with every value as text, so "1024" and 1024 are one payload), --no-records (keys are never
recorded: every request is a new one). A request with the header X-Record-Fails is the fault of a
middleware that saves the key's record after the answer: the ticket is saved and answered 201, and
the record is lost. Tickets live in tickets.sqlite in the working directory; GET /tickets/ID reads
one back, GET /count counts them.
"""

import json
import re
import sqlite3
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FLAGS = set(a for a in sys.argv[1:] if a.startswith("--") and a != "--replay-status")
REPLAY_STATUS = int(sys.argv[sys.argv.index("--replay-status") + 1]) if "--replay-status" in sys.argv else 201
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
LOCK = threading.Lock()
RECORDS = {}
DB = sqlite3.connect("tickets.sqlite", check_same_thread=False)
DB.execute("CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, title TEXT, priority TEXT, n TEXT)")
DB.commit()


def fingerprint(payload):
    if "--loose" in FLAGS:
        return json.dumps({k: str(v) for k, v in payload.items()}, sort_keys=True)
    return json.dumps(payload, sort_keys=True)


def key_of(headers):
    raw = headers.get("Idempotency-Key")
    if raw is None:
        return None, None
    if "--accept-malformed" in FLAGS:
        return raw, None
    if raw.startswith('"'):
        if len(raw) < 2 or not raw.endswith('"'):
            return None, 400
        key = raw[1:-1]
    elif re.match(r"^[A-Za-z0-9][A-Za-z0-9._~-]*$", raw):
        key = raw
    else:
        return None, 400
    if "--uuid-only" in FLAGS and not UUID.match(key):
        return None, 500
    return key, None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body, replayed=False):
        text = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(text)

    def do_GET(self):
        with LOCK:
            if self.path == "/count":
                (n,) = DB.execute("SELECT COUNT(*) FROM tickets").fetchone()
                return self.answer(200, {"count": n})
            found = re.match(r"^/tickets/(\d+)$", self.path)
            row = found and DB.execute(
                "SELECT id, title, priority, n FROM tickets WHERE id = ?", (int(found.group(1)),)
            ).fetchone()
            if not row:
                return self.answer(404, {"error": "no such ticket"})
            return self.answer(200, {"ticket": {"id": row[0], "title": row[1], "priority": row[2], "n": row[3]}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != "/tickets":
            return self.answer(404, {"error": "no such route"})
        caller = self.headers.get("Authorization", "")
        with LOCK:
            self.create(caller, body)

    def create(self, caller, body):
        key, refusal = key_of(self.headers)
        if refusal:
            return self.answer(refusal, {"error": "the key is not accepted"})
        if key is None and "--key-optional" not in FLAGS:
            return self.answer(400, {"error": "an Idempotency-Key is required"})
        try:
            payload = json.loads(body)
        except ValueError:
            return self.answer(400, {"error": "not JSON"})
        if self.headers.get("X-Fail"):
            return self.answer(503, {"error": "a handled failure"})
        record = RECORDS.get((caller, key)) if key is not None else None
        if record:
            first, answer = record
            if fingerprint(payload) != fingerprint(first):
                if "--overwrite" not in FLAGS:
                    return self.answer(422, {"error": "the key was used with another payload"})
                DB.execute("UPDATE tickets SET title = ?, n = ? WHERE id = ?",
                           (payload.get("title"), str(payload.get("n")), answer["id"]))
                DB.commit()
            return self.answer(REPLAY_STATUS, answer, replayed=True)
        if "--enum" in FLAGS and payload.get("priority") not in ("low", "med", "high"):
            return self.answer(400, {"error": "priority must be low, med or high"})
        if not payload.get("title"):
            return self.answer(400, {"error": "a title is required"})
        cursor = DB.execute("INSERT INTO tickets (title, priority, n) VALUES (?, ?, ?)",
                            (payload["title"], payload.get("priority"), str(payload.get("n"))))
        DB.commit()
        answer = {"id": cursor.lastrowid, "title": payload["title"]}
        if key is not None and "--no-records" not in FLAGS and not self.headers.get("X-Record-Fails"):
            RECORDS[(caller, key)] = (payload, answer)
        return self.answer(201, answer)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
