#!/usr/bin/env bash
# A claim's burst opens the connections its target needs, not one per
# delivery (issue 40, item 4: memory over TLS; relay/lib/http_client.c,
# "Waiting for a connection"); a slow target still gets every request on
# the wire at once.
#
# libcurl opens a connection for every HTTP/1.1 transfer that finds none
# idle, so a claim of N landing at once opened N connections (over TLS
# about 51 KiB each, docs/performance.md "Memory"), however fast the target
# answered. Now, past 32 transfers, one that finds no idle connection waits
# for a transfer to end and free one, or for a loop turn that ends none.
#
#   A. a fast receiver, 768 intents due before the relay starts, claimed in
#      one claim of 768 (--batch-size 768): the connections the receiver
#      holds at the end (it never closes an idle one, the relay keeps up to
#      --max-in-flight) are the connections opened. Before: 768, one per
#      delivery of the claim. Now: at most half of them.
#   B. a receiver that holds every answer 8 s, 500 intents: all 500 requests
#      reach it while none has been answered (the receiver counts arrivals,
#      the database counts outcomes): the wait does not hold back a target
#      whose requests need the connections (the way 942ae56 failed
#      integration 28).
# Counts only; the one delay is the receiver's, which the relay must not
# need to outrun by more than its length (as in 28).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

BURST=768
SLOW=500
SLOW_DELAY_MS=8000

# established connections whose local end is PORT (the receiver's side)
conns_at() {
    ss -Htn state established "( sport = :$1 )" | grep -c .
}

# A. a burst to a fast receiver
receiver_start fast
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act"
enqueue_many fast "fast:" "$BURST"
relay_start fast --log-level warn --batch-size "$BURST" --poll-interval-ms 200
ok "A: the $BURST deliveries succeeded" wait_for 60 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'fast' AND state = 'succeeded'" "$BURST"
is "$(receiver_stat fast deliveries_total)" "$BURST" "A: the receiver saw each delivery once"
opened=$(conns_at "$RECV_PORT_fast")
echo "# A: connections open at the receiver after a claim of $BURST: $opened"
ok "A: the claim of $BURST opened at most $((BURST / 2)) connections (saw $opened)" \
    test "$opened" -le $((BURST / 2))
ok "A: connections were opened and kept (saw $opened)" test "$opened" -ge 1
kill -TERM "$RELAY_PID_fast" 2>/dev/null
relay_wait fast 20
is "$?" 0 "A: the relay exits 0 on SIGTERM"

# B. a slow target: all its requests on the wire at once
receiver_start slow --delay-ms "$SLOW_DELAY_MS"
target_add slow "http://127.0.0.1:$RECV_PORT_slow/act" timeout_ms=30000
relay_start slow --log-level warn --poll-interval-ms 200
enqueue_many slow "slow:" "$SLOW"
arrived() { [ "$(receiver_stat slow deliveries_total)" = "$SLOW" ]; }
ok "B: all $SLOW requests reached the slow receiver" wait_cmd 30 arrived
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'slow' AND state = 'succeeded'")" 0 \
    "B: none had been answered when the last one arrived (all $SLOW on the wire at once)"
is "$(conns_at "$RECV_PORT_slow")" "$SLOW" "B: one connection per request in flight"
ok "B: the $SLOW deliveries succeeded" wait_for 60 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'slow' AND state = 'succeeded'" "$SLOW"
is "$(receiver_stat slow deliveries_total)" "$SLOW" "B: the receiver saw each delivery once"
kill -TERM "$RELAY_PID_slow" 2>/dev/null
relay_wait slow 20
is "$?" 0 "B: the relay exits 0 on SIGTERM"

itest_done
