#!/usr/bin/env bash
# Chaos: 6,000 intents over the three kinds of target, every fault mode
# injected at >= 5 %, the relay killed with SIGKILL three times and PostgreSQL
# restarted once while it drains; relays restarted after each kill.
# Asserts: no duplicate effect at receivers that cannot deduplicate; no intent
# lost; every succeeded row has exactly one effect; failed rows have none.
# The targets where nothing listens open their circuits: their intents wait as
# pending, listed in outbox.stuck ("target unavailable since …"), not failed.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup
N_PER_KIND=1800 # x3 kinds, plus 200 per kind to refused targets = 6,000
N_REFUSED=200

# Each receiver injects a fault into 30 % of deliveries, uniformly over five
# modes: drop_after, late, reset_before, status_500, status_429 (6 % each).
receiver_start dedupe --dedupe --random-faults 0.30 --seed 11 --late-ms 900 --delay-ms 40
receiver_start status --random-faults 0.30 --seed 12 --late-ms 900 --delay-ms 40
receiver_start legacy --random-faults 0.30 --seed 13 --late-ms 900 --delay-ms 40
refusing_port closed_port

common="timeout_ms=500 max_attempts=6 backoff_base_ms=20 backoff_cap_ms=300 reconcile_delay_ms=1000"
target_add dedupe "http://127.0.0.1:$RECV_PORT_dedupe/act" $common
target_add status "http://127.0.0.1:$RECV_PORT_status/act" key_header=NULL \
    "status_url='http://127.0.0.1:$RECV_PORT_status/status/{key}'" $common
target_add legacy "http://127.0.0.1:$RECV_PORT_legacy/act" key_header=NULL $common
for kind in dedupe status legacy; do
    target_add "refused_$kind" "http://127.0.0.1:$closed_port/act" ${common/max_attempts=6/max_attempts=3} \
        $([ $kind = dedupe ] || echo key_header=NULL)
done
for kind in dedupe status legacy; do
    sql "SELECT count(*) FROM (SELECT outbox.enqueue('$kind:' || g, '$kind',
           jsonb_build_object('ref', '$kind:' || g, 'n', g)) FROM generate_series(1, $N_PER_KIND) g) x" >/dev/null
    sql "SELECT count(*) FROM (SELECT outbox.enqueue('refused_$kind:' || g, 'refused_$kind',
           jsonb_build_object('ref', 'refused_$kind:' || g)) FROM generate_series(1, $N_REFUSED) g) x" >/dev/null
done
total=$(sql "SELECT count(*) FROM outbox.intents")
echo "# intents: $total"

opts="--lease-ms 1500 --poll-interval-ms 100 --batch-size 16 --max-in-flight 24 --grace-ms 2000"
relay_start a $opts
relay_start b $opts
kills=0
restarted=0
for round in 1 2 3; do
    sleep 2
    pid_var=RELAY_PID_a
    kill -9 "${!pid_var}" 2>/dev/null && kills=$((kills + 1))
    wait "${!pid_var}" 2>/dev/null
    echo "# round $round: relay a killed with SIGKILL; in flight: $(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")"
    if [ $round = 2 ]; then
        pgcluster_restart "$T/pg" && restarted=1 && echo "# PostgreSQL restarted"
    fi
    relay_start a $opts
done

settled="SELECT count(*) FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
          WHERE (i.state IN ('pending', 'in_flight') AND i.target NOT LIKE 'refused_%')
             OR (i.state = 'in_flight' AND i.target LIKE 'refused_%')
             OR (i.state = 'unknown' AND t.status_url IS NOT NULL)"
ok "the outbox settles within 240 s" wait_for 240 "$settled" 0
for r in a b; do pid_var=RELAY_PID_$r; kill -TERM "${!pid_var}"; done
for r in a b; do relay_wait $r 30; is "$?" 0 "relay $r exits 0 on SIGTERM"; done

# Effects per key at each receiver, joined with the table in SQL.
effects_table dedupe status legacy

faults=$(for kind in dedupe status legacy; do port_var=RECV_PORT_$kind; curl -s "http://127.0.0.1:${!port_var}/_stats"; echo; done)
deliveries=$(sed -n 's/.*"deliveries_total":\([0-9]*\).*/\1/p' <<<"$faults" | awk '{s += $1} END {print s + 0}')
for mode in drop_after late reset_before status_500 status_429; do
    n=$(sed -n "s/.*\"$mode\":\([0-9]*\).*/\1/p" <<<"$faults" | awk '{s += $1} END {print s + 0}')
    pct=$(( 1000 * n / deliveries ))
    echo "# fault $mode: $n of $deliveries deliveries ($((pct / 10)).$((pct % 10)) %)"
    ok "fault $mode injected at >= 5 % of deliveries" test "$pct" -ge 50
done
refused=$(sql "SELECT count(*) FROM outbox.intents WHERE target LIKE 'refused_%'")
echo "# fault refused: $refused intents to targets where nothing listens ($(( 100 * refused / total )) % of intents)"
ok "connection refused at >= 5 % of intents" test $(( 100 * refused )) -ge $(( 5 * total ))
is "$kills" 3 "relay killed with SIGKILL three times"
is "$restarted" 1 "PostgreSQL restarted once while draining"

dups=$(sql "SELECT count(*) FROM effects WHERE kind IN ('status', 'legacy') AND n > 1")
lost=$(sql "SELECT count(*) FROM outbox.intents i
             WHERE NOT (i.state = 'succeeded'
                        OR (i.state = 'failed' AND NOT i.ambiguous AND NOT EXISTS (
                              -- an attempt that reached the target and may have acted:
                              -- neither a \"did not act\" answer nor disproved by a later
                              -- status check (\"no attempt executed\" covers every earlier one)
                              SELECT 1 FROM outbox.attempts a
                               WHERE a.intent_id = i.id AND a.request_sent IS DISTINCT FROM false
                                 AND a.class NOT IN ('reconciled_not_executed', 'reconcile_inconclusive',
                                                     'retry_later', 'permanent_failure', 'key_conflict')
                                 AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                                                  WHERE r.intent_id = i.id AND r.id > a.id
                                                    AND r.class = 'reconciled_not_executed')))
                        OR (i.state = 'unknown' AND EXISTS (SELECT 1 FROM outbox.stuck s WHERE s.key = i.key))
                        OR (i.state = 'pending' AND EXISTS (SELECT 1 FROM outbox.stuck s WHERE s.key = i.key
                                                              AND s.reason LIKE 'target unavailable since %')))")
unknown=$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'unknown'")
succeeded_wrong=$(sql "SELECT count(*) FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                        LEFT JOIN effects e ON e.kind = i.target AND e.key = i.key
                       WHERE i.state = 'succeeded' AND t.name NOT LIKE 'refused_%' AND coalesce(e.n, 0) <> 1")
failed_with_effect=$(sql "SELECT count(*) FROM outbox.intents i JOIN effects e ON e.kind = i.target AND e.key = i.key
                          WHERE i.state = 'failed' AND e.n > 0")
echo "# states: $(sql "SELECT string_agg(state || '=' || n, ' ' ORDER BY state) FROM (SELECT state, count(*) n FROM outbox.intents GROUP BY state) s")"
echo "# taken over after kills: $(sql "SELECT count(*) FROM outbox.attempts WHERE error LIKE 'lease of relay % expired%'")"
echo "# reconciled: $(sql "SELECT count(*) FROM outbox.attempts WHERE class IN ('reconciled_executed', 'reconciled_not_executed')")"
echo "# duplicates at non-deduplicating receivers: $dups; lost: $lost; unknown left for a person: $unknown"
is "$total" 6000 "6,000 intents"
is "$dups" 0 "no duplicate effect at receivers that cannot deduplicate"
is "$lost" 0 "no intent lost (succeeded, failed with every attempt unsent, or unknown and in outbox.stuck)"
is "$succeeded_wrong" 0 "every succeeded row has exactly one effect at its receiver"
is "$failed_with_effect" 0 "failed rows have no effect"
is "$(sql "SELECT count(*) FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
           WHERE i.state = 'unknown' AND i.target NOT IN ('legacy', 'refused_legacy')
             AND i.attempts < t.max_attempts")" 0 \
    "rows left unknown: targets without keys or status URL, or a keyed target's attempts exhausted"
is "$(sql "SELECT count(*) FROM outbox.intents i WHERE i.state = 'unknown' AND NOT EXISTS
           (SELECT 1 FROM outbox.attempts a WHERE a.intent_id = i.id AND a.class = 'ambiguous')")" 0 \
    "every unknown row had an ambiguous attempt (a timeout, reset, 5xx or a dead relay's lease)"
is "$(sql "SELECT string_agg(DISTINCT circuit, ',') FROM outbox.target_health WHERE target LIKE 'refused_%'")" open \
    "the targets where nothing listens have open circuits"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target LIKE 'refused_%' AND state NOT IN ('pending', 'failed')")" 0 \
    "their intents wait as pending (or failed after max_attempts = 3, every attempt unsent)"
ok "their attempts are few: at most max_attempts per intent, most spent in the first claim" \
    test "$(sql "SELECT max(attempts) FROM outbox.intents WHERE target LIKE 'refused_%'")" -le 3
ok "no sanitizer report" relay_logs_clean
itest_done
