# tests/bench/mcp.sh — the MCP front door scenario of `make bench` (sourced by
# tests/bench/run.sh, which provides q, emit, say, broken, PIDS, DEF_PG_SETTINGS).
#
# Defaults everywhere, as a user runs it: a PostgreSQL with its stock
# postgresql.conf (a cluster of its own), a tool whose target (the test
# receiver) answers at once, one relay and one front door with no option but
# their addresses, and 64 concurrent SDK-free HTTP clients (wrk, keep-alive,
# a new idempotency key per call) for BENCH_MCP_SECONDS (20) after a 3 s
# warm-up. Each call is a full tools/call: authenticate, validate the
# arguments, enqueue, wait for the relay's delivery and record (woken by
# NOTIFY), answer with the saved response.
#
# Figures (report.py prints them against the issue's aims): calls/s, p50 and
# p99 from request to result (wrk), CPU per call of the front door, of the
# relay and of PostgreSQL (utime + stime from /proc over the measured
# window; PostgreSQL's is every process of its cluster), and how many calls
# did not answer succeeded (must be 0). Then the same for a tool whose
# target is an upstream MCP server (variant upstream_mcp, mcp_upstream_variant).
#
# Then two floods, each on a fresh front door (defaults, a 3 s wait): 30
# concurrent 1 MB bodies with a made-up token, and 100 concurrent calls of
# 600 KB with the valid token to a tool whose target never answers (they
# wait); each prints the front door's peak RSS (VmHWM) beside the bound
# deploy/README.md states for its options, and what the calls were answered.

MCP_BENCH_S=${BENCH_MCP_SECONDS:-20}
MCP_BENCH_CONNS=${BENCH_MCP_CONNECTIONS:-64}

# CPU seconds (user + system) of a process and its live children.
cpu_seconds_of() { # cpu_seconds_of PID...
    local hz total=0 pid
    hz=$(getconf CLK_TCK)
    for pid in "$@"; do
        [ -r "/proc/$pid/stat" ] || continue
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    awk -v t="$total" -v hz="$hz" 'BEGIN { printf "%.3f", t / hz }'
}
cluster_pids() { # the postmaster of DIR and its children
    local pm
    pm=$(head -1 "$1/data/postmaster.pid" 2>/dev/null) || return 0
    echo "$pm" $(pgrep -P "$pm")
}

scenario_mcp() {
    command -v wrk >/dev/null || { broken "mcp: wrk is not installed (Debian package wrk)"; return 1; }
    local saved=("$PGHOST" "$PGPORT" "$PGUSER" "$PGDATABASE" "$DATABASE_URL") port url token mcp_pid relay_pid
    say "mcp: PostgreSQL with stock settings in $B/pgmcp"
    local settings=("${DEF_PG_SETTINGS[@]}")
    # shellcheck disable=SC2054  # the comma belongs to the setting's value
    [ -z "$PROFILE" ] || settings+=(shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all)
    if ! pgcluster_start "$B/pgmcp" "${settings[@]}"; then
        broken "mcp: PostgreSQL did not start"
        return 1
    fi
    port=$PGPORT
    url="postgresql://postgres@127.0.0.1:$port/postgres"
    export PGHOST=${saved[0]} PGPORT=${saved[1]} PGUSER=${saved[2]} PGDATABASE=${saved[3]} DATABASE_URL=${saved[4]}
    token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    if ! "$RELAY" migrate --db "postgresql://outbox_owner@127.0.0.1:$port/postgres" \
        --migrations-dir "$ROOT/migrations" >"$B/mcp-migrate.log" 2>&1 ||
        ! PGPORT=$port q postgres "INSERT INTO outbox.targets (name, url) VALUES ('fast', 'http://127.0.0.1:$RECV_PORT_main/act')" \
            "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES ('refund', 'fast', 'Refund',
               '{\"type\": \"object\", \"properties\": {\"account\": {\"type\": \"integer\"}, \"amount_cents\": {\"type\": \"integer\", \"minimum\": 1}},
                 \"required\": [\"account\", \"amount_cents\"]}')" \
            "SELECT outbox.mcp_client('bench', '$token')" \
            "CREATE ROLE bench_mcp LOGIN; GRANT outbox_mcp TO bench_mcp" >/dev/null; then
        broken "mcp: setup failed (see $B/mcp-migrate.log)"
        pgcluster_stop "$B/pgmcp"
        return 1
    fi
    "$RELAY" run --db "$url" --admin-listen "" >"$B/relay-mcp.log" 2>&1 &
    relay_pid=$!
    PIDS+=("$relay_pid")
    "$RELAY" mcp --db "postgresql://bench_mcp@127.0.0.1:$port/postgres" --mcp-listen 127.0.0.1:0 \
        ${BENCH_MCP_OPTS:-} >"$B/mcp.log" 2>&1 &
    mcp_pid=$!
    PIDS+=("$mcp_pid")
    local mport="" i
    for i in $(seq 1 100); do
        mport=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$B/mcp.log" | head -1)
        [ -n "$mport" ] && curl -sf "http://127.0.0.1:$mport/readyz" -o /dev/null && break
        sleep 0.1
    done
    if [ -z "$mport" ]; then
        broken "mcp: the front door did not start"
        pgcluster_stop "$B/pgmcp"
        return 1
    fi
    cat >"$B/mcp-wrk.lua" <<LUA
-- One tools/call per request, each with a key of its own.
local counter, thread_id = 0, 0
ok_n, other_n = 0, 0 -- globals: done() reads them from each thread
local threads = {}
function setup(thread)
    thread_id = thread_id + 1
    thread:set("tid", thread_id)
    table.insert(threads, thread)
end
function init(args)
    prefix = args[1] .. "-" .. tostring(tid) .. "-"
    tool = args[2] or "refund"
    arguments = args[3] or '{"account":42,"amount_cents":2500}'
end
function request()
    counter = counter + 1
    local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"' .. tool .. '",' ..
        '"arguments":' .. arguments .. ',"_meta":{"outbox-relay/idempotency-key":"' ..
        prefix .. counter .. '"}}}'
    return wrk.format("POST", "/mcp", {["Content-Type"] = "application/json",
        ["Authorization"] = "Bearer $token", ["MCP-Protocol-Version"] = "2025-11-25"}, body)
end
function response(status, headers, body)
    if status == 200 and string.find(body, '"status":"succeeded"', 1, true) then
        ok_n = ok_n + 1
    else
        other_n = other_n + 1
    end
end
function done(summary, latency, requests)
    local ok_total, other_total = 0, 0
    for _, t in ipairs(threads) do
        ok_total = ok_total + t:get("ok_n")
        other_total = other_total + t:get("other_n")
    end
    io.write(string.format("RESULT ok=%d other=%d p50_us=%d p99_us=%d requests=%d\n", ok_total, other_total,
        latency:percentile(50), latency:percentile(99), summary.requests))
end
LUA
    mcp_measure webhook refund '{"account":42,"amount_cents":2500}'
    [ -z "$PROFILE" ] || PGPORT=$port profile_dump postgres mcp
    [ "${BENCH_MCP_UPSTREAM:-1}" = 0 ] || mcp_upstream_variant # 0: the webhook variant only
    kill -TERM "$mcp_pid" 2>/dev/null
    wait "$mcp_pid" 2>/dev/null
    forget_pid "$mcp_pid"
    # Issue 35: the front door's peak RSS under two floods, each on a fresh
    # front door with defaults but a 3 s wait, beside the bound deploy/README.md
    # states (12 MiB + 1.25 x --mcp-memory-bytes + 80 KiB x --mcp-max-connections).
    PGPORT=$port q postgres "INSERT INTO outbox.targets (name, url) VALUES ('held', 'http://127.0.0.1:9/act')" \
        "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('held', 'held', 'Waits')" >/dev/null
    mcp_flood stranger "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" refund 30 1000000 ints
    mcp_flood waiting "$token" held 100 600000 strings
    kill -TERM "$relay_pid" 2>/dev/null
    wait "$relay_pid" 2>/dev/null
    forget_pid "$relay_pid"
    pgcluster_stop "$B/pgmcp"
}

# mcp_metric NAME: the front door's counter NAME (its samples added up; 0 without it).
mcp_metric() {
    curl -s "http://127.0.0.1:$mport/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { t += $2 } END { printf "%d", t }'
}

# mcp_measure VARIANT TOOL ARGS_JSON: warm-up, then the measured wrk run of
# tools/call TOOL (a new key per call); emits kind=mcp with the variant.
# Reads port, mport, mcp_pid, relay_pid of scenario_mcp.
mcp_measure() {
    local variant=$1 tool=$2 args=$3
    say "mcp ($variant): warm-up, then $MCP_BENCH_CONNS clients for ${MCP_BENCH_S}s"
    wrk -t 2 -c "$MCP_BENCH_CONNS" -d 3s --timeout 30s -s "$B/mcp-wrk.lua" "http://127.0.0.1:$mport" -- "warm-$variant" \
        "$tool" "$args" >"$B/mcp-warm-$variant.out" 2>&1
    local pg_pids fd0 rl0 pg0 fd1 rl1 pg1 t0 t1
    [ -z "$PROFILE" ] || PGPORT=$port q postgres "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
        "SELECT pg_stat_statements_reset()" >/dev/null
    pg_pids=$(cluster_pids "$B/pgmcp")
    # the front door's batched enqueues (0046), counted over the window
    local b0 bc0
    b0=$(mcp_metric outbox_mcp_enqueue_batches_total)
    bc0=$(mcp_metric outbox_mcp_enqueue_batched_calls_total)
    fd0=$(cpu_seconds_of "$mcp_pid")
    rl0=$(cpu_seconds_of "$relay_pid")
    pg0=$(cpu_seconds_of $pg_pids)
    t0=$(date +%s.%N)
    wrk -t 2 -c "$MCP_BENCH_CONNS" -d "${MCP_BENCH_S}s" --timeout 30s -s "$B/mcp-wrk.lua" \
        "http://127.0.0.1:$mport" -- "run-$variant" "$tool" "$args" >"$B/mcp-wrk-$variant.out" 2>&1
    t1=$(date +%s.%N)
    fd1=$(cpu_seconds_of "$mcp_pid")
    rl1=$(cpu_seconds_of "$relay_pid")
    pg1=$(cpu_seconds_of $(cluster_pids "$B/pgmcp"))
    local b1 bc1
    b1=$(mcp_metric outbox_mcp_enqueue_batches_total)
    bc1=$(mcp_metric outbox_mcp_enqueue_batched_calls_total)
    local line
    line=$(grep '^RESULT' "$B/mcp-wrk-$variant.out")
    if [ -z "$line" ]; then
        broken "mcp ($variant): wrk printed no result (see $B/mcp-wrk-$variant.out)"
    else
        local okn other p50 p99
        okn=$(sed -n 's/.* ok=\([0-9]*\).*/\1/p' <<<"$line")
        other=$(sed -n 's/.* other=\([0-9]*\).*/\1/p' <<<"$line")
        p50=$(sed -n 's/.* p50_us=\([0-9]*\).*/\1/p' <<<"$line")
        p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$line")
        emit kind=mcp variant="$variant" seconds="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
            connections="$MCP_BENCH_CONNS" succeeded="$okn" other="$other" p50_us="$p50" p99_us="$p99" \
            front_door_cpu_s="$(awk -v a="$fd0" -v b="$fd1" 'BEGIN { printf "%.3f", b - a }')" \
            relay_cpu_s="$(awk -v a="$rl0" -v b="$rl1" 'BEGIN { printf "%.3f", b - a }')" \
            postgres_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN { printf "%.3f", b - a }')" \
            batches="$((b1 - b0))" batched_calls="$((bc1 - bc0))"
    fi
}

# The upstream-MCP variant (issue 36): the same calls to a front-door tool
# whose target is an MCP server written with the official SDK's McpServer
# (tests/mcp/sdk/upstream_server.mjs, sessions, JSON answers, Node 22 from
# tests/lib/install-node.sh): the relay delivers each intent as that
# server's tools/call, with the key in _meta. Against the webhook variant it
# shows what the MCP leg costs (a JSON-RPC body and answer, a Node server).
mcp_upstream_variant() {
    if ! "$ROOT/tests/lib/install-node.sh" >"$B/mcp-node.log" 2>&1; then
        broken "mcp (upstream_mcp): no Node 22 or no MCP packages (see $B/mcp-node.log)"
        return 1
    fi
    . "$ROOT/tests/lib/install-node.sh"
    mkdir -p "$B/mcp-sdk"
    ln -sfn "$SDK_DIR/node_modules" "$B/mcp-sdk/node_modules"
    cp "$ROOT/tests/mcp/sdk/upstream_server.mjs" "$B/mcp-sdk/"
    (cd "$B/mcp-sdk" && exec env MODE=stateful "$NODE_BIN" upstream_server.mjs) >"$B/mcp-upstream.out" 2>&1 &
    local up_pid=$! up="" i
    PIDS+=("$up_pid")
    for i in $(seq 1 100); do
        up=$(sed -n 's/^listening //p' "$B/mcp-upstream.out")
        [ -n "$up" ] && break
        sleep 0.1
    done
    if [ -z "$up" ] || ! PGPORT=$port q postgres \
        "INSERT INTO outbox.targets (name, url, protocol, mcp_version)
           VALUES ('upstream', 'http://127.0.0.1:$up/mcp', 'mcp', '2025-11-25')" \
        "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema, upstream_tool) VALUES ('ticket', 'upstream',
           'Open a ticket', '{\"type\": \"object\", \"properties\": {\"title\": {\"type\": \"string\"}}, \"required\": [\"title\"]}',
           'create_ticket')" >/dev/null; then
        broken "mcp (upstream_mcp): the SDK server did not start, or its target could not be added"
    else
        mcp_measure upstream_mcp ticket '{"title":"printer on fire"}'
    fi
    kill -TERM "$up_pid" 2>/dev/null
    wait "$up_pid" 2>/dev/null
    forget_pid "$up_pid"
}

# mcp_flood NAME TOKEN TOOL N BYTES SHAPE: N concurrent calls of BYTES on a
# fresh front door (tests/mcp/admission_load.py); emits its peak RSS.
mcp_flood() {
    local name=$1 tok=$2 tool=$3 n=$4 bytes=$5 shape=$6 fpid fport="" i answers peak
    "$RELAY" mcp --db "postgresql://bench_mcp@127.0.0.1:$port/postgres" --mcp-listen 127.0.0.1:0 \
        --mcp-wait-ms 3000 ${BENCH_MCP_OPTS:-} >"$B/mcp-$name.log" 2>&1 &
    fpid=$!
    PIDS+=("$fpid")
    for i in $(seq 1 100); do
        fport=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$B/mcp-$name.log" | head -1)
        [ -n "$fport" ] && curl -sf "http://127.0.0.1:$fport/readyz" -o /dev/null && break
        sleep 0.1
    done
    if [ -z "$fport" ]; then
        broken "mcp: the front door for the $name flood did not start"
        return 1
    fi
    say "mcp: flood $name, $n x $bytes bytes at once"
    answers=$(python3 "$ROOT/tests/mcp/admission_load.py" calls "$fport" "$tok" "$tool" "$n" "$bytes" \
        "flood-$name-$RANDOM" "$shape" 2>"$B/mcp-$name.err")
    peak=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$fpid/status")
    local mem conns
    mem=$(sed -n 's/.*"event":"mcp_listening".*"memory_bytes":\([0-9]*\).*/\1/p' "$B/mcp-$name.log" | head -1)
    conns=$(sed -n 's/.*"event":"mcp_listening".*"max_connections":\([0-9]*\).*/\1/p' "$B/mcp-$name.log" | head -1)
    emit kind=mcp_flood flood="$name" requests="$n" bytes="$bytes" peak_kb="${peak:-0}" \
        bound_kb="$(awk -v m="${mem:-20971520}" -v c="${conns:-256}" 'BEGIN { printf "%d", 12 * 1024 + 1.25 * m / 1024 + 80 * c }')" \
        answers="$(tr -d ' "{}' <<<"$answers")"
    kill -TERM "$fpid" 2>/dev/null
    wait "$fpid" 2>/dev/null
    forget_pid "$fpid"
}
