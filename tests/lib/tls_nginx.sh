# tests/lib/tls_nginx.sh — a throwaway CA and Debian's nginx terminating TLS
# in front of a test receiver, for integration scenarios (source after
# itest.sh, call after itest_setup).
#
#   tls_make_ca DIR          a CA (DIR/ca.pem) and nginx's certificate for
#                            127.0.0.1 signed by it (DIR/server.pem, server.key),
#                            ECDSA P-256, valid one day
#   tls_nginx_proxy NAME UPSTREAM_PORT CA_DIR [PORTS] [http2]
#                            nginx on PORTS (1) consecutive free 127.0.0.1 ports
#                            (each a host of its own to libcurl), TLS 1.3 only
#                            (with http2: h2 offered by ALPN too), every
#                            request proxied to 127.0.0.1:UPSTREAM_PORT over
#                            kept-alive connections; one process (master_process
#                            off) registered in ITEST_PIDS, so the cleanup ends it.
#                            Sets NGINX_PORT_<NAME> (the first port); logs under
#                            $T/nginx-NAME/logs.
#
# Why so: TLS is what users' targets speak, and what a connection costs the
# relay (memory, handshakes) only shows through a real TLS server; nginx is the
# one users know. The receiver behind it keeps counting effects, so a scenario
# asserts the same things over TLS as over HTTP.

tls_make_ca() {
    local dir=$1
    mkdir -p "$dir"
    _tls_openssl() {
        openssl "$@" >>"$dir/openssl.log" 2>&1 || bail "openssl $1 failed: $(tail -2 "$dir/openssl.log")"
    }
    command -v openssl >/dev/null || bail "openssl is not installed"
    _tls_openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
        -subj "/CN=outbox itest CA" -keyout "$dir/ca.key" -out "$dir/ca.pem"
    _tls_openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$dir/server.key" -out "$dir/server.csr"
    printf 'subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' >"$dir/server.ext"
    _tls_openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 1 -extfile "$dir/server.ext" -out "$dir/server.pem"
}

tls_nginx_proxy() {
    local name=$1 upstream=$2 ca=$3 ports=${4:-1} h2=""
    local nginx n="$T/nginx-$name" port="" try pid="" k listen
    [ "${5:-}" = http2 ] && h2=" http2" # nginx 1.22's spelling (1.25: "http2 on")
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$nginx" ] || bail "nginx is not installed (make deps)"
    mkdir -p "$n/tmp" "$n/logs"
    for try in 1 2 3 4 5 6; do
        port=$((30000 + (RANDOM % 20000)))
        listen=""
        for ((k = 0; k < ports; k++)); do
            pgcluster_port_free $((port + k)) || { port=""; break; }
            listen="$listen        listen 127.0.0.1:$((port + k)) ssl$h2;"$'\n'
        done
        [ -n "$port" ] || continue
        cat >"$n/nginx.conf" <<CONF
daemon off;
master_process off;
pid $n/nginx.pid;
error_log $n/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $n/tmp/body;
    proxy_temp_path $n/tmp/proxy;
    fastcgi_temp_path $n/tmp/fastcgi;
    uwsgi_temp_path $n/tmp/uwsgi;
    scgi_temp_path $n/tmp/scgi;
    upstream receiver { server 127.0.0.1:$upstream; keepalive 1024; }
    server {
$listen        ssl_protocols TLSv1.3;
        ssl_certificate $ca/server.pem;
        ssl_certificate_key $ca/server.key;
        location / {
            proxy_pass http://receiver;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 60s;
        }
    }
}
CONF
        "$nginx" -p "$n/" -c "$n/nginx.conf" -e "$n/logs/error.log" >"$n/logs/stdout" 2>&1 &
        pid=$!
        ITEST_PIDS+=("$pid")
        # nginx writes its pid file once every port is bound; a port taken by
        # another scenario in the meantime looks busy while nginx retries it
        local i
        for i in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            [ "$(cat "$n/nginx.pid" 2>/dev/null)" = "$pid" ] && break 2
            sleep 0.1
        done
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        port=""
    done
    [ -n "$port" ] || bail "nginx $name did not start: $(tail -3 "$n/logs/error.log" "$n/logs/stdout" 2>/dev/null)"
    printf -v "NGINX_PORT_$name" '%s' "$port"
}
