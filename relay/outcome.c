/*
 * outcome.c — classification of one attempt and the decision that follows.
 *
 * DESIGN (docs/design.md, "Classifying one attempt")
 * The one invariant that matters: nothing that may have executed is ever
 * reported failed, and nothing that may have executed is re-sent to a target
 * that cannot deduplicate. Hence:
 *   - ambiguous + target honours keys + first attempt younger than key_ttl
 *     + attempts left            → pending again, same key, flagged ambiguous
 *   - ambiguous otherwise        → unknown (reconcile or a person decides)
 *   - not sent / retry later     → pending with back-off while the retry
 *     horizon lasts (retry_for since the first attempt, and max_attempts if
 *     the target caps them); after it: failed only if no attempt was
 *     ambiguous, else unknown
 *   - a 4xx after an earlier ambiguous attempt → unknown, never failed
 * 410 Gone is a permanent failure of the intent it answered: the endpoint
 * processed the request and refused it, so it did not act, and many APIs
 * answer 410 for one resource that is gone. Only evidence about the endpoint
 * (410 to several different intents in a row, or to the probe) disables the
 * target (relay/flow.c).
 * 3xx is ambiguous: we do not follow redirects, and a 303 after a POST
 * usually means the work was done.
 * An MCP target (outcome_classify_mcp; docs/design.md, "The gateway's
 * reach (fourth round)"): the HTTP answer is only the envelope. A 2xx
 * carries the JSON-RPC answer: a result says the tool ran (isError: it ran
 * and said no: failed, never re-sent); an error that the JSON-RPC spec
 * defines as refusing the request before it ran (-32700, -32600, -32601,
 * -32602) is a permanent failure; any other error (-32603 "internal error"
 * included: it may come after the tool acted) and a 2xx whose stream ends
 * without our answer are ambiguous, and so is a result that says the
 * upstream's own call is not final (a chained front door whose wait ended
 * first: re-sent with the same key, it answers its outcome). A 404 to a request that carried a
 * session id is the session's end, not the call's: retried after a new
 * initialize.
 * Reconciliation answers: 200 executed → succeeded; 404 not executed →
 * pending again with the doubt cleared (failed if no attempt is left, as
 * then every attempt is known not to have executed); anything else → ask
 * again after about the reconcile delay.
 */
#include "outcome.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum attempt_class outcome_classify(const struct attempt_facts *facts)
{
    if (facts->mcp)
        return outcome_classify_mcp(facts);
    switch (facts->transport) {
    case TRANSPORT_FAILED_UNSENT:
        return CLASS_NOT_SENT;
    case TRANSPORT_FAILED_AFTER_SEND:
        return CLASS_AMBIGUOUS;
    case TRANSPORT_COMPLETE:
        break;
    }
    long s = facts->http_status;
    if (s >= 200 && s <= 299)
        return CLASS_SUCCEEDED;
    if (s == 408 || s == 425 || s == 429)
        return CLASS_RETRY_LATER;
    if (s == 409)
        return facts->honours_keys ? CLASS_RETRY_LATER : CLASS_PERMANENT_FAILURE;
    if (s == 422)
        return CLASS_KEY_CONFLICT;
    if (s >= 400 && s <= 499)
        return CLASS_PERMANENT_FAILURE;
    return CLASS_AMBIGUOUS; /* 5xx, 3xx, 1xx, anything else */
}

bool outcome_rpc_code_not_executed(long code)
{
    return code == -32700 || code == -32600 || code == -32601 || code == -32602;
}

enum attempt_class outcome_classify_mcp(const struct attempt_facts *facts)
{
    if (facts->mcp_refused)
        return CLASS_PERMANENT_FAILURE;
    if (facts->transport != TRANSPORT_COMPLETE)
        return facts->transport == TRANSPORT_FAILED_UNSENT ? CLASS_NOT_SENT : CLASS_AMBIGUOUS;
    long s = facts->http_status;
    if (s == 404 && facts->mcp_session_lost)
        return CLASS_RETRY_LATER;
    if (s >= 200 && s <= 299) {
        switch (facts->mcp_answer) {
        case MCP_ANSWER_RESULT:
            return CLASS_SUCCEEDED;
        case MCP_ANSWER_TOOL_ERROR:
            return CLASS_PERMANENT_FAILURE;
        case MCP_ANSWER_RPC_ERROR:
            return outcome_rpc_code_not_executed(facts->rpc_code) ? CLASS_PERMANENT_FAILURE
                                                                  : CLASS_AMBIGUOUS;
        case MCP_ANSWER_NONE:
        case MCP_ANSWER_NOT_FINAL:
            return CLASS_AMBIGUOUS;
        }
    }
    struct attempt_facts http = *facts;
    http.mcp = false;
    return outcome_classify(&http);
}

enum attempt_class outcome_classify_status_check(const struct attempt_facts *facts)
{
    if (facts->transport != TRANSPORT_COMPLETE)
        return CLASS_RECONCILE_INCONCLUSIVE;
    if (facts->mcp) {
        if (facts->http_status < 200 || facts->http_status > 299 ||
            facts->mcp_answer != MCP_ANSWER_RESULT || facts->mcp_executed < 0)
            return CLASS_RECONCILE_INCONCLUSIVE;
        return facts->mcp_executed ? CLASS_RECONCILED_EXECUTED : CLASS_RECONCILED_NOT_EXECUTED;
    }
    if (facts->http_status == 200)
        return CLASS_RECONCILED_EXECUTED;
    if (facts->http_status == 404)
        return CLASS_RECONCILED_NOT_EXECUTED;
    return CLASS_RECONCILE_INCONCLUSIVE;
}

int outcome_backoff_ms(int attempt, int base_ms, int cap_ms, double random_unit)
{
    double ceiling = base_ms;
    for (int i = 1; i < attempt && ceiling < cap_ms; i++)
        ceiling *= 2;
    if (ceiling > cap_ms)
        ceiling = cap_ms;
    if (random_unit < 0)
        random_unit = 0;
    if (random_unit >= 1)
        random_unit = 0.999999;
    return (int)(ceiling * random_unit);
}

/* The delay before the next attempt: back-off, or Retry-After if longer. */
static int retry_delay_ms(const struct retry_policy *policy, const struct intent_progress *progress,
                          double random_unit)
{
    int delay = outcome_backoff_ms(progress->attempt, policy->backoff_base_ms,
                                   policy->backoff_cap_ms, random_unit);
    if (progress->retry_after_ms > delay)
        delay = progress->retry_after_ms > 86400000 ? 86400000 : (int)progress->retry_after_ms;
    return delay;
}

int64_t outcome_clock_margin_ms(int64_t key_ttl_ms)
{
    int64_t margin = key_ttl_ms / 20;
    return margin < OUTCOME_CLOCK_MARGIN_MAX_MS ? margin : OUTCOME_CLOCK_MARGIN_MAX_MS;
}

/* The key is still remembered at the target at_ms (first attempt + key_ttl),
 * with the clock margin taken off: first_attempt_ms is the database's clock,
 * at_ms this host's. */
static bool key_remembered_at(const struct retry_policy *policy, int64_t first_attempt_ms,
                              int64_t at_ms)
{
    return at_ms - first_attempt_ms <
           policy->key_ttl_ms - outcome_clock_margin_ms(policy->key_ttl_ms);
}

/* A row that may already have executed can be sent again only with the same
 * key, to a target that honours keys, while the target still remembers the
 * key at the time of the re-send. */
static bool same_key_resend_safe(const struct retry_policy *policy,
                                 const struct intent_progress *progress, int delay_ms)
{
    return policy->honours_keys &&
           key_remembered_at(policy, progress->first_attempt_ms, progress->now_ms + delay_ms);
}

/* Another attempt after delay_ms is within the target's retry horizon: the
 * optional cap on attempts, and retry_for since the first attempt. */
static bool retry_within_horizon(const struct retry_policy *policy,
                                 const struct intent_progress *progress, int delay_ms)
{
    if (policy->max_attempts > 0 && progress->attempt >= policy->max_attempts)
        return false;
    if (policy->retry_for_ms > 0 &&
        progress->now_ms + delay_ms - progress->first_attempt_ms >= policy->retry_for_ms)
        return false;
    return true;
}

struct decision outcome_decide(enum attempt_class cls, const struct retry_policy *policy,
                               const struct intent_progress *progress, double random_unit)
{
    struct decision d = {.ambiguous = progress->was_ambiguous || cls == CLASS_AMBIGUOUS};
    switch (cls) {
    case CLASS_SUCCEEDED:
        d.next_state = STATE_SUCCEEDED;
        return d;
    case CLASS_KEY_CONFLICT:
    case CLASS_PERMANENT_FAILURE:
        /* This attempt did not act, but an earlier one may have. */
        d.next_state = d.ambiguous ? STATE_UNKNOWN : STATE_FAILED;
        d.delay_ms = policy->reconcile_delay_ms;
        return d;
    case CLASS_RECONCILED_EXECUTED:
        d.next_state = STATE_SUCCEEDED;
        return d;
    case CLASS_RECONCILED_NOT_EXECUTED:
        /* The target says no attempt executed: the doubt is gone. */
        d.ambiguous = false;
        d.next_state = retry_within_horizon(policy, progress, 0) ? STATE_PENDING : STATE_FAILED;
        d.delay_ms = 0;
        return d;
    case CLASS_RECONCILE_INCONCLUSIVE:
        d.ambiguous = true;
        d.next_state = STATE_UNKNOWN;
        d.delay_ms =
            policy->reconcile_delay_ms / 2 + (int)(policy->reconcile_delay_ms * random_unit);
        return d;
    case CLASS_NOT_SENT:
    case CLASS_RETRY_LATER:
    case CLASS_AMBIGUOUS:
        break;
    }
    int delay = retry_delay_ms(policy, progress, random_unit);
    if (retry_within_horizon(policy, progress, delay)) {
        if (!d.ambiguous || same_key_resend_safe(policy, progress, delay)) {
            d.next_state = STATE_PENDING;
            d.delay_ms = delay;
            return d;
        }
    }
    /* No safe attempt left. Failed only if every attempt is known not to
     * have executed; otherwise unknown, for reconciliation or a person. */
    d.next_state = d.ambiguous ? STATE_UNKNOWN : STATE_FAILED;
    d.delay_ms = policy->reconcile_delay_ms;
    return d;
}

bool outcome_resend_allowed(const struct retry_policy *policy, bool was_ambiguous,
                            int64_t first_attempt_ms, int64_t now_ms)
{
    if (!was_ambiguous)
        return true;
    return policy->honours_keys && key_remembered_at(policy, first_attempt_ms, now_ms);
}

enum probe_verdict outcome_probe_failed(enum attempt_class cls, bool sent, struct decision *dec)
{
    if (cls == CLASS_NOT_SENT && !sent)
        return PROBE_GIVE_BACK;
    if (cls == CLASS_RETRY_LATER && dec->next_state == STATE_FAILED) {
        *dec = (struct decision){
            .next_state = STATE_PENDING, .delay_ms = 0, .ambiguous = dec->ambiguous};
        return PROBE_SPARED;
    }
    return PROBE_AS_ANY;
}

struct decision outcome_decide_not_resent(const struct retry_policy *policy)
{
    struct decision d = {
        .next_state = STATE_UNKNOWN,
        .delay_ms = policy->reconcile_delay_ms,
        .ambiguous = true,
    };
    return d;
}

struct decision outcome_decide_taken_over(const struct retry_policy *policy,
                                          const struct intent_progress *progress,
                                          double random_unit)
{
    static const struct retry_policy never_resend; /* no key header: unknown, never re-sent */
    return outcome_decide(CLASS_AMBIGUOUS, policy ? policy : &never_resend, progress, random_unit);
}

void outcome_taken_over_text(char *buf, size_t size, const char *previous_owner)
{
    snprintf(buf, size, "lease of relay %s expired while in flight: the request may have executed",
             previous_owner);
}

bool outcome_claim_answer_late(uint64_t elapsed_ms, int64_t lease_ms)
{
    return elapsed_ms > (uint64_t)lease_ms / 2;
}

const char *outcome_error_text(enum attempt_class cls, const struct decision *dec, int attempt,
                               long http_status, const char *transport_error, char *buf,
                               size_t size)
{
    bool reconciled = cls == CLASS_RECONCILED_EXECUTED || cls == CLASS_RECONCILED_NOT_EXECUTED;
    if (cls == CLASS_RECONCILED_NOT_EXECUTED && dec->next_state == STATE_FAILED) {
        snprintf(buf, size, "the status URL says no attempt executed, and all %d attempts are used",
                 attempt);
        return buf;
    }
    if (reconciled)
        return NULL;
    if (cls == CLASS_PERMANENT_FAILURE && http_status == 410) {
        snprintf(buf, size,
                 "HTTP 410 Gone: the target refused this intent as gone (it did not act); a 410 "
                 "is not retried");
        return buf;
    }
    if (cls == CLASS_KEY_CONFLICT) {
        snprintf(buf, size, "key conflict: the target answered HTTP %ld", http_status);
        return buf;
    }
    if (dec->next_state == STATE_FAILED && cls != CLASS_PERMANENT_FAILURE) {
        snprintf(buf, size, "not delivered after %d attempt(s), none reached the target; last: %s",
                 attempt, transport_error);
        return buf;
    }
    return transport_error;
}

/* The names of the SQL enums outbox.attempt_class and outbox.intent_state,
 * indexed by the C enums. */
static const char *const class_names[CLASS_COUNT] = {
    [CLASS_NOT_SENT] = "not_sent",
    [CLASS_AMBIGUOUS] = "ambiguous",
    [CLASS_SUCCEEDED] = "succeeded",
    [CLASS_RETRY_LATER] = "retry_later",
    [CLASS_KEY_CONFLICT] = "key_conflict",
    [CLASS_PERMANENT_FAILURE] = "permanent_failure",
    [CLASS_RECONCILED_EXECUTED] = "reconciled_executed",
    [CLASS_RECONCILED_NOT_EXECUTED] = "reconciled_not_executed",
    [CLASS_RECONCILE_INCONCLUSIVE] = "reconcile_inconclusive",
};

static const char *const state_names[STATE_UNKNOWN + 1] = {
    [STATE_PENDING] = "pending",
    [STATE_SUCCEEDED] = "succeeded",
    [STATE_FAILED] = "failed",
    [STATE_UNKNOWN] = "unknown",
};

const char *outcome_class_name(enum attempt_class cls)
{
    return (unsigned)cls < CLASS_COUNT ? class_names[cls] : "ambiguous";
}

const char *outcome_state_name(enum intent_state state)
{
    return (unsigned)state <= STATE_UNKNOWN ? state_names[state] : "unknown";
}

int64_t outcome_parse_retry_after(const char *value, int64_t now_ms)
{
    if (value == NULL)
        return -1;
    while (isspace((unsigned char)*value))
        value++;
    if (*value == '\0')
        return -1;
    if (isdigit((unsigned char)*value)) {
        char *end = NULL;
        long long seconds = strtoll(value, &end, 10);
        while (end && isspace((unsigned char)*end))
            end++;
        if (end == NULL || *end != '\0' || seconds < 0)
            return -1;
        if (seconds > 86400)
            seconds = 86400;
        return (int64_t)seconds * 1000;
    }
    /* HTTP-date, IMF-fixdate form: "Sun, 06 Nov 1994 08:49:37 GMT". */
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *rest = strptime(value, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (rest == NULL)
        return -1;
    time_t at = timegm(&tm);
    if (at == (time_t)-1)
        return -1;
    int64_t delta = (int64_t)at * 1000 - now_ms;
    if (delta < 0)
        delta = 0;
    if (delta > 86400000)
        delta = 86400000;
    return delta;
}
