#!/usr/bin/env bash
# HTTP/2 per target (0030; issue 26, item 2) against Debian's nginx with
# http2 on its TLS listener (ALPN h2 and http/1.1) and a cleartext HTTP/1.1
# listener, in front of a receiver that answers after 50 ms and counts the
# effects. The relay may have 1,024 requests in flight.
#   h2    https, http_version '2': 200 intents, one effect each, every request
#         HTTP/2.0 at nginx, over at most 4 connections
#   h11   the same nginx and URL, '1.1' (the default): every request HTTP/1.1
#         (libcurl would offer h2 by ALPN if the relay did not say 1.1), and
#         more than 4 connections: what h2 saves
#   clear http://, '2': HTTP/1.1 (h2 only over TLS)
#   every attempt a success with its request bytes counted as sent
#   the table refuses h2 for a target without a key header, and prior
#   knowledge (libcurl 7.88 fails requests on a kept h2c connection)
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/tls_nginx.sh"
itest_setup
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || bail "nginx is not installed (make deps)"

# ---- a throwaway CA and nginx's certificate for 127.0.0.1
C=$T/tls
tls_make_ca "$C"

receiver_start keyed --dedupe --delay-ms 50

# ---- nginx: TLS 1.3 with http2 (ALPN h2, http/1.1), and cleartext HTTP/1.1;
# one process, so that the cleanup's kill ends it all. nginx 1.22 spells it
# "listen ... http2" (1.25 moved it to "http2 on").
N=$T/nginx
mkdir -p "$N/tmp" "$N/logs"
TLS_PORT="" CLEAR_PORT=""
for try in 1 2 3 4 5 6; do
    port=$((30000 + (RANDOM % 20000)))
    port2=$((port + 1))
    pgcluster_port_free "$port" && pgcluster_port_free "$port2" || continue
    cat >"$N/nginx.conf" <<CONF
daemon off;
master_process off;
pid $N/nginx.pid;
error_log $N/logs/error.log info;
events { worker_connections 4096; }
http {
    log_format h2 '\$server_port \$server_protocol \$connection \$status \$http_idempotency_key';
    access_log $N/logs/access.log h2;
    client_body_temp_path $N/tmp/body;
    proxy_temp_path $N/tmp/proxy;
    fastcgi_temp_path $N/tmp/fastcgi;
    uwsgi_temp_path $N/tmp/uwsgi;
    scgi_temp_path $N/tmp/scgi;
    upstream receiver { server 127.0.0.1:$RECV_PORT_keyed; keepalive 64; }
    server {
        listen 127.0.0.1:$port ssl http2;
        listen 127.0.0.1:$port2;
        ssl_protocols TLSv1.3;
        ssl_certificate $C/server.pem;
        ssl_certificate_key $C/server.key;
        location / {
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://receiver;
        }
    }
}
CONF
    "$NGINX" -p "$N/" -c "$N/nginx.conf" -e "$N/logs/error.log" >"$N/logs/stdout" 2>&1 &
    NGINX_PID=$!
    ITEST_PIDS+=("$NGINX_PID")
    # both ports must answer: a port bound without listen() by someone else
    # looks free, and nginx keeps retrying it (then exits) with the other bound
    for _ in $(seq 1 50); do
        kill -0 "$NGINX_PID" 2>/dev/null || break
        if ! pgcluster_port_free "$port" && ! pgcluster_port_free "$port2"; then
            TLS_PORT=$port CLEAR_PORT=$port2
            break
        fi
        sleep 0.1
    done
    if [ -z "$TLS_PORT" ]; then
        kill "$NGINX_PID" 2>/dev/null
        wait "$NGINX_PID" 2>/dev/null
    fi
    [ -n "$TLS_PORT" ] && break
done
[ -n "$TLS_PORT" ] || bail "nginx did not start: $(tail -3 "$N/logs/error.log" "$N/logs/stdout" 2>/dev/null)"
URL="https://127.0.0.1:$TLS_PORT/hooks"
CLEAR_URL="http://127.0.0.1:$CLEAR_PORT/hooks"
# the setup itself: curl gets h2 by ALPN
is "$(curl -s -o /dev/null -w '%{http_version}' --cacert "$C/ca.pem" --http2 -X POST -d '{}' \
    -H 'Idempotency-Key: setup:1' "$URL")" 2 "setup: nginx speaks h2 over TLS"

# ---- the table: h2 needs a key header; no prior knowledge
target_add h2 "$URL" ca_file="'$C/ca.pem'" http_version="'2'"
target_add h11 "$URL" ca_file="'$C/ca.pem'"
target_add clear "$CLEAR_URL" http_version="'2'"
is "$(sql "SELECT http_version FROM outbox.targets WHERE name = 'h11'")" 1.1 "the default is '1.1'"
sql "INSERT INTO outbox.targets (name, url, key_header, http_version)
     VALUES ('keyless', '$URL', NULL, '2')" >"$T/keyless.out" 2>&1
ok "h2 for a target without a key header: refused" grep -q 'violates check constraint "targets_http2_needs_key"' "$T/keyless.out"
sql "UPDATE outbox.targets SET key_header = NULL WHERE name = 'h2'" >"$T/keyless2.out" 2>&1
ok "... nor can an h2 target drop its key header" grep -q '"targets_http2_needs_key"' "$T/keyless2.out"
for v in 2-prior-knowledge 3 1.0; do
    sql "UPDATE outbox.targets SET http_version = '$v' WHERE name = 'h2'" >"$T/v.out" 2>&1
    ok "http_version '$v': refused" grep -q '"targets_http_version_check"' "$T/v.out"
done

# ---- 200 intents per target, up to 1,024 in flight, one target at a time
RELAY_OPTS=(--poll-interval-ms 100 --targets-refresh-ms 200 --max-in-flight 1024
    --max-in-flight-per-target 1024 --batch-size 256)
relay_start one "${RELAY_OPTS[@]}"
for t in h2 h11 clear; do
    enqueue_many "$t" "$t:" 200
    wait_for 60 "SELECT count(*) FROM outbox.intents WHERE target = '$t' AND state = 'succeeded'" 200 ||
        bail "$t: the intents did not succeed: $(sql "SELECT state, last_error FROM outbox.intents WHERE target = '$t' AND state <> 'succeeded' LIMIT 1")"
done
kill -TERM "$RELAY_PID_one"
relay_wait one 20
is "$?" 0 "the relay stops cleanly"

# nginx's log: port, protocol, connection serial number, status, key
log_of() { grep -E "^[0-9]+ [^ ]+ [0-9]+ [0-9]+ $1:[0-9]+$" "$N/logs/access.log"; }
protocols() { log_of "$1" | awk '{print $2}' | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' '; }
connections() { log_of "$1" | awk '{print $3}' | sort -u | wc -l; }
is "$(protocols h2)" "HTTP/2.0=200 " "h2: nginx saw 200 HTTP/2.0 requests, no other"
h2_conns=$(connections h2)
ok "h2: over at most 4 connections (saw $h2_conns)" test "$h2_conns" -ge 1 -a "$h2_conns" -le 4
is "$(protocols h11)" "HTTP/1.1=200 " "h11: nginx saw 200 HTTP/1.1 requests, no other"
h11_conns=$(connections h11)
ok "h11: over more than 4 connections (saw $h11_conns)" test "$h11_conns" -gt 4
is "$(protocols clear)" "HTTP/1.1=200 " "clear: '2' over http:// is HTTP/1.1"
echo "# connections for 200 intents: h2 $h2_conns, h11 $h11_conns, clear $(connections clear)"

# ---- the outbox and the receiver: one attempt, one effect per intent
is "$(sql "SELECT count(*) FILTER (WHERE a.class = 'succeeded' AND a.request_sent) || '/' || count(*)
           FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
          WHERE i.target IN ('h2', 'h11', 'clear')")" 600/600 \
    "600 attempts, each a success with its request counted as sent"
effects_table keyed
is "$(sql "SELECT count(*) || ' ' || coalesce(max(n), 0) FROM effects
            WHERE key ~ '^(h2|h11|clear):[0-9]+$'")" "600 1" "600 effects at the receiver, one each"
ok "no sanitizer report" relay_logs_clean
itest_done
