#!/usr/bin/env python3
"""inbox_receiver.py — a receiving service that acts once per idempotency key, with the inbox helper.

outbox-relay delivers at least once: a reply lost on the way back, a relay that dies after
sending, and the same key comes again. Exactly-once *effect* needs the receiver to
deduplicate (docs/design.md, principle 4). This is a small payments service that does, with
schema/inbox.sql in its OWN database (not the outbox's), standard library HTTP and psycopg 3
(Debian: python3-psycopg):

    python3 inbox_receiver.py --db postgresql://payments_receiver@127.0.0.1/payments \\
        --install ../../../schema/inbox.sql --listen 127.0.0.1:8080
    # prints "listening 127.0.0.1:8080"; register it as a target (as an outbox admin):
    #   INSERT INTO outbox.targets (name, url, status_url) VALUES ('payments.refund',
    #     'http://127.0.0.1:8080/refunds', 'http://127.0.0.1:8080/by-key/{key}');

A delivery (POST, PUT or PATCH to any path but /by-key/... and /healthz) carries the key in
the Idempotency-Key header and a JSON object {"account": 42, "amount_cents": 2500}. In ONE
transaction:

    SELECT duplicate, status, response FROM inbox.begin(key, body)
      duplicate: answer the stored status and response; nothing else happens
    INSERT INTO refunds (key, account, amount_cents)        -- the effect
    SELECT inbox.finish(key, 200, response)                 -- the answer, stored with it
    COMMIT, then answer

so a duplicate, one after the other or at the same time (inbox.begin waits for the first
transaction's claim), gets the first answer byte for byte and causes no second refund. A
business refusal would be finish()ed too, so that a duplicate gets the same refusal.

    GET /by-key/{key}   the status URL: 200 {"key", "status", "response"} once the key is
                        processed, 404 while it is not (outbox-relay: "executed" / "not
                        executed" when an attempt's outcome is unknown)
    GET /healthz        200

Errors: no key 400; a body that is not such an object 400; a body over 1 MiB 413; the key
reused with another body 422 (inbox SQLSTATE IB001: outbox-relay records a key conflict);
database trouble 503 with Retry-After (nothing stored: the sender's retry starts afresh).

Options: --listen HOST:PORT (default 127.0.0.1:0; prints "listening HOST:PORT" once bound),
--db CONNINFO (default DATABASE_URL, else libpq's PG* variables), --key-header NAME (default
Idempotency-Key), --install PATH (apply schema/inbox.sql from PATH and create the refunds
table, both idempotent, before serving; needs CREATE in the database). One line per answered
delivery on stderr: "delivery KEY new|duplicate STATUS". SIGTERM or SIGINT stops it.

Shape: one thread and one database connection per HTTP connection (ThreadingHTTPServer);
the relay keeps its connections alive, so a connection serves many deliveries.
"""
import argparse
import json
import os
import signal
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
from psycopg.types.json import Jsonb

MAX_BODY = 1024 * 1024

# The receiver's own table, beside schema/inbox.sql. key is not unique on purpose: the
# inbox, not a constraint, keeps a key to one refund, and a second one would show here.
REFUNDS_DDL = """
CREATE TABLE IF NOT EXISTS refunds (
    id           bigserial PRIMARY KEY,
    key          text NOT NULL,
    account      integer NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    created_at   timestamptz NOT NULL DEFAULT now()
)
"""

# The effect and the answer it leads to, as jsonb text: a duplicate gets inbox.begin's
# response::text, the same text.
EFFECT_SQL = """
INSERT INTO refunds (key, account, amount_cents) VALUES (%(key)s, %(account)s, %(amount)s)
RETURNING jsonb_build_object('refund_id', id, 'key', key, 'account', account,
                             'amount_cents', amount_cents)::text
"""

OPTIONS = None


class Refusal(Exception):
    """An answer without a transaction: the request is malformed."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def parse_request(body):
    try:
        request = json.loads(body)
    except ValueError:
        raise Refusal(400, "the body is not JSON")
    if not isinstance(request, dict):
        raise Refusal(400, "the body is not a JSON object")
    account, amount = request.get("account"), request.get("amount_cents")
    if type(account) is not int or type(amount) is not int or amount <= 0:
        raise Refusal(400, "account and a positive amount_cents, both integers, are required")
    return request


def deliver(conn, key, request):
    """One delivery in one transaction: (status, response text, "new" or "duplicate")."""
    with conn.transaction():
        duplicate, status, response = conn.execute(
            "SELECT duplicate, status, response::text FROM inbox.begin(%s, %s)",
            (key, Jsonb(request))).fetchone()
        if duplicate:
            return status, response, "duplicate"   # nothing was written: the commit is empty
        response = conn.execute(EFFECT_SQL, {"key": key, "account": request["account"],
                                             "amount": request["amount_cents"]}).fetchone()[0]
        conn.execute("SELECT inbox.finish(%s, 200, %s::jsonb)", (key, response))
    return 200, response, "new"


def lookup(conn, key):
    row = conn.execute(
        "SELECT jsonb_build_object('key', %s::text, 'status', status, 'response', response)::text"
        "  FROM inbox.lookup(%s)", (key, key)).fetchone()
    return (200, row[0]) if row else (404, json.dumps({"error": "no answer stored for this key"}))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive: the relay reuses its connections
    timeout = 30                    # an idle connection is closed
    conn = None                     # this HTTP connection's database connection

    def db(self):
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(OPTIONS.db, autocommit=True)
        return self.conn

    def finish(self):
        super().finish()
        if self.conn is not None:
            self.conn.close()

    def answer(self, status, body, retry_after=False):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, message, retry_after=False):
        self.answer(status, json.dumps({"error": message}), retry_after)

    def database_failed(self, err):
        sqlstate = getattr(err, "sqlstate", None)
        if sqlstate == "IB001":
            return self.error(422, str(err).strip())
        if sqlstate == "IB004" or (sqlstate or "").startswith("22"):
            return self.error(400, str(err).strip())
        print("inbox-receiver: %s %s" % (sqlstate, str(err).strip()), file=sys.stderr, flush=True)
        if self.conn is not None and self.conn.broken:
            self.conn = None
        self.error(503, "database unavailable, nothing stored", retry_after=True)

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/healthz":
            return self.answer(200, '{"ok": true}')
        if not path.startswith("/by-key/"):
            return self.error(404, "no such path")
        try:
            self.answer(*lookup(self.db(), urllib.parse.unquote(path[len("/by-key/"):])))
        except psycopg.Error as err:
            self.database_failed(err)

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/healthz" or path.startswith("/by-key/"):
            self.close_connection = True   # the body is not read
            return self.error(405, "GET only here")
        key = self.headers.get(OPTIONS.key_header, "")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True   # the body is not read
            return self.error(413 if length > MAX_BODY else 400, "a body of at most 1 MiB is required")
        body = self.rfile.read(length)
        try:
            if not key:
                raise Refusal(400, "no %s header" % OPTIONS.key_header)
            request = parse_request(body)
        except Refusal as refusal:
            return self.error(refusal.status, str(refusal))
        for attempt in range(3):
            try:
                status, response, how = deliver(self.db(), key, request)
                break
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as err:
                if attempt == 2:           # else the whole transaction simply runs again
                    return self.database_failed(err)
            except psycopg.Error as err:
                return self.database_failed(err)
        print("delivery %s %s %d" % (key, how, status), file=sys.stderr, flush=True)
        self.answer(status, response)

    do_PUT = do_POST
    do_PATCH = do_POST

    def log_message(self, format, *args):   # one line per delivery is enough
        pass


def install(conninfo, inbox_sql_path):
    with open(inbox_sql_path) as f:
        inbox_sql = f.read()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(inbox_sql)            # no parameters: sent as one script
        conn.execute(REFUNDS_DDL)


def main():
    global OPTIONS
    parser = argparse.ArgumentParser(description="A receiver that acts once per key (schema/inbox.sql).")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (default 127.0.0.1:0)")
    parser.add_argument("--db", default=os.environ.get("DATABASE_URL", ""),
                        help="connection string (default DATABASE_URL, else PG* variables)")
    parser.add_argument("--key-header", default="Idempotency-Key")
    parser.add_argument("--install", metavar="INBOX_SQL",
                        help="apply this schema/inbox.sql and create the refunds table first")
    OPTIONS = parser.parse_args()
    host, _, port = OPTIONS.listen.rpartition(":")
    if not host or not port.isdigit():
        parser.error("--listen wants HOST:PORT")
    if OPTIONS.install:
        try:
            install(OPTIONS.db, OPTIONS.install)
        except (OSError, psycopg.Error) as err:
            print("inbox-receiver: --install %s: %s" % (OPTIONS.install, str(err).strip()), file=sys.stderr)
            return 1
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # PID 1 in a container too
    print("listening %s:%d" % server.server_address[:2], flush=True)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
