#!/usr/bin/env bash
# Proves: the counters of /metrics equal the attempts rows they count (retries, reconciliations, take-overs, fenced-out, attempts by class) and outbox_in_flight the rows in flight.
# What happens, each counted by the relay that did it and by its rows in
# outbox.attempts (attempts.relay):
#   - take-overs: relay victim is killed (-9) and relay sleeper frozen
#     (SIGSTOP) with deliveries in flight; relay m takes their rows over;
#   - fenced-out: sleeper, thawed, finishes its deliveries and records them,
#     refused by the lease fence (attempts.recorded = false);
#   - retries: a target answers 503 for a while (attempts after the first);
#   - reconciliations: a target with a status URL and a key_ttl too short to
#     re-send: a request that acted but answered too late (late) is
#     reconciled executed, one that did not act (a 500, twice) not executed,
#     then sent again (a status check at attempt 2 is not a retry). Answers,
#     not resets: libcurl re-sends by itself on a reused connection that
#     breaks, which would hide a fault;
#   - in flight: six slow deliveries of m against its outbox_in_flight.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start sk --dedupe --delay-ms 2000
receiver_start fl --mode-status 503
receiver_start ck --late-ms 2000
receiver_start hd --delay-ms 3000
target_add slowk "http://127.0.0.1:$RECV_PORT_sk/act" timeout_ms=10000 backoff_base_ms=10 backoff_cap_ms=100
target_add flaky "http://127.0.0.1:$RECV_PORT_fl/act" backoff_base_ms=50 backoff_cap_ms=200 circuit_failure_threshold=1000
target_add checked "http://127.0.0.1:$RECV_PORT_ck/act" "status_url='http://127.0.0.1:$RECV_PORT_ck/status/{key}'" \
    "key_ttl='1 millisecond'" reconcile_delay_ms=300 backoff_base_ms=10 backoff_cap_ms=100 timeout_ms=1000
target_add hold "http://127.0.0.1:$RECV_PORT_hd/act" timeout_ms=10000

# Two relays with 10 deliveries of 2 s each; one dies, one freezes.
enqueue_many slowk "s:" 20
relay_start victim --lease-ms 1000 --poll-interval-ms 100 --max-in-flight 10
relay_start sleeper --lease-ms 1000 --poll-interval-ms 100 --max-in-flight 10 --admin-listen 127.0.0.1:0
ADMIN_sleeper=$(relay_admin_port sleeper)
[ -n "$ADMIN_sleeper" ] || bail "the sleeper's admin port did not open"
ok "victim and sleeper hold 10 rows each" wait_for 10 \
    "SELECT string_agg(lease_owner || ':' || n, ' ' ORDER BY lease_owner)
       FROM (SELECT lease_owner, count(*) n FROM outbox.intents WHERE state = 'in_flight' GROUP BY 1) x" \
    "relay-sleeper:10 relay-victim:10"
ok "their 20 requests reached the receiver" wait_cmd 10 \
    bash -c "[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_sk/_stats | sed -n 's/.*\"deliveries_total\":\([0-9]*\).*/\1/p')\" = 20 ]"
kill -9 "$RELAY_PID_victim"
kill -STOP "$RELAY_PID_sleeper"

relay_start m --lease-ms 1000 --poll-interval-ms 100 --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port m)
[ -n "$ADMIN" ] || bail "m's admin port did not open"
ok "m takes the 20 rows over" wait_for 15 \
    "SELECT count(*) FROM outbox.attempts WHERE relay = 'relay-m' AND error LIKE 'lease of relay % expired%'" 20
kill -CONT "$RELAY_PID_sleeper"
fenced_rows() { sql "SELECT count(*) FROM outbox.attempts WHERE relay = 'relay-$1' AND NOT recorded"; }
ok "the thawed sleeper records its 10 outcomes, refused by the fence" wait_cmd 15 \
    bash -c "[ \"\$(psql -X -tA -c \"SELECT count(*) FROM outbox.attempts WHERE relay = 'relay-sleeper' AND NOT recorded\")\" = 10 ]"
ok "the sleeper's outbox_fenced_out_total catches up" wait_cmd 5 \
    bash -c "[ \"\$(curl -s http://127.0.0.1:$ADMIN_sleeper/metrics | awk '\$1 == \"outbox_fenced_out_total\" { print \$2 }')\" = 10 ]"
is "$(relay_metric "$ADMIN_sleeper" outbox_fenced_out_total)" "$(fenced_rows sleeper)" \
    "sleeper: outbox_fenced_out_total = its attempts rows with recorded = false"
kill -TERM "$RELAY_PID_sleeper"
relay_wait sleeper 20
is "$?" 0 "the sleeper stops cleanly"

# Retries and reconciliations.
enqueue_many flaky "f:" 5
sql "SELECT outbox.enqueue('c:acted' || g, 'checked', '{\"_fault\": \"late\"}') FROM generate_series(1, 3) g" >/dev/null
sql "SELECT outbox.enqueue('c:refused' || g, 'checked', '{\"_fault\": \"status_500\", \"_fault_times\": 2}')
       FROM generate_series(1, 3) g" >/dev/null
ok "the flaky target answers 503 at least 15 times" wait_cmd 15 \
    bash -c "[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_fl/_stats | sed -n 's/.*\"mode_answers_total\":\([0-9]*\).*/\1/p')\" -ge 15 ]"
curl -s -X POST -d '{}' "http://127.0.0.1:$RECV_PORT_fl/_mode" >/dev/null
ok "slowk, flaky and checked all succeed" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 31
is "$(receiver_stat sk effects_total)/$(receiver_stat fl effects_total)/$(receiver_stat ck effects_total)" "20/5/6" \
    "one effect per intent at each receiver"

# In flight: six deliveries of 3 s.
enqueue_many hold "h:" 6
ok "m has six hold rows in flight" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight' AND lease_owner = 'relay-m' AND target = 'hold'" 6
is "$(relay_metric "$ADMIN" 'outbox_in_flight{target="hold"}')" \
    "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight' AND lease_owner = 'relay-m' AND target = 'hold'")" \
    "outbox_in_flight{target=\"hold\"} = m's rows of hold in flight (6)"
is "$(curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '$1 ~ /^outbox_in_flight\{/ { s += $2 } END { print s }')" \
    "$(sql "SELECT count(*) FROM outbox.intents WHERE state IN ('in_flight', 'unknown') AND lease_owner = 'relay-m'")" \
    "outbox_in_flight summed over targets = every row m holds"
ok "the hold rows succeed" wait_for 15 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 37
ok "m has written everything" wait_cmd 10 bash -c \
    "[ \"\$(curl -s http://127.0.0.1:$ADMIN/metrics | awk '\$1 == \"outbox_unrecorded_outcomes\" { print \$2 }')\" = 0 ]"
is "$(curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '$1 ~ /^outbox_in_flight\{/ { s += $2 } END { print s }')" 0 \
    "outbox_in_flight is back to 0 everywhere"

# The counters against the rows. A delivery's row has request_sent and
# key_sent known; a take-over's has request_sent NULL; a status check's key_sent.
M=$(curl -s "http://127.0.0.1:$ADMIN/metrics")
from_metrics() { # FAMILY → "labels value" lines with a value other than 0, sorted
    awk -v f="$1" 'index($1, f "{") == 1 && $2 != 0 { sub(/^[^{]*/, "", $1); print $1, $2 }' <<<"$M" | LC_ALL=C sort
}
from_rows() { # SQL of (label, count) → the same lines
    sql "SELECT l || ' ' || n FROM ($1) x" | LC_ALL=C sort
}
A="outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE a.relay = 'relay-m'"
want_retries=$(from_rows "SELECT '{target=\"' || i.target || '\"}' l, count(*) n FROM $A
                      AND a.attempt > 1 AND a.request_sent IS NOT NULL AND a.key_sent IS NOT NULL GROUP BY 1")
echo "# m's rows: retries $(tr '\n' ' ' <<<"$want_retries")"
is "$(from_metrics outbox_retries_total)" "$want_retries" \
    "outbox_retries_total by target = m's delivery rows after the first attempt"
ok "retries happened at flaky (>= 10) and slowk (m re-sent what it took over)" \
    bash -c "grep -qE '^\\{target=\"flaky\"\\} ([1-9][0-9]+)$' <<<'$want_retries' && grep -q 'slowk' <<<'$want_retries'"
want_rec=$(from_rows "SELECT '{target=\"' || i.target || '\",result=\"' ||
                       CASE a.class WHEN 'reconciled_executed' THEN 'executed'
                                    WHEN 'reconciled_not_executed' THEN 'not_executed' ELSE 'inconclusive' END
                       || '\"}' l, count(*) n FROM $A
                   AND a.class IN ('reconciled_executed', 'reconciled_not_executed', 'reconcile_inconclusive')
                 GROUP BY 1")
is "$(from_metrics outbox_reconciliations_total)" "$want_rec" \
    "outbox_reconciliations_total by target and result = m's status-check rows"
ok "reconciliations happened: 3 executed, 6 not executed (at attempts 1 and 2)" \
    bash -c "grep -q 'result=\"executed\"} 3' <<<'$want_rec' && grep -q 'result=\"not_executed\"} 6' <<<'$want_rec'"
is "$(relay_metric "$ADMIN" outbox_taken_over_total)" \
    "$(sql "SELECT count(*) FROM $A AND a.class = 'ambiguous' AND a.request_sent IS NULL AND a.error LIKE 'lease of relay % expired%'")" \
    "outbox_taken_over_total = m's take-over rows"
is "$(relay_metric "$ADMIN" outbox_taken_over_total)" 20 "which are the 20 rows of victim and sleeper"
is "$(relay_metric "$ADMIN" outbox_fenced_out_total)" "$(fenced_rows m)" \
    "m: outbox_fenced_out_total = its rows with recorded = false"
want_classes=$(from_rows "SELECT '{target=\"' || i.target || '\",class=\"' || a.class || '\"}' l, count(*) n FROM $A GROUP BY 1")
is "$(from_metrics outbox_attempts_total)" "$want_classes" "outbox_attempts_total by target and class = m's rows"
is "$(relay_metric "$ADMIN" outbox_recorded_total)" \
    "$(sql "SELECT count(*) FROM $A AND a.recorded")" "outbox_recorded_total = m's applied rows"

kill -TERM "$RELAY_PID_m"
relay_wait m 20
is "$?" 0 "m stops cleanly"
ok "no sanitizer report" relay_logs_clean
itest_done
