"""By-hand probes of the Shrimp Task Manager over stdio, with the standard library only: the
JSON-RPC lines a client sends, one at a time (each waits for its answer) or all at once
(pipelined). The server asks the client for its roots (roots/list) before it touches its data; the
script answers with none, as a client without roots does, so DATA_DIR alone says where the tasks
are kept.

Usage (from this folder, after npm ci):
  python3 by_hand.py tools        the tools/list entry of split_tasks (fields picked out)
  python3 by_hand.py refusal      split_tasks with a description too short, then with a tasksRaw
                                  that is not a string: the two refusals, neither marked isError
  python3 by_hand.py retry        the same split_tasks twice, then the tasks file
  python3 by_hand.py reconnect    split_tasks, then the same call from a second server process on
                                  the same DATA_DIR (a client that reconnected), then the tasks file
  python3 by_hand.py pipelined    six different split_tasks sent together, then the tasks file
  python3 by_hand.py staggered    twelve different split_tasks sent 5 ms apart, each roots/list
                                  answered at once, then the tasks file, or why it is not JSON

Prints each answer's id, isError and the start of its text. The tasks live in a fresh temporary
folder (DATA_DIR).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

SERVER = "node_modules/mcp-shrimp-task-manager/dist/index.js"


def tasks_raw(name, description="The printer on floor three is jammed again"):
    return json.dumps([{"name": name, "description": description, "implementationGuide": "Clear the paper path"}])


def split(ident, name, **extra):
    arguments = {"updateMode": "append", "tasksRaw": tasks_raw(name, **extra)}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": "split_tasks", "arguments": arguments}}


def main(mode, folder=None):
    folder = folder or tempfile.mkdtemp()
    env = dict(os.environ, DATA_DIR=folder)
    server = subprocess.Popen(["node", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, text=True)

    def send(message):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    def answer():
        while True:
            message = json.loads(server.stdout.readline())
            if message.get("method") == "roots/list":
                send({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": []}})
            elif "id" in message and "method" not in message:
                return message

    def show(message):
        result = message.get("result", {})
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        ids = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text)
        print(json.dumps({"id": message["id"], "isError": result.get("isError", False),
                          "text": text[:160], "task ids in the text": ids}, ensure_ascii=False))

    def tasks_file():
        try:
            with open(os.path.join(folder, "tasks.json")) as f:
                text = f.read()
            tasks = json.loads(text)["tasks"]
        except FileNotFoundError:
            tasks = []
        except json.JSONDecodeError as error:
            # Overlapping rewrites of different lengths leave the longer one's tail behind.
            print(json.dumps({"tasks.json": "not JSON: %s" % error, "bytes": len(text),
                              "after the JSON": text[error.pos:error.pos + 60]}))
            return
        print(json.dumps({"tasks.json": [{"id": t["id"], "name": t["name"]} for t in tasks]}))

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "by-hand", "version": "0"}}})
    answer()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    if mode == "tools":
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        for tool in answer()["result"]["tools"]:
            if tool["name"] == "split_tasks":
                print(json.dumps({"name": tool["name"], "required": tool["inputSchema"].get("required"),
                                  "properties": sorted(tool["inputSchema"]["properties"]),
                                  "annotations": tool.get("annotations")}))
    elif mode == "refusal":
        send(split(2, "Printer on floor three", description="jammed"))
        show(answer())
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "split_tasks", "arguments": {"updateMode": "append", "tasksRaw": 7}}})
        show(answer())
        tasks_file()
    elif mode == "retry":
        for ident in (2, 3):
            send(split(ident, "Printer on floor three"))
            show(answer())
        tasks_file()
    elif mode in ("reconnect", "reconnected"):
        send(split(2, "Printer on floor three"))
        show(answer())
        if mode == "reconnected":
            tasks_file()
    elif mode == "staggered":
        # As a client with several calls in flight sends them: one after another, a few
        # milliseconds apart, answering each roots/list as soon as it comes, so the server's reads
        # and rewrites of tasks.json overlap at different lengths.
        answers = []

        def reader():
            while len(answers) < 12:
                message = json.loads(server.stdout.readline())
                if message.get("method") == "roots/list":
                    send({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": []}})
                elif "id" in message and "method" not in message:
                    answers.append(message)

        thread = threading.Thread(target=reader)
        thread.start()
        for ident in range(2, 14):
            send(split(ident, "Printer on floor %d" % (ident - 1) + "!" * (ident * 7)))
            time.sleep(0.005)
        thread.join(timeout=30)
        for message in sorted(answers, key=lambda m: m["id"]):
            show(message)
        tasks_file()
    else:
        names = ["Printer on floor %d" % n for n in range(1, 7)]
        for ident, name in enumerate(names, start=2):
            send(split(ident, name))
        for _ in names:
            show(answer())
        tasks_file()
    server.stdin.close()
    server.wait()
    if mode == "reconnect":
        main("reconnected", folder)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "retry")
