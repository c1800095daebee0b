"""FastMCP 4.x (fastmcp, pinned in requirements.txt) wrapping the lab's HTTP API with
FastMCP.from_openapi, over stdio (the launcher the hop check starts, target.toml) or over
Streamable HTTP (a server you start first, target-http.toml).

Usage:
  python3 server.py --api URL --token TOKEN [--spec FILE] [--transport http --port N]

URL is the API's base URL (the hop check's {{upstream}}, or http://127.0.0.1:PORT for the
[upstream] port of target-http.toml); the OpenAPI document is read from URL/openapi.json once, at
start, or from FILE with --spec (then nothing is fetched at start, so the wrapper can start
before the API is served). Every request goes to URL with "Authorization: Bearer TOKEN". The
lab's document names a templated server (http://127.0.0.1:{port}), so the client's base_url is
what points the tools at the API. One tool per operation, named by its operationId
(createTicket, ...); header parameters (Idempotency-Key) are tool arguments.

--transport stdio (the default) serves MCP on stdin/stdout. --transport http serves Streamable
HTTP on 127.0.0.1:N at /mcp (FastMCP's run(transport="http", host=..., port=...)), one process
for every session, all of them calling the API with the one TOKEN.
"""

import argparse
import json

import httpx2
from fastmcp import FastMCP


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", required=True, help="the API's base URL")
    parser.add_argument("--token", required=True, help="the caller's bearer token")
    parser.add_argument("--spec", help="the OpenAPI document, read from this file instead of "
                                       "URL/openapi.json")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio (default), or Streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--port", type=int, help="the loopback port for --transport http")
    args = parser.parse_args()
    if (args.transport == "http") != (args.port is not None):
        parser.error("--port goes with --transport http, and --transport http needs --port")
    api = args.api.rstrip("/")
    if args.spec:
        with open(args.spec, encoding="utf-8") as file:
            spec = json.load(file)
    else:
        spec = httpx2.get(api + "/openapi.json", timeout=30).raise_for_status().json()
    client = httpx2.AsyncClient(base_url=api, headers={"Authorization": f"Bearer {args.token}"},
                                timeout=30)
    server = FastMCP.from_openapi(openapi_spec=spec, client=client, name="lab-tickets")
    if args.transport == "http":
        server.run(transport="http", host="127.0.0.1", port=args.port, show_banner=False)
    else:
        server.run()  # stdio


if __name__ == "__main__":
    main()
