"""Creates tickets with Python `requests`, retried by urllib3's own `Retry`.

Usage: client.py MODE BASE_URL PLAN_JSON

PLAN_JSON is a list of intentions, each `{"token": "alice-token", "title": "...", "priority":
"high"}`, created one after the other in that order. MODE says how the caller keys them:

- `keyed`: one Idempotency-Key per intention, made once; urllib3 sends it again on its retries,
  as they re-send the same request.
- `unkeyed`: no key.
- `replan`: as `keyed`, and when urllib3 gives up, the application sends the intention again
  under a new key (at most twice in all): the re-plan a lost reply tempts a caller into.

The retry policy is urllib3's: `allowed_methods` adds POST, which urllib3 does not retry by
default, and `read=1` re-sends a request once after a read error, which is what a read timeout
is. The read timeout is short, so a reply the proxy holds is given up on. No status is retried.
Every retry is urllib3's decision, or, in `replan`, the re-plan above.

Prints one JSON object: per intention, each plan's key and outcome (the status and body, or the
error that ended it) and the retries urllib3 made, from urllib3's own log of them.
"""

import json
import logging
import sys
import uuid

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

# Seconds to wait for a reply once the request is sent: short, so a held reply is given up on,
# and far longer than the loopback service takes to answer.
READ_TIMEOUT = 2.0
CONNECT_TIMEOUT = 10.0


class Retries(logging.Handler):
    """urllib3's log of its retries ("Retrying (Retry(...)) after connection broken by ...")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Retrying"):
            self.lines.append(message)


def session() -> requests.Session:
    retry = Retry(
        total=2,
        connect=1,
        read=1,
        status=0,
        other=0,
        allowed_methods=frozenset({"GET", "POST"}),
        backoff_factor=0,
        raise_on_status=False,
    )
    s = requests.Session()
    s.mount("http://", HTTPAdapter(max_retries=retry))
    return s


def send(s: requests.Session, base_url: str, intention: dict, key: str | None) -> dict:
    headers = {"Authorization": f"Bearer {intention['token']}"}
    if key is not None:
        # The draft's form: an sf-string, quoted.
        headers["Idempotency-Key"] = f'"{key}"'
    try:
        response = s.post(
            f"{base_url}/tickets",
            headers=headers,
            json={"title": intention["title"], "priority": intention["priority"]},
            timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
        )
    except requests.exceptions.RequestException as error:
        return {"error": f"{type(error).__name__}: {error}"}
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return {"status": response.status_code, "body": body}


def main() -> int:
    mode, base_url, plan = sys.argv[1], sys.argv[2].rstrip("/"), json.loads(sys.argv[3])
    if mode not in ("keyed", "unkeyed", "replan"):
        print(f"unknown mode {mode!r}: keyed, unkeyed or replan", file=sys.stderr)
        return 2
    retries = Retries()
    logging.getLogger("urllib3.connectionpool").addHandler(retries)
    s = session()
    intentions = []
    for intention in plan:
        plans = []
        for _ in range(2 if mode == "replan" else 1):
            key = None if mode == "unkeyed" else f"{mode}-{uuid.uuid4()}"
            before = len(retries.lines)
            outcome = send(s, base_url, intention, key)
            plans.append(
                {"key": key, "outcome": outcome, "retries": retries.lines[before:]}
            )
            if "error" not in outcome:
                break
        intentions.append({**intention, "plans": plans})
    print(json.dumps({"mode": mode, "intentions": intentions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
