"""A logging reverse proxy for the by-hand reproductions of the hop check: it forwards every request
to UPSTREAM unchanged (method, path, headers, body) and prints one JSON line per request, with the
standard library only. What a wrapper sends to the HTTP API is what this prints.

Usage:
  python3 logproxy.py PORT UPSTREAM [FAULTS]   e.g. python3 logproxy.py 0 http://127.0.0.1:40111
  python3 logproxy.py --summary < LOG      one short line per logged request: method, path, the
                                           Idempotency-Key and Authorization headers, body, status

FAULTS apply to creates (POST /tickets) only, to the first ones in order: the lost ones first,
then the answered ones; every other request, and every create after them, is forwarded:

  --lose-first N                  forward the first N creates, read the API's whole answer (the
                                  API committed), then close the wrapper's connection without
                                  writing a byte
  --answer-first STATUS[,STATUS]  answer the next creates with these statuses without forwarding,
                                  with a problem+json body (RFC 9457) as the lab's check sends it:
                                  503 the overloaded type and `Retry-After: 0`, 429 about:blank
                                  and `Retry-After: 1`, 409 the in-flight type; any other status
                                  about:blank

  --hold-first SECONDS            forward the first create, and pass its answer on only after
                                  SECONDS (the API committed at once), so that creates sent
                                  together with it arrive while it is in flight

  e.g. python3 logproxy.py 0 http://127.0.0.1:40111 --answer-first 503

PORT 0 picks a free port. The first line on stderr is "listening on http://127.0.0.1:PORT"; then
each request is one line on stdout (flushed):

  {"method": "POST", "path": "/tickets", "headers": {...all, as sent...}, "body": "...",
   "status": 201, "answer": "..."}

plus "replayed": "true" when the API's answer says Idempotent-Replayed, and "fault" on a faulted
create: "lost: ..." (then "status" and "answer" are the API's, which the wrapper never got) or
"answered: ..." (then they are the proxy's own; the API never saw the request).

"body" is the request's body as text, whole; "answer" the reply's, cut after 600 characters (the
OpenAPI document is long). Stop it with a signal
(Ctrl-C, kill PID); bound it with `timeout`.
"""

import http.server
import json
import sys
import threading
import time
import urllib.error
import urllib.request

# Hop-by-hop headers, and the ones urllib sets itself; everything else is forwarded as received.
NOT_FORWARDED = {"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                 "accept-encoding", "te", "upgrade", "proxy-connection"}
NOT_RETURNED = {"transfer-encoding", "connection", "keep-alive", "content-length", "date", "server"}


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)

PROBLEM_BASE = "https://tool-retries-lab.github.io/book/http-boundary.html#problem-"
# status: (problem type, title, Retry-After), as the lab's hop check answers a faulted create.
ANSWERS = {
    503: (PROBLEM_BASE + "overloaded", "The service is at its connection limit", "0"),
    429: ("about:blank", "Too Many Requests", "1"),
    409: (PROBLEM_BASE + "in-flight", "A request with this key is still being processed", None),
}


class Faults:
    """The faults still to apply, one per create, in order: "lose", or a status to answer."""

    def __init__(self, lose=0, answer=(), hold=0.0):
        self.queue = (["hold"] if hold else []) + ["lose"] * lose + list(answer)
        self.hold = hold
        self.lock = threading.Lock()

    def next(self, method, path):
        if method != "POST" or path.split("?")[0] != "/tickets":
            return None
        with self.lock:
            return self.queue.pop(0) if self.queue else None


def problem(status):
    kind, title, retry_after = ANSWERS.get(status, ("about:blank", http.HTTPStatus(status).phrase,
                                                    None))
    body = json.dumps({"type": kind, "title": title, "status": status,
                       "detail": "answered by logproxy.py, which plays the API here"})
    headers = [("Content-Type", "application/problem+json")]
    if retry_after is not None:
        headers.append(("Retry-After", retry_after))
    return headers, body.encode()


def handler(upstream, faults=None):
    faults = faults or Faults()

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = faults.next(self.command, self.path)
            if isinstance(fault, int):
                return self.answer(body, fault)
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in NOT_FORWARDED]
            request = urllib.request.Request(upstream + self.path, data=body or None,
                                             method=self.command)
            for name, value in headers:
                request.add_header(name, value)
            try:
                with OPENER.open(request, timeout=60) as reply:
                    status, reply_headers, data = reply.status, reply.headers, reply.read()
            except urllib.error.HTTPError as err:
                status, reply_headers, data = err.code, err.headers, err.read()
            except OSError as err:
                status, reply_headers, data = 502, {}, f"logproxy: {err}".encode()
            answer = data.decode("utf-8", "replace")
            if len(answer) > 600:
                answer = answer[:600] + f"... ({len(data)} bytes)"
            line = {"method": self.command, "path": self.path,
                    "headers": dict(self.headers.items()),
                    "body": body.decode("utf-8", "replace"), "status": status, "answer": answer}
            if reply_headers.get("Idempotent-Replayed"):
                line["replayed"] = reply_headers.get("Idempotent-Replayed")
            if fault == "lose":
                line["fault"] = "lost: the API answered; the proxy closed the connection unanswered"
                print(json.dumps(line), flush=True)
                self.close_connection = True
                return
            if fault == "hold":
                line["fault"] = f"held: the API answered; the proxy held its answer {faults.hold} s"
                time.sleep(faults.hold)
            print(json.dumps(line), flush=True)
            self.send_response(status)
            for name, value in reply_headers.items():
                if name.lower() not in NOT_RETURNED:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def answer(self, body, status):
            headers, data = problem(status)
            line = {"method": self.command, "path": self.path,
                    "headers": dict(self.headers.items()),
                    "body": body.decode("utf-8", "replace"), "status": status,
                    "answer": data.decode(),
                    "fault": f"answered: {status} by the proxy, not forwarded"}
            print(json.dumps(line), flush=True)
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = forward

        def log_message(self, *args):
            pass

    return Proxy


def summary(lines):
    for line in lines:
        entry = json.loads(line)
        headers = {name.lower(): value for name, value in entry["headers"].items()}
        words = [entry["method"], entry["path"], "key:", headers.get("idempotency-key", "-"),
                 "auth:", headers.get("authorization", "-"), "body:", entry["body"] or "-",
                 "->", str(entry["status"])] + (["(replayed)"] if entry.get("replayed") else [])
        if entry.get("fault"):
            words.append("[" + entry["fault"].split(":")[0] + "]")
        print(" ".join(words))


def main():
    if sys.argv[1:] == ["--summary"]:
        return summary(sys.stdin)
    args, rest, lose, answer, hold = [], sys.argv[1:], 0, [], 0.0
    try:
        while rest:
            word = rest.pop(0)
            if word == "--lose-first":
                lose = int(rest.pop(0))
            elif word == "--hold-first":
                hold = float(rest.pop(0))
            elif word == "--answer-first":
                answer = [int(status) for status in rest.pop(0).split(",")]
            else:
                args.append(word)
    except (IndexError, ValueError):
        sys.exit(__doc__)
    if len(args) != 2:
        sys.exit(__doc__)
    port, upstream = int(args[0]), args[1].rstrip("/")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port),
                                             handler(upstream, Faults(lose, answer, hold)))
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
