"""FastMCP 4.x (fastmcp, pinned in requirements.txt) wrapping the lab's HTTP API with
FastMCP.from_openapi, over stdio: the launcher the hop check starts (target.toml).

Usage:
  python3 server.py --api URL --token TOKEN

URL is the API's base URL (the hop check's {{upstream}}); the OpenAPI document is read from
URL/openapi.json once, at start. Every request goes to URL with "Authorization: Bearer TOKEN".
The lab's document names a templated server (http://127.0.0.1:{port}), so the client's base_url
is what points the tools at the API. One tool per operation, named by its operationId
(createTicket, ...); header parameters (Idempotency-Key) are tool arguments.
"""

import argparse

import httpx2
from fastmcp import FastMCP


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", required=True, help="the API's base URL")
    parser.add_argument("--token", required=True, help="the caller's bearer token")
    args = parser.parse_args()
    api = args.api.rstrip("/")
    spec = httpx2.get(api + "/openapi.json", timeout=30).raise_for_status().json()
    client = httpx2.AsyncClient(base_url=api, headers={"Authorization": f"Bearer {args.token}"},
                                timeout=30)
    FastMCP.from_openapi(openapi_spec=spec, client=client, name="lab-tickets").run()  # stdio


if __name__ == "__main__":
    main()
