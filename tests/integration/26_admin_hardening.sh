#!/usr/bin/env bash
# The admin port under pressure, and its bearer token.
#
# Limits (relay.c: 64 connections for any request, 32 of them long-polls, 16
# more for the probes): 32 long-polls wait, the 33rd gets 429 with
# Retry-After; with every regular connection taken by long-polls and idle
# sockets, /healthz and /readyz are still answered (the probe lane),
# /metrics gets 503; a flood of idle sockets beyond the probe lane makes room
# by closing the oldest; idle sockets are closed after 5 s; the long-polls
# then all end with an operator's cancel (one re-check per key).
#
# Token (--admin-token-file, OUTBOX_RELAY_ADMIN_TOKEN_FILE): /metrics and /v1/
# need "Authorization: Bearer <token>" (401 with WWW-Authenticate otherwise),
# /healthz and /readyz do not; the token is never logged; a missing or empty
# file stops the relay at start.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

MAX_CONNECTIONS=64
MAX_WAITS=32
PROBE_RESERVE=16

# http ARGS... → HTTP_STATUS, HTTP_BODY (status 000: no answer within curl's 5 s)
http() {
    local out
    out=$(curl -s -m 5 -D "$T/headers" -w '\n%{http_code}' "$@")
    HTTP_STATUS=${out##*$'\n'}
    HTTP_BODY=${out%$'\n'*}
}

# metric NAME_WITH_LABELS → its value on /metrics (of $ADMIN)
metric() {
    curl -s -m 5 "$@" "$ADMIN/metrics" | awk -v name="$1" '$1 == name { print $2 }'
}

# wait_metric SECONDS NAME VALUE
wait_metric() {
    local i
    for i in $(seq 1 $(($1 * 10))); do
        [ "$(metric "$2")" = "$3" ] && return 0
        sleep 0.1
    done
    return 1
}

# open_idle N: N more TCP connections that never send a byte (fds in IDLE_FDS).
IDLE_FDS=()
open_idle() {
    local i fd
    for i in $(seq 1 "$1"); do
        exec {fd}<>"/dev/tcp/127.0.0.1/$ADMIN_PORT" || return 1
        IDLE_FDS+=("$fd")
    done
}

# closed_by_server FD: the server closed it (EOF or reset, not a timeout).
closed_by_server() {
    local byte rc
    read -r -t 0.5 -N 1 -u "$1" byte 2>/dev/null
    rc=$?
    [ "$rc" -gt 0 ] && [ "$rc" -le 128 ]
}

receiver_start ok
target_add api "http://127.0.0.1:$RECV_PORT_ok/calls"
target_add paused "http://127.0.0.1:$RECV_PORT_ok/calls" enabled=false
# Four keys that stay pending (their target is disabled: inserted directly).
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint)
     SELECT 'held:' || g, 'paused', '{}', '' FROM generate_series(1, 4) g" >/dev/null

relay_start one --admin-listen "127.0.0.1:0" --poll-interval-ms 200
ADMIN_PORT=$(relay_admin_port one)
[ -n "$ADMIN_PORT" ] || bail "the relay did not log its admin port"
ADMIN="http://127.0.0.1:$ADMIN_PORT"
for i in $(seq 1 100); do curl -sf "$ADMIN/readyz" >/dev/null && break; sleep 0.1; done

# ---------------------------------------------------------------- long-polls: a cap of their own
POLL_PIDS=()
for i in $(seq 1 $MAX_WAITS); do
    curl -s -m 50 -o "$T/poll-$i.body" -w '%{http_code}' \
        "$ADMIN/v1/intents/held:$((i % 4 + 1))?wait=60s" >"$T/poll-$i.code" &
    POLL_PIDS+=($!)
done
ok "$MAX_WAITS long-polls are held" wait_metric 20 outbox_admin_waiting $MAX_WAITS
http "$ADMIN/v1/intents/held:1?wait=60s"
is "$HTTP_STATUS" 429 "one more long-poll: 429"
ok "429 says Retry-After: 1" grep -qi '^Retry-After: 1' "$T/headers"
ok "429: a JSON error" grep -qE '^\{"error":".+"\}$' <<<"$HTTP_BODY"
echo "# $HTTP_BODY"
http "$ADMIN/v1/intents/held:1"
is "$HTTP_STATUS" 200 "a lookup without wait is still answered"
ok "  (pending)" grep -qF '"status":"pending"' <<<"$HTTP_BODY"
http "$ADMIN/healthz"
is "$HTTP_STATUS" 200 "healthz with $MAX_WAITS long-polls held"

# ---------------------------------------------------------------- every regular connection taken
# The long-polls hold 32; idle sockets take the other 32 and 8 of the probe lane.
open_idle $((MAX_CONNECTIONS - MAX_WAITS + 8)) || bail "could not open idle connections"
sleep 0.3
for path in /healthz /readyz /healthz /readyz; do
    http "$ADMIN$path"
    is "$HTTP_STATUS" 200 "$path with every regular connection taken: 200 (not 000: no slot freed first)"
done
http -I "$ADMIN/healthz"
is "$HTTP_STATUS" 200 "HEAD /healthz too"
http "$ADMIN/metrics"
is "$HTTP_STATUS" 503 "/metrics, not a probe: 503 on the probe lane"
ok "  a JSON error" grep -qE '^\{"error":"too many admin connections"\}$' <<<"$HTTP_BODY"

# Beyond the probe lane: the oldest idle ones are closed to make room.
open_idle $((PROBE_RESERVE + 8)) || bail "could not open more idle connections"
sleep 0.3
for path in /healthz /readyz; do
    http "$ADMIN$path"
    is "$HTTP_STATUS" 200 "$path with the probe lane flooded too: 200"
done
ok "the first idle connection of the probe lane was closed to make room" \
    closed_by_server "${IDLE_FDS[$((MAX_CONNECTIONS - MAX_WAITS))]}"

# ---------------------------------------------------------------- idle connections close
# Closed by the server (EOF or reset), each waited for up to 30 s: a bound
# that keeps the scenario from hanging, not the 5 s idle timeout measured.
open=0
for fd in "${IDLE_FDS[@]}"; do wait_cmd 30 closed_by_server "$fd" || open=$((open + 1)); done
is "$open" 0 "all ${#IDLE_FDS[@]} idle connections were closed by the server"
for fd in "${IDLE_FDS[@]}"; do exec {fd}>&-; done
http "$ADMIN/metrics"
is "$HTTP_STATUS" 200 "/metrics is served again"
ok "  outbox_admin_refused_total{reason=\"evicted\"} counted" \
    grep -qE '^outbox_admin_refused_total\{reason="evicted"\} [1-9]' <<<"$HTTP_BODY"
ok "  outbox_admin_refused_total{reason=\"waits\"} 1" \
    grep -qxF 'outbox_admin_refused_total{reason="waits"} 1' <<<"$HTTP_BODY"
ok "  outbox_admin_connections{lane=\"probe\"} 0" \
    grep -qxF 'outbox_admin_connections{lane="probe"} 0' <<<"$HTTP_BODY"
# A keep-alive connection, answered, then idle: closed 5 s after the answer.
exec {ka}<>"/dev/tcp/127.0.0.1/$ADMIN_PORT"
start=$(date +%s%N)
printf 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n' >&$ka
answer=$(timeout 30 cat <&$ka)
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
exec {ka}>&-
ok "a keep-alive connection is answered" grep -q '^HTTP/1.1 200' <<<"$answer"
ok "  and closed by the server (EOF before cat's 30 s bound)" test "$rc" = 0
# A lower bound only: a slow machine makes it longer, never shorter.
ok "  not before it was idle for 5 s (after $ms ms)" test "$ms" -ge 4500
running=0
for pid in "${POLL_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && running=$((running + 1)); done
is "$running" $MAX_WAITS "the long-polls are still held (not idle: waiting)"

# ---------------------------------------------------------------- long-polls end with an operator's cancel
# Each curl gives up after 50 s, before the polls' 60 s deadline: a poll
# answered at its deadline (which would also read "cancelled") has no 200.
sql "SELECT count(outbox.cancel('held:' || g, 'test over')) FROM generate_series(1, 4) g" >/dev/null
for pid in "${POLL_PIDS[@]}"; do wait "$pid"; done
cancelled=$(grep -l '"status":"cancelled"' "$T"/poll-*.body | wc -l)
is "$cancelled" $MAX_WAITS "each says cancelled"
is "$(for f in "$T"/poll-*.code; do cat "$f"; echo; done | sort -u)" 200 \
    "each with 200, before its 60 s deadline: woken by the re-check after the cancel"

# ---------------------------------------------------------------- bearer token
TOKEN="tok-$RANDOM$RANDOM-admin"
printf '%s\n' "$TOKEN" >"$T/token"
relay_start two --admin-listen "127.0.0.1:0" --admin-token-file "$T/token"
ADMIN="http://127.0.0.1:$(relay_admin_port two)"
for i in $(seq 1 100); do curl -sf "$ADMIN/readyz" >/dev/null && break; sleep 0.1; done
http "$ADMIN/healthz"
is "$HTTP_STATUS" 200 "token: /healthz needs none"
http "$ADMIN/readyz"
is "$HTTP_STATUS" 200 "token: /readyz needs none"
http "$ADMIN/metrics"
is "$HTTP_STATUS" 401 "token: /metrics without it: 401"
ok "  WWW-Authenticate: Bearer" grep -qi '^WWW-Authenticate: Bearer' "$T/headers"
ok "  a JSON error" grep -qE '^\{"error":".+"\}$' <<<"$HTTP_BODY"
http "$ADMIN/metrics" -H "Authorization: Bearer wrong-$TOKEN"
is "$HTTP_STATUS" 401 "token: a wrong one: 401"
http "$ADMIN/metrics" -H "Authorization: Bearer ${TOKEN%?}"
is "$HTTP_STATUS" 401 "token: a prefix of it: 401"
http "$ADMIN/metrics" -H "Authorization: Basic $TOKEN"
is "$HTTP_STATUS" 401 "token: another scheme: 401"
http "$ADMIN/metrics" -H "Authorization: Bearer $TOKEN"
is "$HTTP_STATUS" 200 "token: /metrics with it: 200"
ok "  Prometheus text" grep -q '^outbox_admin_waiting 0$' <<<"$HTTP_BODY"
http "$ADMIN/metrics" -H "authorization: bearer  $TOKEN "
is "$HTTP_STATUS" 200 "token: header name and scheme in any case, extra spaces: 200"
http "$ADMIN/v1/intents/held:1"
is "$HTTP_STATUS" 401 "token: /v1/intents without it: 401"
http "$ADMIN/v1/intents/held:1?wait=5s" -H "Authorization: Bearer $TOKEN"
is "$HTTP_STATUS" 200 "token: /v1/intents with it: 200"
ok "the token is not in the log" bash -c "! grep -qF -- '$TOKEN' '$T/relay-two.log'"
ok "the log says a token is required" grep -q '"event":"admin_listening".*bearer' "$T/relay-two.log"

OUTBOX_RELAY_ADMIN_TOKEN_FILE="$T/token" relay_start three --admin-listen "127.0.0.1:0"
ADMIN="http://127.0.0.1:$(relay_admin_port three)"
for i in $(seq 1 100); do curl -sf "$ADMIN/readyz" >/dev/null && break; sleep 0.1; done
http "$ADMIN/metrics"
is "$HTTP_STATUS" 401 "OUTBOX_RELAY_ADMIN_TOKEN_FILE: /metrics without the token: 401"
http "$ADMIN/metrics" -H "Authorization: Bearer $TOKEN"
is "$HTTP_STATUS" 200 "OUTBOX_RELAY_ADMIN_TOKEN_FILE: with it: 200"

relay_start nofile --admin-listen "127.0.0.1:0" --admin-token-file "$T/no-such-file"
relay_wait nofile 20
is "$?" 1 "a missing token file: the relay exits 1"
ok "  and says which option" grep -q '"event":"admin_token_file_failed".*admin-token-file' "$T/relay-nofile.log"
: >"$T/empty-token"
relay_start empty --admin-listen "127.0.0.1:0" --admin-token-file "$T/empty-token"
relay_wait empty 20
is "$?" 1 "an empty token file: the relay exits 1"

for name in one two three; do
    pid_var="RELAY_PID_$name"
    kill -TERM "${!pid_var}"
    relay_wait "$name" 20
    is "$?" 0 "relay $name exits 0 on SIGTERM"
done
ok "no sanitizer report" relay_logs_clean
itest_done
