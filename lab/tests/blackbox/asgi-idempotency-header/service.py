"""A ticket service on FastAPI behind asgi-idempotency-header's middleware, as its README sets it up.

Usage: service.py DATABASE [PORT]   (PORT 0 or absent: any free port; the address is printed)

Callers are bearer tokens (alice-token, bob-token). Tickets live in the SQLite file DATABASE;
POST /comments is a second keyed endpoint, for the check's "same key on another endpoint" point.
Fault triggers, in the body, so a black-box check can reach the error paths:
  title "", or a priority containing "invalid"  -> 422 validation error (nothing created)
  a priority containing "flaky"   -> 503 the first time a title and priority are seen, then
                                     success (a downstream blip)
  a priority containing "crash"   -> the handler raises (FastAPI answers 500)
  a priority containing "after-effect" -> the handler raises after the ticket is saved (a fault
                                     between the effect and the middleware's record)
"""

import contextlib
import socket
import sqlite3
import sys

import uvicorn
from idempotency_header_middleware import IdempotencyHeaderMiddleware
from idempotency_header_middleware.backends import MemoryBackend
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

CALLERS = {"Bearer alice-token": "alice", "Bearer bob-token": "bob"}
DATABASE = sys.argv[1]
FLAKY_SEEN = set()


def connect():
    db = sqlite3.connect(DATABASE)
    db.execute("CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, owner TEXT, title TEXT, priority TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS comments (id INTEGER PRIMARY KEY, owner TEXT, text TEXT)")
    return db


def caller(request):
    return CALLERS.get(request.headers.get("authorization", ""))


app = FastAPI()
app.add_middleware(IdempotencyHeaderMiddleware, backend=MemoryBackend())


@app.post("/tickets")
async def create_ticket(request: Request):
    owner = caller(request)
    if owner is None:
        return JSONResponse({"error": "unknown caller"}, 401)
    body = await request.json()
    title, priority = body.get("title"), body.get("priority", "normal")
    if not isinstance(title, str) or not title.strip() or "invalid" in str(priority):
        return JSONResponse({"error": "a non-empty title and a known priority, please"}, 422)
    if "flaky" in str(priority) and (title, priority) not in FLAKY_SEEN:
        FLAKY_SEEN.add((title, priority))
        return JSONResponse({"error": "ticket backend briefly unavailable"}, 503)
    if "crash" in str(priority):
        raise RuntimeError("handler failed before creating the ticket")
    with contextlib.closing(connect()) as db, db:
        ticket_id = db.execute(
            "INSERT INTO tickets (owner, title, priority) VALUES (?, ?, ?)", (owner, title, priority)
        ).lastrowid
    if "after-effect" in str(priority):
        raise RuntimeError(f"handler failed after saving ticket {ticket_id}")
    return JSONResponse({"ticket_id": ticket_id, "owner": owner, "title": title, "priority": priority}, 201)


@app.post("/comments")
async def create_comment(request: Request):
    owner = caller(request)
    if owner is None:
        return JSONResponse({"error": "unknown caller"}, 401)
    text = (await request.json()).get("text")
    with contextlib.closing(connect()) as db, db:
        comment_id = db.execute("INSERT INTO comments (owner, text) VALUES (?, ?)", (owner, text)).lastrowid
    return JSONResponse({"comment_id": comment_id, "owner": owner, "text": text}, 201)


@app.get("/tickets")
async def list_tickets(request: Request):
    owner = caller(request)
    if owner is None:
        return JSONResponse({"error": "unknown caller"}, 401)
    with contextlib.closing(connect()) as db:
        rows = db.execute("SELECT id, title, priority FROM tickets WHERE owner = ? ORDER BY id", (owner,)).fetchall()
    return JSONResponse({"tickets": [{"ticket_id": i, "title": t, "priority": p} for i, t, p in rows]})


if __name__ == "__main__":
    connect().close()
    sock = socket.socket()
    sock.bind(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 0))
    # Listening before the line is printed: a caller that waits for the line is never refused.
    sock.listen(128)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
