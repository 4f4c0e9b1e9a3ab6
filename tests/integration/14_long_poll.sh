#!/usr/bin/env bash
# GET /v1/intents/{key}?wait=…: held until the outcome is final, woken by the
# relay's own recording, by the NOTIFY of an outcome recorded elsewhere (an
# operator's outbox.cancel; tests/integration/89_admin_wait_notify.sh counts
# which wake-up ended each wait), and answered when the wait ends with the
# outcome as it is then, not as it was when last looked at.
# No duration is asserted: "answered before the wait ended" is a wait of 60 s
# (the most ?wait= allows) that curl gives up on after 30 s (a bound that only
# keeps the scenario from hanging), and "read at the deadline" is the order of
# a cancel's commit and the answer.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow --delay-ms 1500
target_add api "http://127.0.0.1:$RECV_PORT_slow/calls"
target_add paused "http://127.0.0.1:$RECV_PORT_slow/calls" enabled=false
relay_start one --poll-interval-ms 200 --admin-listen "127.0.0.1:0"
admin_port=$(relay_admin_port one)
base="http://127.0.0.1:$admin_port/v1/intents"
for i in $(seq 1 50); do curl -sf "http://127.0.0.1:$admin_port/readyz" >/dev/null && break; sleep 0.1; done

sql "SELECT outbox.enqueue('lp:1', 'api', '{\"n\": 1}')" >/dev/null
body=$(curl -s -m 30 -w ' %{http_code}' "$base/lp:1?wait=60s")
echo "# $body"
ok "held until the delivery finished (1.5 s at the target), woken by the recording, not the 60 s deadline" \
    grep -q '"status":"succeeded".* 200$' <<<"$body"

body=$(curl -s -m 30 -w ' %{http_code}' "$base/lp:1?wait=60s")
ok "a final outcome is answered at once, not at the 60 s deadline" grep -q '"status":"succeeded".* 200$' <<<"$body"

# A row that stays pending (its target is disabled: enqueue refuses it, so it
# is inserted directly): the wait ends and the current outcome comes back.
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lp:held', 'paused', '{}', '')" >/dev/null
body=$(curl -s -w ' %{http_code}' "$base/lp:held?wait=1500ms")
echo "# $body"
ok "when the wait ends: 200 with the current status" grep -q '"status":"pending".* 200$' <<<"$body"

# Cancelled by an operator during a 60 s wait: no delivery of this relay
# wakes the wait, the cancel's NOTIFY (or the periodic re-check) does.
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lp:cancel', 'paused', '{}', '')" >/dev/null
curl -s -m 30 -w ' %{http_code}' "$base/lp:cancel?wait=60s" >"$T/cancel.out" &
poll=$!
sleep 1
sql "SELECT outbox.cancel('lp:cancel', 'x')" >/dev/null
wait "$poll"
body=$(cat "$T/cancel.out")
echo "# $body"
ok "a wait ends with an operator's cancel, before its 60 s deadline" grep -q '"status":"cancelled".* 200$' <<<"$body"

# Cancelled shortly before the wait ends: the answer is read at the deadline,
# not the last outcome seen before it. The row is changed by a plain UPDATE,
# which sends no NOTIFY (outbox.cancel's would wake the wait at once), so
# only the re-check or the lookup at the deadline can see it. Judged only
# when it committed while the request was still held (its curl still running
# afterwards); a slow machine tries another key (up to 5).
judged=0
for i in 1 2 3 4 5; do
    sql "INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lp:late$i', 'paused', '{}', '')" >/dev/null
    curl -s -w ' %{http_code}' "$base/lp:late$i?wait=1500ms" >"$T/late.out" &
    poll=$!
    sleep 1.1
    sql "UPDATE outbox.intents SET state = 'cancelled' WHERE key = 'lp:late$i'" >/dev/null
    held=no
    kill -0 "$poll" 2>/dev/null && held=yes
    wait "$poll"
    body=$(cat "$T/late.out")
    echo "# lp:late$i: held when cancelled: $held; $body"
    [ "$held" = yes ] || continue
    judged=1
    ok "a cancel just before the deadline is in the answer" grep -q '"status":"cancelled".* 200$' <<<"$body"
    break
done
ok "a cancel committed while its request was held (of 5 tries)" test "$judged" = 1

is "$(curl -s -o /dev/null -w '%{http_code}' "$base/lp:nope?wait=5s")" 404 "unknown key: 404 at once"
body=$(curl -s -w ' %{http_code}' "$base/lp:1?wait=soon")
is "$body" '{"error":"wait must be a duration such as 30s or 500ms (at most 60s)"} 400' "bad wait: 400 with a JSON error"

kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
