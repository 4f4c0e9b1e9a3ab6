# shellcheck shell=bash
# tests/bench/headline.sh — the headline scenario of `make bench` (issue 17)
# (sourced by tests/bench/run.sh, which provides q, newdb, emit, pg_cpu,
# runstat, the stock cluster $B/pgdef and DEF_RELAY_OPTS).
#
# The relay as users run it, against a receiver users know:
#   - PostgreSQL: the `defaults` cluster ($B/pgdef): initdb's postgresql.conf,
#     fsync, synchronous_commit and full_page_writes on;
#   - receiver: Debian's nginx, started here on a free 127.0.0.1 port with its
#     own prefix, config, temp paths and pid file under $B/nginx, `daemon off`
#     so that its master is our child and is stopped by its PID; keep-alive,
#     access_log off, `return 200 '{"ok":true}'` for POST on /deliveries;
#   - the relay with default options (DEF_RELAY_OPTS: only --exit-when-idle
#     and --admin-listen ""; log level info, to a file), a target inserted with
#     only name and url (the table's defaults: max_in_flight 1024, the
#     Idempotency-Key header, timeout 10 s);
#   - BENCH_HEADLINE_INTENTS (100,000) intents enqueued, ANALYZE, CHECKPOINT
#     (as the `defaults` drain), drained by one relay --exit-when-idle.
# Each round (BENCH_HEADLINE_RUNS, 3), right after the drain, runs
# tests/bench/curl_probe.c twice: libcurl alone, the same number of requests
# to the same nginx, so that relay CPU per intent / libcurl CPU per request
# is a ratio taken within one round:
#   - `probe`: as many requests at once as the relay had in flight on average
#     in that drain (its attempts' latencies added up / drain time): the same
#     HTTP work at the same concurrency. The target ratio is taken with it.
#   - `probecap`: 1,024 at once, the relay's default --max-in-flight. libcurl
#     7.88 costs about twice as much per request with 1,024 transfers at once
#     as with 150 to 500 (which is what the relay has), so this one is shown,
#     not judged.
# The two probes alternate in order from round to round.
#
# The same rounds then run over TLS (issue 26; BENCH_HEADLINE_TLS_RUNS, 3;
# BENCH_ONLY=headline_tls runs only these): the same nginx also listens with
# TLS 1.3 only, its certificate (ECDSA P-256, for 127.0.0.1) signed by a
# throwaway CA made here with openssl; the relay trusts it through the
# target's ca_file, curl_probe through --cacert. nginx's defaults for
# resumption (session tickets on, no shared session cache). Per drain and per
# probe: handshakes = connections nginx accepted (stub_status, /_status's
# own excluded), of which resumed = first requests of a connection with
# $ssl_session_reused "r" (an access log on the TLS server only, buffered);
# connections open at the target = established sockets on nginx's port
# (ss, every 0.2 s: maximum and mean). The HTTP rounds record their
# connections too. One more TLS drain (BENCH_HEADLINE_STORM=1, the default)
# reloads nginx (SIGHUP: new workers, the old ones close their kept-alive
# connections) a third of the way in: a reconnect storm, its handshakes and
# the relay's CPU against the plain TLS rounds.
#
# HTTP/2 (issue 26 item 2; BENCH_ONLY=headline_h2 only, not in a full run):
# BENCH_HEADLINE_H2_RUNS (3) pairs of TLS drains, the target at
# http_version '1.1' (kind=headline_h2_base, the TLS rounds' listener) and
# '2' (kind=headline_h2, a third listener of the same nginx, the same TLS
# and certificate plus http2), in alternating order; no probes. Per drain:
# intents/s, relay CPU per delivery, handshakes and connections at nginx.
#
# Raw figures go to kind=headline lines (one per round; kind=headline_tls
# over TLS, kind=headline_storm) and one kind=headline_meta line; report.py
# prints them first. The headline's own
# time is not counted against BENCH_BUDGET_S (HEADLINE_S, which run.sh's
# over_budget subtracts), so the other scenarios run as many rounds as before.

. "$ROOT/tests/bench/bare_claim.sh" # headline_bare: the limit's PostgreSQL share
HEADLINE_RUNS=${BENCH_HEADLINE_RUNS:-3}
N_HEADLINE=${BENCH_HEADLINE_INTENTS:-100000}
HEADLINE_IN_FLIGHT=${BENCH_HEADLINE_IN_FLIGHT:-1024} # the relay's --max-in-flight default (and targets.max_in_flight's)
HEADLINE_TLS_RUNS=${BENCH_HEADLINE_TLS_RUNS:-3}
HEADLINE_STORM=${BENCH_HEADLINE_STORM:-1}
HEADLINE_H2_RUNS=${BENCH_HEADLINE_H2_RUNS:-3}
# The log line's cost (issue 40): BENCH_HEADLINE_LOG_RUNS (3) pairs of HTTP
# drains, the default (info: a line per delivery, written once per loop
# turn) against --log-level warn (no line), in alternating order.
HEADLINE_LOG_RUNS=${BENCH_HEADLINE_LOG_RUNS:-3}
# Before/after over TLS (issue 40): BENCH_RELAY_B, another relay binary,
# drains once more in every TLS round, before or after the relay under test
# (alternating), kind=headline_tls_b (no probes): peak RSS, intents/s, CPU
# per delivery and connections of both in one run. BENCH_HEADLINE_PROBES=0
# leaves the curl_probe runs out (shorter; the ratios to libcurl then show
# as BROKEN).
HEADLINE_RELAY_B=${BENCH_RELAY_B:-}
HEADLINE_PROBES=${BENCH_HEADLINE_PROBES:-1}
HEADLINE_EXTRA_OPTS=()
NGINX_TLS_PORT=""
NGINX_H2_PORT=""
HEADLINE_CA="" # the throwaway CA's certificate (PEM), the TLS target's ca_file
NGINX=${BENCH_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
NGINX_PID=""
NGINX_PORT=""

# nginx_cpu → seconds of CPU of the master and its workers (/proc ticks).
# The master's own count includes the workers it has reaped (cutime,
# cstime): a reload (the reconnect storm) replaces every worker, and
# without them the drain's nginx CPU came out negative.
nginx_cpu() {
    local p
    {
        awk '{print $14 + $15 + $16 + $17}' "/proc/$NGINX_PID/stat" 2>/dev/null
        for p in $(ps -o pid= --ppid "$NGINX_PID" 2>/dev/null); do
            awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null
        done
    } | awk -v hz="$CLK_TCK" '{s += $1} END {printf "%.3f\n", s / hz}'
}
# nginx_requests → stub_status's connections accepted and requests (this
# request and its connection included), "ACCEPTS REQUESTS".
nginx_requests() {
    curl -s "http://127.0.0.1:$NGINX_PORT/_status" | awk 'NR == 3 {print $1, $3}'
}

# nginx_start: $B/nginx/nginx.conf on a free port; sets NGINX_PID, NGINX_PORT.
# The configuration is Debian's nginx.conf pared down to what answers the
# relay (no access log, no gzip, no sites), with two changes:
# worker_connections 4096 instead of Debian's 768, because 1,024 deliveries
# in flight open up to 1,024 connections and two workers do not share them
# evenly; and the paths under $B. Everything else is nginx's default
# (keepalive_timeout 75 s, keepalive_requests 1000, worker_processes auto).
# headline_tls_files DIR: a throwaway CA and nginx's certificate for
# 127.0.0.1 (ECDSA P-256, one day) in DIR; sets HEADLINE_CA.
headline_tls_files() {
    local d=$1
    mkdir -p "$d"
    {
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
            -subj "/CN=outbox bench CA" -keyout "$d/ca.key" -out "$d/ca.pem" &&
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
                -keyout "$d/server.key" -out "$d/server.csr" &&
            printf 'subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' >"$d/server.ext" &&
            openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
                -days 1 -extfile "$d/server.ext" -out "$d/server.pem"
    } >"$d/openssl.log" 2>&1 || { broken "headline: openssl: $(tail -2 "$d/openssl.log" | tr '\n' ' ')"; return 1; }
    HEADLINE_CA=$d/ca.pem
}

nginx_start() {
    local dir=$B/nginx try port tls_port _
    [ -x "$NGINX" ] || { broken "headline: nginx is missing (make deps installs it)"; return 1; }
    mkdir -p "$dir/tmp" "$dir/logs"
    headline_tls_files "$dir/tls" || return 1
    for try in 1 2 3 4 5 6 7 8; do
        port=$((20000 + (RANDOM * 7 + $$ + try * 173) % 40000))
        tls_port=$((port + 1))
        pgcluster_port_free "$port" && pgcluster_port_free "$tls_port" &&
            pgcluster_port_free $((port + 2)) || continue
        cat >"$dir/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    log_format tls '\$connection \$connection_requests \$ssl_session_reused \$ssl_protocol';
    server {
        listen 127.0.0.1:$port;
        location = /deliveries {
            if (\$request_method != POST) {
                return 405;
            }
            default_type application/json;
            return 200 '{"ok":true}';
        }
        location = /_status {
            stub_status;
        }
    }
    server {
        listen 127.0.0.1:$tls_port ssl;
        ssl_protocols TLSv1.3;
        ssl_certificate $dir/tls/server.pem;
        ssl_certificate_key $dir/tls/server.key;
        access_log $dir/logs/tls.log tls buffer=64k flush=1s;
        location = /deliveries {
            if (\$request_method != POST) {
                return 405;
            }
            default_type application/json;
            return 200 '{"ok":true}';
        }
    }
    server {
        listen 127.0.0.1:$((port + 2)) ssl http2;
        ssl_protocols TLSv1.3;
        ssl_certificate $dir/tls/server.pem;
        ssl_certificate_key $dir/tls/server.key;
        access_log $dir/logs/tls.log tls buffer=64k flush=1s;
        location = /deliveries {
            if (\$request_method != POST) {
                return 405;
            }
            default_type application/json;
            return 200 '{"ok":true}';
        }
    }
}
CONF
        : >"$dir/logs/error.log"
        "$NGINX" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/logs/error.log" >"$dir/logs/stdout" 2>&1 &
        NGINX_PID=$!
        PIDS+=("$NGINX_PID")
        NGINX_PORT=$port
        NGINX_TLS_PORT=$tls_port
        NGINX_H2_PORT=$((port + 2))
        for _ in $(seq 1 100); do
            kill -0 "$NGINX_PID" 2>/dev/null || break
            [ -n "$(nginx_requests)" ] && return 0
            sleep 0.05
        done
        kill -TERM "$NGINX_PID" 2>/dev/null
        wait "$NGINX_PID" 2>/dev/null
        forget_pid "$NGINX_PID"
        NGINX_PID=""
        grep -q "Address already in use" "$dir/logs/error.log" "$dir/logs/stdout" 2>/dev/null || break
    done
    broken "headline: nginx did not start: $(tail -3 "$dir/logs/error.log" "$dir/logs/stdout" 2>/dev/null | tr '\n' ' ')"
    return 1
}

nginx_stop() {
    [ -n "$NGINX_PID" ] || return 0
    kill -QUIT "$NGINX_PID" 2>/dev/null # graceful: workers finish, then the master exits
    local _
    for _ in $(seq 1 50); do
        kill -0 "$NGINX_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -TERM "$NGINX_PID" 2>/dev/null
    wait "$NGINX_PID" 2>/dev/null
    forget_pid "$NGINX_PID"
    NGINX_PID=""
}

# wal_composition DB LSN0 LSN1: what the WAL between two LSNs is made of
# (pg_walinspect's pg_get_wal_stats by record type, the whole cluster's WAL:
# the drain's, autovacuum's, the checkpointer's), as bench fields:
#   wal_records       every record
#   wal_btree_entries tuples added to B-tree leaves: INSERT_LEAF, INSERT_POST
#                     (a posting-list insert) and SPLIT_L/SPLIT_R (a split
#                     carries the new tuple); INSERT_UPPER, the downlink a
#                     split adds to the parent, is not an entry of a row
#   wal_heap_inserts  Heap INSERT (a new row: an intent's history row)
#   wal_heap_updates  Heap UPDATE (a new version that every index got an
#                     entry for) and wal_hot_updates, Heap HOT_UPDATE (one no
#                     index heard of)
#   wal_heap_locks    Heap LOCK (a row lock written to the page: SKIP LOCKED)
#   wal_fpi_bytes     full-page images (each page's first change after the
#                     checkpoint that precedes the drain)
# "+INIT" variants (the record that starts a page) count with their type.
wal_composition() {
    q "$1" "SELECT format('wal_records=%s wal_btree_entries=%s wal_heap_inserts=%s wal_heap_updates=%s wal_hot_updates=%s wal_heap_locks=%s wal_fpi_bytes=%s',
                          sum(count), sum(count) FILTER (WHERE kind IN ('Btree/INSERT_LEAF', 'Btree/INSERT_POST', 'Btree/SPLIT_L', 'Btree/SPLIT_R')),
                          coalesce(sum(count) FILTER (WHERE kind = 'Heap/INSERT'), 0),
                          coalesce(sum(count) FILTER (WHERE kind = 'Heap/UPDATE'), 0),
                          coalesce(sum(count) FILTER (WHERE kind = 'Heap/HOT_UPDATE'), 0),
                          coalesce(sum(count) FILTER (WHERE kind = 'Heap/LOCK'), 0), sum(fpi_size))
              FROM (SELECT split_part(\"resource_manager/record_type\", '+', 1) AS kind, count, fpi_size
                      FROM pg_get_wal_stats('$2', '$3', true)) s" 2>/dev/null
}

# conn_sampler_start PORT FILE: the number of established connections to
# nginx's PORT (server side), every 0.2 s, one line each, until stopped;
# sets SAMPLER_PID. ss reads the kernel's table: nginx does not see it.
conn_sampler_start() {
    local port=$1 file=$2
    : >"$file"
    while :; do
        ss -Htn state established "( sport = :$port )" 2>/dev/null | wc -l
        sleep 0.2
    done >>"$file" &
    SAMPLER_PID=$!
    PIDS+=("$SAMPLER_PID")
}
# conn_sampler_stop FILE → "MAX MEAN" of the samples
conn_sampler_stop() {
    kill "$SAMPLER_PID" 2>/dev/null
    wait "$SAMPLER_PID" 2>/dev/null
    forget_pid "$SAMPLER_PID"
    awk '{ if ($1 > m) m = $1; s += $1; n++ } END { printf "%d %.0f\n", m, n ? s / n : 0 }' "$1"
}
# tls_log_reset / tls_log_count: the TLS server's access log (flushed every
# second) emptied before a run and read after it → "NEW RESUMED": first
# requests of a connection, and those whose TLS session was resumed.
tls_log_reset() {
    sleep 1.1
    : >"$B/nginx/logs/tls.log"
}
tls_log_count() {
    sleep 1.1
    awk '$2 == 1 { n++; if ($3 == "r") r++ } END { printf "%d %d\n", n, r }' "$B/nginx/logs/tls.log"
}

# headline_probe ROUND NAME K [SCHEME]: libcurl alone, N_HEADLINE requests to
# nginx (SCHEME http, the default, or https), K at once; appends NAME_*
# fields to PROBE_FIELDS.
headline_probe() {
    local r=$1 name=$2 k=$3 scheme=${4:-http} n0 n1 a0 a1 c0 c1 out url tls_args=() conns new resumed
    url="http://127.0.0.1:$NGINX_PORT/deliveries"
    if [ "$scheme" = https ]; then
        url="https://127.0.0.1:$NGINX_TLS_PORT/deliveries"
        tls_args=(--cacert "$HEADLINE_CA")
        tls_log_reset
    fi
    read -r a0 n0 <<<"$(nginx_requests)"
    c0=$(nginx_cpu)
    conn_sampler_start "$([ "$scheme" = https ] && echo "$NGINX_TLS_PORT" || echo "$NGINX_PORT")" \
        "$B/headline-$scheme-$name-$r.conns"
    out=$(timeout -k 5 240 "$BIN/curl_probe" --url "$url" "${tls_args[@]}" \
        --requests "$N_HEADLINE" --in-flight "$k" --prefix "$name:$r:" 2>"$B/headline-$name-$r.err") ||
        { broken "headline/$r: curl_probe failed: $(head -3 "$B/headline-$name-$r.err" | tr '\n' ' ')"; return 1; }
    c1=$(nginx_cpu)
    read -r a1 n1 <<<"$(nginx_requests)"
    conns=$(conn_sampler_stop "$B/headline-$scheme-$name-$r.conns")
    PROBE_FIELDS+=("${name}_conns_max=${conns% *}" "${name}_conns_mean=${conns#* }")
    if [ "$scheme" = https ]; then
        read -r new resumed <<<"$(tls_log_count)"
        PROBE_FIELDS+=("${name}_tls_new=$new" "${name}_tls_resumed=$resumed")
    fi
    echo "$out" >"$B/headline-$name-$r.out"
    # requests N ok N errors E connections C wall_s W user_s U sys_s S maxrss_kb M
    local -a f
    read -r -a f <<<"$out"
    PROBE_FIELDS+=("${name}_in_flight=$k" "${name}_requests=${f[1]}" "${name}_connections=${f[7]}"
        "${name}_wall_s=${f[9]}" "${name}_user_s=${f[11]}" "${name}_sys_s=${f[13]}" "${name}_maxrss_kb=${f[15]}"
        "${name}_nginx_cpu_s=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.3f", b - a}')"
        "${name}_nginx_requests=$((n1 - n0 - 1))" "${name}_nginx_accepts=$((a1 - a0 - 1))")
    say "headline round $r ($scheme): curl_probe, $k in flight: $N_HEADLINE requests in ${f[9]}s, $(awk -v u="${f[11]}" -v s="${f[13]}" -v n="$N_HEADLINE" 'BEGIN {printf "%.1f", (u + s) * 1e6 / n}') µs CPU each"
}

# headline_drain ROUND [SCHEME [STORM]]: a fresh database on the stock
# cluster, its target pointed at nginx (SCHEME http, the default, or https
# with the throwaway CA as the target's ca_file, or h2: https to the http2
# listener, http_version '2'), N_HEADLINE intents, one
# relay with default options. STORM=1: nginx reloads (SIGHUP) once a third
# of the intents succeeded.
headline_drain() {
    local r=$1 scheme=${2:-http} storm=${3:-0} rc=0
    local db=bench_headline_$r
    [ "$scheme" = https ] && db=bench_headline_tls_$r
    [ "$storm" = 1 ] && db=bench_headline_storm_$r
    [ "$scheme" = h2 ] && db=bench_headline_h2_$r
    local -x PGPORT=$DEF_PGPORT
    # shellcheck disable=SC2034  # read by pg_cpu, pg_children (run.sh)
    local PGDIR=$B/pgdef
    newdb "$db" || { broken "headline/$r: createdb"; return 1; }
    # bench_tmpl of the stock cluster has target `bench` with only name and
    # url; only its url changes, to nginx.
    local port=$NGINX_PORT set_url="url = 'http://127.0.0.1:$NGINX_PORT/deliveries'"
    if [ "$scheme" = https ]; then
        port=$NGINX_TLS_PORT
        set_url="url = 'https://127.0.0.1:$NGINX_TLS_PORT/deliveries', ca_file = '$HEADLINE_CA'"
    elif [ "$scheme" = h2 ]; then
        port=$NGINX_H2_PORT
        set_url="url = 'https://127.0.0.1:$NGINX_H2_PORT/deliveries', ca_file = '$HEADLINE_CA', http_version = '2'"
    fi
    q "$db" "UPDATE outbox.targets SET $set_url WHERE name = 'bench'" \
        >/dev/null || { broken "headline/$r: target"; return 1; }
    local t0=$EPOCHREALTIME load_s
    enqueue_intents "$db" bench "headline:$r:" "$N_HEADLINE" || { broken "headline/$r: enqueue"; return 1; }
    load_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}')
    q "$db" "ANALYZE outbox.intents" "CHECKPOINT" >/dev/null

    local base_children pg0 pg1 ng0 ng1 n0 n1 a0 a1 wal0 wal1 conns tls_new=0 tls_resumed=0 storm_at=""
    [ "$scheme" != http ] && tls_log_reset
    base_children=$(pg_children)
    # WAL written during the drain (bytes): unlike CPU time, it does not
    # move with the machine's load, so it shows a change in what a delivery
    # writes even when the CPU figures are lost in noise.
    wal0=$(q "$db" "SELECT pg_current_wal_lsn() - '0/0'")
    # pg_walinspect (contrib, in PostgreSQL's package) reads the same range
    # back afterwards: what the bytes are made of (wal_composition).
    local lsn0 lsn1
    q "$db" "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null 2>&1 &&
        lsn0=$(q "$db" "SELECT pg_current_wal_lsn()")
    read -r a0 n0 <<<"$(nginx_requests)"
    pg0=$(pg_cpu)
    ng0=$(nginx_cpu)
    conn_sampler_start "$port" "$B/$db.conns"
    local start=$EPOCHREALTIME
    timeout -k 5 240 "$BIN/runstat" -o "$B/$db.relay.stat" -- \
        "$RELAY" run --db "$(dburl "$db")" --relay-id "bench-headline" "${DEF_RELAY_OPTS[@]}" \
        "${HEADLINE_EXTRA_OPTS[@]}" >"$B/$db.relay.log" 2>&1 &
    local wrapper=$!
    PIDS+=("$wrapper")
    if [ "$storm" = 1 ]; then
        # the reconnect storm: nginx reloads once a third has succeeded
        local _
        for _ in $(seq 1 600); do
            kill -0 "$wrapper" 2>/dev/null || break
            [ "$(q "$db" "SELECT count(*) >= $((N_HEADLINE / 3)) FROM outbox.intents WHERE state = 'succeeded'")" = t ] && {
                kill -HUP "$NGINX_PID"
                storm_at=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}')
                break
            }
            sleep 0.1
        done
    fi
    wait "$wrapper" || rc=$?
    forget_pid "$wrapper"
    local end=$EPOCHREALTIME
    conns=$(conn_sampler_stop "$B/$db.conns")
    [ "$scheme" != http ] && read -r tls_new tls_resumed <<<"$(tls_log_count)"
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    ng1=$(nginx_cpu)
    read -r a1 n1 <<<"$(nginx_requests)"
    wal1=$(q "$db" "SELECT pg_current_wal_lsn() - '0/0'")
    local -a wal_fields=()
    if [ -n "${lsn0:-}" ]; then
        lsn1=$(q "$db" "SELECT pg_current_wal_lsn()")
        read -ra wal_fields <<<"$(wal_composition "$db" "$lsn0" "$lsn1")"
    fi
    local wall user sys maxrss succeeded attempts latency_s
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')
    read -r _ user sys maxrss _ <"$B/$db.relay.stat" || { user=0; sys=0; maxrss=0; }
    succeeded=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
    # latency_s: the attempts' latencies added up; / wall = deliveries in flight on average
    read -r attempts latency_s <<<"$(q "$db" "SELECT count(*) || ' ' || coalesce(sum(latency_ms), 0) / 1000.0 FROM outbox.attempts")"
    # attempts that did not succeed, by class and error (the h2 drains' stream errors)
    local failed_attempts
    failed_attempts=$(q "$db" "SELECT coalesce(string_agg(n || ' ' || class || ': ' || e, '; '), '')
                                 FROM (SELECT class, left(coalesce(error, ''), 100) AS e, count(*) AS n
                                         FROM outbox.attempts WHERE class <> 'succeeded' GROUP BY 1, 2) x")
    if [ "$rc" != 0 ] || [ "$succeeded" != "$N_HEADLINE" ]; then
        broken "headline/$r: relay exit $rc, $succeeded of $N_HEADLINE succeeded (log: $B/$db.relay.log)"
        return 1
    fi
    DRAIN_FIELDS=(intents="$N_HEADLINE" wall_s="$wall" load_s="$load_s" relay_user_s="$user" relay_sys_s="$sys"
        relay_maxrss_kb="$maxrss" pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')"
        nginx_cpu_s="$(awk -v a="$ng0" -v b="$ng1" 'BEGIN {printf "%.3f", b - a}')"
        nginx_requests=$((n1 - n0 - 1)) nginx_accepts=$((a1 - a0 - 1)) succeeded="$succeeded"
        attempts="$attempts" failed_attempts="$failed_attempts" attempts_latency_s="$latency_s" wal_bytes="$(awk -v a="$wal0" -v b="$wal1" 'BEGIN {printf "%d", b - a}')"
        relay_log_lines="$(wc -l <"$B/$db.relay.log")" conns_max="${conns% *}" conns_mean="${conns#* }"
        tls_new="$tls_new" tls_resumed="$tls_resumed" storm_at_s="${storm_at:-0}" "${wal_fields[@]}")
    MEAN_IN_FLIGHT=$(awk -v l="$latency_s" -v w="$wall" 'BEGIN {k = int(l / w + 0.5); print (k < 1 ? 1 : k)}')
    say "headline round $r ($scheme${storm_at:+, nginx reloaded at ${storm_at}s}): $N_HEADLINE intents in ${wall}s (load ${load_s}s), relay peak RSS ${maxrss} kB, $MEAN_IN_FLIGHT in flight on average"
    dropdb_quiet "$db"
}

# headline_drain_b ROUND: the TLS drain of ROUND with BENCH_RELAY_B,
# emitted as kind=headline_tls_b.
headline_drain_b() {
    local r=$1 load
    local DRAIN_FIELDS=() MEAN_IN_FLIGHT=1
    local RELAY=$HEADLINE_RELAY_B # headline_drain runs "$RELAY"
    load=$(cut -d' ' -f1 /proc/loadavg)
    headline_drain "$r" https || return 1
    emit kind=headline_tls_b round="$r" relay_b="$HEADLINE_RELAY_B" load1_before="$load" "${DRAIN_FIELDS[@]}" \
        load1_after="$(cut -d' ' -f1 /proc/loadavg)"
}

scenario_headline() {
    local started=$SECONDS r
    HEADLINE_S=0
    [ -n "$DEF_PGPORT" ] || { broken "headline: the stock PostgreSQL is not there"; return 1; }
    nginx_start || return 1
    say "headline: stock PostgreSQL, nginx on 127.0.0.1:$NGINX_PORT and (TLS) :$NGINX_TLS_PORT (pid $NGINX_PID), relay ${DEF_RELAY_OPTS[*]}"
    local http_runs=$HEADLINE_RUNS tls_runs=$HEADLINE_TLS_RUNS h2_runs=0
    want headline || http_runs=0 # BENCH_ONLY=headline_tls
    { want headline || want headline_tls; } || tls_runs=0 # BENCH_ONLY=headline_h2
    [[ ",${ONLY:-}," == *",headline_h2,"* ]] && h2_runs=$HEADLINE_H2_RUNS
    emit_text kind=headline_meta nginx="$("$NGINX" -v 2>&1 | sed 's/^nginx version: //')" \
        nginx_conf="worker_processes auto, worker_connections 4096, access_log off, keep-alive (timeout 75 s, 1000 requests), return 200 {\"ok\":true}" \
        nginx_tls="TLS 1.3 only, ECDSA P-256 certificate from a throwaway CA (the target's ca_file, curl_probe --cacert), session tickets on (nginx's default), no shared session cache; an access log on the TLS server only (buffer 64k, flushed every 1 s) to count resumed sessions" \
        relay_options="$(printf '%q ' "${DEF_RELAY_OPTS[@]}")" intents="$N_HEADLINE" runs="$http_runs" tls_runs="$tls_runs" \
        storm="$HEADLINE_STORM" \
        probe="tests/bench/curl_probe.c: libcurl multi + epoll, the relay's request options; at the relay's mean in flight of the round (the ratio's), and at $HEADLINE_IN_FLIGHT (the default cap)"
    for r in $(seq 1 "$http_runs"); do
        local DRAIN_FIELDS=() PROBE_FIELDS=() MEAN_IN_FLIGHT=1 load
        load=$(cut -d' ' -f1 /proc/loadavg)
        headline_drain "$r" || break
        if [ $((r % 2)) = 1 ]; then
            { headline_probe "$r" probe "$MEAN_IN_FLIGHT" &&
                headline_probe "$r" probecap "$HEADLINE_IN_FLIGHT"; } || break
        else
            { headline_probe "$r" probecap "$HEADLINE_IN_FLIGHT" &&
                headline_probe "$r" probe "$MEAN_IN_FLIGHT"; } || break
        fi
        headline_bare "$r" || break # the limit's PostgreSQL share (tests/bench/bare_claim.sh)
        emit kind=headline round="$r" load1_before="$load" "${DRAIN_FIELDS[@]}" "${PROBE_FIELDS[@]}" \
            load1_after="$(cut -d' ' -f1 /proc/loadavg)"
    done
    # The same over TLS (issue 26): the probes at the same concurrency, over
    # the same TLS, in the same round.
    for r in $(seq 1 "$tls_runs"); do
        local DRAIN_FIELDS=() PROBE_FIELDS=() MEAN_IN_FLIGHT=1 load
        # BENCH_RELAY_B first in the odd rounds
        if [ -n "$HEADLINE_RELAY_B" ] && [ $((r % 2)) = 1 ]; then headline_drain_b "$r" || break; fi
        load=$(cut -d' ' -f1 /proc/loadavg)
        headline_drain "$r" https || break
        local -a a_fields=("${DRAIN_FIELDS[@]}")
        if [ -n "$HEADLINE_RELAY_B" ] && [ $((r % 2)) = 0 ]; then headline_drain_b "$r" || break; fi
        DRAIN_FIELDS=("${a_fields[@]}")
        if [ "$HEADLINE_PROBES" = 0 ]; then
            :
        elif [ $((r % 2)) = 1 ]; then
            { headline_probe "$r" probe "$MEAN_IN_FLIGHT" https &&
                headline_probe "$r" probecap "$HEADLINE_IN_FLIGHT" https; } || break
        else
            { headline_probe "$r" probecap "$HEADLINE_IN_FLIGHT" https &&
                headline_probe "$r" probe "$MEAN_IN_FLIGHT" https; } || break
        fi
        emit kind=headline_tls round="$r" load1_before="$load" "${DRAIN_FIELDS[@]}" "${PROBE_FIELDS[@]}" \
            load1_after="$(cut -d' ' -f1 /proc/loadavg)"
    done
    # HTTP/2 against HTTP/1.1 over the same TLS, in alternating order.
    for r in $(seq 1 "$h2_runs"); do
        local DRAIN_FIELDS=() MEAN_IN_FLIGHT=1 load scheme
        for scheme in $([ $((r % 2)) = 1 ] && echo "https h2" || echo "h2 https"); do
            load=$(cut -d' ' -f1 /proc/loadavg)
            headline_drain "$r" "$scheme" || break 2
            emit kind="$([ "$scheme" = h2 ] && echo headline_h2 || echo headline_h2_base)" round="$r" \
                load1_before="$load" "${DRAIN_FIELDS[@]}" load1_after="$(cut -d' ' -f1 /proc/loadavg)"
        done
    done
    # The log line's cost: the default (info) against --log-level warn, pairs
    # in alternating order (the relay's CPU per delivery, the difference).
    local log_runs=$HEADLINE_LOG_RUNS
    want headline || log_runs=0
    for r in $(seq 1 "$log_runs"); do
        local DRAIN_FIELDS=() MEAN_IN_FLIGHT=1 load level
        for level in $([ $((r % 2)) = 1 ] && echo "warn info" || echo "info warn"); do
            HEADLINE_EXTRA_OPTS=()
            [ "$level" = warn ] && HEADLINE_EXTRA_OPTS=(--log-level warn)
            load=$(cut -d' ' -f1 /proc/loadavg)
            headline_drain "$r" http || break 2
            emit kind="headline_log_$level" round="$r" load1_before="$load" "${DRAIN_FIELDS[@]}" \
                load1_after="$(cut -d' ' -f1 /proc/loadavg)"
        done
    done
    HEADLINE_EXTRA_OPTS=()
    # The reconnect storm: one more TLS drain, nginx reloaded a third of the way in.
    if [ "$HEADLINE_STORM" = 1 ] && [ "$tls_runs" -gt 0 ]; then
        local DRAIN_FIELDS=() MEAN_IN_FLIGHT=1 load
        load=$(cut -d' ' -f1 /proc/loadavg)
        headline_drain 1 https 1 &&
            emit kind=headline_storm round=1 load1_before="$load" "${DRAIN_FIELDS[@]}" \
                load1_after="$(cut -d' ' -f1 /proc/loadavg)"
    fi
    nginx_stop
    # The headline's time does not count against the drain rounds' budget
    # (run.sh's over_budget subtracts it).
    # shellcheck disable=SC2034  # read by over_budget (run.sh)
    HEADLINE_S=$((SECONDS - started))
}
