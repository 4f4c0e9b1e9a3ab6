#!/usr/bin/env python3
"""The MCP front door, second round (issue 35, items 8, 9 and 12), over raw
HTTP on a socket: what a client sees byte for byte while a tasks/result
blocks, and the headers http.client would not send (twice, not UTF-8).
tests/integration/73_mcp_protocol_second_round.sh starts PostgreSQL, three
receivers (one answering at once, one after 3 s, one after 12 s), a relay and
`outbox-relay mcp --mcp-wait-ms 1000`, then runs this twice:

  PHASE=1  the checks; the last one sends SIGTERM to the front door while a
           tasks/result blocks, and writes the task ids that must still
           complete to $TASKS_FILE;
  PHASE=2  against a new front door: those tasks' results, complete.

Prints one line per check, "ok<TAB>description" or
"not ok<TAB>description<TAB>detail". Environment: MCP_PORT, MCP_PID,
TOKEN_A, RECV_PORT_slow, RECV_PORT_stuck, TASKS_FILE, PHASE, and libpq's PG*.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

PORT = int(os.environ["MCP_PORT"])
TOKEN = os.environ["TOKEN_A"]
PHASE = os.environ.get("PHASE", "1")
TASKS_FILE = os.environ["TASKS_FILE"]
WAIT_MS = 1000  # the front door's --mcp-wait-ms


def check(cond, desc, detail=""):
    if cond:
        print("ok\t%s" % desc)
    else:
        print("not ok\t%s\t%s" % (desc, str(detail).replace("\n", "\\n")[:700]))
    sys.stdout.flush()


def sql(query):
    return subprocess.run(["psql", "-X", "-q", "-tA", "-c", query], capture_output=True, text=True).stdout.strip()


def request(body, headers=(), accept=b"application/json, text/event-stream", token=TOKEN):
    """A POST /mcp as bytes: the usual headers, then `headers` (name, value) as given."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    lines = [b"POST /mcp HTTP/1.1", b"Host: 127.0.0.1:%d" % PORT, b"Content-Type: application/json",
             b"Connection: close", b"Content-Length: %d" % len(body), b"MCP-Protocol-Version: 2025-11-25"]
    if accept:
        lines.append(b"Accept: " + accept)
    if token:
        lines.append(b"Authorization: Bearer " + token.encode())
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def exchange(req, until=None, timeout=60):
    """Sends req; reads until the server closes (or until(data) is true: then
    the socket is returned open). (data, socket or None)."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    s.sendall(req)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if until and until(data):
            return data, s
    s.close()
    return data, None


def parse(data):
    """(status, headers with lower-case names, body bytes)"""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def sse_events(body):
    """(comment lines, the data of each event) of a text/event-stream body"""
    comments, events = [], []
    for block in body.decode().split("\n\n"):
        data = []
        for line in block.split("\n"):
            if line.startswith(":"):
                comments.append(line)
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            events.append("\n".join(data))
    return comments, events


def rpc(method, params, rid=1):
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def as_json(body):
    try:
        return json.loads(body)
    except ValueError:
        return None


def make_task(tool, key, n):
    """A legacy task-augmented call: the task id, answered at once."""
    data, _ = exchange(request(rpc("tools/call", {"name": tool, "arguments": {"n": n}, "task": {"ttl": 600000},
                                                  "_meta": {"outbox-relay/idempotency-key": key}})))
    status, headers, body = parse(data)
    doc = as_json(body) or {}
    return doc.get("result", {}).get("task", {}).get("taskId", ""), doc


def effects(port_var, key):
    s = socket.create_connection(("127.0.0.1", int(os.environ[port_var])), timeout=10)
    s.sendall(b"GET /_effects HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return (as_json(parse(data)[2]) or {}).get(key, 0)


def waiting_calls():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    for line in parse(data)[2].decode().splitlines():
        if line.startswith("outbox_mcp_waiting_calls "):
            return int(float(line.split()[1]))
    return -1


def intents():
    return int(sql("SELECT count(*) FROM outbox.intents"))


def result_of(doc):
    return (doc or {}).get("result", {})


if PHASE == "2":
    # ---- after SIGTERM: nothing was lost ----------------------------------------------------
    tasks = json.load(open(TASKS_FILE))
    for what, tid, key in tasks:
        data, _ = exchange(request(rpc("tasks/result", {"taskId": tid}), accept=b"application/json"))
        status, headers, body = parse(data)
        res = result_of(as_json(body))
        check(status == 200 and res.get("structuredContent", {}).get("status") == "succeeded" and
              res.get("_meta", {}).get("io.modelcontextprotocol/related-task", {}).get("taskId") == tid,
              "after %s: a new front door's tasks/result blocks until the task is terminal and gives its "
              "result" % what, (status, body[:400]))
        check(effects("RECV_PORT_stuck", "mcp:agent-a:" + key) == 1, "after %s: one effect at the target" % what,
              effects("RECV_PORT_stuck", "mcp:agent-a:" + key))
    sys.exit(0)

# ---- item 8: tasks/result blocks until the task is terminal --------------------------------
# The slow target answers after 3 s, three times --mcp-wait-ms: today's front
# door answered tasks/result at 1 s with a result that was not final.
tid, doc = make_task("slow_refund", "r8:sse", 1)
check(tid.startswith("task-") and doc["result"]["task"]["status"] == "working",
      "a task-augmented call to a target slower than --mcp-wait-ms: its task, working, at once", doc)
data, _ = exchange(request(rpc("tasks/result", {"taskId": tid}, rid="r-8")))
status, headers, body = parse(data)
comments, events = sse_events(body)
msg = as_json(events[-1]) if events else None
res = result_of(msg)
check(status == 200 and headers.get("content-type") == "text/event-stream" and "content-length" not in headers,
      "tasks/result (the client accepts SSE) past --mcp-wait-ms: 200, an event stream", (status, headers))
check(len(comments) >= 1 and body.startswith(b":"),
      "the connection is kept alive while it waits: comment lines before the answer", body[:300])
check(len(events) == 1 and msg and msg.get("id") == "r-8" and
      res.get("structuredContent", {}).get("status") == "succeeded" and res.get("isError") is False,
      "then the one message event: the completed result (succeeded), not a working one", body[-600:])
check(res.get("_meta", {}).get("io.modelcontextprotocol/related-task", {}).get("taskId") == tid,
      "the result names its task (related-task)", res.get("_meta"))
check(effects("RECV_PORT_slow", "mcp:agent-a:r8:sse") == 1, "one effect at the target", None)

tid, doc = make_task("slow_refund", "r8:json", 2)
data, _ = exchange(request(rpc("tasks/result", {"taskId": tid}, rid=81), accept=b"application/json"))
status, headers, body = parse(data)
msg = as_json(body)
res = result_of(msg)
check(status == 200 and headers.get("content-type") == "application/json" and body.startswith(b"\n"),
      "a client that accepts only JSON: application/json, kept alive with blank lines before the JSON",
      (status, headers, body[:100]))
check(msg and msg.get("id") == 81 and res.get("structuredContent", {}).get("status") == "succeeded",
      "and the JSON is the completed result", body[:600])

tid, doc = make_task("slow_refund", "r8:json", 2)  # the same key: terminal now
data, _ = exchange(request(rpc("tasks/result", {"taskId": tid})))
status, headers, body = parse(data)
check(status == 200 and headers.get("content-type") == "application/json" and
      headers.get("content-length") == str(len(body)) and
      result_of(as_json(body)).get("structuredContent", {}).get("status") == "succeeded",
      "a terminal task's tasks/result: plain JSON at once, as before", (status, headers, body[:200]))

# The client goes away while tasks/result blocks: the front door notices (a
# keep-alive write fails) and lets the call go; the task and its intent stay.
tid_gone, doc = make_task("stuck_refund", "r8:gone", 3)
data, s = exchange(request(rpc("tasks/result", {"taskId": tid_gone})), until=lambda d: b"\r\n\r\n:" in d)
check(s is not None and parse(data)[0] == 200, "a tasks/result on a target that answers after 12 s streams",
      data[:300])
check(waiting_calls() == 1, "the front door counts it waiting", waiting_calls())
if s is not None:
    s.close()
deadline = time.time() + 9
while waiting_calls() != 0 and time.time() < deadline:
    time.sleep(0.1)
check(waiting_calls() == 0, "the client closed its connection: the front door let the call go", waiting_calls())
state = sql("SELECT state FROM outbox.intents WHERE key = 'mcp:agent-a:r8:gone'")
check(state not in ("succeeded", "failed", "cancelled", ""),
      "before the task was terminal (its intent is %s): noticed by the keep-alive, not by the answer" % state, state)

# ---- item 9: an Idempotency-Key header that is not UTF-8 -------------------------------------
before = intents()
call = rpc("tools/call", {"name": "refund", "arguments": {"n": 9}})
data, _ = exchange(request(call, [(b"Idempotency-Key", b"r9-\xff\xfe")]))
status, headers, body = parse(data)
doc = as_json(body) or {}
check(status == 200 and doc.get("error", {}).get("code") == -32602 and
      "Idempotency-Key header is not UTF-8" in doc["error"].get("message", ""),
      "an Idempotency-Key header that is not UTF-8: -32602, saying so", (status, body[:300]))
bad_args = rpc("tools/call", {"name": "refund", "arguments": {"n": "nine"}})
data, _ = exchange(request(bad_args, [(b"Idempotency-Key", b"\xc3(")]))
status, headers, body = parse(data)
doc = as_json(body) or {}
check(status == 200 and doc.get("error", {}).get("code") == -32602 and "not UTF-8" in doc["error"].get("message", ""),
      "the same with arguments that fail the schema (an answer that names the key): -32602, not an empty body",
      (status, body[:300]))
check(intents() == before, "nothing was enqueued for them", intents() - before)
data, _ = exchange(request(rpc("tools/call", {"name": "refund", "arguments": {"n": 9},
                                              "_meta": {"outbox-relay/idempotency-key": "r9\u0007bell"}})))
doc = as_json(parse(data)[2]) or {}
check(doc.get("error", {}).get("code") == -32602 and "control character" in doc["error"].get("message", ""),
      "a _meta key with a control character: still -32602, saying so", doc)
data, _ = exchange(request(rpc("tools/call", {"name": "refund", "arguments": {"n": 9},
                                              "_meta": {"outbox-relay/idempotency-key": 42}})))
doc = as_json(parse(data)[2]) or {}
check(doc.get("error", {}).get("code") == -32602 and "must be a string" in doc["error"].get("message", ""),
      "a _meta key that is not a string: still -32602, saying so", doc)
data, _ = exchange(request(call, [(b"Idempotency-Key", b"r9\x07bell")]))
status, headers, body = parse(data)
doc = as_json(body) or {}
check((status == 200 and doc.get("error", {}).get("code") == -32602 and "control character" in body.decode())
      or (status == 400 and b"error" in body),
      "an Idempotency-Key header with a control character: refused, saying why", (status, body[:300]))
data, _ = exchange(request(call, [(b"Idempotency-Key", "r9:caf\u00e9".encode())]))
doc = as_json(parse(data)[2]) or {}
check(result_of(doc).get("structuredContent", {}).get("status") == "succeeded",
      "an Idempotency-Key header in UTF-8 (not ASCII) is a key like any other", doc)

# ---- item 12: "id": null, and headers that must come once ------------------------------------
for what, body in (("a body that is not JSON", b"{not json"),
                   ("not JSON-RPC 2.0", b'{"jsonrpc": "1.0", "id": 5, "method": "ping"}'),
                   ("an id that is an object", b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}'),
                   ("a batch", b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]')):
    data, _ = exchange(request(body))
    status, headers, rbody = parse(data)
    doc = as_json(rbody) or {}
    check(status == 400 and doc.get("error", {}).get("code") in (-32700, -32600) and "id" in doc and doc["id"] is None,
          "%s: the error carries \"id\": null" % what, (status, rbody[:300]))
data, _ = exchange(request(b'{"jsonrpc": "2.0", "id": "x-1", "params": {}}'))
doc = as_json(parse(data)[2]) or {}
check(doc.get("id") == "x-1" and doc.get("error", {}).get("code") == -32600,
      "an invalid request whose id can be read: that id", doc)

before = intents()
ping = rpc("ping", {})
data, _ = exchange(request(ping, [(b"Host", b"evil.example")]))
status, headers, body = parse(data)
check(status == 400 and b"Host" in body and b"more than once" in body, "two Host headers: 400", (status, body))
data, _ = exchange(request(rpc("tools/call", {"name": "refund", "arguments": {"n": 12},
                                              "_meta": {"outbox-relay/idempotency-key": "r12:auth"}}),
                           [(b"Authorization", b"Bearer not-a-token")]))
status, headers, body = parse(data)
check(status == 400 and b"Authorization" in body and b"more than once" in body,
      "two Authorization headers (the first a good token): 400, not first-wins", (status, body))
data, _ = exchange(request(rpc("tools/call", {"name": "refund", "arguments": {"n": 12}}),
                           [(b"Idempotency-Key", b"r12:one"), (b"idempotency-key", b"r12:two")]))
status, headers, body = parse(data)
check(status == 400 and b"more than once" in body, "two Idempotency-Key headers: 400", (status, body))
data, _ = exchange(request(rpc("tools/call", {"name": "refund", "arguments": {"n": 12}}),
                           [(b"Idempotency-Key", b"r12:same"), (b"Idempotency-Key", b"r12:same")]))
check(parse(data)[0] == 400, "two equal Idempotency-Key headers: 400 too", data[:200])
check(intents() == before, "nothing was enqueued by them", intents() - before)
data, _ = exchange(request(ping, [(b"X-Trace", b"a"), (b"X-Trace", b"b")]))
check(parse(data)[0] == 200, "another header twice is no reason to refuse", data[:200])

# ---- item 8: SIGTERM while tasks/result blocks -----------------------------------------------
tid_term, doc = make_task("stuck_refund", "r8:term", 4)
data, s = exchange(request(rpc("tasks/result", {"taskId": tid_term}, rid="r-term")),
                   until=lambda d: b"\r\n\r\n:" in d)
check(s is not None, "a tasks/result blocks (streaming) when SIGTERM comes", data[:200])
os.kill(int(os.environ["MCP_PID"]), signal.SIGTERM)
while s is not None:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
status, headers, body = parse(data)
comments, events = sse_events(body)
msg = as_json(events[-1]) if events else {}
err = (msg or {}).get("error", {})
check(len(events) == 1 and msg.get("id") == "r-term" and err.get("code") == -32603 and
      "shutting down" in err.get("message", "") and "Call tasks/result again" in err.get("message", ""),
      "SIGTERM: a JSON-RPC error that says to call tasks/result again, not a result that is not final",
      body[-600:])
check(err.get("data", {}).get("status") == "working" and err.get("data", {}).get("taskId") == tid_term,
      "with the task's id and its status (working)", err)
json.dump([["the client went away", tid_gone, "r8:gone"], ["SIGTERM", tid_term, "r8:term"]], open(TASKS_FILE, "w"))
