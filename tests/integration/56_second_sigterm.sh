#!/usr/bin/env bash
# Proves: a second SIGTERM skips the grace period (design.md, Shutdown): exit 0 at once, sent requests recorded ambiguous, unsent ones released.
# The first SIGTERM stops claiming and waits for the deliveries (a 30 s
# grace, answers take 8 s); the second ends the wait: the relay aborts them,
# records the ones whose request was sent as ambiguous (a same-key retry for
# the keyed target), gives back the ones never sent (connects that a full
# listen backlog leaves hanging) as pending with their attempt undone,
# leaves outbox.relays, and exits 0 well before the answers would come.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow --delay-ms 8000
target_add keyed "http://127.0.0.1:$RECV_PORT_slow/act" timeout_ms=20000
# A port that listens with a backlog of 0 and never accepts: the first
# connection completes in the kernel, the next ones hang in connect.
python3 -c 'import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(0)
print("bound 127.0.0.1:%d" % s.getsockname()[1], flush=True)
while True:
    time.sleep(3600)' >"$T/hole.out" 2>&1 &
ITEST_PIDS+=("$!")
wait_cmd 5 grep -q '^bound' "$T/hole.out" || bail "the backlog port was not bound"
HOLE_PORT=$(sed -n 's/^bound 127.0.0.1://p' "$T/hole.out")
target_add hole "http://127.0.0.1:$HOLE_PORT/act" key_header=NULL timeout_ms=20000
enqueue_many keyed "k:" 10
enqueue_many hole "h:" 6

relay_start a --grace-ms 30000 --poll-interval-ms 100
ok "all 16 in flight" wait_for 10 "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 16
ok "the slow receiver has all 10 requests" wait_cmd 10 \
    bash -c "[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_slow/_stats | sed -n 's/.*\"deliveries_total\":\([0-9]*\).*/\1/p')\" = 10 ]"
is "$(sql "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-a'")" 1 "the relay is listed in outbox.relays"

kill -TERM "$RELAY_PID_a"
ok "the first SIGTERM is logged as a shutdown with a 30 s grace" \
    wait_cmd 5 grep -q '"event":"shutdown","reason":"SIGTERM","in_flight":16,"grace_ms":30000' "$T/relay-a.log"
sleep 1
ok "a second later the relay still waits for its deliveries" kill -0 "$RELAY_PID_a"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")" 16 "all 16 still in flight"
kill -TERM "$RELAY_PID_a"
relay_wait a 10
is "$?" 0 "exit 0 after the second SIGTERM"
# That it exited before the 8 s answers, not at the end of the 30 s grace, is
# an order the log and the states below prove (16 aborted, none succeeded),
# not a duration.
ok "the second SIGTERM is logged as shutdown_now" grep -q '"event":"shutdown_now","reason":"SIGTERM"' "$T/relay-a.log"
ok "the aborted deliveries are counted" grep -q '"event":"grace_period_over","aborted":16' "$T/relay-a.log"

is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")" 0 "no row left in flight"
is "$(sql "SELECT count(*) FROM outbox.intents i JOIN outbox.attempts a ON a.intent_id = i.id
            WHERE i.target = 'keyed' AND i.state = 'pending' AND i.ambiguous AND i.attempts = 1
              AND a.class = 'ambiguous' AND a.request_sent AND a.key_sent")" 10 \
    "keyed: each sent request recorded ambiguous (sent, with its key), a same-key retry pending"
sent_hole=$(sql "SELECT count(*) FROM outbox.intents i JOIN outbox.attempts a ON a.intent_id = i.id
                  WHERE i.target = 'hole' AND i.state = 'unknown' AND i.ambiguous AND a.class = 'ambiguous' AND a.request_sent")
released=$(sql "SELECT count(*) FROM outbox.intents i WHERE i.target = 'hole' AND i.state = 'pending' AND NOT i.ambiguous
                  AND i.attempts = 0 AND i.first_attempt_at IS NULL
                  AND NOT EXISTS (SELECT 1 FROM outbox.attempts a WHERE a.intent_id = i.id)")
is "$((sent_hole + released))" 6 "hole: each row either sent (keyless: unknown) or released ($sent_hole sent, $released released)"
ok "at least 4 of the 6 were never sent and were released, attempt undone, no history row" test "$released" -ge 4
ok "the relay's last line counts them as released" \
    grep -q "\"event\":\"relay_stopped\".*\"released\":${released}[,}]" "$T/relay-a.log"
is "$(sql "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-a'")" 0 "the relay removed itself from outbox.relays"
is "$(receiver_stat slow deliveries_total)" 10 "no request was sent twice"
ok "no sanitizer report" relay_logs_clean
itest_done
