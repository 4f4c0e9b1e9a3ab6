#!/usr/bin/env python3
"""One MCP request to the front door over plain HTTP, for the scenarios'
shell scripts: prints the JSON-RPC answer (one line), exits 0 when an answer
came (whatever it says), 1 when the connection failed.

  mcp_call.py PORT TOKEN call TOOL KEY ARGS_JSON [--task] [--raw]   tools/call (2025-11-25);
      --raw: ARGS_JSON goes into the body byte for byte (Python would turn
      19.99 into a float and 1e400 into Infinity)
  mcp_call.py PORT TOKEN get|result|cancel TASK_ID          tasks/get, tasks/result, tasks/cancel
  mcp_call.py PORT TOKEN list                               tools/list
"""
import http.client
import json
import sys

port, token, what = int(sys.argv[1]), sys.argv[2], sys.argv[3]
raw = what == "call" and "--raw" in sys.argv[7:]
if what == "call":
    params = {"name": sys.argv[4], "arguments": {} if raw else json.loads(sys.argv[6]),
              "_meta": {"outbox-relay/idempotency-key": sys.argv[5]}}
    if "--task" in sys.argv[7:]:
        params["task"] = {"ttl": 600000}
    method = "tools/call"
elif what == "list":
    method, params = "tools/list", {}
else:
    method = {"get": "tasks/get", "result": "tasks/result", "cancel": "tasks/cancel"}[what]
    params = {"taskId": sys.argv[4]}
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
if raw:
    body = body.replace('"arguments": {}', '"arguments": ' + sys.argv[6], 1)
try:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
    conn.request("POST", "/mcp", body=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "Authorization": "Bearer " + token, "MCP-Protocol-Version": "2025-11-25"})
    r = conn.getresponse()
    text = r.read().decode()
    if r.getheader("Content-Type", "").startswith("text/event-stream"):
        # a tasks/result that blocked past --mcp-wait-ms: the message is the data of the last event
        data = [line[5:].strip() for line in text.split("\n") if line.startswith("data:")]
        text = data[-1] if data else ""
    print(text.strip())
except OSError as e:
    print(json.dumps({"transport_error": str(e)}))
    sys.exit(1)
