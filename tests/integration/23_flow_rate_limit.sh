#!/usr/bin/env bash
# Flow control, a rate limit held across relays: rate_limit_per_s = 200 on a
# target, 3,000 intents, two relays with default options. The receiver counts
# arrivals in every sliding 1 s window.
#   - no 1 s window holds more than 220 requests (1.1 x the limit): a slow
#     machine only lowers it;
#   - an unlimited target beside it drains (how many rows of the limited one
#     were left then is printed: on a slow machine both share the relays);
#   - how long the drain took and the busiest window are printed, not
#     asserted: a slow machine lowers them (timings belong to make bench).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start limited --dedupe
receiver_start free --dedupe
target_add limited "http://127.0.0.1:$RECV_PORT_limited/act" rate_limit_per_s=200
target_add free "http://127.0.0.1:$RECV_PORT_free/act"
enqueue_many limited "limited:" 3000
enqueue_many free "free:" 3000

relay_start a
relay_start b
ok "the unlimited target drains beside the limited one" wait_for 60 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'free' AND state = 'succeeded'" 3000
left=$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'limited' AND state <> 'succeeded'")
echo "# the unlimited target drained with $left rows of the limited one left"
ok "the rate-limited target drains (3,000 at 200/s)" wait_for 120 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'limited' AND state = 'succeeded'" 3000

max_1s=$(receiver_stat limited max_deliveries_1s)
first=$(receiver_stat limited first_delivery_ms)
last=$(receiver_stat limited last_delivery_ms)
drain_ms=$((last - first))
echo "# limited target: busiest 1 s window $max_1s requests (limit 200/s); 3000 delivered in $drain_ms ms"
ok "no 1 s window over 220 requests ($max_1s)" test "$max_1s" -le 220
is "$(receiver_stat limited deliveries_total)" 3000 "each intent delivered once"
is "$(sql "SELECT count(DISTINCT lease_owner) FROM outbox.intents WHERE target = 'limited'")" 0 "no lease left behind"
by_relay=$(sql "SELECT string_agg(relay || '=' || n, ' ' ORDER BY relay) FROM (SELECT a.relay, count(*) n FROM outbox.attempts a
                 JOIN outbox.intents i ON i.id = a.intent_id WHERE i.target = 'limited' GROUP BY 1) x")
echo "# deliveries by relay: $by_relay"
ok "both relays delivered to the limited target" test "$(wc -w <<<"$by_relay")" = 2

for r in a b; do pid_var=RELAY_PID_$r; kill -TERM "${!pid_var}"; done
for r in a b; do relay_wait $r 30; is "$?" 0 "relay $r exits 0"; done
ok "no sanitizer report" relay_logs_clean
itest_done
