#!/usr/bin/env python3
"""The MCP front door over real HTTP, without an SDK: every answer that the
protocol, the tokens and the keys decide (tests/integration/42_mcp_protocol.sh
starts PostgreSQL, a receiver, a relay and `outbox-relay mcp`, then runs this).

Prints one line per check, "ok<TAB>description" or
"not ok<TAB>description<TAB>detail"; the scenario turns them into TAP.
Environment: MCP_PORT, RECV_PORT, TOKEN_A, TOKEN_B, TOKEN_C, and libpq's PG*
for counting rows with psql.
"""
import http.client
import json
import os
import subprocess
import sys

PORT = int(os.environ["MCP_PORT"])
RECV = int(os.environ["RECV_PORT"])
TOKEN_A, TOKEN_B, TOKEN_C = os.environ["TOKEN_A"], os.environ["TOKEN_B"], os.environ["TOKEN_C"]
MODERN = "2026-07-28"


def check(cond, desc, detail=""):
    if cond:
        print("ok\t%s" % desc)
    else:
        print("not ok\t%s\t%s" % (desc, str(detail).replace("\n", " ")[:600]))
    sys.stdout.flush()


def sql(query):
    return subprocess.run(["psql", "-X", "-q", "-tA", "-c", query], capture_output=True, text=True).stdout.strip()


def send(method="POST", path="/mcp", body=None, headers=None, token=TOKEN_A, raw=None):
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        h["Authorization"] = "Bearer " + token
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    text = r.read()
    conn.close()
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = None
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), doc


def rpc(method, params=None, rid=1, **kw):
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return send(body=msg, **kw)


def legacy(method, params=None, **kw):
    headers = kw.pop("headers", {})
    headers.setdefault("MCP-Protocol-Version", "2025-11-25")
    return rpc(method, params, headers=headers, **kw)


def modern_meta(extra=None, tasks=False):
    caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}} if tasks else {}
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "checks", "version": "1"}}
    meta.update(extra or {})
    return meta


def modern(method, params=None, name=None, headers=None, **kw):
    h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    h.update(headers or {})
    return rpc(method, params, headers=h, **kw)


def call(key, args, token=TOKEN_A, tool="refund", **kw):
    params = {"name": tool, "arguments": args}
    if key is not None:
        params["_meta"] = {"outbox-relay/idempotency-key": key}
    return legacy("tools/call", params, token=token, **kw)


def effects(key):
    conn = http.client.HTTPConnection("127.0.0.1", RECV, timeout=10)
    conn.request("GET", "/_stats")
    stats = json.loads(conn.getresponse().read())
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", RECV, timeout=10)
    conn.request("GET", "/_effects")
    eff = json.loads(conn.getresponse().read())
    conn.close()
    return eff.get(key, 0), stats


def intents():
    return int(sql("SELECT count(*) FROM outbox.intents"))


# ---- legacy era: the handshake ----------------------------------------------------------
st, h, doc = rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "checks", "version": "1"}})
res = (doc or {}).get("result", {})
check(st == 200 and res.get("protocolVersion") == "2025-11-25", "initialize answers 2025-11-25", (st, doc))
check(res.get("serverInfo", {}).get("name") == "outbox-relay" and "tools" in res.get("capabilities", {}),
      "initialize: serverInfo and the tools capability", doc)
check("mcp-session-id" not in h, "no session id is minted", h)
st, h, doc = rpc("initialize", {"protocolVersion": "2024-01-01", "capabilities": {},
                                "clientInfo": {"name": "checks", "version": "1"}})
check(st == 200 and doc["result"]["protocolVersion"] == "2025-11-25",
      "initialize with an unknown version is answered with ours", doc)
st, h, doc = send(body={"jsonrpc": "2.0", "method": "notifications/initialized"},
                  headers={"MCP-Protocol-Version": "2025-11-25"})
check(st == 202 and doc is None, "notifications/initialized: 202, no body", (st, doc))
st, h, doc = legacy("ping")
check(st == 200 and doc.get("result") == {}, "ping: {}", doc)
st, h, doc = legacy("ping", headers={"MCP-Protocol-Version": "1999-01-01"})
check(st == 400, "a legacy request with an unsupported MCP-Protocol-Version: 400", (st, doc))

# ---- tools/list ---------------------------------------------------------------------------
st, h, doc = legacy("tools/list")
tools = {t["name"]: t for t in doc["result"]["tools"]}
check(sorted(tools) == ["note", "ping_note", "refund"], "client A sees its tools, in order", sorted(tools))
refund = tools.get("refund", {})
check(refund.get("inputSchema", {}).get("required") == ["account", "amount_cents"],
      "the tool's inputSchema is the registered one", refund.get("inputSchema"))
check(refund.get("annotations", {}).get("idempotentHint") is True and
      refund.get("annotations", {}).get("destructiveHint") is True,
      "annotations: idempotentHint true, destructiveHint from the row", refund.get("annotations"))
check(refund.get("execution", {}).get("taskSupport") == "optional", "2025-11-25: execution.taskSupport optional",
      refund)
check(refund.get("outputSchema", {}).get("required") == ["status", "key", "message"],
      "outputSchema describes the result envelope", refund.get("outputSchema"))
st, h, doc = legacy("tools/list", token=TOKEN_C)
check([t["name"] for t in doc["result"]["tools"]] == ["note"], "client C sees only the tool it was given", doc)

# ---- tools/call: the outcome, once -------------------------------------------------------
before = intents()
st, h, doc = call("run-1:step-1", {"account": 42, "amount_cents": 2500})
res = (doc or {}).get("result", {})
sc = res.get("structuredContent", {})
check(st == 200 and res.get("isError") is False and sc.get("status") == "succeeded",
      "a call to a target that answers: succeeded", doc)
check(sc.get("response_status") == 200 and isinstance(sc.get("response"), dict) and sc["response"].get("ok") is True,
      "structuredContent carries the saved response, parsed", sc)
check(sc.get("key") == "run-1:step-1" and sc.get("target") == "refund" and sc.get("attempts") == 1,
      "with the key, the target and one attempt", sc)
text = res["content"][0]["text"]
check(text.split("\n", 1)[0] == sc.get("message") and json.loads(text.split("\n", 1)[1]) == sc,
      "the text block starts with what the outcome means (the message), then the same JSON", res.get("content"))
n, stats = effects("mcp:agent-a:run-1:step-1")
check(n == 1, "one effect at the receiver, under the namespaced key", n)
st, h, doc = call("run-1:step-1", {"account": 42, "amount_cents": 2500})
sc2 = doc["result"]["structuredContent"]
check(sc2 == sc, "the same key and arguments again: the same saved outcome", (sc2, sc))
n, stats = effects("mcp:agent-a:run-1:step-1")
check(n == 1 and intents() == before + 1, "and nothing sent twice, one intent", (n, intents(), before))

st, h, doc = call("run-1:step-1", {"account": 42, "amount_cents": 9999})
res = doc["result"]
check(res.get("isError") is True and res["structuredContent"]["status"] == "key_conflict" and
      res["structuredContent"].get("fields") == ["amount_cents"],
      "the key with other arguments: isError, key_conflict, the fields that differ", res)

# ---- bad input: nothing enqueued ----------------------------------------------------------
before = intents()
st, h, doc = call("run-1:step-2", {"account": "42", "amount_cents": -5, "extra": 1})
res = doc["result"]
check(res.get("isError") is True and res["structuredContent"]["status"] == "invalid_arguments",
      "arguments that fail the schema: isError, invalid_arguments", res)
errs = " ".join(res["structuredContent"].get("errors", []))
check("/account" in errs and "/amount_cents" in errs and "/extra" in errs, "naming every path", errs)
st, h, doc = call(None, {"account": 42, "amount_cents": 1})
check(doc.get("error", {}).get("code") == -32602 and "outbox-relay/idempotency-key" in doc["error"]["message"],
      "no key: -32602 saying where to put it", doc)
st, h, doc = call(None, {"account": "x"})
check(doc.get("result", {}).get("isError") is True, "no key and bad arguments: the arguments are checked first", doc)
st, h, doc = call("run-1:step-3", {"account": 42, "amount_cents": 1}, headers={"Idempotency-Key": "other"})
check(doc.get("error", {}).get("code") == -32602 and "differ" in doc["error"]["message"],
      "Idempotency-Key header and _meta key differ: -32602", doc)
st, h, doc = call("bad\nkey", {"account": 42, "amount_cents": 1})
check(doc.get("error", {}).get("code") == -32602 and "control character" in doc["error"]["message"],
      "a key with a control character: -32602 from enqueue's check", doc)
st, h, doc = call("k" * 300, {"account": 42, "amount_cents": 1})
check(doc.get("error", {}).get("code") == -32602 and "limit" in doc["error"]["message"],
      "a key too long for the namespace: -32602 naming the limit", doc)
st, h, doc = call("run-1:step-4", {"account": 42, "amount_cents": 1}, tool="nope")
check(doc.get("error", {}).get("code") == -32602 and "Unknown tool" in doc["error"]["message"],
      "an unknown tool: -32602", doc)
st, h, doc = call("run-1:step-4", {"account": 42, "amount_cents": 1}, token=TOKEN_C)
check(doc.get("error", {}).get("code") == -32602, "another client's tool: -32602 (as if unknown)", doc)
check(intents() == before, "none of these enqueued anything", (intents(), before))

# the key through the header, and client B using A's key
st, h, doc = legacy("tools/call", {"name": "refund", "arguments": {"account": 7, "amount_cents": 100}},
                    headers={"Idempotency-Key": "run-2:step-1", "MCP-Protocol-Version": "2025-11-25"})
check(doc["result"]["structuredContent"]["status"] == "succeeded", "the key in the Idempotency-Key header", doc)
st, h, doc = call("run-1:step-1", {"account": 42, "amount_cents": 9999}, token=TOKEN_B)
check(doc["result"]["structuredContent"]["status"] == "succeeded",
      "client B with A's key and other arguments: no conflict, its own intent", doc)
check(effects("mcp:agent-b:run-1:step-1")[0] == 1 and effects("mcp:agent-a:run-1:step-1")[0] == 1,
      "the target received two namespaced keys, one effect each", None)

# a retry whose arguments differ only in the target's volatile field is the same intent
st, h, doc = call("run-3:note", {"text": "hello", "sent_at": "10:00"}, tool="note")
first = (doc or {}).get("result", {}).get("structuredContent", doc)
st, h, doc = call("run-3:note", {"text": "hello", "sent_at": "10:05"}, tool="note")
again = (doc or {}).get("result", {}).get("structuredContent", doc)
check(first.get("status") == "succeeded" and again.get("status") == "succeeded" and again.get("attempts") == 1 and
      again.get("response") == first.get("response"),
      "a retry whose arguments changed only in a volatile field (sent_at): the same intent and outcome", (first, again))
check(effects("mcp:agent-a:run-3:note")[0] == 1, "one effect for it", None)

# a tool that opted in to server-minted keys: a call without a key is a new action each time
st, h, doc = call(None, {"text": "a"}, tool="ping_note")
m1 = (doc or {}).get("result", {}).get("structuredContent", doc)
st, h, doc = call(None, {"text": "a"}, tool="ping_note")
m2 = (doc or {}).get("result", {}).get("structuredContent", doc)
check(m1.get("status") == "succeeded" and m1.get("key", "").startswith("minted-") and m2.get("key") != m1.get("key"),
      "server_keys: a call without a key gets a minted one, and a repeat is a new action (no dedupe)", (m1, m2))

# ---- the transport's refusals -------------------------------------------------------------
st, h, doc = legacy("ping", token=None)
check(st == 401 and "bearer" in h.get("www-authenticate", "").lower(), "no token: 401 with WWW-Authenticate", (st, h))
st, h, doc = legacy("tools/list", token="not-a-token-of-anyone-0123456789abcdef")
check(st == 401, "a wrong token: 401", st)
st, h, doc = send(method="GET")
check(st == 405 and h.get("allow") == "POST", "GET /mcp: 405, Allow: POST", (st, h))
st, h, doc = send(method="DELETE")
check(st == 405, "DELETE /mcp: 405", st)
st, h, doc = send(body=[{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
check(st == 400 and doc["error"]["code"] == -32600, "a batch: 400, -32600", (st, doc))
st, h, doc = send(raw=b"{not json")
check(st == 400 and doc["error"]["code"] == -32700, "bad JSON: 400, -32700", (st, doc))
st, h, doc = send(raw=b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (10 * 1024 * 1024) + b'"}}')
check(st == 413, "a 10 MB body: 413", st)
st, h, doc = send(raw=b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + b"[" * 5000 + b"]" * 5000 + b"}")
check(st == 400 and doc and doc["error"]["code"] == -32700, "a body nested 5,000 deep: 400, -32700", (st, doc))
st, h, doc = legacy("ping", headers={"Host": "attacker.example"})
check(st == 403, "a Host that is not ours: 403 (DNS rebinding)", st)
st, h, doc = legacy("ping", headers={"Origin": "http://attacker.example"})
check(st == 403, "an Origin that is not allowed: 403", st)
st, h, doc = legacy("ping", headers={"Host": "localhost:%d" % PORT, "Origin": "http://localhost:%d" % PORT})
check(st == 200, "our own Host and a loopback Origin: 200", st)
st, h, doc = legacy("resources/list")
check(st == 200 and doc["error"]["code"] == -32601, "legacy: an unknown method is -32601 (HTTP 200)", (st, doc))

st, h, doc = legacy("ping", headers={"Host": "127.evil.example"})
check(st == 403, "a Host that only starts like a loopback address (127.evil.example): 403", st)

# Pipelined requests, the connection reset after the first answer: the second
# call must not outlive its connection (a use-after-free the sanitizers catch).
import socket, struct, time
def pipelined_then_reset(token):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    one = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"MCP-Protocol-Version: 2025-11-25\r\nAuthorization: Bearer " + token.encode() +
           b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s = socket.create_connection(("127.0.0.1", PORT))
    s.sendall(one + one)
    s.recv(65536)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
for i in range(60):
    pipelined_then_reset("wrong-token-%d" % i if i % 2 else TOKEN_A)
time.sleep(1.5)
st, h, doc = legacy("ping")
check(st == 200 and doc.get("result") == {}, "60 pipelined pairs reset after the first answer: the front door still answers", (st, doc))

# ---- modern era (2026-07-28) --------------------------------------------------------------
st, h, doc = modern("server/discover", {"_meta": modern_meta()})
res = (doc or {}).get("result", {})
check(st == 200 and MODERN in res.get("supportedVersions", []) and "2025-11-25" in res.get("supportedVersions", []),
      "server/discover: both eras' versions", doc)
check(res.get("resultType") == "complete" and res.get("ttlMs", -1) >= 0 and res.get("cacheScope") in ("public", "private"),
      "with resultType, ttlMs and cacheScope", res)
check(res.get("_meta", {}).get("io.modelcontextprotocol/serverInfo", {}).get("name") == "outbox-relay",
      "and serverInfo in _meta", res.get("_meta"))
check("io.modelcontextprotocol/tasks" in res.get("capabilities", {}).get("extensions", {}),
      "the tasks extension is offered", res.get("capabilities"))
st, h, doc = modern("tools/list", {"_meta": modern_meta()})
res = doc["result"]
check(res.get("resultType") == "complete" and res.get("cacheScope") == "private" and "ttlMs" in res,
      "modern tools/list: resultType, ttlMs, cacheScope private (it depends on the token)", res)
check("execution" not in res["tools"][0], "modern tools carry no execution field", res["tools"][0])
st, h, doc = modern("tools/call", {"_meta": modern_meta({"outbox-relay/idempotency-key": "m-1"}),
                                   "name": "refund", "arguments": {"account": 1, "amount_cents": 5}}, name="refund")
res = doc["result"]
check(res.get("resultType") == "complete" and res["structuredContent"]["status"] == "succeeded",
      "modern tools/call: succeeded, resultType complete", doc)
st, h, doc = modern("tools/call", {"_meta": modern_meta({"outbox-relay/idempotency-key": "m-2"}),
                                   "name": "refund", "arguments": {"account": 1, "amount_cents": 5}}, name="note")
check(st == 400 and doc["error"]["code"] == -32020, "Mcp-Name that is not the body's tool: 400, -32020", (st, doc))
st, h, doc = modern("tools/list", {"_meta": modern_meta()}, headers={"Mcp-Method": "tools/call"})
check(st == 400 and doc["error"]["code"] == -32020, "Mcp-Method that is not the body's: 400, -32020", (st, doc))
st, h, doc = rpc("tools/list", {"_meta": modern_meta()}, headers={"Mcp-Method": "tools/list"})
check(st == 400 and doc["error"]["code"] == -32020, "no MCP-Protocol-Version header: 400, -32020", (st, doc))
st, h, doc = modern("tools/list", {"_meta": modern_meta({"io.modelcontextprotocol/protocolVersion": "v999"})},
                    headers={"MCP-Protocol-Version": "v999"})
check(st == 400 and doc["error"]["code"] == -32022 and doc["error"]["data"]["requested"] == "v999",
      "an unsupported version: 400, -32022 with supported and requested", (st, doc))
st, h, doc = modern("tools/list", {})
check(st == 400 and doc["error"]["code"] == -32602, "the 2026 header without the _meta envelope: 400, -32602", (st, doc))
st, h, doc = modern("resources/list", {"_meta": modern_meta()})
check(st == 404 and doc["error"]["code"] == -32601 and doc.get("id") == 1, "modern unknown method: 404, -32601, the id echoed", (st, doc))
st, h, doc = modern("ping", {"_meta": modern_meta()})
check(st == 404, "modern ping: 404 (removed in 2026-07-28)", st)
st, h, doc = modern("tasks/get", {"_meta": modern_meta(), "taskId": "x"}, name="x")
check(st == 400 and doc["error"]["code"] == -32021, "modern tasks/get without the tasks extension: 400, -32021", (st, doc))

# ---- tasks (2025-11-25) ----------------------------------------------------------------------
st, h, doc = legacy("tools/call", {"name": "refund", "arguments": {"account": 3, "amount_cents": 30},
                                   "task": {"ttl": 60000},
                                   "_meta": {"outbox-relay/idempotency-key": "t-1"}})
task = (doc or {}).get("result", {}).get("task", {})
check(task.get("taskId", "").startswith("task-") and len(task["taskId"]) >= 64 and task.get("ttl") == 60000,
      "a task-augmented call returns a task with an unguessable id at once", doc)
tid = task.get("taskId", "")
check(sql("SELECT count(*) FROM outbox.mcp_tasks WHERE task_id = '%s'" % tid) == "1", "durable before it is returned", tid)
st, h, doc = legacy("tools/call", {"name": "refund", "arguments": {"account": 3, "amount_cents": 30},
                                   "task": {}, "_meta": {"outbox-relay/idempotency-key": "t-1"}})
check(doc["result"]["task"]["taskId"] == tid, "the same key gives the same task", doc)
st, h, doc = legacy("tasks/result", {"taskId": tid})
res = doc.get("result", {})
check(res.get("structuredContent", {}).get("status") == "succeeded" and
      res.get("_meta", {}).get("io.modelcontextprotocol/related-task", {}).get("taskId") == tid,
      "tasks/result: the call's result, with related-task", doc)
st, h, doc = legacy("tasks/get", {"taskId": tid})
check(doc["result"].get("status") == "completed", "tasks/get: completed", doc)
st, h, doc = legacy("tasks/get", {"taskId": tid}, token=TOKEN_B)
check(doc.get("error", {}).get("code") == -32602, "another client cannot read the task", doc)
st, h, doc = legacy("tasks/list")
check(any(t["taskId"] == tid for t in doc["result"]["tasks"]), "tasks/list lists it", doc)
st, h, doc = legacy("tasks/cancel", {"taskId": tid})
check(doc.get("error", {}).get("code") == -32602 and "already" in doc["error"]["message"],
      "tasks/cancel of a finished task: an error", doc)
