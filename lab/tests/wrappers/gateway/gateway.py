"""An HTTP gateway in front of an HTTP ticket API (the lab's `lab serve` contract) that stores nothing
itself, on Python's standard library only, with a bug planted on request: the negative controls of
the hop check of an HTTP service (`lab check --target` with `[service]` and `[upstream]`), where the
lab serves the API behind the gateway and records what the gateway sends it.

Usage:
  gateway.py --port PORT --api URL [--bug BUG] [--retries N]

It listens on 127.0.0.1:PORT and forwards every request to URL (`http://127.0.0.1:PORT`, as the hop
check's {{upstream}} gives it): the same method, path, body, and headers (Authorization and
Idempotency-Key among them) but the hop-by-hop ones. The API's status, body and headers come back as
they are. One connection per request, 5 s per attempt. When the API's answer is lost after the
request was sent (a reset connection, a timeout), the gateway answers 502 (504 for a timeout) with
an RFC 9457 problem whose detail says that the outcome is unknown and to retry with the same
Idempotency-Key.

With --retries N (default 0: no retry) a POST that got 503, 429 or a connection error is sent again,
up to N more times, each time with the SAME key and body, after Retry-After (at most 1 s).

BUG (one per run) breaks exactly one thing a gateway can get wrong across the hop:
  none                 correct
  drops-key            Idempotency-Key is never forwarded
  session-key          a key fixed at start (a random UUID, sf-string quoted) replaces every POST's
  mints-key            a fresh key (a random UUID, sf-string quoted) replaces every POST's, so a
                       client's retry reaches the API under a new key
  retry-new-key        resends as with --retries 2 (or the --retries given), but each resend carries
                       a fresh key; the first send carries the client's key
  conflict-as-success  a 422 or 409 from the API is answered 201 {"status": "created"}, naming no
                       ticket
  empty-error          any API error or transport failure is answered with its status (502 for a
                       transport failure) and an empty body
  rewraps-body         a POST's body is sent as {"ticket": <the body>}
  reencodes-body       every second POST sent upstream (the 2nd, 4th, ..., resends included) has its
                       string values upper-cased, so a retry differs and the API refuses it (422)
  in-flight-new-key    a POST whose key another POST of the gateway is still sending goes out under
                       a fresh key (a gateway that treats a key as a lock on one request at a time),
                       so calls sent together make one effect each; one at a time, nothing is wrong
"""

import argparse
import email.utils
import http.client
import http.server
import json
import socket
import threading
import time
import urllib.parse
import uuid

BUGS = ["none", "drops-key", "session-key", "mints-key", "retry-new-key", "conflict-as-success",
        "empty-error", "rewraps-body", "reencodes-body", "in-flight-new-key"]
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
              "upgrade", "host", "content-length"}
KEY = "idempotency-key"


def fresh_key():
    return '"' + str(uuid.uuid4()) + '"'


class Upstream:
    """The API the gateway forwards to, and the planted bug's state."""

    def __init__(self, url, bug, retries):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.bug = bug
        self.retries = retries if retries or bug != "retry-new-key" else 2
        self.session_key = fresh_key()
        self.posts = 0
        self.lock = threading.Lock()
        self.in_flight = set()  # the keys of the POSTs being sent, for in-flight-new-key

    def once(self, method, path, headers, body):
        """One attempt: (status, headers, body), or raises OSError when no answer came."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def body_for(self, body):
        """The body sent upstream: the client's, unless the bug changes it (a body that is not
        JSON is always sent as it came, for the API to refuse)."""
        try:
            value = json.loads(body or b"null")
        except ValueError:
            return body
        if self.bug == "rewraps-body":
            return json.dumps({"ticket": value}).encode()
        with self.lock:
            self.posts += 1
            second = self.posts % 2 == 0
        if self.bug == "reencodes-body" and second and isinstance(value, dict):
            value = {k: v.upper() if isinstance(v, str) else v for k, v in value.items()}
            return json.dumps(value).encode()
        return body

    def post(self, path, headers, body):
        """A create, with the gateway's own resends; the last answer, or raises OSError."""
        if self.bug == "drops-key":
            headers.pop(KEY, None)
        elif self.bug == "session-key":
            headers[KEY] = self.session_key
        elif self.bug == "mints-key":
            headers[KEY] = fresh_key()
        elif self.bug == "in-flight-new-key":
            key = headers.get(KEY)
            with self.lock:
                busy = key in self.in_flight
                if not busy:
                    self.in_flight.add(key)
            if busy:
                headers[KEY] = fresh_key()
            else:
                try:
                    return self.resending(path, headers, body)
                finally:
                    with self.lock:
                        self.in_flight.discard(key)
        return self.resending(path, headers, body)

    def resending(self, path, headers, body):
        """The POST, sent again after a 503, 429 or a connection error as --retries allows."""
        attempt = 0
        while True:
            sent = dict(headers)
            if self.bug == "retry-new-key" and attempt > 0:
                sent[KEY] = fresh_key()
            try:
                status, answer_headers, answer = self.once("POST", path, sent, self.body_for(body))
            except OSError:
                if attempt >= self.retries:
                    raise
                attempt += 1
                continue
            if status not in (429, 503) or attempt >= self.retries:
                return status, answer_headers, answer
            wait = dict((k.lower(), v) for k, v in answer_headers).get("retry-after", "0")
            time.sleep(min(1.0, float(wait) if wait.strip().isdigit() else 0.0))
            attempt += 1


def problem(status, title, detail):
    return json.dumps({"type": "about:blank", "title": title, "status": status,
                       "detail": detail}).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None

    def log_message(self, *args):
        pass

    def forward(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            # The client hung up mid-body: nothing is forwarded.
            self.close_connection = True
            return
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        api = self.upstream
        try:
            if self.command == "POST":
                status, answer_headers, answer = api.post(self.path, headers, body)
            else:
                status, answer_headers, answer = api.once(self.command, self.path, headers, body)
        except socket.timeout:
            self.lost(504, "Gateway Timeout", "the API did not answer within 5 s")
            return
        except OSError as err:
            self.lost(502, "Bad Gateway", f"the connection to the API failed: {err}")
            return
        if api.bug == "conflict-as-success" and status in (409, 422):
            self.answer(201, [("content-type", "application/json")],
                        json.dumps({"status": "created"}).encode())
            return
        if api.bug == "empty-error" and status >= 400:
            self.answer(status, [], b"")
            return
        kept = [(k, v) for k, v in answer_headers if k.lower() not in HOP_BY_HOP]
        self.answer(status, kept, answer)

    def lost(self, status, title, detail):
        if self.upstream.bug == "empty-error":
            self.answer(status, [], b"")
            return
        detail += ("; the outcome is unknown: the create may have been made. Retry with the "
                   "same Idempotency-Key.")
        self.answer(status, [("content-type", "application/problem+json")],
                    problem(status, title, detail))

    def answer(self, status, headers, body):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.send_header("date", email.utils.formatdate(usegmt=True))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up (the hang-up point does so on purpose)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api", required=True, help="the API's base URL")
    parser.add_argument("--bug", choices=BUGS, default="none")
    parser.add_argument("--retries", type=int, default=0)
    args = parser.parse_args()
    Handler.upstream = Upstream(args.api, args.bug, args.retries)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
