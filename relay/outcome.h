/*
 * outcome.h — pure rules: what one attempt means, and what happens next.
 *
 * No I/O here, so every cell of docs/design.md's tables is unit tested
 * (tests/unit/test_outcome.c). The names of the enums are the values of the
 * SQL enums outbox.attempt_class and outbox.intent_state.
 */
#ifndef OUTBOX_OUTCOME_H
#define OUTBOX_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum attempt_class {
    CLASS_NOT_SENT,          /* nothing reached the target: safe to retry */
    CLASS_AMBIGUOUS,         /* the target may have acted */
    CLASS_SUCCEEDED,         /* 2xx */
    CLASS_RETRY_LATER,       /* 408, 425, 429; 409 from a key-honouring target */
    CLASS_KEY_CONFLICT,      /* 422 */
    CLASS_PERMANENT_FAILURE, /* other 4xx, 410 included (flow.c decides if the endpoint is gone) */
    /* Reconciliation of an unknown row through the target's status URL: */
    CLASS_RECONCILED_EXECUTED,     /* 200: the target did act */
    CLASS_RECONCILED_NOT_EXECUTED, /* 404: it did not; safe to send again */
    CLASS_RECONCILE_INCONCLUSIVE,  /* anything else: ask again later */
};
#define CLASS_COUNT (CLASS_RECONCILE_INCONCLUSIVE + 1)

enum intent_state {
    STATE_PENDING,
    STATE_SUCCEEDED,
    STATE_FAILED,
    STATE_UNKNOWN,
};

/* How the transport ended, as far as libcurl could tell. */
enum transport_end {
    TRANSPORT_COMPLETE,         /* a full HTTP response was read */
    TRANSPORT_FAILED_UNSENT,    /* failed before any request byte was written */
    TRANSPORT_FAILED_AFTER_SEND /* failed (timeout, reset, empty or garbled reply) after sending */
};

/* What an MCP target's answer to tools/call was (relay/mcp_upstream.c
 * reads it from the JSON or the event stream of a 2xx answer). */
enum mcp_answer_kind {
    MCP_ANSWER_NONE,       /* no JSON-RPC response with the call's id (a broken stream, garbage) */
    MCP_ANSWER_RESULT,     /* a result, isError false: the tool ran and succeeded */
    MCP_ANSWER_TOOL_ERROR, /* a result, isError true: the tool ran and said no */
    MCP_ANSWER_RPC_ERROR,  /* a JSON-RPC error (rpc_code) */
    /* a result of a gateway that says its own call of the tool is not
     * final yet (_meta["outbox-relay/final"]: false, our front door's
     * answer when its wait ended first): it may still act */
    MCP_ANSWER_NOT_FINAL,
};

struct attempt_facts {
    enum transport_end transport;
    long http_status;  /* when transport == TRANSPORT_COMPLETE */
    bool honours_keys; /* the target has a key header */
    /* An MCP target (targets.protocol 'mcp'): */
    bool mcp;
    enum mcp_answer_kind mcp_answer; /* of a 2xx answer */
    long rpc_code;                   /* MCP_ANSWER_RPC_ERROR's code */
    bool mcp_session_lost;           /* 404 to a request that carried a session id */
    bool mcp_refused;                /* the session's initialize was refused: the call never went */
    int mcp_executed; /* a status tool's structuredContent.executed: 1, 0, -1 neither */
};

struct retry_policy {
    bool honours_keys;
    int64_t key_ttl_ms;
    int max_attempts;     /* 0: no cap */
    int64_t retry_for_ms; /* retry horizon from the first attempt; 0: none */
    int backoff_base_ms;
    int backoff_cap_ms;
    int reconcile_delay_ms;
};

struct intent_progress {
    int attempt;              /* number of this attempt, from 1 */
    bool was_ambiguous;       /* an earlier attempt may have executed */
    int64_t first_attempt_ms; /* wall clock, ms since the epoch */
    int64_t now_ms;
    int64_t retry_after_ms; /* from Retry-After; -1 when absent */
};

struct decision {
    enum intent_state next_state;
    int delay_ms;   /* until next due (pending) or next reconciliation (unknown) */
    bool ambiguous; /* the row is (now) flagged ambiguous */
};

enum attempt_class outcome_classify(const struct attempt_facts *facts);

/* What one tools/call to an MCP target means (docs/design.md, "The
 * gateway's reach"): outcome_classify calls it when facts->mcp.
 *   result, isError false          → succeeded (the whole result saved)
 *   result, isError true           → permanent failure (the tool said no)
 *   -32700 -32600 -32601 -32602,   → permanent failure (not executed)
 *   a refused initialize
 *   404 to a session id            → retry later (the session is gone: not
 *                                    executed; initialized again)
 *   -32603, any other JSON-RPC error, a 2xx without the call's answer
 *   (broken stream)                → ambiguous
 *   any other HTTP status, a transport failure: the HTTP rules. */
enum attempt_class outcome_classify_mcp(const struct attempt_facts *facts);
/* The JSON-RPC codes that say the request was not executed: parse error,
 * invalid request, method not found, invalid params. */
bool outcome_rpc_code_not_executed(long code);

/* What a status URL answer means (200 executed, 404 not executed, else
 * inconclusive); for an MCP target's status tool (facts->mcp): a result
 * whose structuredContent says executed true or false, else inconclusive. */
enum attempt_class outcome_classify_status_check(const struct attempt_facts *facts);

/* What follows an attempt of this class. random_unit is in [0, 1): the full
 * jitter of the back-off (injected so that tests are exact). */
struct decision outcome_decide(enum attempt_class cls, const struct retry_policy *policy,
                               const struct intent_progress *progress, double random_unit);

/* Key age compares the database's first_attempt_at with this host's clock.
 * Both are NTP-disciplined in any sane deployment, but a few seconds of skew
 * must not turn a re-send into one the target no longer recognises: a key is
 * treated as forgotten key_ttl - margin after the first attempt, where the
 * margin is 5 % of key_ttl, at most a minute (24 h → 1 min; 10 min → 30 s). */
#define OUTCOME_CLOCK_MARGIN_MAX_MS 60000
int64_t outcome_clock_margin_ms(int64_t key_ttl_ms);

/* At send time: may a claimed row go out? A row flagged ambiguous only to a
 * key-honouring target that still remembers the key (first + key_ttl -
 * margin > now). */
bool outcome_resend_allowed(const struct retry_policy *policy, bool was_ambiguous,
                            int64_t first_attempt_ms, int64_t now_ms);

/* Exponential back-off with full jitter: uniform in [0, min(cap, base * 2^(attempt-1))). */
int outcome_backoff_ms(int attempt, int base_ms, int cap_ms, double random_unit);

/* What a failed circuit probe means for the intent it carried. A probe is
 * sent because the target was failing; its refusal is evidence about the
 * target (the circuit hears it), not about the intent:
 *   - never sent (refused, unreachable): PROBE_GIVE_BACK, the row goes back
 *     unsent and its attempt is not counted, as for a request aborted
 *     before it left this host;
 *   - answered "try later" (429, 503, 5xx without a sign of execution):
 *     counted, but never the attempt that fails the intent: it stays
 *     pending (*dec is changed), due when the circuit lets it go;
 *   - anything else (success, an ambiguous outcome, a permanent failure of
 *     this intent): PROBE_AS_ANY, decided like any attempt. */
enum probe_verdict { PROBE_AS_ANY, PROBE_GIVE_BACK, PROBE_SPARED };
enum probe_verdict outcome_probe_failed(enum attempt_class cls, bool sent, struct decision *dec);

/* A row that may have executed and that its target can no longer recognise
 * (outcome_resend_allowed said no, at send time): unknown, flagged
 * ambiguous, reconciled after the target's reconcile delay. */
struct decision outcome_decide_not_resent(const struct retry_policy *policy);
#define OUTCOME_NOT_RESENT_REASON                                                                  \
    "not re-sent: an earlier attempt may have executed and the target may no longer remember "     \
    "its key"

/* A row whose lease expired in the hands of another relay (it died, or lost
 * its database): decided as an ambiguous attempt, as if its request had
 * timed out. policy is NULL for a target this relay does not know: then the
 * row becomes unknown and is never re-sent. */
struct decision outcome_decide_taken_over(const struct retry_policy *policy,
                                          const struct intent_progress *progress,
                                          double random_unit);
/* The error recorded for a taken-over row, naming the relay that held it. */
void outcome_taken_over_text(char *buf, size_t size, const char *previous_owner);

/* The database stamps a claim's leases when the claim's transaction starts.
 * An answer that comes more than half a lease later (the claim waited on a
 * lock, or the answer was held up on the way) leaves too little of them: a
 * row sent after its lease expired may also be sent by the relay that took
 * it over, a second effect at a target that cannot deduplicate (the model's
 * T3, tests/model/README.md). Renewals run every third of a lease, so half
 * is the margin. Such rows go back unsent and are claimed again. */
bool outcome_claim_answer_late(uint64_t elapsed_ms, int64_t lease_ms);
#define OUTCOME_CLAIM_LATE_REASON                                                                  \
    "the claim answered after half its lease: its rows are given back unsent and claimed again"

/* The error text recorded with a decided attempt (the attempt's history row
 * and the intent's last_error): NULL for none (the status URL settled the
 * doubt), transport_error as it is, or a sentence written into buf that
 * says why the intent ended failed, what the key conflict was, or that a
 * 410 refused it. */
const char *outcome_error_text(enum attempt_class cls, const struct decision *dec, int attempt,
                               long http_status, const char *transport_error, char *buf,
                               size_t size);

const char *outcome_class_name(enum attempt_class cls);
const char *outcome_state_name(enum intent_state state);

/* Parses a Retry-After value (delay-seconds or HTTP-date) into ms from now_ms;
 * -1 when absent or unparseable. */
int64_t outcome_parse_retry_after(const char *value, int64_t now_ms);

#endif
