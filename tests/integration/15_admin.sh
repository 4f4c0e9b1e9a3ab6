#!/usr/bin/env bash
# The admin HTTP port of a real relay: /healthz, /readyz (ready, then not
# ready with a reason while PostgreSQL is down, then ready again; the reason
# names no host, port or user, those are in the log), /metrics
# (Prometheus text: per-target attempt counters, database reconnects), the
# outcome of a key at /v1/intents/{key} (200, 404, 400, 503), and the HTTP
# edges: keep-alive, 405, 404, 413, garbage on the socket. A second relay
# cannot take the same port and says so; SIGTERM closes the port.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup


# http_get URL [curl options] → HTTP_STATUS, HTTP_BODY (status 000: no answer)
http_get() {
    local out
    out=$(curl -s -m 5 -w '\n%{http_code}' "$@")
    HTTP_STATUS=${out##*$'\n'}
    HTTP_BODY=${out%$'\n'*}
}

# wait_http SECONDS PATH STATUS: poll until PATH answers STATUS; 0 if it did.
wait_http() {
    local limit=$1 path=$2 want=$3 i
    for i in $(seq 1 $((limit * 10))); do
        http_get "$ADMIN$path"
        [ "$HTTP_STATUS" = "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

# wait_body SECONDS URL BODY: poll until URL answers exactly BODY; 0 if it did.
wait_body() {
    local limit=$1 url=$2 want=$3 i
    for i in $(seq 1 $((limit * 10))); do
        http_get "$url"
        [ "$HTTP_BODY" = "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

# discreet TEXT: no host, port, user or libpq wording in TEXT.
discreet() {
    ! grep -qiF -e "$PGHOST" -e "$PGPORT" -e "$PGUSER" -e "server at" -e "socket" -e "for user" <<<"$1"
}

# raw_exchange BYTES (printf %b escapes) → everything the server sent until it closed.
raw_exchange() {
    exec 7<>"/dev/tcp/127.0.0.1/$ADMIN_PORT" || return 1
    printf '%b' "$1" >&7
    timeout 5 cat <&7
    exec 7<&- 7>&-
}

# Start the stopped cluster again on its port (pgcluster_start would initdb).
pg_start_again() {
    local bin
    bin=$(pgcluster_bindir) || return 1
    pgcluster_as_owner "$bin/pg_ctl" -D "$T/pg/data" -l "$T/pg/server.log" -w -t 60 \
        -o "-p $PGPORT -k $T/pg -c listen_addresses=127.0.0.1 -c fsync=off" start \
        >>"$T/pg/pg_ctl.log" 2>&1
}

# Every line of a Prometheus text document is a comment or "series value",
# and no family is declared twice.
metrics_well_formed() {
    ! grep -vE '^(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEInfNa]+)$' "$1" &&
        [ -z "$(grep '^# TYPE ' "$1" | cut -d' ' -f3 | sort | uniq -d)" ]
}

receiver_start keyed --dedupe
target_add api "http://127.0.0.1:$RECV_PORT_keyed/calls"
# Port 0: the kernel picks a free port, and the relay logs it.
relay_start one --admin-listen "127.0.0.1:0" --poll-interval-ms 200 --reconnect-max-ms 500
ADMIN_PORT=$(relay_admin_port one)
[ -n "$ADMIN_PORT" ] || bail "the relay did not log its admin port"
ADMIN="http://127.0.0.1:$ADMIN_PORT"

# ---------------------------------------------------------------- health and readiness
ok "healthz answers" wait_http 20 /healthz 200
is "$HTTP_BODY" '{"status":"ok"}' "healthz body"
ok "ready once the database is connected" wait_http 20 /readyz 200
is "$HTTP_BODY" '{"status":"ready"}' "readyz body"

# ---------------------------------------------------------------- metrics after 3 deliveries
sql "SELECT count(*) FROM (SELECT outbox.enqueue('k' || g, 'api', jsonb_build_object('n', g))
     FROM generate_series(1, 3) g) x" >/dev/null
ok "three intents delivered" wait_for 20 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 3
status=$(curl -s -m 5 -D "$T/metrics.headers" -o "$T/metrics.txt" -w '%{http_code}' "$ADMIN/metrics")
is "$status" 200 "metrics 200"
ok "metrics content type is Prometheus text 0.0.4" \
    grep -qi '^Content-Type: text/plain; version=0.0.4' "$T/metrics.headers"
ok "metrics has Content-Length" grep -qi '^Content-Length: [0-9]' "$T/metrics.headers"
ok 'outbox_attempts_total{target="api",class="succeeded"} 3' \
    grep -qxF 'outbox_attempts_total{target="api",class="succeeded"} 3' "$T/metrics.txt"
ok "outbox_db_reconnects_total is exposed" grep -qE '^outbox_db_reconnects_total [0-9]+$' "$T/metrics.txt"
ok "metrics document well formed" metrics_well_formed "$T/metrics.txt"

# ---------------------------------------------------------------- outcome of a key
http_get "$ADMIN/v1/intents/k1"
is "$HTTP_STATUS" 200 "intent k1: 200"
echo "# $HTTP_BODY"
ok 'intent k1: "status":"succeeded"' grep -qF '"status":"succeeded"' <<<"$HTTP_BODY"
http_get "$ADMIN/v1/intents/no-such-key"
is "$HTTP_STATUS" 404 "unknown key: 404"
ok "unknown key: JSON error" grep -qE '^\{"error":".+"\}$' <<<"$HTTP_BODY"
http_get "$ADMIN/v1/intents/$(printf 'x%.0s' $(seq 1 300))"
is "$HTTP_STATUS" 400 "300-byte key: 400"
ok "300-byte key: JSON error" grep -qE '^\{"error":".+"\}$' <<<"$HTTP_BODY"
http_get "$ADMIN/v1/intents/a%0Ab"
is "$HTTP_STATUS" 400 "key with a control character: 400"
http_get "$ADMIN/v1/intents/"
is "$HTTP_STATUS" 400 "empty key: 400"
sql "SELECT outbox.enqueue('run:7/step 2', 'api', '{\"n\": 7}')" >/dev/null
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'run:7/step 2'" succeeded
http_get "$ADMIN/v1/intents/run%3A7%2Fstep%202"
is "$HTTP_STATUS" 200 "percent-encoded key: 200"
ok "percent-encoded key: succeeded" grep -qF '"status":"succeeded"' <<<"$HTTP_BODY"

# ---------------------------------------------------------------- HTTP edges
http_get "$ADMIN/nowhere"
is "$HTTP_STATUS" 404 "unknown path: 404"
http_get "$ADMIN/healthz" -X POST -d x
is "$HTTP_STATUS" 405 "POST /healthz: 405"
verbose=$(curl -sv -m 5 -o /dev/null "$ADMIN/healthz" -o /dev/null "$ADMIN/readyz" 2>&1)
ok "keep-alive: the second request reuses the connection" grep -q 'Re-using existing connection' <<<"$verbose"
answer=$(raw_exchange 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n')
ok "Connection: close is honoured" grep -q '^Connection: close' <<<"$answer"
answer=$(raw_exchange '\x16\x03\x01garbage\x00\xff\r\n\r\n')
ok "garbage on the socket: 400, then closed" grep -q '^HTTP/1.1 400' <<<"$answer"
http_get "$ADMIN/healthz" -H "X-Padding: $(head -c 100000 /dev/zero | tr '\0' a)"
is "$HTTP_STATUS" 413 "a 100 KB request: 413"
http_get "$ADMIN/healthz"
is "$HTTP_STATUS" 200 "still serving after the bad requests"

# ---------------------------------------------------------------- database down, then back
pgcluster_stop "$T/pg"
ok "not ready while the database is down" wait_http 20 /readyz 503
echo "# $HTTP_BODY"
ok "not ready: status and a reason" grep -qE '^\{"status":"not ready","reason":".+"\}$' <<<"$HTTP_BODY"
ok "the reason names no host, port or user" discreet "$HTTP_BODY"
ok "the reason settles on: database not connected: connection refused" \
    wait_body 20 "$ADMIN/readyz" '{"status":"not ready","reason":"database not connected: connection refused"}'
ok "the full message, with host and port, is in the log" \
    grep -qE "\"event\":\"db_(connect_failed|connection_lost)\".*$PGPORT" "$T/relay-one.log"
http_get "$ADMIN/healthz"
is "$HTTP_STATUS" 200 "healthz still 200: the loop is alive"
http_get "$ADMIN/v1/intents/k1"
is "$HTTP_STATUS" 503 "outcome lookup while the database is down: 503"
ok "lookup 503: JSON error" grep -qE '^\{"error":".+"\}$' <<<"$HTTP_BODY"
ok "PostgreSQL started again" pg_start_again
ok "ready again after the database is back" wait_http 30 /readyz 200
curl -s -m 5 "$ADMIN/metrics" >"$T/metrics-after.txt"
ok "outbox_db_reconnects_total counted the loss" \
    grep -qE '^outbox_db_reconnects_total [1-9][0-9]*$' "$T/metrics-after.txt"
http_get "$ADMIN/v1/intents/k1"
is "$HTTP_STATUS" 200 "outcome lookup works again"

# ---------------------------------------------------------------- a login the database refuses
relay_start badlogin --admin-listen "127.0.0.1:0" --reconnect-max-ms 500 \
    --db "postgresql://no_such_login@$PGHOST:$PGPORT/$PGDATABASE"
BAD_ADMIN="http://127.0.0.1:$(relay_admin_port badlogin)"
ok "a refused login: database not connected: authentication failed" \
    wait_body 20 "$BAD_ADMIN/readyz" '{"status":"not ready","reason":"database not connected: authentication failed"}'
ok "the login's name is not on the port" discreet "$HTTP_BODY"
ok "it is in the log" grep -q 'no_such_login' "$T/relay-badlogin.log"
kill -TERM "$RELAY_PID_badlogin"
relay_wait badlogin 20
is "$?" 0 "that relay exits 0 on SIGTERM"

# ---------------------------------------------------------------- port in use, shutdown
relay_start two --admin-listen "127.0.0.1:$ADMIN_PORT"
relay_wait two 20
rc=$?
ok "a second relay on the same admin port exits with an error (rc $rc)" \
    test "$rc" != 0 -a "$rc" != 124 -a "$rc" != 66 -a "$rc" != 67
ok "and logs admin_listen_failed" grep -q '"event":"admin_listen_failed"' "$T/relay-two.log"

kill -TERM "$RELAY_PID_one"
relay_wait one 20
is "$?" 0 "relay exits 0 on SIGTERM"
http_get "$ADMIN/healthz"
is "$HTTP_STATUS" 000 "the admin port is closed after exit"
ok "no sanitizer report" relay_logs_clean
itest_done
