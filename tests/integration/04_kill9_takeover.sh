#!/usr/bin/env bash
# kill -9 of a relay with deliveries in flight: after the lease expires another
# relay takes those rows over as ambiguous. A deduplicating target gets the
# same key again (one effect per key); a target that cannot deduplicate is
# never re-sent: its rows wait in `unknown`, listed in outbox.stuck.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start keyed --dedupe --delay-ms 2500
receiver_start plain --delay-ms 2500
target_add keyed "http://127.0.0.1:$RECV_PORT_keyed/calls" timeout_ms=20000 backoff_base_ms=10 backoff_cap_ms=100
target_add plain "http://127.0.0.1:$RECV_PORT_plain/calls" key_header=NULL timeout_ms=20000
enqueue_many keyed "k:" 40
enqueue_many plain "p:" 40

relay_start victim --lease-ms 2000 --poll-interval-ms 100
ok "deliveries reached both receivers" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 80
sleep 0.5 # the requests have arrived and are being worked on (2.5 s each)
kill -9 "$RELAY_PID_victim"
wait "$RELAY_PID_victim" 2>/dev/null
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight' AND lease_owner = 'relay-victim'")" \
    80 "the dead relay's rows are in flight under its lease"

relay_start heir --lease-ms 2000 --poll-interval-ms 100
ok "nothing stays in flight" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 0
ok "deduplicating target: all succeeded after the retry with the same key" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'keyed' AND state = 'succeeded'" 40
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'keyed' AND ambiguous")" 40 \
    "taken-over rows are flagged ambiguous"
is "$(receiver_stat keyed effects_total)" 40 "one effect per key at the deduplicating receiver"
is "$(receiver_stat keyed keys_with_duplicate_effects)" 0 "no key acted on twice"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'plain' AND state = 'unknown' AND ambiguous")" 40 \
    "legacy target: rows wait in unknown, not re-sent"
is "$(receiver_stat plain deliveries_total)" 40 "legacy receiver got each intent once"
is "$(sql "SELECT count(*) FROM outbox.stuck WHERE target = 'plain'
             AND reason = 'outcome unknown: needs a person — no status URL, no key'")" 40 \
    "unknown rows are listed in outbox.stuck, as needing a person"
is "$(sql "SELECT status FROM outbox.outcome('p:1')")" reconciling "the agent sees reconciling"
is "$(sql "SELECT count(*) FROM outbox.attempts WHERE class = 'ambiguous' AND request_sent IS NULL AND error LIKE 'lease of relay relay-victim expired%'")" \
    80 "each take-over is an ambiguous attempt naming the dead relay"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'failed'")" 0 "nothing marked failed"
kill -TERM "$RELAY_PID_heir"; relay_wait heir 20
is "$?" 0 "heir exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
