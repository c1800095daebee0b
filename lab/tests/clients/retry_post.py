"""One keyed create with Python `requests`, retried by urllib3's own `Retry`.

Usage: retry_post.py BASE_URL TOKEN KEY PAYLOAD_JSON

urllib3 does not retry POST by default; `allowed_methods` adds it, and `read=3` retries a
connection that closed before any answer (urllib3 counts that as a read error). The script only
configures the library: every retry is urllib3's decision. It prints one JSON line: the final
status, the `Idempotent-Replayed` header and the body.
"""

import json
import sys

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry


def main() -> int:
    base_url, token, key, payload = sys.argv[1:5]
    retry = Retry(
        total=3,
        connect=3,
        read=3,
        status=0,
        allowed_methods=frozenset({"GET", "POST"}),
        backoff_factor=0,
        raise_on_status=False,
    )
    session = requests.Session()
    session.mount("http://", HTTPAdapter(max_retries=retry))
    response = session.post(
        f"{base_url}/tickets",
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        json=json.loads(payload),
        timeout=10,
    )
    print(
        json.dumps(
            {
                "status": response.status_code,
                "replayed": response.headers.get("Idempotent-Replayed"),
                "body": response.json(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
