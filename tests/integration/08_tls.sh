#!/usr/bin/env bash
# TLS verification is on: a target whose certificate the relay cannot verify
# (self-signed) is never sent the request: not_sent attempts, then failed.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup
command -v openssl >/dev/null || bail "openssl is not installed"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
    -keyout "$T/key.pem" -out "$T/cert.pem" >/dev/null 2>&1 || bail "cannot make a certificate"
# A port that was free when looked at can be taken by a scenario running
# beside this one before s_server binds it: then s_server exits, and the
# port being in use says nothing. Listening means s_server alive and the
# port taken.
port=""
for try in 1 2 3 4 5; do
    candidate=$(( 30000 + (RANDOM % 20000) ))
    pgcluster_port_free "$candidate" || continue
    openssl s_server -accept "127.0.0.1:$candidate" -cert "$T/cert.pem" -key "$T/key.pem" -www \
        -naccept 100 >"$T/s_server.log" 2>&1 &
    pid=$!
    ITEST_PIDS+=("$pid")
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        pgcluster_port_free "$candidate" || { port=$candidate; break; }
        sleep 0.1
    done
    [ -n "$port" ] && kill -0 "$pid" 2>/dev/null && break
    port=""
done
[ -n "$port" ] || bail "openssl s_server did not start: $(tail -2 "$T/s_server.log")"
target_add selfsigned "https://127.0.0.1:$port/hooks" max_attempts=2 backoff_base_ms=10 backoff_cap_ms=20
sql "SELECT outbox.enqueue('tls:1', 'selfsigned', '{\"amount\": 1}')" >/dev/null

relay_start one --exit-when-idle --poll-interval-ms 100
relay_wait one 30
is "$?" 0 "relay exits 0"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'tls:1'")" failed "failed: the request never left"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key = 'tls:1' AND a.class = 'not_sent' AND NOT a.request_sent")" 2 \
    "both attempts not_sent, no request bytes sent"
ok "the reason names the certificate problem" bash -c \
    "psql -X -tA -c \"SELECT last_error FROM outbox.outcome('tls:1')\" | grep -qi 'certificate'"
ok "no sanitizer report" relay_logs_clean
itest_done
