/*
 * sql.h — every statement the relay runs, named, prepared on each connection.
 *
 * The logic lives in SQL functions (migrations/0003_relay.sql), so that the
 * relay's role needs EXECUTE only and the statements here stay one line.
 * Locks and indexes: claim and take_over_expired use FOR UPDATE SKIP LOCKED
 * on the partial indexes intents_due and intents_in_flight; record and
 * release are fenced by (lease_owner, attempts) and touch rows by primary key.
 */
#ifndef OUTBOX_SQL_H
#define OUTBOX_SQL_H

#include "lib/pg.h"

#include <stdbool.h>
#include <stdint.h>

/* The main connection LISTENs to both (pg_conn_new's list): due intents
 * (claim), and keys whose outcome changed (the admin port's waits; 0041). */
#define SQL_CHANNEL "outbox_intents"
#define SQL_CHANNEL_OUTCOMES "outbox_outcomes"
#define SQL_CHANNELS SQL_CHANNEL "," SQL_CHANNEL_OUTCOMES

/* $1 relay, $2 idle */
#define STMT_HEARTBEAT "heartbeat"
/* $1 relay */
#define STMT_GONE "gone"
/* $1 relay, $2 text[] targets, $3 int[] rooms, $4 limit, $5 lease ms, $6 scan: floor,
 * sweep or auto (the setting outbox.claim_scan, migration 0052; relay_db.c,
 * "Two lanes") */
#define STMT_CLAIM "claim"
/* $1 relay, $2 limit, $3 lease ms, $4 bigint[] ids this relay holds (never taken over) */
#define STMT_TAKE_OVER "take_over"
/* $1 relay, $2 bigint[] ids, $3 lease ms */
#define STMT_RENEW "renew"
/* $1 relay, $2..$13 parallel arrays (see schema/outbox/functions/record.sql) */
#define STMT_RECORD "record"
/* $1 relay, $2 bigint[] ids, $3 int[] attempts */
#define STMT_RELEASE "release"
/* $1 relay, $2 limit, $3 lease ms */
#define STMT_CLAIM_UNKNOWN "claim_unknown"
/* $1 relay, $2 target, $3 event, $4 reason, $5 ms (see outbox.target_event) */
#define STMT_TARGET_EVENT "target_event"
/* $1 key */
#define STMT_OUTCOME "outcome"
/* no parameters */
#define STMT_LIVE_COUNTS "live_counts"
/* $1 text[] targets this relay has room for. The relay lets the database
 * answer the next lease to expire from what this connection read of it
 * within 500 ms (setting outbox.lease_reuse, 0050; unused before 0050):
 * under a held snapshot each read steps over the entry of every row
 * delivered within a lease. */
#define STMT_NEXT_DUE "next_due"
/* The same, read at every call, for --exit-when-idle, which exits on its
 * NULL: the answer counts every lease committed by then. */
#define STMT_NEXT_DUE_EXACT "next_due_exact"
#define STMT_TARGETS "targets"
/* no parameters: outbox.schema_version() (0042), 0 before 0042, NULL when
 * not migrated by migrate. Through query_to_xml, so that the statement is
 * prepared on a schema without the function too (an older database is
 * told apart, not failed at connect). */
#define STMT_SCHEMA_VERSION "schema_version"
/* The schema a relay serving --databases requires: 0042, where
 * outbox.schema_version() came (docs/design.md, "Many databases"). */
#define RELAY_SCHEMA_VERSION 42

static const struct pg_statement relay_statements[] = {
    {STMT_HEARTBEAT, "SELECT outbox.relay_heartbeat($1, $2)"},
    {STMT_GONE, "SELECT outbox.relay_gone($1)"},
    /* The scan goes in the session's setting, set first (the lateral call
     * reads the CTE's row, so the planner cannot call it before): an older
     * schema's claim_due ignores it, and a --db relay still runs there. */
    {STMT_CLAIM,
     "WITH scan AS MATERIALIZED (SELECT set_config('outbox.claim_scan', $6, false) AS s)"
     " SELECT c.id, c.key, c.target, c.payload, c.attempt, c.ambiguous,"
     " c.first_attempt_ms, c.probe, c.traceparent, c.key_sent FROM scan,"
     " LATERAL outbox.claim_due(CASE WHEN scan.s IS NOT NULL THEN $1 END, $2, $3, $4,"
     " $5) AS c"},
    {STMT_TAKE_OVER, "SELECT id, key, target, attempt, ambiguous, first_attempt_ms, previous_owner,"
                     " key_sent FROM outbox.take_over($1, $2, $3, $4)"},
    {STMT_RENEW, "SELECT outbox.renew_leases($1, $2, $3)"},
    {STMT_RECORD, "SELECT outbox.record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"},
    {STMT_RELEASE, "SELECT outbox.release($1, $2, $3)"},
    {STMT_NEXT_DUE,
     "WITH reuse AS MATERIALIZED (SELECT set_config('outbox.lease_reuse', 'on', false))"
     " SELECT outbox.next_due_ms($1) FROM reuse"},
    {STMT_NEXT_DUE_EXACT, "SELECT outbox.next_due_ms($1)"},
    {STMT_CLAIM_UNKNOWN, "SELECT id, key, target, attempt, first_attempt_ms"
                         " FROM outbox.claim_unknown($1, $2, $3)"},
    {STMT_TARGET_EVENT, "SELECT circuit, gate_ms FROM outbox.target_event($1, $2, $3, $4, $5)"},
    {STMT_OUTCOME, "SELECT row_to_json(o)::text FROM outbox.outcome($1) o"},
    {STMT_LIVE_COUNTS, "SELECT state, intents, oldest_due_age_s FROM outbox.live_counts()"},
    {STMT_SCHEMA_VERSION,
     "SELECT CASE WHEN to_regprocedure('outbox.schema_version()') IS NULL THEN 0 ELSE"
     " (xpath('/row/v/text()', query_to_xml('SELECT outbox.schema_version() AS v', false, true,"
     " '')))[1]::text::integer END"},
    {STMT_TARGETS,
     "SELECT t.name, url, method, key_header, (extract(epoch FROM key_ttl) * 1000)::bigint,"
     " status_url, timeout_ms, max_attempts, backoff_base_ms, backoff_cap_ms,"
     " coalesce(reconcile_delay_ms, 3 * timeout_ms), max_in_flight, headers::text, secret_env,"
     " enabled, (extract(epoch FROM retry_for) * 1000)::bigint, rate_limit_per_s,"
     " circuit_failure_threshold, coalesce(s.circuit, 'closed'),"
     " coalesce(s.paused_until > now(), false), t.ca_file, t.client_cert_file, t.client_key_file,"
     /* 0037's columns through to_jsonb: this relay still reads a schema
      * before 0037 (every target then http; tests/integration/66 runs it
      * at 0031) */
     " t.http_version, coalesce(to_jsonb(t) ->> 'protocol', 'http'),"
     " coalesce(to_jsonb(t) ->> 'mcp_version', 'auto'), to_jsonb(t) ->> 'auth_secret',"
     " to_jsonb(t) ->> 'status_tool'"
     " FROM outbox.targets t LEFT JOIN outbox.target_state s ON s.target = t.name "
     "ORDER BY t.name"},
};

#define RELAY_STATEMENT_COUNT (sizeof(relay_statements) / sizeof(relay_statements[0]))

/* The rows these statements answer, parsed by sql.c: the column numbers
 * live there, beside this file's SELECT lists, and nowhere else. Texts
 * point into the PGresult and live as long as it does. */

/* A row to send: one of STMT_CLAIM, or of STMT_CLAIM_UNKNOWN (a status
 * check: no payload, ambiguous by definition, never a probe). */
struct claimed_row {
    int64_t id;
    const char *key;
    const char *target;
    const char *payload; /* NULL: a status check */
    int attempt;
    bool ambiguous;
    int64_t first_attempt_ms;
    bool probe;              /* the one request of a half-open circuit */
    const char *traceparent; /* the caller's W3C trace context; NULL: none */
    bool key_sent;           /* the claim stamped: this request carries the key */
};
struct claimed_row sql_claimed_row(const PGresult *res, int row);
struct claimed_row sql_unknown_row(const PGresult *res, int row);

/* A row of STMT_TAKE_OVER: in flight under a lease that expired. */
struct taken_over_row {
    int64_t id;
    const char *key;
    const char *target;
    int attempt;
    bool was_ambiguous;
    int64_t first_attempt_ms;
    const char *previous_owner;
    int key_sent; /* the request that may have executed carried the key: 1, 0, -1 not recorded */
};
struct taken_over_row sql_taken_over_row(const PGresult *res, int row);

#endif
