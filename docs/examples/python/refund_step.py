#!/usr/bin/env python3
"""refund_step.py — an agent's refund step with outbox-relay, in Python with psycopg 3.

    apt-get install python3-psycopg           # Debian 12: psycopg 3.1
    DATABASE_URL=postgresql://refund_app@127.0.0.1/app python3 refund_step.py run-7f3a:step-4 42 2500

Arguments: KEY ACCOUNT AMOUNT_CENTS. The key comes from the workflow's durable
state ({run_id}:{step_id}), never from a model: a resumed run calls the step
again with the same key. Environment: DATABASE_URL (or libpq's PG* variables),
a login granted outbox_app plus SELECT, UPDATE on accounts; OUTBOX_TARGET
(default payments.refund); WAIT_SECONDS (default 30), how long to wait for the
outcome.

1. One transaction: outbox.enqueue(key, target, payload) and the business write,
   the debit, only when this call created the intent (`inserted`). enqueue is
   idempotent, the UPDATE is not: run the step three times with one key and the
   refund is sent once either way, but an unguarded UPDATE debits three times.
   Both commit together or not at all (no such account: neither).
2. Wait for the outcome: poll outbox.outcome(key) until it is final or the bound
   passes. (A service that may reach the relay's admin port can instead
   long-poll GET /v1/intents/{key}?wait=30s.) The relay owns every retry: the
   step never sends anything itself and never re-enqueues under a new key.

Prints what it did and, last, "outcome: STATUS — MESSAGE". Exit status:
0 succeeded; 2 not final when the wait ended (pending, awaiting_approval,
delivering, reconciling: run the step again later with the same key, which only
waits again); 3 failed or cancelled; 1 an error (nothing committed).
"""
import os
import sys
import time

import psycopg
from psycopg.types.json import Jsonb

FINAL = {"succeeded", "failed", "cancelled"}


def enqueue_and_debit(conn, key, target, account, amount_cents):
    """The enqueue and the debit: one transaction, the debit only for a new intent."""
    with conn.transaction():
        inserted, status = conn.execute(
            "SELECT inserted, status FROM outbox.enqueue(%s, %s, %s)",
            (key, target, Jsonb({"account": account, "amount_cents": amount_cents}))).fetchone()
        if inserted:
            debit = conn.execute(
                "UPDATE accounts SET balance_cents = balance_cents - %s WHERE id = %s",
                (amount_cents, account))
            if debit.rowcount != 1:
                raise LookupError("no account %d" % account)   # rolls back the intent too
    return inserted, status


def wait_for_outcome(conn, key, wait_seconds):
    """Poll the outcome until it is final or the bound passes; the last one read."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.1
    while True:
        outcome = conn.execute(
            "SELECT status, response_status, response_body, message FROM outbox.outcome(%s)",
            (key,)).fetchone()
        if outcome[0] in FINAL or time.monotonic() >= deadline:
            return outcome
        time.sleep(max(min(pause, deadline - time.monotonic()), 0))
        pause = min(pause * 2, 1.0)


def main(argv):
    if len(argv) != 4 or not argv[2].isdigit() or not argv[3].isdigit():
        print("usage: refund_step.py KEY ACCOUNT AMOUNT_CENTS", file=sys.stderr)
        return 1
    key, account, amount_cents = argv[1], int(argv[2]), int(argv[3])
    target = os.environ.get("OUTBOX_TARGET") or "payments.refund"
    wait_seconds = float(os.environ.get("WAIT_SECONDS") or 30)
    try:
        # autocommit: each poll is its own statement, never an idle open transaction;
        # conn.transaction() makes the step's one transaction.
        with psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True) as conn:
            inserted, status = enqueue_and_debit(conn, key, target, account, amount_cents)
            if inserted:
                print("enqueued %s: inserted=true status=%s (debited %d cents from account %d)"
                      % (key, status, amount_cents, account))
            else:
                print("enqueued %s: inserted=false status=%s (an earlier run created it: no second debit)"
                      % (key, status))
            status, http, body, message = wait_for_outcome(conn, key, wait_seconds)
    except (psycopg.Error, LookupError) as err:
        sqlstate = getattr(err, "sqlstate", None)
        print("refund_step: %s%s" % (str(err).strip(), " (SQLSTATE %s)" % sqlstate if sqlstate else ""),
              file=sys.stderr)
        return 1
    print("outcome: %s — %s%s" % (status, message, " (HTTP %d)" % http if http else ""))
    if body is not None:
        print("response: %s" % body)
    if status == "succeeded":
        return 0
    if status in FINAL:
        return 3
    print("not final after %g s: run the step again later with the same key" % wait_seconds)
    return 2


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main(sys.argv))
