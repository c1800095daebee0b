"""By-hand probes of the memory server over stdio, with the standard library only: the JSON-RPC
lines a client sends, one at a time (each waits for its answer) or all at once (pipelined).

Usage (from this folder, after npm ci):
  python3 by_hand.py tools        the tools/list entry of create_entities (fields picked out)
  python3 by_hand.py retry        the same create_entities twice, then read_graph
  python3 by_hand.py pipelined    two different create_entities sent together, then read_graph

Prints each answer's id and structuredContent. The graph lives in a fresh temporary folder.
"""

import json
import os
import subprocess
import sys
import tempfile

SERVER = "node_modules/@modelcontextprotocol/server-memory/dist/index.js"


def entity(name):
    return {"name": name, "entityType": "ticket", "observations": ["It is jammed"]}


def call(ident, name, arguments):
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def main(mode):
    folder = tempfile.mkdtemp()
    env = dict(os.environ, MEMORY_FILE_PATH=os.path.join(folder, "memory.jsonl"))
    server = subprocess.Popen(["node", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, text=True)

    def send(message):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    def answer():
        while True:
            message = json.loads(server.stdout.readline())
            if "id" in message:
                return message

    def show(message):
        result = message.get("result", {})
        print(json.dumps({"id": message["id"], "isError": result.get("isError", False),
                          "structuredContent": result.get("structuredContent")}))

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "by-hand", "version": "0"}}})
    answer()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    if mode == "tools":
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        for tool in answer()["result"]["tools"]:
            if tool["name"] == "create_entities":
                print(json.dumps({"name": tool["name"], "required": tool["inputSchema"].get("required"),
                                  "properties": sorted(tool["inputSchema"]["properties"]),
                                  "annotations": tool.get("annotations")}))
        server.stdin.close()
        server.wait()
        return
    if mode == "retry":
        for ident in (2, 3):
            send(call(ident, "create_entities", {"entities": [entity("Printer on floor three")]}))
            show(answer())
    else:
        send(call(2, "create_entities", {"entities": [entity("Printer on floor three")]}))
        send(call(3, "create_entities", {"entities": [entity("Scanner on floor two")]}))
        show(answer())
        show(answer())
    send(call(4, "read_graph", {}))
    show(answer())
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "retry")
