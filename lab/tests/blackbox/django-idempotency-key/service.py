"""A ticket service on Django behind django-idempotency-key's middleware, set up as its README says.

Usage: service.py DATABASE [PORT]   (PORT 0 or absent: any free port; the address is printed)

One file: settings, a view and the server (the standard library's threaded WSGI server, so
requests run concurrently as under any production WSGI server). Callers are bearer tokens
(alice-token, bob-token); tickets live in the SQLite file DATABASE; POST /comments is a second
keyed endpoint, for the check's "same key on another endpoint" point. Fault triggers in the body:
  title "", or a priority containing "invalid"  -> 422 validation error (nothing created)
  a priority containing "flaky"   -> 503 the first time a title and priority are seen, then
                                     success (a downstream blip)
  a priority containing "crash"   -> the view raises (Django answers 500)
  a priority containing "after-effect" -> the view raises after the ticket is saved (a fault
                                     between the effect and the middleware's record)

The negative control of lab/tests/it/middlewares.rs sets BLACKBOX_PLANTED_BUG=unscoped-keys: the
service then hashes its keys without the caller, a configuration mistake one line long, and the
check must see another caller's key replay the first caller's ticket.
"""

import hashlib
import json
import os
import socketserver
import sqlite3
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import django
from django.conf import settings

DATABASE = sys.argv[1]
CALLERS = {"Bearer alice-token": "alice", "Bearer bob-token": "bob"}
FLAKY_SEEN = set()
FLAKY_LOCK = threading.Lock()


class UnscopedKeyEncoder:
    """The package's BasicKeyEncoder without the Authorization header: the planted bug."""

    def encode_key(self, request, key):
        digest = hashlib.sha256()
        for part in (key.encode(), request.path_info.encode(), request.method.encode(), request.body):
            digest.update(part)
        return digest.hexdigest()


IDEMPOTENCY_KEY = {"STORAGE": {"CLASS": "idempotency_key.storage.MemoryKeyStorage"}}
if os.environ.get("BLACKBOX_PLANTED_BUG") == "unscoped-keys":
    IDEMPOTENCY_KEY["ENCODER_CLASS"] = "__main__.UnscopedKeyEncoder"
elif os.environ.get("BLACKBOX_PLANTED_BUG"):
    sys.exit(f"BLACKBOX_PLANTED_BUG: unknown bug {os.environ['BLACKBOX_PLANTED_BUG']!r} (known: unscoped-keys)")

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="blackbox-test-only",
    MIDDLEWARE=["idempotency_key.middleware.IdempotencyKeyMiddleware"],
    INSTALLED_APPS=["idempotency_key"],
    # The package's defaults, written out: in-memory storage, a thread lock around the lookup.
    IDEMPOTENCY_KEY=IDEMPOTENCY_KEY,
    LOGGING_CONFIG=None,
)
django.setup()

from django.http import JsonResponse  # noqa: E402  (needs the settings above)
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402


def connect():
    db = sqlite3.connect(DATABASE, timeout=10)
    db.execute("CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, owner TEXT, title TEXT, priority TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS comments (id INTEGER PRIMARY KEY, owner TEXT, text TEXT)")
    return db


@csrf_exempt
def tickets(request):
    owner = CALLERS.get(request.headers.get("Authorization", ""))
    if owner is None:
        return JsonResponse({"error": "unknown caller"}, status=401)
    db = connect()
    try:
        if request.method == "GET":
            rows = db.execute("SELECT id, title, priority FROM tickets WHERE owner = ? ORDER BY id", (owner,))
            return JsonResponse({"tickets": [{"ticket_id": i, "title": t, "priority": p} for i, t, p in rows]})
        body = json.loads(request.body)
        title, priority = body.get("title"), body.get("priority", "normal")
        if not isinstance(title, str) or not title.strip() or "invalid" in str(priority):
            return JsonResponse({"error": "a non-empty title and a known priority, please"}, status=422)
        with FLAKY_LOCK:
            blip = "flaky" in str(priority) and (title, priority) not in FLAKY_SEEN
            FLAKY_SEEN.add((title, priority))
        if blip:
            return JsonResponse({"error": "ticket backend briefly unavailable"}, status=503)
        if "crash" in str(priority):
            raise RuntimeError("view failed before creating the ticket")
        with db:
            ticket_id = db.execute(
                "INSERT INTO tickets (owner, title, priority) VALUES (?, ?, ?)", (owner, title, priority)
            ).lastrowid
        if "after-effect" in str(priority):
            raise RuntimeError(f"view failed after saving ticket {ticket_id}")
        return JsonResponse({"ticket_id": ticket_id, "owner": owner, "title": title, "priority": priority}, status=201)
    finally:
        db.close()


@csrf_exempt
def comments(request):
    owner = CALLERS.get(request.headers.get("Authorization", ""))
    if owner is None:
        return JsonResponse({"error": "unknown caller"}, status=401)
    text = json.loads(request.body).get("text")
    db = connect()
    try:
        with db:
            comment_id = db.execute("INSERT INTO comments (owner, text) VALUES (?, ?)", (owner, text)).lastrowid
    finally:
        db.close()
    return JsonResponse({"comment_id": comment_id, "owner": owner, "text": text}, status=201)


urlpatterns = [path("tickets", tickets), path("comments", comments)]


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


if __name__ == "__main__":
    from django.core.wsgi import get_wsgi_application

    connect().close()
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = make_server("127.0.0.1", port, get_wsgi_application(), ThreadingServer, QuietHandler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
