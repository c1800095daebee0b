"""A mitmproxy addon: the first replies to one create come back after a later reply.

    mitmdump -s slow_first.py --set slow_first_title=TITLE [--set slow_first_count=N]

The first N replies (1 unless told) to a POST whose JSON body has the title TITLE are held in
the proxy after the service has answered. Each stays held until the proxy has passed on a later
reply to a request with the same title (the retry the client sent once it gave up), or until
the proxy shuts down, or for a minute at most. Nothing is changed: the service's answer is
passed on as it came, only late, and the caller has left by then.

This file is the lab's fault injection for lab/tests/it/audit_har.rs, which starts mitmdump in
reverse-proxy mode with its HAR export (`--set hardump=FILE`). What that export records of a
held reply, as mitmproxy 11.0.2's addons/savehar.py writes it and as a run shows:

- the entry keeps the service's status, headers and body, and no `_error`: savehar writes
  `_error` only for a flow without a response, and the client's leaving is noticed after the
  response hook (the flow's error is set, but not written);
- its `startedDateTime` and `time` are the service's: mitmproxy stamps the response's end
  before the response hook runs, so the hold is not in `time`;
- its place in `log.entries` is late: savehar adds a flow to its list when the flow's response
  hook has run (this addon's hold included, as script addons come before savehar), so the held
  entry comes after the later reply that overtook it.

The order of the entries is the one thing in the file that says the reply was not back when
the retry was sent.
"""

import asyncio
import json
import logging

from mitmproxy import ctx, http

# The longest a reply is held: a guard for a broken run (a retry that never comes); a healthy
# run releases every hold long before.
GUARD_SECONDS = 60.0


def title_of(flow: http.HTTPFlow) -> str | None:
    """The title of a JSON create, or None for any other request."""
    if flow.request.method != "POST":
        return None
    try:
        body = json.loads(flow.request.get_text(strict=False) or "")
    except ValueError:
        return None
    title = body.get("title") if isinstance(body, dict) else None
    return title if isinstance(title, str) else None


class SlowFirst:
    def __init__(self) -> None:
        # Replies to the title seen so far.
        self.seen = 0
        # Set when a reply to the title has passed unheld, or at shutdown: every hold ends.
        self.overtaken = asyncio.Event()
        # Holds not yet ended; `idle` is set whenever there are none.
        self.holding = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def load(self, loader) -> None:
        loader.add_option(
            "slow_first_title", str, "", "The create title whose first replies are held."
        )
        loader.add_option(
            "slow_first_count", int, 1, "How many of its first replies are held."
        )

    async def response(self, flow: http.HTTPFlow) -> None:
        title = ctx.options.slow_first_title
        if not title or title_of(flow) != title:
            return
        self.seen += 1
        if self.seen > ctx.options.slow_first_count:
            logging.info(f"slow_first: reply {self.seen} to {title!r} passes unheld")
            self.overtaken.set()
            return
        answer = flow.response.status_code if flow.response else None
        logging.info(f"slow_first: holding reply {self.seen} to {title!r} (HTTP {answer})")
        self.holding += 1
        self.idle.clear()
        try:
            await asyncio.wait_for(self.overtaken.wait(), GUARD_SECONDS)
        except TimeoutError:
            logging.warning(f"slow_first: no later reply to {title!r} in {GUARD_SECONDS} s")
        finally:
            logging.info(f"slow_first: passing on held reply to {title!r}")
            self.holding -= 1
            if self.holding == 0:
                self.idle.set()

    async def done(self) -> None:
        # At shutdown every hold ends, and this waits for the held flows to pass on, so that
        # savehar (whose `done` runs after this one) has them in its list when it writes.
        self.overtaken.set()
        try:
            await asyncio.wait_for(self.idle.wait(), GUARD_SECONDS)
        except TimeoutError:
            logging.warning("slow_first: held replies still not passed on at shutdown")


addons = [SlowFirst()]
