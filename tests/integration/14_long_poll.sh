#!/usr/bin/env bash
# GET /v1/intents/{key}?wait=…: held until the outcome is final, woken at once
# by the relay's own recording, within about a second by an outcome recorded
# elsewhere (an operator's outbox.cancel), and answered when the wait ends
# with the outcome as it is then, not as it was when last looked at.
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
start=$(date +%s%N)
body=$(curl -s -w ' %{http_code}' "$base/lp:1?wait=10s")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "# $body (after $ms ms)"
ok "the long poll answers with the final outcome" grep -q '"status":"succeeded".* 200$' <<<"$body"
ok "it was held until the delivery finished (~1.5 s; took $ms ms)" test "$ms" -ge 1200 -a "$ms" -lt 5000

start=$(date +%s%N)
body=$(curl -s -w ' %{http_code}' "$base/lp:1?wait=10s")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
ok "a final outcome is answered at once (took $ms ms)" test "$ms" -lt 500

# A row that stays pending (its target is disabled: enqueue refuses it, so it
# is inserted directly): the wait ends and the current outcome comes back.
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lp:held', 'paused', '{}', '')" >/dev/null
start=$(date +%s%N)
body=$(curl -s -w ' %{http_code}' "$base/lp:held?wait=1500ms")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "# $body (after $ms ms)"
ok "when the wait ends: 200 with the current status" grep -q '"status":"pending".* 200$' <<<"$body"
ok "after the wait (~1.5 s; took $ms ms)" test "$ms" -ge 1400 -a "$ms" -lt 4000

# Cancelled by an operator 1 s into a 10 s wait: no delivery of this relay
# wakes the wait, the periodic re-check does.
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lp:cancel', 'paused', '{}', '')" >/dev/null
start=$(date +%s%N)
curl -s -w ' %{http_code}' "$base/lp:cancel?wait=10s" >"$T/cancel.out" &
poll=$!
sleep 1
sql "SELECT outbox.cancel('lp:cancel', 'x')" >/dev/null
wait "$poll"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
body=$(cat "$T/cancel.out")
echo "# $body (after $ms ms)"
ok "a wait ends with an operator's cancel" grep -q '"status":"cancelled".* 200$' <<<"$body"
ok "within ~1 s of the cancel, not at the end of the wait (took $ms ms)" test "$ms" -lt 3000

# Cancelled shortly before the wait ends: the answer is read at the deadline,
# not the last outcome seen before it.
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lp:late', 'paused', '{}', '')" >/dev/null
start=$(date +%s%N)
curl -s -w ' %{http_code}' "$base/lp:late?wait=1500ms" >"$T/late.out" &
poll=$!
sleep 1.1
sql "SELECT outbox.cancel('lp:late', 'x')" >/dev/null
wait "$poll"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
body=$(cat "$T/late.out")
echo "# $body (after $ms ms)"
ok "a cancel just before the deadline is in the answer" grep -q '"status":"cancelled".* 200$' <<<"$body"
ok "by the deadline (~1.5 s; took $ms ms)" test "$ms" -lt 2500

is "$(curl -s -o /dev/null -w '%{http_code}' "$base/lp:nope?wait=5s")" 404 "unknown key: 404 at once"
body=$(curl -s -w ' %{http_code}' "$base/lp:1?wait=soon")
is "$body" '{"error":"wait must be a duration such as 30s or 500ms (at most 60s)"} 400' "bad wait: 400 with a JSON error"

kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
