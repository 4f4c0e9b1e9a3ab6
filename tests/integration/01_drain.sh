#!/usr/bin/env bash
# 10,000 intents → 10,000 effects at a receiver that cannot deduplicate,
# every row succeeded with exactly one attempt; headers and signing checked.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start plain
target_add legacy "http://127.0.0.1:$RECV_PORT_plain/effects" key_header=NULL
receiver_start keyed
target_add signed "http://127.0.0.1:$RECV_PORT_keyed/hooks" \
    "headers='{\"X-Team\": \"payments\"}'" secret_env="'OUTBOX_SECRET_TEST'"
export OUTBOX_SECRET_TEST=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw

enqueue_many legacy "drain:" 10000
sql "SELECT outbox.enqueue('signed:1', 'signed', '{\"amount\": 5, \"currency\": \"EUR\"}')" >/dev/null

relay_start one --exit-when-idle --poll-interval-ms 100
relay_wait one 120
is "$?" 0 "relay drains and exits 0 when idle"

is "$(receiver_stat plain effects_total)" 10000 "10,000 effects at the receiver"
is "$(receiver_stat plain deliveries_total)" 10000 "no delivery beyond one per intent"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'legacy' AND state = 'succeeded' AND attempts = 1")" \
    10000 "every row succeeded with exactly one attempt"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.target = 'legacy' AND a.class = 'succeeded' AND a.request_sent AND a.http_status = 200")" \
    10000 "one attempts row per delivery: sent, HTTP 200"
is "$(sql "SELECT response_status FROM outbox.outcome('drain:42')")" 200 "saved response status"
is "$(sql "SELECT response_body::jsonb->>'ok' FROM outbox.outcome('drain:42')")" true "saved response body"

headers=$(curl -s "http://127.0.0.1:$RECV_PORT_keyed/_requests/signed:1")
echo "# $headers"
ok "key header sent" grep -q '"idempotency-key":"signed:1"' <<<"$headers"
ok "content type sent" grep -q '"content-type":"application/json"' <<<"$headers"
ok "static header sent" grep -q '"x-team":"payments"' <<<"$headers"
ok "webhook-id is the key" grep -q '"webhook-id":"signed:1"' <<<"$headers"
# Verify the Standard Webhooks signature independently with openssl.
ts=$(sed -n 's/.*"webhook-timestamp":"\([0-9]*\)".*/\1/p' <<<"$headers")
sig=$(sed -n 's/.*"webhook-signature":"v1,\([^"]*\)".*/\1/p' <<<"$headers")
body=$(curl -s "http://127.0.0.1:$RECV_PORT_keyed/_requests/signed:1" | sed -n 's/.*"last_body":"\(.*\)"}$/\1/p' | sed 's/\\"/"/g')
keyhex=$(echo -n "${OUTBOX_SECRET_TEST#whsec_}" | base64 -d | od -An -tx1 | tr -d ' \n')
want=$(printf '%s' "signed:1.$ts.$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$keyhex" -binary | base64)
is "$sig" "$want" "webhook-signature verifies with the secret"
# A delivery without the key header is filed under the key "-": all 10,000
# must be there, and no other key (a sent header would file each under its own).
keyless=$(curl -s "http://127.0.0.1:$RECV_PORT_plain/_requests/-")
ok "the legacy target got no key header: 10,000 deliveries under '-'" grep -q '"deliveries":10000,' <<<"$keyless"
is "$(receiver_stat plain keys_seen)" 1 "the legacy receiver saw no key but '-'"
ok "the last legacy delivery's headers have no idempotency-key" bash -c '! grep -q idempotency-key' <<<"$keyless"
ok "the secret never appears in the relay log" bash -c "! grep -q MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw $T/relay-one.log"
ok "no sanitizer report" relay_logs_clean
itest_done
