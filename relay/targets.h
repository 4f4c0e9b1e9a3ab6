/*
 * targets.h — the relay's copy of outbox.targets, and what a target adds to
 * each request: URL, method, timeout, key header, static headers, signing.
 *
 * Target records live until the relay exits (a reload updates them in
 * place), so deliveries may hold a pointer to their target.
 */
#ifndef OUTBOX_TARGETS_H
#define OUTBOX_TARGETS_H

#include <curl/curl.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "flow.h"
#include "mcp_upstream.h"
#include "outcome.h"
#include "lib/strbuf.h"

/* A target's signing secrets: the variable that secret_env names may hold
 * several, separated by white space, so that a secret can be rotated
 * without downtime (old and new side by side, then the old one removed). */
#define TARGET_MAX_SECRETS 8

/* The HTTP a target is spoken to in (targets.http_version). */
enum target_http {
    TARGET_HTTP_1_1, /* '1.1', and any text this relay does not know */
    TARGET_HTTP_2,   /* '2': h2 offered by ALPN over TLS, else HTTP/1.1 */
};
enum target_http target_http_parse(const char *text);

struct target_secret {
    unsigned char *bytes; /* the HMAC key: decoded from "whsec_<base64>", or the raw text */
    size_t len;           /* at least 1 */
};

/* Claims on the wire at once per database: the floor claim and the sweep. */
#define TARGET_CLAIM_LANES 2

struct target {
    char *name;
    char *url;
    char *method;
    char *key_header; /* NULL: cannot deduplicate */
    char *status_url; /* NULL: none */
    int64_t key_ttl_ms;
    int timeout_ms;
    int max_attempts; /* 0: no cap (retry_for bounds the retries) */
    int64_t retry_for_ms;
    int backoff_base_ms;
    int backoff_cap_ms;
    int reconcile_delay_ms;
    int max_in_flight;
    double rate_limit_per_s; /* 0: unlimited (applied by outbox.claim) */
    int circuit_failure_threshold;
    char **static_headers; /* "Name: value", NULL-terminated */
    char *secret_env;
    /* TLS files on the relay's host, paths only, read by libcurl when
     * it connects: never their contents here, in the database or in logs. */
    char *ca_file; /* PEM CAs that verify the target; NULL: --ca-file or the system store */
    char *client_cert_file;      /* PEM client certificate (chain); NULL: none */
    char *client_key_file;       /* its PEM private key; set exactly when client_cert_file is */
    enum target_http http;       /* deliver.c maps it to libcurl's HTTP version */
    bool mcp;                    /* protocol 'mcp': an intent is a tools/call (mcp_upstream.c) */
    enum upstream_pref mcp_pref; /* mcp_version */
    char *auth_secret;           /* the variable's name, never its value */
    char *status_tool;           /* the upstream tool asked about unknown intents; NULL: none */
    char *auth_header;           /* "Authorization: Bearer <token>"; NULL: none. Never logged */
    struct upstream_session upstream;                 /* this relay's session with it */
    struct target_secret secrets[TARGET_MAX_SECRETS]; /* in the variable's order */
    size_t secret_count;                              /* 0: requests are not signed */
    bool enabled;
    bool present;  /* still in outbox.targets at the last reload */
    int in_flight; /* deliveries and status checks of this relay now */
    /* The rooms each claim lane's statement on the wire asked for (relay_db.c,
     * "Two lanes"): counted as in flight until its answer (targets_unclaim). */
    int claiming[TARGET_CLAIM_LANES];
    struct target_flow flow;    /* this relay's window and failure run */
    enum circuit_state circuit; /* as last read from, or reported to, the database */
    bool paused;                /* a Retry-After pause, as last read or reported */
    uint64_t circuit_reports;   /* target_event reports sent (open, probe, gone, pause) */
    size_t answer_bytes;        /* its recent largest answer, as deliver.c follows it */
    /* Counters for /metrics; records survive reloads, so do the counts. */
    uint64_t attempts_by_class[CLASS_COUNT];
    uint64_t decisions_by_state[STATE_UNKNOWN + 1];
    uint64_t retries; /* attempts after the first */
};

struct target_set {
    struct target **items;
    size_t count;
};

/* Replaces the set's contents from a STMT_TARGETS result, keeping records
 * (and their in-flight counts) of targets that still exist. */
void targets_load(struct target_set *set, PGresult *res);
struct target *targets_find(const struct target_set *set, const char *name);
/* Whether a target of the table has a status URL or an MCP status tool
 * (reconciliation asks it). */
bool targets_any_status_url(const struct target_set *set);
void targets_free(struct target_set *set);

struct retry_policy target_retry_policy(const struct target *t);

/* The most requests this relay may have in flight to t: the target's own
 * max_in_flight, and relay_cap (--max-in-flight-per-target). */
int target_cap(const struct target *t, int relay_cap);
/* Fills names (text[]) and, when rooms is not NULL, rooms (int[], each at
 * most limit) with the targets that have room (their cap narrowed by the
 * adaptive window, flow.h, minus what is in flight and what claims on the
 * wire asked for; none for a target that is disabled or gone from the
 * table), beginning with the one at start_at (in [0, 1)) of the set: the
 * relay starts at a random one, for fairness across targets. Each room is
 * divided by parts (rounded up: a claim that leaves the rest to the other
 * lane). With lane >= 0 (and rooms), each target's claiming[lane] is set to
 * the room asked for, until targets_unclaim. leave_gated leaves out the
 * targets this relay knows to be gated (a rate limit, an open circuit, a
 * pause): the sweep, which does not claim them (migration 0052), holds no
 * room of theirs. Returns how many. */
size_t targets_claimable(struct target_set *set, int relay_cap, double start_at,
                         struct strbuf *names, struct strbuf *rooms, int limit, int lane, int parts,
                         bool leave_gated);
/* The answer to lane's claim came: its rooms are free again (its rows are in
 * flight now, or given back). */
void targets_unclaim(struct target_set *set, int lane);

/* The relay reads a secret (secret_env, {"env": ...} header values) only from
 * variables with this prefix: never DATABASE_URL, PGPASSWORD or the like. */
#define TARGET_SECRET_ENV_PREFIX "OUTBOX_SECRET_"
bool target_secret_env_allowed(const char *name);
/* targets.headers (a JSON object) as "Name: value" lines, NULL-terminated
 * (caller frees each and the array); {"env": VAR} values read from VAR;
 * a header that cannot be sent is left out with a warning. Also used by
 * mcp-import (cli/mcp_import.c). */
char **target_parse_static_headers(const char *target, const char *json_text);

/* Headers for one delivery: key header, content type, static headers,
 * and Standard Webhooks signature headers when the target has secrets
 * (webhook-signature carries one "v1,<base64>" per secret). */
struct curl_slist *target_request_headers(const struct target *t, const char *key, const char *body,
                                          size_t body_len, int64_t now_s);

/* Standard Webhooks: base64(HMAC-SHA256(secret, id "." timestamp "." body)),
 * written as "v1,<base64>" into out (NUL-terminated). */
void webhook_signature(const unsigned char *secret, size_t secret_len, const char *id,
                       int64_t timestamp, const char *body, size_t body_len, char *out,
                       size_t out_size);

/* The value of the webhook-signature header: webhook_signature's "v1,<base64>"
 * for each of the count secrets, in their order, separated by single spaces,
 * as Standard Webhooks allows (a receiver accepts the request if any entry
 * verifies with a secret it knows). Caller frees; NULL when count is 0. */
char *webhook_signature_header(const struct target_secret *secrets, size_t count, const char *id,
                               int64_t timestamp, const char *body, size_t body_len);

#endif
