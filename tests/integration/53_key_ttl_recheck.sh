#!/usr/bin/env bash
# Proves: a same-key retry claimed after its target's key_ttl is not re-sent (the claim-time re-check), one claimed within it is.
# Both intents get a 503 (ambiguous: it may have executed) with Retry-After:
# 2, so their retry with the same key is due in 2 s, which is within key_ttl
# when decided. The relay stops before the retry and another starts once the
# first attempt is older than the short key_ttl (4 s). The target may have
# forgotten that key: the row must not be sent again, but recorded unknown
# with the reason from relay/outcome.h. A target that remembers keys for an
# hour gets its retry, as usual. Without the check in relay_take_claimed_row
# the short-ttl row is sent a second time.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r --mode-status 503 --mode-retry-after 2
target_add short "http://127.0.0.1:$RECV_PORT_r/act" "key_ttl='4 seconds'" backoff_base_ms=10 backoff_cap_ms=100
target_add long "http://127.0.0.1:$RECV_PORT_r/act" "key_ttl='1 hour'" backoff_base_ms=10 backoff_cap_ms=100
sql "SELECT outbox.enqueue('ttl:short', 'short', '{\"n\": 1}')" >/dev/null
sql "SELECT outbox.enqueue('ttl:long', 'long', '{\"n\": 2}')" >/dev/null

relay_start first --poll-interval-ms 100
ok "both first attempts end ambiguous, a same-key retry scheduled" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'pending' AND ambiguous AND attempts = 1 AND next_attempt_at > now()" 2
kill -TERM "$RELAY_PID_first"
relay_wait first 20
is "$?" 0 "the first relay stops before the retries are due"
is "$(sql "SELECT string_agg(a.class || ' ' || a.http_status, ',') FROM outbox.attempts a")" \
    "ambiguous 503,ambiguous 503" "the first attempts: 503, ambiguous"
curl -s -X POST -d '{}' "http://127.0.0.1:$RECV_PORT_r/_mode" >/dev/null # the target answers 200 from now on
is "$(receiver_stat r deliveries_total)" 2 "two requests so far"

ok "the short target's first attempt becomes older than its key_ttl" wait_for 15 \
    "SELECT now() - first_attempt_at > interval '4 seconds' FROM outbox.intents WHERE key = 'ttl:short'" t
relay_start second --poll-interval-ms 100
ok "the long target's retry succeeds" wait_for 15 "SELECT state FROM outbox.intents WHERE key = 'ttl:long'" succeeded
ok "the short target's row becomes unknown" wait_for 15 "SELECT state FROM outbox.intents WHERE key = 'ttl:short'" unknown

is "$(receiver_stat r deliveries_total)" 3 "one request more, the long target's: the short one was not re-sent"
is "$(curl -s "http://127.0.0.1:$RECV_PORT_r/_requests/ttl:short" | sed -n 's/.*"deliveries":\([0-9]*\).*/\1/p')" "" \
    "the receiver never saw ttl:short with its key (its one request met the 503 mode)"
is "$(sql "SELECT attempts || ' ' || ambiguous || ' ' || last_error FROM outbox.intents WHERE key = 'ttl:short'")" \
    "2 true not re-sent: an earlier attempt may have executed and the target may no longer remember its key" \
    "the row: attempt 2, still ambiguous, last_error says why (OUTCOME_NOT_RESENT_REASON)"
is "$(sql "SELECT a.class || ' ' || a.request_sent || ' ' || a.relay || ' ' || a.error FROM outbox.attempts a
             JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'ttl:short' AND a.attempt = 2")" \
    "not_sent false relay-second not re-sent: an earlier attempt may have executed and the target may no longer remember its key" \
    "its second attempt is a history row: not_sent, no request, the same reason"
is "$(sql "SELECT status FROM outbox.outcome('ttl:short')")" reconciling "the agent sees reconciling"
is "$(sql "SELECT attempts || ' ' || response_status FROM outbox.intents WHERE key = 'ttl:long'")" "2 200" \
    "the long target: attempt 2 sent, 200"
kill -TERM "$RELAY_PID_second"
relay_wait second 20
is "$?" 0 "the second relay stops cleanly"
ok "no sanitizer report" relay_logs_clean
itest_done
