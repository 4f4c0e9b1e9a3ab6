#!/usr/bin/env bash
# Per-target TLS files (0029; issue 26, item 1) against Debian's nginx that
# requires a client certificate (ssl_verify_client on, TLS 1.3 only), its
# certificate from a throwaway CA made here; nginx proxies to a receiver,
# which counts the effects.
#   mtls      ca_file + client certificate and key: delivered, one effect per
#             key, nginx saw the relay's certificate (its subject in the log)
#   nocert    ca_file, no client certificate, same host and port, sent after
#             mtls left kept-alive connections there: nginx refuses it (HTTP
#             400 "No required SSL certificate was sent"), failed, no effect.
#             libcurl must not reuse an mtls connection for it.
#   noca      client certificate, no ca_file: the private CA is not in the
#             system store, verification fails, nothing sent, failed; never
#             succeeded (nor through a reused connection or a cached CA store)
#   badkey    client_key_file that does not exist; badca: ca_file that does
#             not exist: not_sent, the error names the target's setting, not
#             the key; the key's bytes are in no log and no table
#   mtlsstatus  a target that cannot deduplicate, its status URL behind the
#             same nginx: the receiver acts and drops the answer (nginx: 502,
#             ambiguous), the status check (GET, client certificate too)
#             finds it executed: succeeded, one effect
#   --ca-file the relay-wide CA bundle verifies a target without ca_file
. "$(dirname "$0")/../lib/itest.sh"
itest_setup
command -v openssl >/dev/null || bail "openssl is not installed"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || bail "nginx is not installed (make deps)"

# ---- a throwaway CA, nginx's certificate for 127.0.0.1, the relay's client certificate
C=$T/tls
mkdir -p "$C"
mk() { openssl "$@" >>"$C/openssl.log" 2>&1 || bail "openssl $1 failed: $(tail -2 "$C/openssl.log")"; }
mk req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=outbox itest CA" \
    -keyout "$C/ca.key" -out "$C/ca.pem"
mk req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$C/server.key" -out "$C/server.csr"
printf 'subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' >"$C/server.ext"
mk x509 -req -in "$C/server.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 1 \
    -extfile "$C/server.ext" -out "$C/server.pem"
mk req -newkey rsa:2048 -nodes -subj "/CN=outbox-relay-itest" -keyout "$C/client.key" -out "$C/client.csr"
printf 'extendedKeyUsage = clientAuth\n' >"$C/client.ext"
mk x509 -req -in "$C/client.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 1 \
    -extfile "$C/client.ext" -out "$C/client.pem"
chmod 600 "$C/client.key"
# the same certificate under another name: libcurl 7.88 matches a kept-alive
# connection by the client certificate's path, not the key's, so badkey
# needs a path of its own to make a connection of its own (see deliver.c)
cp "$C/client.pem" "$C/client-b.pem"

receiver_start keyed --dedupe

# ---- nginx: TLS 1.3, client certificate required, proxy to the receiver;
# one process (master_process off), so that the cleanup's kill ends it all
N=$T/nginx
mkdir -p "$N/tmp" "$N/logs"
NGINX_PORT=""
for try in 1 2 3 4 5 6; do
    port=$((30000 + (RANDOM % 20000)))
    pgcluster_port_free "$port" || continue
    cat >"$N/nginx.conf" <<CONF
daemon off;
master_process off;
pid $N/nginx.pid;
error_log $N/logs/error.log info;
events { worker_connections 256; }
http {
    log_format tls '\$ssl_protocol "\$ssl_client_s_dn" \$ssl_client_verify \$status \$http_idempotency_key \$connection \$ssl_session_reused';
    access_log $N/logs/access.log tls;
    client_body_temp_path $N/tmp/body;
    proxy_temp_path $N/tmp/proxy;
    fastcgi_temp_path $N/tmp/fastcgi;
    uwsgi_temp_path $N/tmp/uwsgi;
    scgi_temp_path $N/tmp/scgi;
    server {
        listen 127.0.0.1:$port ssl;
        ssl_protocols TLSv1.3;
        ssl_certificate $C/server.pem;
        ssl_certificate_key $C/server.key;
        ssl_client_certificate $C/ca.pem;
        ssl_verify_client on;
        location / {
            proxy_pass http://127.0.0.1:$RECV_PORT_keyed;
        }
    }
}
CONF
    "$NGINX" -p "$N/" -c "$N/nginx.conf" -e "$N/logs/error.log" >"$N/logs/stdout" 2>&1 &
    NGINX_PID=$!
    ITEST_PIDS+=("$NGINX_PID")
    for _ in $(seq 1 50); do
        kill -0 "$NGINX_PID" 2>/dev/null || break
        pgcluster_port_free "$port" || { NGINX_PORT=$port; break; }
        sleep 0.1
    done
    [ -n "$NGINX_PORT" ] && break
done
[ -n "$NGINX_PORT" ] || bail "nginx did not start: $(tail -3 "$N/logs/error.log" "$N/logs/stdout" 2>/dev/null)"
URL="https://127.0.0.1:$NGINX_PORT/hooks"
# the setup itself: curl with the client certificate is served, without it refused
is "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$C/ca.pem" --cert "$C/client.pem" \
    --key "$C/client.key" -X POST -H 'Idempotency-Key: setup:1' -d '{}' "$URL")" 200 \
    "setup: nginx serves curl with the client certificate"
is "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$C/ca.pem" -X POST -d '{}' "$URL")" 400 \
    "setup: nginx refuses curl without one"

target_add mtls "$URL" ca_file="'$C/ca.pem'" client_cert_file="'$C/client.pem'" \
    client_key_file="'$C/client.key'"
target_add mtlsstatus "$URL" key_header=NULL reconcile_delay_ms=300 \
    "status_url='https://127.0.0.1:$NGINX_PORT/status/{key}'" ca_file="'$C/ca.pem'" \
    client_cert_file="'$C/client.pem'" client_key_file="'$C/client.key'"
target_add nocert "$URL" ca_file="'$C/ca.pem'" max_attempts=2 backoff_base_ms=10 backoff_cap_ms=20
target_add noca "$URL" client_cert_file="'$C/client.pem'" client_key_file="'$C/client.key'" \
    max_attempts=2 backoff_base_ms=10 backoff_cap_ms=20
target_add badkey "$URL" ca_file="'$C/ca.pem'" client_cert_file="'$C/client-b.pem'" \
    client_key_file="'$C/missing.key'" max_attempts=2 backoff_base_ms=10 backoff_cap_ms=20
target_add badca "$URL" ca_file="'$C/missing-ca.pem'" client_cert_file="'$C/client.pem'" \
    client_key_file="'$C/client.key'" max_attempts=2 backoff_base_ms=10 backoff_cap_ms=20

# ---- mtls first: kept-alive connections with the client certificate stay open
sql "SELECT count(*) FROM (SELECT outbox.enqueue('mtls:' || g, 'mtls', jsonb_build_object('n', g))
       FROM generate_series(1, 20) g) x" >/dev/null
relay_start one --poll-interval-ms 100 --targets-refresh-ms 200
wait_for 30 "SELECT count(*) FROM outbox.intents WHERE target = 'mtls' AND state = 'succeeded'" 20 ||
    bail "mtls intents did not succeed: $(sql "SELECT last_error FROM outbox.intents WHERE target = 'mtls' LIMIT 1")"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'mtls' AND state = 'succeeded'")" 20 \
    "mtls: 20 intents succeeded through nginx with the client certificate"
is "$(grep -c '^TLSv1.3 "CN=outbox-relay-itest" SUCCESS 200 mtls:' "$N/logs/access.log")" 20 \
    "nginx saw the relay's certificate (verified, TLS 1.3) on the 20 deliveries"

# ---- a status check over mutual TLS settles an ambiguous delivery
sql "SELECT outbox.enqueue('mtlsstatus:1', 'mtlsstatus', '{\"ref\": \"mtlsstatus:1\", \"_fault\": \"drop_after\"}')" >/dev/null
wait_for 30 "SELECT state FROM outbox.intents WHERE key = 'mtlsstatus:1'" succeeded
is "$(sql "SELECT state || ' ' || response_status FROM outbox.intents WHERE key = 'mtlsstatus:1'")" "succeeded 200" \
    "mtlsstatus: ambiguous (nginx 502), then the status check over mutual TLS found it executed"
is "$(grep -c '^TLSv1.3 "CN=outbox-relay-itest" SUCCESS 200 - [0-9]* [.r]$' "$N/logs/access.log")" 1 \
    "... nginx saw that status check with the relay's certificate"

# ---- then the others, while mtls's connections are open to the same host:port
for t in nocert noca badkey badca; do
    sql "SELECT outbox.enqueue('$t:1', '$t', '{\"n\": 1}')" >/dev/null
done
wait_for 30 "SELECT count(*) FROM outbox.intents WHERE key IN ('nocert:1', 'noca:1', 'badkey:1', 'badca:1')
               AND state IN ('failed', 'succeeded', 'unknown')" 4 || bail "the other targets did not settle"

is "$(sql "SELECT state || ' ' || response_status FROM outbox.intents WHERE key = 'nocert:1'")" "failed 400" \
    "nocert: refused by nginx with 400 (no connection of mtls reused), failed"
ok "nocert: the saved answer is nginx's 'No required SSL certificate was sent'" bash -c \
    "psql -X -tA -c \"SELECT response_body FROM outbox.outcome('nocert:1')\" | grep -q 'No required SSL certificate was sent'"

is "$(sql "SELECT state FROM outbox.intents WHERE key = 'noca:1'")" failed \
    "noca: failed, never succeeded (the private CA is not in the system store)"
is "$(sql "SELECT count(*) FILTER (WHERE a.class = 'not_sent' AND NOT a.request_sent) || '/' || count(*)
           FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'noca:1'")" 2/2 \
    "noca: both attempts not_sent, no request bytes"
ok "noca: the error is the verification of the target's certificate" \
    bash -c "psql -X -tA -c \"SELECT error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                              WHERE i.key = 'noca:1'\" | grep -q 'SSL certificate problem'"

is "$(sql "SELECT state FROM outbox.intents WHERE key = 'badkey:1'")" failed "badkey: failed"
is "$(sql "SELECT count(*) FILTER (WHERE a.class = 'not_sent' AND NOT a.request_sent) || '/' || count(*)
           FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'badkey:1'")" 2/2 \
    "badkey: both attempts not_sent"
first_attempt_error() {
    sql "SELECT a.error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
          WHERE i.key = '$1' ORDER BY a.attempt LIMIT 1"
}
is "$(first_attempt_error badkey:1 | cut -c1-65)" \
    "the target's client_cert_file or client_key_file cannot be used: " \
    "badkey: the attempt's error names the target's setting"
ok "badkey: so does the intent's last error" bash -c "psql -X -tA -c \"SELECT last_error FROM outbox.intents
    WHERE key = 'badkey:1'\" | grep -qF \"; last: the target's client_cert_file or client_key_file cannot be used\""
ok "badkey: ... and the missing file" bash -c \
    "psql -X -tA -c \"SELECT error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                      WHERE i.key = 'badkey:1'\" | grep -qF '$C/missing.key'"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'badca:1'")" failed "badca: failed"
is "$(first_attempt_error badca:1 | cut -c1-37)" \
    "the target's ca_file cannot be used: " "badca: the error names the target's ca_file"

# ---- what the target saw: one effect per mtls key, none of the others
effects_table keyed
is "$(sql "SELECT count(*) || ' ' || coalesce(max(n), 0) FROM effects WHERE key LIKE 'mtls:%'")" "20 1" \
    "20 mtls effects at the receiver, one each"
is "$(sql "SELECT n FROM effects WHERE key = 'mtlsstatus:1'")" 1 "one mtlsstatus effect"
is "$(sql "SELECT count(*) FROM effects WHERE key !~ '^(mtls|mtlsstatus|setup):'")" 0 "no effect of another target"

# ---- the relay-wide --ca-file verifies a target without its own ca_file
kill -TERM "$RELAY_PID_one"
relay_wait one 20
is "$?" 0 "the relay stops cleanly"
target_add relayca "$URL" client_cert_file="'$C/client.pem'" client_key_file="'$C/client.key'" max_attempts=2
sql "SELECT outbox.enqueue('relayca:1', 'relayca', '{\"n\": 1}')" >/dev/null
relay_start two --exit-when-idle --poll-interval-ms 100 --ca-file "$C/ca.pem"
relay_wait two 30
is "$?" 0 "relay two exits 0"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'relayca:1'")" succeeded \
    "relayca: verified through --ca-file, succeeded"
"$RELAY_BIN" run --db "$RELAY_DB_URL" --ca-file "$C/nothing.pem" >"$T/bad-ca-file.out" 2>&1
is "$?" 2 "--ca-file naming a missing file stops the relay at start (exit 2)"
ok "... naming the option" grep -q "for --ca-file (OUTBOX_RELAY_CA_FILE)" "$T/bad-ca-file.out"

# ---- secrets: paths only, never the key's bytes, in logs or tables
key_line=$(sed -n 2p "$C/client.key")
ok "the key's bytes are in no relay log" bash -c "! grep -qF -- '$key_line' $T/relay-*.log"
ok "no 'PRIVATE KEY' in the relay logs" bash -c "! grep -q 'PRIVATE KEY' $T/relay-*.log"
is "$(sql "SELECT count(*) FROM outbox.attempts WHERE error LIKE '%PRIVATE KEY%' OR error LIKE '%$key_line%'")" 0 \
    "... nor in outbox.attempts"
ok "no sanitizer report" relay_logs_clean
itest_done
