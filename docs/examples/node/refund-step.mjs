// refund-step.mjs — an agent's refund step with outbox-relay, in Node with `pg`.
//
//   npm ci                                    # pg, pinned in package-lock.json
//   DATABASE_URL=postgresql://refund_app@127.0.0.1/app node refund-step.mjs run-7f3a:step-4 42 2500
//
// Arguments: KEY ACCOUNT AMOUNT_CENTS. The key comes from the workflow's durable
// state ({run_id}:{step_id}), never from a model: a resumed run calls the step
// again with the same key. Environment: DATABASE_URL (or libpq's PG* variables),
// a login granted outbox_app plus SELECT, UPDATE on accounts; OUTBOX_TARGET
// (default payments.refund); WAIT_SECONDS (default 30), how long to wait for
// the outcome.
//
// 1. One transaction: outbox.enqueue(key, target, payload) and the business write,
//    the debit, only when this call created the intent (`inserted`). enqueue is
//    idempotent, the UPDATE is not: run the step three times with one key and
//    the refund is sent once either way, but an unguarded UPDATE debits three
//    times. Both commit together or not at all (no such account: neither).
// 2. Wait for the outcome: poll outbox.outcome(key) until it is final or the
//    bound passes. (A service that may reach the relay's admin port can instead
//    long-poll GET /v1/intents/{key}?wait=30s.) The relay owns every retry: the
//    step never sends anything itself and never re-enqueues under a new key.
//
// Prints what it did and, last, "outcome: STATUS — MESSAGE". Exit status:
// 0 succeeded; 2 not final when the wait ended (pending, awaiting_approval,
// delivering, reconciling: run the step again later with the same key, which
// only waits again); 3 failed or cancelled; 1 an error (nothing committed).
import pg from "pg";

const FINAL = new Set(["succeeded", "failed", "cancelled"]);

function usage(message) {
  console.error(`refund-step: ${message}`);
  console.error("usage: node refund-step.mjs KEY ACCOUNT AMOUNT_CENTS");
  process.exit(1);
}

const [key, accountText, centsText] = process.argv.slice(2);
if (!key || !/^[0-9]+$/.test(accountText ?? "") || !/^[0-9]+$/.test(centsText ?? "")) {
  usage("KEY, and ACCOUNT and AMOUNT_CENTS as whole numbers, are required");
}
const account = Number(accountText);
const amountCents = Number(centsText);
const target = process.env.OUTBOX_TARGET || "payments.refund";
const waitSeconds = Number(process.env.WAIT_SECONDS || 30);
if (!(waitSeconds >= 0)) usage("WAIT_SECONDS must be a number of seconds");

// The enqueue and the debit: one transaction, the debit only for a new intent.
async function enqueueAndDebit(client) {
  await client.query("BEGIN");
  try {
    const { rows: [intent] } = await client.query(
      "SELECT inserted, status FROM outbox.enqueue($1, $2, $3)",
      [key, target, { account, amount_cents: amountCents }]);
    if (intent.inserted) {
      const debit = await client.query(
        "UPDATE accounts SET balance_cents = balance_cents - $1 WHERE id = $2",
        [amountCents, account]);
      if (debit.rowCount !== 1) throw new Error(`no account ${account}`);
    }
    await client.query("COMMIT");
    return intent;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {});
    throw err;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Poll the outcome until it is final or the bound passes; the last one read.
async function waitForOutcome(client) {
  const deadline = Date.now() + waitSeconds * 1000;
  let pause = 100;
  for (;;) {
    const { rows: [outcome] } = await client.query(
      "SELECT status, response_status, response_body, message FROM outbox.outcome($1)", [key]);
    if (FINAL.has(outcome.status) || Date.now() >= deadline) return outcome;
    await sleep(Math.min(pause, Math.max(deadline - Date.now(), 0)));
    pause = Math.min(pause * 2, 1000);
  }
}

// DATABASE_URL, or without it libpq's PG* variables (pg reads those itself).
const db = new pg.Client(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {});
let code = 1;
try {
  await db.connect();
  try {
    const intent = await enqueueAndDebit(db);
    console.log(intent.inserted
      ? `enqueued ${key}: inserted=true status=${intent.status} (debited ${amountCents} cents from account ${account})`
      : `enqueued ${key}: inserted=false status=${intent.status} (an earlier run created it: no second debit)`);
    const outcome = await waitForOutcome(db);
    const http = outcome.response_status ? ` (HTTP ${outcome.response_status})` : "";
    console.log(`outcome: ${outcome.status} — ${outcome.message}${http}`);
    if (outcome.response_body !== null) console.log(`response: ${outcome.response_body}`);
    if (outcome.status === "succeeded") {
      code = 0;
    } else if (FINAL.has(outcome.status)) {
      code = 3;
    } else {
      console.log(`not final after ${waitSeconds} s: run the step again later with the same key`);
      code = 2;
    }
  } finally {
    await db.end();
  }
} catch (err) {
  console.error(`refund-step: ${err.message}${err.code ? ` (SQLSTATE ${err.code})` : ""}`);
  code = 1;
}
process.exit(code);
