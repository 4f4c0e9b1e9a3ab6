/*
 * mcp_admission.h — who may use the front door's memory and database, and
 * how much: the verdict on a token before its body is read, the memory and
 * requests each client holds, and a fair queue in front of the database
 * connections (the essay is at the top of mcp_admission.c).
 *
 * What it owns: the token verdict cache (a token's SHA-256 → its client,
 * or unknown), the database question that fills it (coalesced per token),
 * per-client and total memory charges and requests in flight, the queue of
 * statements per client served round robin, the rate limit of refusal log
 * lines, and giving memory back to the system after a burst. What it does
 * not own: HTTP, JSON-RPC, what the statements mean (mcp_server.c).
 */
#ifndef OUTBOX_MCP_ADMISSION_H
#define OUTBOX_MCP_ADMISSION_H

#include "lib/pg.h"
#include "mcp/mcp_protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct admission admission_t;
struct adm_client;

struct adm_limits {
    size_t memory_bytes;        /* charges of all clients together; past it 503 */
    size_t client_memory_bytes; /* one client's charges; past it 429, alone past it 413 */
    int client_calls;           /* one client's requests in flight; past it 429 */
};

enum adm_verdict {
    ADM_UNKNOWN, /* not in the cache (or the database could not say) */
    ADM_GOOD,    /* a client's token */
    ADM_BAD,     /* no client has it */
};

/* Why a charge or a request was refused. */
enum adm_refusal {
    ADM_OK,
    ADM_CLIENT_FULL, /* the client holds its share: 429, Retry-After */
    ADM_SERVER_FULL, /* all clients together hold the total: 503, Retry-After */
    ADM_TOO_LARGE,   /* more than a client may ever hold at once: 413 */
};

/* Someone waiting for the database's verdict on a token (embedded in the
 * waiter's own struct; on_verdict runs once, unless cancelled first). */
struct adm_waiter {
    struct adm_waiter *prev, *next;
    void *entry;      /* the cache entry it waits on; NULL when not waiting */
    char as_hash[68]; /* set before on_verdict: the hash statements authenticate with (GOOD) */
    void (*on_verdict)(struct adm_waiter *w, enum adm_verdict verdict, struct adm_client *client);
};

/* A statement's result, with the connection it ran on (for its SQLSTATE). */
typedef void (*adm_result_cb)(void *data, pg_conn_t *pg, PGresult *res, const char *error);

admission_t *adm_new(uv_loop_t *loop, const struct adm_limits *limits, pg_conn_t **pg,
                     int pg_count);
/* Closes its handles; on_closed runs from the loop, then it is freed. Queued
 * statements are failed first. */
void adm_close(admission_t *a, void (*on_closed)(void *data), void *data);

/* ---- the token verdict */

/* The cached verdict on a token hash ("\x" + 64 hex digits); GOOD sets
 * *client and, when as_hash is not NULL, the hash the statements
 * authenticate with (the token's own, or a JWT's client's). A verdict is
 * kept ADM_VERDICT_MS, a JWT's no later than its exp. */
enum adm_verdict adm_verdict(admission_t *a, const char *token_hash, struct adm_client **client,
                             char as_hash[68]);
/* Asks the database about a token not in the cache (one question per
 * token however many wait for it). false: too many unknown tokens are being
 * asked about, or no database connection is ready: refuse with 503. */
bool adm_ask(admission_t *a, const char *token_hash, struct adm_waiter *w);
/* The same for a JWT whose signature and claims were checked (oauth.c):
 * token_hash is the JWT's, client the name it gave; the database is asked
 * for that client's row (outbox.mcp_oauth_client), and the verdict is kept
 * no later than cap_ms (uv_now's clock: the token's exp). */
bool adm_ask_client(admission_t *a, const char *token_hash, const char *client, uint64_t cap_ms,
                    struct adm_waiter *w);
void adm_waiter_cancel(admission_t *a, struct adm_waiter *w);

/* ---- budgets */

/* The client of that name (as outbox.mcp_clients has it), made the first
 * time; kept until adm_close. */
struct adm_client *adm_client_get(admission_t *a, const char *name);
/* The client's name (as outbox.mcp_clients has it). */
const char *adm_client_name(const struct adm_client *c);
/* Charges bytes to the client (and the total) for a holder that holds
 * `held` already; ADM_OK or why not. A body being read may take only half
 * of a client's share (body true), so that parsing always has the rest. */
enum adm_refusal adm_charge(admission_t *a, struct adm_client *c, size_t bytes, size_t held,
                            bool body);
/* Lowers a charge (to what is still held); memory goes back to the system
 * once a burst is over. */
void adm_uncharge(admission_t *a, struct adm_client *c, size_t bytes);
/* One more request of the client in flight; ADM_CLIENT_FULL past its limit. */
enum adm_refusal adm_call_begin(admission_t *a, struct adm_client *c);
void adm_call_end(admission_t *a, struct adm_client *c);

/* What jansson will take to parse this body (measured: up to ~80 bytes of
 * heap per byte for "[{},{},…]"), from one pass over its bytes; the body
 * itself included. */
size_t adm_parse_estimate(const char *body, size_t len);
/* Keeps of a parsed request only what answering needs (id, method, era,
 * version, the tasks extension); params and _meta are freed. */
void adm_request_slim(struct mcp_request *req);

/* ---- the database */

/* Queues a statement for the client (NULL: the token questions), served
 * round robin between clients as connections free up. Values are copied,
 * then copied(data) runs (may be NULL: the caller may free what they
 * pointed to), before anything is sent: cb may run before adm_query
 * returns. false (neither is called): no database connection is ready. */
bool adm_query(admission_t *a, struct adm_client *c, const char *statement, int n,
               const char *const *values, adm_result_cb cb, void *data, void (*copied)(void *data));
/* Hands queued statements to connections with room (call when a
 * connection became ready or lost, and after every result). */
void adm_pump(admission_t *a);
/* Statement `single` (nparams parameters) may go in batches: `batch` takes
 * each parameter as an array of the calls' values and answers one row per
 * call, its ord (1-based) in the last column; a job's callback gets a
 * result of its own row. Both names are kept (string constants). */
void adm_set_batch(admission_t *a, const char *single, const char *batch, int nparams);
/* A ready connection with the fewest statements queued, or NULL. */
pg_conn_t *adm_least_busy(admission_t *a);

/* ---- what /metrics and the log say */

struct adm_stats {
    size_t charged, peak; /* bytes now, and the most since start */
    size_t queued;        /* statements waiting for a connection */
    uint64_t auth_questions, verdict_hits, trims;
    uint64_t batches, batched_calls, batch_failures; /* adm_set_batch's statements */
};
void adm_stats(const admission_t *a, struct adm_stats *out);
/* The clients seen (for per-client gauges): requests in flight and bytes
 * charged of each. */
const struct adm_client *adm_first_client(const admission_t *a);
const struct adm_client *adm_next_client(const admission_t *a, const struct adm_client *c);
int adm_client_calls(const struct adm_client *c);
size_t adm_client_charged(const struct adm_client *c);

/* A log line at most once a second per limiter; *suppressed: how many were
 * not written since the last one (for its "suppressed" field). */
struct adm_rate {
    uint64_t window_ms;
    uint64_t suppressed;
};
bool adm_rate_allow(admission_t *a, struct adm_rate *r, uint64_t *suppressed);
/* Once its second is over: the count not written (true when any), reset. */
bool adm_rate_flush(admission_t *a, struct adm_rate *r, uint64_t *suppressed);

#endif
