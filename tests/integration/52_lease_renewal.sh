#!/usr/bin/env bash
# Proves: a relay renews the leases of the deliveries it is running, so a live peer never takes them over.
# Two live relays, a 1 s lease, a receiver that answers after 2.5 s and cannot
# deduplicate (a second request would be a second effect): every intent one
# request and one effect, succeeded at its first attempt, no take-over in the
# attempts table, outbox_taken_over_total 0 on both relays. Without renewal
# (relay_renew_leases doing nothing) each relay takes the other's rows over
# after a second and re-sends them with the same key: two effects per key.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow --delay-ms 2500
target_add t "http://127.0.0.1:$RECV_PORT_slow/act" timeout_ms=10000 backoff_base_ms=10 backoff_cap_ms=100
enqueue_many t "lease:" 300

# 100 in flight each: both relays hold rows at once, for 2.5 lease lengths.
relay_start a --lease-ms 1000 --poll-interval-ms 100 --max-in-flight 100 --admin-listen 127.0.0.1:0
relay_start b --lease-ms 1000 --poll-interval-ms 100 --max-in-flight 100 --admin-listen 127.0.0.1:0
ADMIN_a=$(relay_admin_port a)
ADMIN_b=$(relay_admin_port b)
[ -n "$ADMIN_a" ] && [ -n "$ADMIN_b" ] || bail "an admin port did not open"

ok "both relays deliver at once" wait_for 15 \
    "SELECT count(DISTINCT lease_owner) FROM outbox.intents WHERE state = 'in_flight'" 2
# The lease of the row claimed last moves forward while its delivery runs,
# under the same relay and attempt.
id=$(sql "SELECT id FROM outbox.intents WHERE state = 'in_flight' ORDER BY lease_expires_at DESC, id LIMIT 1")
before=$(sql "SELECT attempts || '|' || lease_owner || '|' || lease_expires_at FROM outbox.intents WHERE id = $id")
sleep 1.2
is "$(sql "SELECT state || ' ' || (attempts || '|' || lease_owner = split_part('$before', '|', 1) || '|' || split_part('$before', '|', 2))
                || ' ' || (lease_expires_at > split_part('$before', '|', 3)::timestamptz)
           FROM outbox.intents WHERE id = $id")" "in_flight true true" \
    "1.2 s later (over a lease) the row is still in flight, same relay and attempt, its lease later"

ok "all 300 succeeded" wait_for 40 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 300
is "$(sql "SELECT count(*) FROM outbox.intents WHERE attempts = 1 AND NOT ambiguous")" 300 \
    "each at its first attempt, none flagged ambiguous"
is "$(receiver_stat slow deliveries_total)/$(receiver_stat slow effects_total)" "300/300" \
    "300 requests and 300 effects at the receiver"
is "$(receiver_stat slow keys_with_duplicate_effects)" 0 "no key acted on twice"
is "$(sql "SELECT count(*) || ' ' || count(*) FILTER (WHERE class = 'succeeded' AND recorded)
             || ' ' || count(*) FILTER (WHERE error LIKE 'lease of relay%')
           FROM outbox.attempts")" "300 300 0" "300 attempts rows, all succeeded and applied, no take-over"
is "$(sql "SELECT count(*) FROM outbox.attempts WHERE latency_ms < 2000")" 0 \
    "every delivery lasted longer than the 1 s lease (not vacuous)"
is "$(sql "SELECT string_agg(relay || '>' || (count > 0)::text, ' ' ORDER BY relay)
           FROM (SELECT relay, count(*) FROM outbox.attempts GROUP BY relay) x")" "relay-a>true relay-b>true" \
    "both relays delivered"
is "$(relay_metric "$ADMIN_a" outbox_taken_over_total)/$(relay_metric "$ADMIN_b" outbox_taken_over_total)" "0/0" \
    "outbox_taken_over_total is 0 on both relays"
is "$(relay_metric "$ADMIN_a" outbox_fenced_out_total)/$(relay_metric "$ADMIN_b" outbox_fenced_out_total)" "0/0" \
    "no outcome was fenced out"
ok "no lease_taken_over in the logs" bash -c "! grep -q '\"event\":\"lease_taken_over\"' '$T'/relay-*.log"
kill -TERM "$RELAY_PID_a" "$RELAY_PID_b"
relay_wait a 20
is "$?" 0 "relay a stops cleanly"
relay_wait b 20
is "$?" 0 "relay b stops cleanly"
ok "no sanitizer report" relay_logs_clean
itest_done
