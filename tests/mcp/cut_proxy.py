#!/usr/bin/env python3
"""A loopback TCP proxy in front of the MCP front door that loses answers on
purpose: the founding scenario of issue 23 (tests/integration/43_mcp_sdk.sh).

It forwards each HTTP request to the front door as it came. For the FIRST
tools/call of each distinct idempotency key (params._meta
["outbox-relay/idempotency-key"], else the Idempotency-Key header) it reads
the front door's whole response, so the call has fully happened, and then
resets the client's connection (SO_LINGER 0: an RST, no FIN, no bytes of the
answer) instead of passing the response on: the client is left not knowing
whether its call happened. Every later request, that key's retries included,
is passed through untouched. Requests without a key (initialize, tools/list,
...) always pass.

    cut_proxy.py [--no-cut] UPSTREAM_PORT [LIFETIME_SECONDS]

Prints "listening 127.0.0.1:PORT", then one line per request:
"pass METHOD KEY STATUS" or "cut METHOD KEY STATUS BYTES". Exits by itself
after LIFETIME_SECONDS (default 300), so it never outlives its scenario.

CUT_EVERY=N in the environment loses the first answer of every Nth key only
(make demo-mcp). CUT_WITHOUT_KEY=1 keys a tools/call that carries no key by
its tool and arguments as sent (for tools whose key_source is 'arguments':
tests/integration/77_mcp_argument_keys.sh, make demo-mcp), so the first
answer of each distinct call is lost and its retry passes. --no-cut passes every answer on. PROXY_HEADER="Name: value" in the
environment sets that header on every forwarded request (replacing one the
client sent): tests/integration/44_mcp_conformance.sh gives the conformance
suite, which cannot send an Authorization header, the bearer token this way.
Host, Origin and all else go upstream as the client sent them.
"""
import json
import os
import socket
import struct
import sys
import threading
import time

ARGS = [a for a in sys.argv[1:] if a != "--no-cut"]
CUT = "--no-cut" not in sys.argv[1:]
UPSTREAM = ("127.0.0.1", int(ARGS[0]))
LIFETIME = float(ARGS[1]) if len(ARGS) > 1 else 300.0
EXTRA = os.environ.get("PROXY_HEADER", "")
CUT_EVERY = max(1, int(os.environ.get("CUT_EVERY", "1")))
MAX_MESSAGE = 16 * 1024 * 1024
KEY_META = "outbox-relay/idempotency-key"
WITHOUT_KEY = os.environ.get("CUT_WITHOUT_KEY") == "1"

seen_keys = set()
lock = threading.Lock()


def log(line):
    with lock:
        print(line, flush=True)


class Closed(Exception):
    pass


class Reader:
    """Buffered reads of one HTTP/1.1 message at a time from a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Closed()
        self.buf += data
        if len(self.buf) > MAX_MESSAGE:
            raise Closed()

    def until(self, marker):
        while marker not in self.buf:
            self.fill()
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def message(self, is_response=False, request_method=None):
        """(head bytes, header dict, raw body bytes as sent, decoded body)"""
        head = self.until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        status = None
        if is_response:
            status = int(lines[0].split()[1])
        no_body = is_response and (status in (204, 304) or 100 <= status < 200 or request_method == "HEAD")
        if no_body:
            return head, headers, b"", b"", lines[0]
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raw, body = b"", b""
            while True:
                size_line = self.until(b"\r\n")
                raw += size_line
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:  # the last chunk, then trailer lines up to an empty one
                    while True:
                        line = self.until(b"\r\n")
                        raw += line
                        if line == b"\r\n":
                            break
                    break
                chunk = self.exactly(size + 2)
                raw += chunk
                body += chunk[:-2]
            return head, headers, raw, body, lines[0]
        if "content-length" in headers:
            body = self.exactly(int(headers["content-length"]))
            return head, headers, body, body, lines[0]
        if is_response:  # read to the end of the connection
            try:
                while True:
                    self.fill()
            except Closed:
                pass
            body, self.buf = self.buf, b""
            return head, headers, body, body, lines[0]
        return head, headers, b"", b"", lines[0]


def key_of(method_line, headers, body):
    if not method_line.startswith("POST "):
        return None, None
    try:
        doc = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    method = doc.get("method")
    params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
    meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
    key = meta.get(KEY_META) or headers.get("idempotency-key")
    if key is None and WITHOUT_KEY and method == "tools/call":
        key = "args:%s:%s" % (params.get("name"), json.dumps(params.get("arguments"), sort_keys=True,
                                                             separators=(",", ":")))
    return method, (key if method == "tools/call" else None)


def with_header(head, line):
    """The request head with header LINE ("Name: value") set, replacing any of that name."""
    if not line:
        return head
    name = line.split(":", 1)[0].strip().lower()
    lines = head[:-4].split(b"\r\n")
    kept = [lines[0]] + [x for x in lines[1:] if x.split(b":", 1)[0].strip().lower() != name.encode()]
    return b"\r\n".join(kept + [line.encode("latin-1")]) + b"\r\n\r\n"


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def serve(client):
    reader = Reader(client)
    try:
        while True:
            head, headers, raw, body, first = reader.message()
            method, key = key_of(first, headers, body)
            upstream = socket.create_connection(UPSTREAM, timeout=120)
            try:
                upstream.sendall(with_header(head, EXTRA) + raw)
                up = Reader(upstream)
                rhead, rheaders, rraw, rbody, rfirst = up.message(True, first.split(" ")[0])
            finally:
                upstream.close()
            status = rfirst.split(" ")[1]
            with lock:
                cut = CUT and key is not None and key not in seen_keys
                if key is not None and key not in seen_keys:
                    seen_keys.add(key)
                    # CUT_EVERY=N: only the first answer of every Nth new key is lost
                    cut = cut and len(seen_keys) % CUT_EVERY == 0
            if cut:
                log("cut %s %s %s %d" % (method, key, status, len(rhead) + len(rraw)))
                reset(client)
                return
            log("pass %s %s %s" % (method or first.split(" ")[0], key or "-", status))
            client.sendall(rhead + rraw)
            if rheaders.get("connection", "").lower() == "close" or \
                    headers.get("connection", "").lower() == "close":
                break
    except (Closed, OSError):
        pass
    try:
        client.close()
    except OSError:
        pass


def main():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(1.0)
    print("listening 127.0.0.1:%d" % listener.getsockname()[1], flush=True)
    deadline = time.monotonic() + LIFETIME
    while time.monotonic() < deadline:
        try:
            client, _ = listener.accept()
        except socket.timeout:
            continue
        client.settimeout(120)
        threading.Thread(target=serve, args=(client,), daemon=True).start()


if __name__ == "__main__":
    main()
