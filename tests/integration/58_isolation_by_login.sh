#!/usr/bin/env bash
# Isolation by login (migrations/0026_isolation_by_login.sql; issue 24, item 9):
# two services with their own logins, both granted outbox_app, connect with
# psql; svc_a is listed in outbox.isolated_logins, svc_b is not.
#   - svc_a reads its own outcome (the saved response), and reads svc_b's key
#     as no key; its enqueue of svc_b's key is refused (OR001) with nothing of
#     svc_b's response, and sends nothing; its cancel_run of the run id both
#     use cancels only its own pending step;
#   - svc_b keeps the behaviour of before: it reads svc_a's key;
#   - one effect per delivered key at the receiver, none for what was refused
#     or cancelled;
#   - the operator paths are not isolated: the relay's admin port
#     (GET /v1/intents/{key}, as the relay's login, listed here by mistake)
#     and `outbox-relay status` as an operator answer for either key, while
#     `outbox-relay status` run as svc_a answers for its own key only.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add api "http://127.0.0.1:$RECV_PORT_r/act" backoff_base_ms=200 backoff_cap_ms=200
sql "CREATE ROLE svc_a LOGIN; CREATE ROLE svc_b LOGIN; GRANT outbox_app TO svc_a, svc_b;
     INSERT INTO outbox.isolated_logins (login, note)
     VALUES ('svc_a', 'its own intents only'), ('itest_relay', 'by mistake: a relay is never isolated')" >/dev/null
URL_A="postgresql://svc_a@127.0.0.1:$PGPORT/postgres"
URL_B="postgresql://svc_b@127.0.0.1:$PGPORT/postgres"
as() { # as LOGIN_URL SQL → psql as that login; stderr kept in $T/as.err
    psql -X -q -tA -v ON_ERROR_STOP=1 "$1" -c "$2" 2>"$T/as.err"
}

as "$URL_B" "SELECT outbox.enqueue('b:pay', 'api', '{\"amount\": 10}', 'run-1')" >/dev/null || bail "svc_b cannot enqueue"
as "$URL_B" "SELECT outbox.enqueue('b:later', 'api', '{\"step\": 2}', 'run-1', now() + interval '1 hour')" >/dev/null
as "$URL_A" "SELECT outbox.enqueue('a:pay', 'api', '{\"amount\": 20}', 'run-1')" >/dev/null || bail "svc_a cannot enqueue"
as "$URL_A" "SELECT outbox.enqueue('a:later', 'api', '{\"step\": 2}', 'run-1', now() + interval '1 hour')" >/dev/null
is "$(sql "SELECT string_agg(key || '=' || enqueued_by, ' ' ORDER BY key) FROM outbox.intents")" \
    "a:later=svc_a a:pay=svc_a b:later=svc_b b:pay=svc_b" "each intent records the login that enqueued it"

relay_start one --admin-listen 127.0.0.1:0 --poll-interval-ms 100
ok "both due intents are delivered" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 2

is "$(as "$URL_A" "SELECT status || ' ' || response_status || ' ' || response_body FROM outbox.outcome('a:pay')")" \
    'succeeded 200 {"ok":true,"key":"a:pay","effect":1}' "svc_a reads its own outcome, with the saved response"
is "$(as "$URL_A" "SELECT count(*) FROM outbox.outcome('b:pay')")" 0 "svc_a reads svc_b's key as no key"
is "$(as "$URL_A" "SELECT coalesce(outbox.traceparent_of('b:pay'), 'none') || ' ' ||
                          (SELECT count(*) FROM outbox.links('b:pay'))")" "none 0" "nor its trace context or links"
out=$(as "$URL_A" "SELECT response_body FROM outbox.enqueue('b:pay', 'api', '{\"amount\": 10}')")
is "$?:$out" "1:" "svc_a's enqueue of svc_b's key is refused"
is "$(head -1 "$T/as.err")" "ERROR:  outbox.enqueue: key 'b:pay' is already used by another login" \
    "with OR001's message, naming only the key"
ok "nothing of svc_b's response, target or payload in the refusal" \
    bash -c "! grep -q 'effect\|amount\|api\|succeeded' '$T/as.err'"
is "$(as "$URL_A" "SELECT outbox.cancel_run('run-1', 'svc_a gives up')")" 1 \
    "svc_a's cancel_run of the shared run id: 1 (its own pending step)"
is "$(sql "SELECT string_agg(key || '=' || state, ' ' ORDER BY key) FROM outbox.intents WHERE key LIKE '%:later'")" \
    "a:later=cancelled b:later=pending" "svc_b's step of the same run id is untouched"

is "$(as "$URL_B" "SELECT status || ' ' || response_body FROM outbox.outcome('a:pay')")" \
    'succeeded {"ok":true,"key":"a:pay","effect":1}' "svc_b, not isolated, reads svc_a's key as before"

sleep 0.5   # a refused enqueue would have been delivered by now
effects=$(curl -s "http://127.0.0.1:$RECV_PORT_r/_effects")
is "$effects" '{"b:pay":1,"a:pay":1}' "one effect per delivered key; nothing for the refused or cancelled ones"

ADMIN_PORT=$(relay_admin_port one)
body=$(curl -s "http://127.0.0.1:$ADMIN_PORT/v1/intents/b:pay")
ok "the admin port (the relay's login, listed by mistake) answers for svc_b's key" \
    grep -q '"status":"succeeded"' <<<"$body"
st=$("$RELAY_BIN" status b:pay --db "$DATABASE_URL" 2>&1)
ok "outbox-relay status as an operator answers for svc_b's key" grep -q '^status: *succeeded' <<<"$st"
"$RELAY_BIN" status b:pay --db "$URL_A" >"$T/status-a.out" 2>&1
is "$?" 3 "outbox-relay status as svc_a: no such key (exit 3) for svc_b's key"
"$RELAY_BIN" status a:pay --db "$URL_A" >"$T/status-a.out" 2>&1
ok "and its own key's outcome" grep -q '^status: *succeeded' "$T/status-a.out"

kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
