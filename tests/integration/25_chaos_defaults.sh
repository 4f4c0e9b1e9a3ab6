#!/usr/bin/env bash
# Chaos with the defaults a new user has: 3,000 intents over a keyed target, a
# legacy target with a status URL and a legacy target without one, every
# target with default settings (only its URL, key header and status URL set),
# two relays with default options. Each receiver injects five fault kinds at
# 5 % each (drop_after, late, reset_before, status_500, status_429); relay a
# is killed with SIGKILL twice and PostgreSQL is restarted once while they
# drain. Within 60 s of the last fault nothing is pending or in flight; no
# receiver that cannot deduplicate sees a second effect; every succeeded row
# has exactly one effect.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup
N=1000

receiver_start dedupe --dedupe --random-faults 0.25 --seed 21 --late-ms 1500
receiver_start status --random-faults 0.25 --seed 22 --late-ms 1500
receiver_start legacy --random-faults 0.25 --seed 23 --late-ms 1500
target_add dedupe "http://127.0.0.1:$RECV_PORT_dedupe/act"
target_add status "http://127.0.0.1:$RECV_PORT_status/act" key_header=NULL \
    "status_url='http://127.0.0.1:$RECV_PORT_status/status/{key}'"
target_add legacy "http://127.0.0.1:$RECV_PORT_legacy/act" key_header=NULL
for kind in dedupe status legacy; do
    sql "SELECT count(*) FROM (SELECT outbox.enqueue('$kind:' || g, '$kind',
           jsonb_build_object('ref', '$kind:' || g, 'n', g)) FROM generate_series(1, $N) g) x" >/dev/null
done

relay_start a
relay_start b
sleep 1
kill -9 "$RELAY_PID_a"; wait "$RELAY_PID_a" 2>/dev/null
echo "# relay a killed; in flight: $(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")"
relay_start a
sleep 1
pgcluster_restart "$T/pg" && echo "# PostgreSQL restarted"
sleep 1
kill -9 "$RELAY_PID_a"; wait "$RELAY_PID_a" 2>/dev/null
echo "# relay a killed again; in flight: $(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")"
relay_start a
last_fault=$(date +%s)

ok "within 60 s of the last fault nothing is pending or in flight" wait_for 60 \
    "SELECT count(*) FROM outbox.intents WHERE state IN ('pending', 'in_flight')" 0
echo "# settled $(( $(date +%s) - last_fault )) s after the last fault"
echo "# states: $(sql "SELECT string_agg(target || '/' || state || '=' || n, ' ' ORDER BY target, state)
                      FROM (SELECT target, state, count(*) n FROM outbox.intents GROUP BY 1, 2) s")"
effects_table dedupe status legacy
is "$(sql "SELECT count(*) FROM effects WHERE kind IN ('status', 'legacy') AND n > 1")" 0 \
    "no duplicate effect at receivers that cannot deduplicate"
is "$(sql "SELECT count(*) FROM outbox.intents i LEFT JOIN effects e ON e.kind = i.target AND e.key = i.key
           WHERE i.state = 'succeeded' AND coalesce(e.n, 0) <> 1")" 0 "every succeeded row has exactly one effect"
is "$(sql "SELECT count(*) FROM outbox.intents i JOIN effects e ON e.kind = i.target AND e.key = i.key
           WHERE i.state = 'failed' AND e.n > 0")" 0 "failed rows have no effect"
is "$(sql "SELECT count(*) FROM outbox.intents i WHERE state = 'unknown'
           AND NOT EXISTS (SELECT 1 FROM outbox.stuck s WHERE s.key = i.key)")" 0 "every unknown row is in outbox.stuck"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'dedupe' AND state <> 'succeeded'")" 0 \
    "the keyed target: every intent succeeded"
is "$(sql "SELECT string_agg(DISTINCT circuit, ',') FROM outbox.target_health")" closed \
    "faults at 5 % each do not open a circuit"

for r in a b; do pid_var=RELAY_PID_$r; kill -TERM "${!pid_var}"; done
for r in a b; do relay_wait $r 30; is "$?" 0 "relay $r exits 0 on SIGTERM"; done
ok "no sanitizer report" relay_logs_clean
itest_done
