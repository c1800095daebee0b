"""A ticket service on Django REST Framework behind djangorestframework-idempotency-key, set up as
the package's code asks (its README is one line): the app in INSTALLED_APPS, its middleware, the
IDEMPOTENCY_KEY_LOCK_TIMEOUT setting it reads, its migrations, and the view method decorated with
simple_idempotency_key_method.

Usage: service.py DATABASE [PORT]   (PORT 0 or absent: any free port; the address is printed)

One file: settings, the views and the server (the standard library's threaded WSGI server, so
requests run concurrently as under any production WSGI server). Django's database is the SQLite
file DATABASE: the package's idempotency_key table and the service's tickets and comments, written
through Django's own connection, so a ticket is written in the transaction the package opens
around the view. Callers are bearer tokens (alice-token, bob-token); POST /comments is a second
keyed endpoint. Fault triggers in the body:
  title "", or a priority containing "invalid"  -> 422 validation error (nothing created)
  a priority containing "flaky"   -> 503 the first time a title and priority are seen, then
                                     success (a downstream blip)
  a priority containing "crash"   -> the view raises (Django answers 500)
  a priority containing "after-effect" -> the view raises after the ticket is saved (a fault
                                     between the effect and the middleware's record)
"""

import json
import socketserver
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import django
from django.conf import settings

DATABASE = sys.argv[1]
CALLERS = {"Bearer alice-token": "alice", "Bearer bob-token": "bob"}
FLAKY_SEEN = set()
FLAKY_LOCK = threading.Lock()

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="blackbox-test-only",
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DATABASE, "OPTIONS": {"timeout": 20}}},
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "rest_framework", "rest_framework_idempotency_key"],
    MIDDLEWARE=["rest_framework_idempotency_key.middleware.IdempotencyKeyMiddleware"],
    # The one setting the middleware reads: how long a key's lock holds off a second request.
    IDEMPOTENCY_KEY_LOCK_TIMEOUT=60,
    REST_FRAMEWORK={"DEFAULT_AUTHENTICATION_CLASSES": [], "DEFAULT_PERMISSION_CLASSES": [], "UNAUTHENTICATED_USER": None},
    USE_TZ=True,
    LOGGING_CONFIG=None,
)
django.setup()

from django.core.management import call_command  # noqa: E402  (needs the settings above)
from django.db import connection  # noqa: E402
from django.db.backends.sqlite3.base import DatabaseWrapper  # noqa: E402

# SQLite transactions start as BEGIN IMMEDIATE, so two requests never both read and then both try
# to write (SQLite fails one of them at once with "database is locked", a 500 that says nothing
# about the middleware). Django 5.1 made this an option (DATABASES' "transaction_mode":
# "IMMEDIATE"); Django 4.2 begins every transaction with a plain BEGIN in this one method.
DatabaseWrapper._start_transaction_under_autocommit = lambda self: self.cursor().execute("BEGIN IMMEDIATE")
from django.urls import path  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402
from rest_framework_idempotency_key.decorators import simple_idempotency_key_method  # noqa: E402


def caller(request):
    return CALLERS.get(request.headers.get("Authorization", ""))


class Tickets(APIView):
    def get(self, request):
        owner = caller(request)
        if owner is None:
            return Response({"error": "unknown caller"}, status=401)
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, title, priority FROM tickets WHERE owner = %s ORDER BY id", [owner])
            rows = cursor.fetchall()
        return Response({"tickets": [{"ticket_id": i, "title": t, "priority": p} for i, t, p in rows]})

    @simple_idempotency_key_method
    def post(self, request):
        owner = caller(request)
        if owner is None:
            return Response({"error": "unknown caller"}, status=401)
        body = json.loads(request.body)
        title, priority = body.get("title"), body.get("priority", "normal")
        if not isinstance(title, str) or not title.strip() or "invalid" in str(priority):
            return Response({"error": "a non-empty title and a known priority, please"}, status=422)
        with FLAKY_LOCK:
            blip = "flaky" in str(priority) and (title, priority) not in FLAKY_SEEN
            FLAKY_SEEN.add((title, priority))
        if blip:
            return Response({"error": "ticket backend briefly unavailable"}, status=503)
        if "crash" in str(priority):
            raise RuntimeError("view failed before creating the ticket")
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO tickets (owner, title, priority) VALUES (%s, %s, %s)", [owner, title, priority])
            ticket_id = cursor.lastrowid
        if "after-effect" in str(priority):
            raise RuntimeError(f"view failed after saving ticket {ticket_id}")
        return Response({"ticket_id": ticket_id, "owner": owner, "title": title, "priority": priority}, status=201)


class Comments(APIView):
    @simple_idempotency_key_method
    def post(self, request):
        owner = caller(request)
        if owner is None:
            return Response({"error": "unknown caller"}, status=401)
        text = json.loads(request.body).get("text")
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO comments (owner, text) VALUES (%s, %s)", [owner, text])
            comment_id = cursor.lastrowid
        return Response({"comment_id": comment_id, "owner": owner, "text": text}, status=201)


urlpatterns = [path("tickets", Tickets.as_view()), path("comments", Comments.as_view())]


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


if __name__ == "__main__":
    from django.core.wsgi import get_wsgi_application

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, owner TEXT, title TEXT, priority TEXT)")
        cursor.execute("CREATE TABLE IF NOT EXISTS comments (id INTEGER PRIMARY KEY, owner TEXT, text TEXT)")
    connection.close()
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = make_server("127.0.0.1", port, get_wsgi_application(), ThreadingServer, QuietHandler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
