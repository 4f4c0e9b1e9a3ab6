#!/usr/bin/env python3
"""One tools/call to the front door, with or without a key, in either era,
for tests/integration/90_mcp_passthrough.sh: prints the JSON-RPC answer (one
line); exits 1 when the connection failed.

  pt_call.py PORT TOKEN TOOL ARGS_JSON [KEY|-] [legacy|modern]
"""
import http.client
import json
import sys

port, token, tool, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
key = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "-" else None
era = sys.argv[6] if len(sys.argv) > 6 else "legacy"
params = {"name": tool, "arguments": args}
meta = {}
if key is not None:
    meta["outbox-relay/idempotency-key"] = key
headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "Authorization": "Bearer " + token}
if era == "modern":
    meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
    meta["io.modelcontextprotocol/clientCapabilities"] = {}
    meta["io.modelcontextprotocol/clientInfo"] = {"name": "pt_call", "version": "1"}
    headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool})
else:
    headers["MCP-Protocol-Version"] = "2025-11-25"
if meta:
    params["_meta"] = meta
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
try:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
    conn.request("POST", "/mcp", body=body, headers=headers)
    r = conn.getresponse()
    print(r.read().decode().strip())
except OSError as e:
    print(json.dumps({"transport_error": str(e)}))
    sys.exit(1)
