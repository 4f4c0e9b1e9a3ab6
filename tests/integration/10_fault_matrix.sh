#!/usr/bin/env bash
# The fault matrix of "Outcome semantics": every fault × every kind of target,
# asserting effects at the receiver and the final state in the table.
#
# targets:  dedupe  — honours Idempotency-Key (the receiver deduplicates)
#           status  — cannot deduplicate (no key header), has a status URL
#           legacy  — cannot deduplicate, no status URL
# faults:   drop_after (acts, drops the connection), late (acts, answers after
#           the timeout), reset_before (resets before acting), status_500
#           (500 before acting), status_429 (429 + Retry-After: 1), refused
#           (nothing listens)
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start dedupe --dedupe --late-ms 2500
receiver_start status --late-ms 2500
receiver_start legacy --late-ms 2500
refusing_port closed_port

common="timeout_ms=1000 max_attempts=4 backoff_base_ms=50 backoff_cap_ms=200 reconcile_delay_ms=1500"
target_add dedupe "http://127.0.0.1:$RECV_PORT_dedupe/act" $common
target_add status "http://127.0.0.1:$RECV_PORT_status/act" key_header=NULL \
    "status_url='http://127.0.0.1:$RECV_PORT_status/status/{key}'" $common
target_add legacy "http://127.0.0.1:$RECV_PORT_legacy/act" key_header=NULL $common
target_add refused_dedupe "http://127.0.0.1:$closed_port/act" $common
target_add refused_status "http://127.0.0.1:$closed_port/act" key_header=NULL \
    "status_url='http://127.0.0.1:$closed_port/status/{key}'" $common
target_add refused_legacy "http://127.0.0.1:$closed_port/act" key_header=NULL $common

faults="drop_after late reset_before status_500 status_429"
for kind in dedupe status legacy; do
    for fault in $faults; do
        sql "SELECT outbox.enqueue('$fault/$kind', '$kind',
               '{\"ref\": \"$fault/$kind\", \"_fault\": \"$fault\", \"_fault_times\": 1}')" >/dev/null
    done
    sql "SELECT outbox.enqueue('refused/$kind', 'refused_$kind', '{\"ref\": \"refused/$kind\"}')" >/dev/null
done

relay_start matrix --poll-interval-ms 100
ok "every cell settles within 40 s" wait_for 40 \
    "SELECT count(*) FROM outbox.intents
      WHERE state IN ('pending', 'in_flight') OR (state = 'unknown' AND target = 'status')" 0
kill -TERM "$RELAY_PID_matrix"; relay_wait matrix 20
is "$?" 0 "relay exits 0"

effects() { # effects KIND KEY → effects at that receiver for the key
    local port_var="RECV_PORT_$1"
    local body
    body=$(curl -s "http://127.0.0.1:${!port_var}/_requests/$2")
    local n
    n=$(sed -n 's/.*"effects":\([0-9]*\).*/\1/p' <<<"$body")
    echo "${n:-0}"
}

cell() { # cell FAULT KIND STATE STATUS EFFECTS AMBIGUOUS
    local key="$1/$2"
    local row
    row=$(sql "SELECT i.state || ' ' || o.status || ' ' || CASE WHEN i.ambiguous THEN 't' ELSE 'f' END
                 FROM outbox.intents i, outbox.outcome(i.key) o WHERE i.key = '$key'")
    local want_effects=$5
    local got_effects=0
    [ "$1" != refused ] && got_effects=$(effects "$2" "$key")
    is "$row effects=$got_effects" "$3 $4 $6 effects=$want_effects" "$key → $3, agent sees $4, $want_effects effect(s)"
}

#    fault        target  state      agent sees   effects ambiguous
cell drop_after   dedupe  succeeded  succeeded    1       t
cell late         dedupe  succeeded  succeeded    1       t
cell reset_before dedupe  succeeded  succeeded    1       t
cell status_500   dedupe  succeeded  succeeded    1       t
cell status_429   dedupe  succeeded  succeeded    1       f
cell refused      dedupe  failed     failed       0       f

cell drop_after   status  succeeded  succeeded    1       t
cell late         status  succeeded  succeeded    1       t
cell reset_before status  succeeded  succeeded    1       f
cell status_500   status  succeeded  succeeded    1       f
cell status_429   status  succeeded  succeeded    1       f
cell refused      status  failed     failed       0       f

cell drop_after   legacy  unknown    reconciling  1       t
cell late         legacy  unknown    reconciling  1       t
cell reset_before legacy  unknown    reconciling  0       t
cell status_500   legacy  unknown    reconciling  0       t
cell status_429   legacy  succeeded  succeeded    1       f
cell refused      legacy  failed     failed       0       f

is "$(receiver_stat status keys_with_duplicate_effects)$(receiver_stat legacy keys_with_duplicate_effects)" 00 \
    "no key acted on twice at the receivers that cannot deduplicate"
is "$(receiver_stat dedupe effects_total)" 5 "deduplicating receiver: one effect per key"
is "$(sql "SELECT count(*) FROM outbox.stuck WHERE target = 'legacy'
             AND reason = 'outcome unknown: needs a person — no status URL, no key'")" 4 \
    "the four unknown legacy rows are listed in outbox.stuck, as needing a person"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.target = 'legacy' AND a.class = 'ambiguous'")" 4 \
    "legacy: exactly one ambiguous attempt each, never re-sent"
is "$(sql "SELECT string_agg(DISTINCT a.class::text, ',' ORDER BY a.class::text) FROM outbox.attempts a
           JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key IN ('drop_after/status', 'late/status')")" \
    "ambiguous,reconciled_executed" "status URL said executed → succeeded without a second send"
is "$(sql "SELECT string_agg(a.class::text, ',' ORDER BY a.id) FROM outbox.attempts a
           JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'reset_before/status'")" \
    "ambiguous,reconciled_not_executed,succeeded" "status URL said not executed → sent again"
ok "429: the retry waited for Retry-After (1 s)" test "$(sql "SELECT extract(epoch FROM max(a.at) - min(a.at)) >= 0.95
    FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'status_429/legacy'")" = t
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key LIKE 'refused/%' AND a.class = 'not_sent' AND NOT a.request_sent")" 12 \
    "refused: four attempts each, all known not sent"
is "$(sql "SELECT last_error FROM outbox.outcome('refused/legacy')" | cut -c1-60)" \
    "not delivered after 4 attempt(s), none reached the target; l" "failed carries the reason"
is "$(sql "SELECT count(*) FROM outbox.outcome('late/legacy')
             WHERE last_error IS NULL AND message = 'outcome unknown: needs a person — no status URL, no key'")" 1 \
    "the agent sees no raw transport error, only 'outcome unknown: needs a person — no status URL, no key'"
ok "no sanitizer report" relay_logs_clean
itest_done
