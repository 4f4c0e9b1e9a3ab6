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
#include <stdint.h>

enum attempt_class {
    CLASS_NOT_SENT,          /* nothing reached the target: safe to retry */
    CLASS_AMBIGUOUS,         /* the target may have acted */
    CLASS_SUCCEEDED,         /* 2xx */
    CLASS_RETRY_LATER,       /* 408, 410, 425, 429; 409 from a key-honouring target */
    CLASS_KEY_CONFLICT,      /* 422 */
    CLASS_PERMANENT_FAILURE, /* other 4xx */
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

struct attempt_facts {
    enum transport_end transport;
    long http_status;  /* when transport == TRANSPORT_COMPLETE */
    bool honours_keys; /* the target has a key header */
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

/* What a status URL answer means (200 executed, 404 not executed, else inconclusive). */
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

const char *outcome_class_name(enum attempt_class cls);
const char *outcome_state_name(enum intent_state state);

/* Parses a Retry-After value (delay-seconds or HTTP-date) into ms from now_ms;
 * -1 when absent or unparseable. */
int64_t outcome_parse_retry_after(const char *value, int64_t now_ms);

#endif
