# tests/lib/itest.sh — what every integration scenario needs: a throwaway
# PostgreSQL with the schema, real receivers, real relays, and TAP output.
#
# A scenario sources this file, calls itest_setup, then uses:
#   receiver_start NAME [receiver options]  → sets RECV_PORT_<NAME>, RECV_PID_<NAME>
#   relay_start NAME [relay options]        → sets RELAY_PID_<NAME> (log: $T/relay-NAME.log);
#                                             logged in as itest_relay (only outbox_relay)
#   target_add NAME URL [column=value ...]  → INSERT INTO outbox.targets
#   sql "SELECT ..."                        → the single value, or rows as psql -tA prints them
#   ok COND_CMD... / is GOT WANT DESC       → TAP lines
#   wait_for SECONDS SQL WANT / wait_cmd SECONDS CMD...  → poll until true
# and ends with itest_done. Everything started is stopped in the EXIT trap,
# also when the scenario fails or is interrupted. RELAY_BIN selects the relay
# build (the sanitizer build under `make test`).

ITEST_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$ITEST_ROOT/tests/lib/pgcluster.sh"

RELAY_BIN=${RELAY_BIN:-$ITEST_ROOT/build/outbox-relay}
RECEIVER_BIN=${RECEIVER_BIN:-$ITEST_ROOT/build/test-receiver}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=66}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=67}

TAP_COUNT=0
TAP_FAILED=0
ITEST_PIDS=()

itest_cleanup() {
    local pid
    for pid in "${ITEST_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null
    done
    [ -n "${T:-}" ] && pgcluster_stop "$T/pg"
    if [ -n "${T:-}" ] && [ "$TAP_FAILED" = 0 ] && [ -z "${KEEP_TMP:-}" ]; then
        rm -rf "$T"
    elif [ -n "${T:-}" ]; then
        echo "# logs kept in $T" >&2
    fi
}

itest_setup() {
    T=$(mktemp -d /tmp/outbox-itest.XXXXXX)
    chmod 755 "$T"
    trap itest_cleanup EXIT
    trap 'exit 130' INT TERM
    pgcluster_start "$T/pg" "$@" || bail "PostgreSQL did not start"
    # As the schema owner, not a superuser (pgcluster.sh).
    "$ITEST_ROOT/build/outbox-relay" migrate --db "$OWNER_URL" --migrations-dir "$ITEST_ROOT/migrations" \
        >"$T/migrate.log" 2>&1 || { cat "$T/migrate.log" >&2; bail "migrate failed"; }
    # Relays log in as itest_relay, a login with only outbox_relay (what README
    # tells an operator to grant), unless a scenario names its own --db or
    # DATABASE_URL: a statement the relay sends that the role may not run
    # fails the scenarios instead of passing unseen under a superuser.
    psql -X -q -v ON_ERROR_STOP=1 -c "CREATE ROLE itest_relay LOGIN; GRANT outbox_relay TO itest_relay" \
        >/dev/null || bail "could not create the relay's login"
    ITEST_DB_URL=$DATABASE_URL
    RELAY_DB_URL="postgresql://itest_relay@127.0.0.1:$PGPORT/postgres"
}

bail() {
    echo "Bail out! $*"
    exit 1
}

ok() {
    local desc=$1; shift
    TAP_COUNT=$((TAP_COUNT + 1))
    if "$@"; then
        echo "ok $TAP_COUNT - $desc"
    else
        echo "not ok $TAP_COUNT - $desc"
        TAP_FAILED=$((TAP_FAILED + 1))
    fi
}

is() {
    local got=$1 want=$2 desc=$3
    TAP_COUNT=$((TAP_COUNT + 1))
    if [ "$got" = "$want" ]; then
        echo "ok $TAP_COUNT - $desc"
    else
        echo "not ok $TAP_COUNT - $desc"
        echo "#   got:  '$got'"
        echo "#   want: '$want'"
        TAP_FAILED=$((TAP_FAILED + 1))
    fi
}

itest_done() {
    echo "1..$TAP_COUNT"
    [ "$TAP_FAILED" = 0 ]
}

sql() {
    psql -X -q -tA -v ON_ERROR_STOP=1 -c "$1"
}

target_add() {
    local name=$1 url=$2; shift 2
    local cols="name, url" vals="'$name', '$url'" kv
    for kv in "$@"; do
        cols="$cols, ${kv%%=*}"
        vals="$vals, ${kv#*=}"
    done
    sql "INSERT INTO outbox.targets ($cols) VALUES ($vals)" >/dev/null
}

# enqueue_many TARGET PREFIX N [extra jsonb]: N intents, 500 per transaction.
enqueue_many() {
    local target=$1 prefix=$2 n=$3 extra=${4:-'{}'}
    sql "SELECT count(*) FROM (SELECT outbox.enqueue('$prefix' || g, '$target',
             jsonb_build_object('n', g) || '$extra'::jsonb) FROM generate_series(1, $n) g) x" >/dev/null
}

receiver_start() {
    local name=$1; shift
    "$RECEIVER_BIN" "$@" >"$T/recv-$name.out" 2>"$T/recv-$name.err" &
    local pid=$! i port=""
    ITEST_PIDS+=("$pid")
    for i in $(seq 1 100); do
        port=$(sed -n 's/^listening 127.0.0.1://p' "$T/recv-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || bail "receiver $name did not start"
    printf -v "RECV_PORT_$name" '%s' "$port"
    printf -v "RECV_PID_$name" '%s' "$pid"
}

# refusing_port VAR: a loopback port where every connection is refused, held
# for the whole test. A port that was merely free when looked at can be taken
# by a parallel test, or become the source port of the relay's own connect
# (a TCP self-connect): a socket bound without listen() refuses and keeps both out.
refusing_port() {
    local out="$T/refusing-$1.out" i port=""
    python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
print("bound 127.0.0.1:%d" % s.getsockname()[1], flush=True)
while True:
    time.sleep(3600)' >"$out" 2>&1 &
    ITEST_PIDS+=("$!")
    for i in $(seq 1 100); do
        port=$(sed -n 's/^bound 127.0.0.1://p' "$out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || bail "the refusing port was not bound"
    printf -v "$1" '%s' "$port"
}

# receiver_stat NAME FIELD → a number from /_stats
receiver_stat() {
    local port_var="RECV_PORT_$1"
    curl -s "http://127.0.0.1:${!port_var}/_stats" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"
}

# mcp_start [mcp options]: `outbox-relay mcp` on a free port, logged in as
# front_door (created here, a login with only outbox_mcp; log: $T/mcp.log);
# sets MCP_PORT and MCP_PID once /readyz answers, bails otherwise.
mcp_start() {
    sql "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'front_door') THEN
             CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door; END IF; END \$\$" >/dev/null
    "$RELAY_BIN" mcp --db "postgresql://front_door@127.0.0.1:$PGPORT/postgres" --mcp-listen 127.0.0.1:0 \
        "$@" >>"$T/mcp.log" 2>&1 &
    MCP_PID=$!
    ITEST_PIDS+=("$MCP_PID")
    MCP_PORT=""
    local i
    for i in $(seq 1 50); do
        MCP_PORT=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$T/mcp.log" | tail -1)
        [ -n "$MCP_PORT" ] && break
        sleep 0.1
    done
    [ -n "$MCP_PORT" ] || { cat "$T/mcp.log" >&2; bail "the front door did not start"; }
    wait_cmd 10 curl -sf "http://127.0.0.1:$MCP_PORT/readyz" -o /dev/null || bail "the front door is not ready"
}

relay_start() {
    local name=$1; shift
    local arg db=(--db "$RELAY_DB_URL")
    [ "$DATABASE_URL" = "$ITEST_DB_URL" ] || db=()
    for arg in "$@"; do
        case $arg in --db | --db=*) db=() ;; esac
    done
    "$RELAY_BIN" run --relay-id "relay-$name" --admin-listen "" "${db[@]}" "$@" \
        >>"$T/relay-$name.log" 2>&1 &
    local pid=$!
    ITEST_PIDS+=("$pid")
    printf -v "RELAY_PID_$name" '%s' "$pid"
}

# relay_admin_port NAME → the admin port of a relay started with
# --admin-listen 127.0.0.1:0 (read from its log; waits up to 5 s)
relay_admin_port() {
    local i port=""
    for i in $(seq 1 50); do
        port=$(sed -n 's/.*"event":"admin_listening".*"port":\([0-9]*\).*/\1/p' "$T/relay-$1.log" | tail -1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    echo "$port"
}

# relay_metric PORT SERIES → the value of one series of the /metrics at admin
# port PORT, SERIES as printed (outbox_retries_total{target="t"}); nothing when absent
relay_metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" 'index($0, n " ") == 1 { print $2 }'
}

# relay_wait NAME SECONDS → the relay's exit code (124 if it did not exit in time)
relay_wait() {
    local pid_var="RELAY_PID_$1" limit=$2 i
    local pid=${!pid_var}
    for i in $(seq 1 $((limit * 10))); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            return $?
        fi
        sleep 0.1
    done
    return 124
}

# wait_for SECONDS SQL WANT: poll until the query returns WANT; 0 if it did.
wait_for() {
    local limit=$1 query=$2 want=$3 i
    for i in $(seq 1 $((limit * 10))); do
        [ "$(sql "$query" 2>/dev/null)" = "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

# wait_cmd SECONDS CMD...: poll until CMD succeeds; 0 if it did.
wait_cmd() {
    local limit=$1 i
    shift
    for i in $(seq 1 $((limit * 10))); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}

# effects_table NAME...: the table public.effects (kind, key, n) from the
# /_effects of the receivers started as NAME..., for joins with the outbox.
effects_table() {
    local kind port_var values=""
    for kind in "$@"; do
        port_var=RECV_PORT_$kind
        curl -s "http://127.0.0.1:${!port_var}/_effects" >"$T/effects-$kind.json"
        chmod 644 "$T/effects-$kind.json"
        values="$values${values:+, }('$kind')"
    done
    sql "CREATE TABLE effects AS
           SELECT r.kind, e.key, e.value::int AS n
             FROM (VALUES $values) AS r(kind),
                  jsonb_each_text(pg_read_file('$T/effects-' || r.kind || '.json')::jsonb) AS e" >/dev/null
}

# A sanitizer report in any relay log fails the scenario.
relay_logs_clean() {
    ! grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$T"/relay-*.log 2>/dev/null
}

# itest_node_sdk: Node 22 and the official MCP packages
# (tests/lib/install-node.sh; NODE_BIN and SDK_DIR set), and the client
# scripts of tests/mcp/sdk/ in $T/sdk beside their node_modules: ES modules
# resolve from the script's folder, not NODE_PATH. Bails without them.
itest_node_sdk() {
    local failed_before=$TAP_FAILED
    ok "Node 22 and the official MCP packages are installed (tests/lib/install-node.sh)" \
        bash -c "'$ITEST_ROOT/tests/lib/install-node.sh' 2>'$T/install-node.err'"
    [ "$TAP_FAILED" = "$failed_before" ] ||
        { sed 's/^/# /' "$T/install-node.err"; bail "no Node 22 or no MCP packages: cannot run"; }
    . "$ITEST_ROOT/tests/lib/install-node.sh"
    mkdir -p "$T/sdk"
    ln -sfn "$SDK_DIR/node_modules" "$T/sdk/node_modules"
    cp "$ITEST_ROOT"/tests/mcp/sdk/*.mjs "$T/sdk/"
}
