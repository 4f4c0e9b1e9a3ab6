#!/usr/bin/env bash
# Two relays over the same four databases (--databases), the chaos scenario's
# faults: receivers that fail 30 % of deliveries (drop after the request,
# late answers past the timeout, resets, 500, 429), relay a killed with
# SIGKILL three times and restarted, one database's cluster restarted once.
# Per database: every keyed intent succeeded with one effect at its
# deduplicating receiver (or, its 6 attempts all failed, waits for a person as
# unknown, as in 11_chaos); a legacy intent (no key header) is succeeded with
# one effect or left unknown for a person with at most one: 0 duplicate
# effects, 0 lost, and the relays' leases, fence and take-over work per
# database as they do for one.
# itest: alone
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/multidb.sh"
itest_setup
multidb_cluster "$T/pg2" synchronous_commit=on

for name in a b c; do multidb_add "$name"; done
multidb_add d "$T/pg2"
multidb_migrate

receiver_start dedupe --dedupe --random-faults 0.30 --seed 21 --late-ms 900 --delay-ms 20
receiver_start legacy --random-faults 0.30 --seed 22 --late-ms 900 --delay-ms 20
NK=400
NL=100
for name in a b c d; do
    dsql "$name" "INSERT INTO outbox.targets (name, url, timeout_ms, max_attempts, backoff_base_ms, backoff_cap_ms)
                  VALUES ('keyed', 'http://127.0.0.1:$RECV_PORT_dedupe/act', 500, 6, 20, 300)" >/dev/null
    dsql "$name" "INSERT INTO outbox.targets (name, url, key_header, timeout_ms, max_attempts, backoff_base_ms, backoff_cap_ms)
                  VALUES ('legacy', 'http://127.0.0.1:$RECV_PORT_legacy/act', NULL, 500, 6, 20, 300)" >/dev/null
    dsql "$name" "SELECT count(*) FROM (SELECT outbox.enqueue('$name:k:' || g, 'keyed', jsonb_build_object('ref', '$name:k:' || g))
                    FROM generate_series(1, $NK) g) x" >/dev/null
    dsql "$name" "SELECT count(*) FROM (SELECT outbox.enqueue('$name:l:' || g, 'legacy', jsonb_build_object('ref', '$name:l:' || g))
                    FROM generate_series(1, $NL) g) x" >/dev/null
done

opts="--databases $T/relay.databases --lease-ms 1500 --poll-interval-ms 100 --batch-size 16 --max-in-flight 32 --grace-ms 2000 --reconnect-max-ms 500"
relay_start a $opts
relay_start b $opts
for round in 1 2 3; do
    sleep 3
    kill -9 "$RELAY_PID_a" 2>/dev/null
    wait "$RELAY_PID_a" 2>/dev/null
    echo "# round $round: relay a killed with SIGKILL"
    [ $round = 2 ] && pgcluster_restart "$T/pg2" && echo "# d's cluster restarted"
    relay_start a $opts
done

unsettled() {
    local name n=0
    for name in a b c d; do
        n=$((n + $(dsql "$name" "SELECT count(*) FROM outbox.intents WHERE state IN ('pending', 'in_flight')
                                     OR (state = 'unknown' AND target = 'keyed' AND attempts < 6)")))
    done
    echo "$n"
}
settled() { test "$(unsettled)" = 0; }
ok "every database settles" wait_cmd 300 settled
for name in a b c d; do
    read -r keys effects dups <<<"$(effects_of "$name" dedupe)"
    is "$effects/$dups" "$keys/0" "$name: no keyed intent acted on twice"
    is "$(dsql "$name" "SELECT count(*) FROM outbox.intents WHERE target = 'keyed'
                          AND NOT (state = 'succeeded' OR (state = 'unknown' AND attempts = 6))")" 0 \
        "$name: every keyed intent succeeded, or is unknown after its 6 attempts (none lost)"
    ok "$name: every succeeded keyed intent acted on" \
        test "$keys" -ge "$(dsql "$name" "SELECT count(*) FROM outbox.intents WHERE target = 'keyed' AND state = 'succeeded'")"
    read -r keys effects dups <<<"$(effects_of "$name" legacy)"
    is "$dups" 0 "$name: no legacy key acted on twice"
    is "$(dsql "$name" "SELECT count(*) FROM outbox.intents WHERE target = 'legacy' AND state NOT IN ('succeeded', 'unknown')")" 0 \
        "$name: every legacy intent succeeded or waits for a person as unknown (none lost)"
    ok "$name: legacy succeeded ones acted on (at least as many effects as succeeded)" \
        test "$effects" -ge "$(dsql "$name" "SELECT count(*) FROM outbox.intents WHERE target = 'legacy' AND state = 'succeeded'")"
done
echo "# take-overs: $(for n in a b c d; do dsql $n "SELECT count(*) FROM outbox.attempts WHERE error LIKE 'lease of relay % expired%'"; done | paste -sd+ | bc)"
kill -TERM "$RELAY_PID_a" "$RELAY_PID_b"; relay_wait a 30; ra=$?; relay_wait b 30; rb=$?
is "$ra/$rb" "0/0" "both exit 0"
ok "no sanitizer report" relay_logs_clean
itest_done
