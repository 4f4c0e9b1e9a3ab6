#!/usr/bin/env bash
# SIGTERM with deliveries in flight: stop claiming, let them finish within the
# grace period, record everything, exit 0, no row left in_flight. When the
# grace period is shorter than the deliveries, the aborted requests (sent) are
# ambiguous: retried with the key where the target deduplicates, unknown where not.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow --dedupe --delay-ms 1000
target_add slow "http://127.0.0.1:$RECV_PORT_slow/calls" timeout_ms=10000
enqueue_many slow "graceful:" 50
relay_start graceful --grace-ms 8000 --poll-interval-ms 100
ok "deliveries in flight" wait_for 10 "SELECT count(*) > 0 FROM outbox.intents WHERE state = 'in_flight'" t
kill -TERM "$RELAY_PID_graceful"
relay_wait graceful 15
is "$?" 0 "exit 0 after SIGTERM"
# Within the grace period: no delivery was aborted (an aborted one that was
# sent would be pending and ambiguous), counted, not timed.
is "$(sql "SELECT count(*) FROM outbox.intents WHERE ambiguous OR attempts > 1")" 0 \
    "exited within the grace period: no delivery aborted, none sent twice"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")" 0 "no row left in flight"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state NOT IN ('succeeded', 'pending')")" 0 \
    "every row succeeded or still pending (never claimed)"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")" "$(receiver_stat slow effects_total)" \
    "every effect is recorded as succeeded"

# Grace shorter than the receiver's answer: abort, classify, record, exit 0.
receiver_start late --delay-ms 5000
target_add keyed "http://127.0.0.1:$RECV_PORT_late/calls" timeout_ms=10000
target_add plain "http://127.0.0.1:$RECV_PORT_late/calls" key_header=NULL timeout_ms=10000
sql "DELETE FROM outbox.intents WHERE state = 'pending'" >/dev/null
enqueue_many keyed "abort-k:" 10
enqueue_many plain "abort-p:" 10
relay_start hasty --grace-ms 500 --poll-interval-ms 100
ok "deliveries in flight" wait_for 10 "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 20
sleep 0.3
kill -TERM "$RELAY_PID_hasty"
relay_wait hasty 15
is "$?" 0 "exit 0 after SIGTERM with aborted deliveries"
# That it exited at the end of the grace period, before the 5 s answers, is
# the order the states below prove (an answer read would be a success), not a
# duration.
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")" 0 "no row left in flight"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'abort-k:%' AND state = 'pending' AND ambiguous")" 10 \
    "aborted after sending, key-honouring target: pending retry, flagged ambiguous"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'abort-p:%' AND state = 'unknown'")" 10 \
    "aborted after sending, legacy target: unknown"
ok "no sanitizer report" relay_logs_clean
itest_done
