#!/usr/bin/env python3
"""Loads for the front door's admission (tests/integration/72_mcp_admission.sh
and the bench's mcp scenario): many requests at once over raw sockets, each
sent whole before any answer is read, and what came back counted.

  admission_load.py calls PORT TOKEN TOOL N BYTES PREFIX [SHAPE]
      N concurrent tools/call (keys PREFIX:1..N) whose arguments make a body
      of about BYTES; prints {"<status>": count, ..., "retry_after": n}
      (how many answers carried Retry-After). SHAPE: ints ([1,1,…], the
      costliest to parse per byte) or strings (["abcdefgh",…]).
      ADMISSION_LAST_BYTES=M: the last call's body is of about M bytes.
  admission_load.py bad PORT N
      N requests one after another with a made-up token (pings, then a
      notification and a JSON-RPC response): prints the statuses counted.
  admission_load.py silent PORT N [SOURCE]
      opens N connections that send nothing (from SOURCE, e.g. 127.0.0.2),
      prints "open N" and how many the server has closed, five times a
      second, until killed (or for 120 s).
"""
import json
import os
import socket
import sys
import threading
import time


def body_of(tool, key, size, shape):
    head = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {"data": []},
                       "_meta": {"outbox-relay/idempotency-key": key}}}
    text = json.dumps(head)
    item = "1," if shape == "ints" else '"abcdefgh",'
    n = max(1, (size - len(text)) // len(item))
    data = "[" + (item * n)[:-1] + "]"
    return text.replace('"data": []', '"data": ' + data).encode()


def request(port, token, body, timeout=120):
    """One POST /mcp on its own connection: (status, headers text, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = ("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            "Authorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (token, len(body))).encode()
    try:
        s.sendall(head + body)
    except OSError:
        pass  # refused before the body was read: the answer is still there
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    if not data.startswith(b"HTTP/1.1 "):
        return 0, "", data
    header, _, rest = data.partition(b"\r\n\r\n")
    return int(header.split()[1]), header.decode(errors="replace"), rest


def calls(port, token, tool, n, size, prefix, shape):
    results = [None] * n
    bodies = [body_of(tool, "%s:%d" % (prefix, i + 1), size, shape) for i in range(n)]
    big = int(os.environ.get("ADMISSION_LAST_BYTES", "0"))
    if big:  # the last call's body of another size (tests/integration/92)
        bodies[-1] = body_of(tool, "%s:%d" % (prefix, n), big, shape)
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        try:
            results[i] = request(port, token, bodies[i])
        except OSError as e:
            results[i] = (0, "", str(e).encode())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = {}
    retry_after = 0
    for status, header, _ in results:
        counts[str(status)] = counts.get(str(status), 0) + 1
        if "\nRetry-After:" in header:
            retry_after += 1
    counts["retry_after"] = retry_after
    print(json.dumps(counts, sort_keys=True))


def bad(port, n):
    token = os.urandom(16).hex()
    counts = {}
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    for _ in range(n):
        status, _, _ = request(port, token, ping, timeout=30)
        counts["ping %d" % status] = counts.get("ping %d" % status, 0) + 1
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    counts["notification"] = request(port, token, note, timeout=30)[0]
    answer = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {}}).encode()
    counts["response"] = request(port, token, answer, timeout=30)[0]
    print(json.dumps(counts, sort_keys=True))


def silent(port, n, source):
    socks = []
    for _ in range(n):
        s = socket.socket()
        if source:
            s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    print("open %d" % len(socks), flush=True)
    until = time.time() + 120  # a safety: a scenario that forgets it does not leave it behind
    while time.time() < until:
        closed = 0
        for s in socks:
            try:
                if s.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        print("closed %d" % closed, flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "calls":
        calls(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]),
              sys.argv[7], sys.argv[8] if len(sys.argv) > 8 else "ints")
    elif what == "bad":
        bad(int(sys.argv[2]), int(sys.argv[3]))
    elif what == "silent":
        silent(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
    else:
        sys.exit(__doc__)
