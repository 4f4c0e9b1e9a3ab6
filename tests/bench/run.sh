#!/usr/bin/env bash
# tests/bench/run.sh — `make bench`: throughput, latency, CPU and memory figures.
#
# Self-contained like the tests: its own PostgreSQL (production-like
# durability: fsync, synchronous_commit and full_page_writes on), the -O2
# relay and receiver from build/, and small C helpers built here into
# build/bench/. Prints a table of figures against their targets and writes
# the same figures, with versions and settings, to build/bench.json.
#
# Scenarios (see tests/bench/README.md for what each measures and why):
#   headline     printed first: stock PostgreSQL, Debian's nginx as the receiver, the
#                relay with default options, 100,000 intents; libcurl alone beside it
#                (tests/bench/headline.sh, tests/bench/curl_probe.c); then the same over
#                TLS 1.3 (a throwaway CA as the target's ca_file: handshakes, connections
#                open at nginx) and one TLS drain with a reconnect storm (headline_tls
#                alone: BENCH_ONLY=headline_tls)
#   drain        N intents already enqueued (ANALYZEd), one relay, until all succeeded
#   defaults     the same drain as users run it: stock PostgreSQL settings (its own
#                cluster), a target with only name and url, a relay with no tuning options
#   slow_target  the stock cluster and a default relay against a target that answers in
#                2 s (BENCH_SLOW_INTENTS, 20,000): what a delivery costs PostgreSQL while
#                the relay holds its default 1,024 in flight for seconds (lease renewal)
#   no_analyze   the same drain right after the bulk load, before any ANALYZE
#   two_relays   the same drain with two relays side by side
#   four_relays  the same drain with four relays side by side (how relays scale on 2 cores)
#   cpu          relay / relay+PostgreSQL+receiver CPU per delivered intent (from drain)
#   trickle      200 intents/s, one per transaction: commit → arrival at the receiver
#   enqueue      pgbench: outbox.enqueue vs a plain INSERT (and NOTIFY / live-relay variants)
#   memory       peak RSS of the relay with 1,000 deliveries in flight: small responses,
#                then responses at the 64 KiB cap, against the bound in docs/operations.md ("Memory")
#   history      drain 50,000 with 2,000,000 terminal rows in the table vs an empty table
#   ordered      ordered delivery: 1,000 groups x 10 steps (p_ordering_key) drained by one
#                relay, beside an unordered drain of as many intents, each round
#   databases    one relay over 4 databases (--databases) against 4 relays of one database
#                each, same load (BENCH_DATABASES_INTENTS per database, 10,000), stock
#                cluster, relays with default options: deliveries/s, CPU per delivery, RSS
#                (tests/bench/databases.sh, BENCH_DATABASES_RUNS rounds, 3)
#   log_cost     the success log line alone (tests/bench/log_cost.c: relay/lib/log.c
#                writing 1,000,000 attempt lines to a file, CPU per line; also with headline)
#   held         a snapshot held (a forgotten BEGIN) while 400 intents/s flow one per
#                transaction, on the stock cluster with a default relay: commit → arrival
#                per minute before, during and after the hold, intents' size
#                (tests/bench/held.sh; BENCH_HELD_S, BENCH_HELD_RATE, ...)
#   mcp          the MCP front door with defaults: 64 SDK-free HTTP clients calling a tool
#                whose target answers at once (tests/bench/mcp.sh, BENCH_MCP_SECONDS); then
#                the same calls to a tool whose target is an upstream MCP server (an SDK
#                McpServer with sessions, Node 22): calls/s, p50, p99 beside the webhook's
#                (BENCH_MCP_UPSTREAM=0 leaves it out); the webhook's PostgreSQL CPU per
#                call, calls/s, p50 and p99 beside issue 40's targets
#
# Knobs (environment): BENCH_RUNS (drain rounds, default 5), BENCH_RUNS_OTHER
# (rounds of the other scenarios, default 1), BENCH_DRAIN_INTENTS (100000),
# BENCH_HISTORY_ROWS (2000000), BENCH_HISTORY_INTENTS (50000),
# BENCH_TRICKLE_SECONDS (20), BENCH_PGBENCH_SECONDS (10), BENCH_BATCH_SIZE,
# BENCH_MAX_IN_FLIGHT, BENCH_ONLY (comma list of scenarios to run),
# BENCH_ORDERED_GROUPS (1000) and BENCH_ORDERED_STEPS (10) for `ordered`,
# BENCH_BUDGET_S (540: later drain rounds are skipped past it),
# BENCH_STEADY_SECONDS (300) and BENCH_STEADY_RATE (2000) for the retention
# steady state (tests/bench/retention.sh), BENCH_HEADLINE_RUNS (3) and
# BENCH_HEADLINE_INTENTS (100000) for `headline` (tests/bench/headline.sh),
# BENCH_HEADLINE_TLS_RUNS (3) and BENCH_HEADLINE_STORM (1; 0 = no storm drain)
# for its TLS rounds, BENCH_HEADLINE_IN_FLIGHT (1024: the second probe's
# concurrency; lower it where 1,024 handshakes at once time out on a loaded
# machine), BENCH_RELAY (another relay binary: before/after pairs on one
# machine state), BENCH_DATABASES_INTENTS (10000 per database) and
# BENCH_DATABASES_RUNS (3) for `databases`, KEEP_TMP=1.
#
# Exit status: 0 when every scenario produced its figures (a MISS against a
# target is a finding, not a failure); 1 when the bench itself broke
# (something did not start, a drain timed out or lost rows).
# shellcheck disable=SC2154  # RECV_PORT_<name>/RECV_PID_<name> are set with printf -v
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
. tests/lib/pgcluster.sh

RUNS=${BENCH_RUNS:-5}
OTHER_RUNS=${BENCH_RUNS_OTHER:-1}
N_DRAIN=${BENCH_DRAIN_INTENTS:-100000}
N_SLOW=${BENCH_SLOW_INTENTS:-20000}
SLOW_DELAY_MS=2000
N_HISTORY_ROWS=${BENCH_HISTORY_ROWS:-2000000}
N_HISTORY=${BENCH_HISTORY_INTENTS:-50000}
TRICKLE_SECONDS=${BENCH_TRICKLE_SECONDS:-20}
PGBENCH_SECONDS=${BENCH_PGBENCH_SECONDS:-10}
BATCH_SIZE=${BENCH_BATCH_SIZE:-256}
MAX_IN_FLIGHT=${BENCH_MAX_IN_FLIGHT:-1024}
ONLY=${BENCH_ONLY:-}
BUDGET_S=${BENCH_BUDGET_S:-540}
N_MEMORY=2000
ORDERED_GROUPS=${BENCH_ORDERED_GROUPS:-1000}
ORDERED_STEPS=${BENCH_ORDERED_STEPS:-10}
MEMORY_IN_FLIGHT=1000
MEMORY_RESPONSE_CAP=65536 # the relay's --max-response-bytes default

# BENCH_PROFILE=1: load pg_stat_statements (track = all) and auto_explain
# (plans of statements over BENCH_EXPLAIN_MS, default 20), and keep, per
# drain, the top statements in the log directory. Costs a little: figures
# from a profiled run are marked as such in build/bench.json.
PROFILE=${BENCH_PROFILE:-}
EXPLAIN_MS=${BENCH_EXPLAIN_MS:-20}

RELAY=${BENCH_RELAY:-$ROOT/build/outbox-relay}
RECEIVER=$ROOT/build/test-receiver
BIN=$ROOT/build/bench
PGBIN=$(pgcluster_bindir) || exit 1
PGBENCH=$PGBIN/pgbench
PG_SETTINGS=(fsync=on synchronous_commit=on full_page_writes=on shared_buffers=256MB
    max_wal_size=4GB checkpoint_timeout=30min maintenance_work_mem=256MB effective_cache_size=2GB)
# The `defaults` scenario's cluster: initdb's postgresql.conf as shipped.
# pgcluster.sh turns fsync, synchronous_commit and full_page_writes off for
# the tests' speed; these three only put PostgreSQL's own defaults back.
# (pgcluster.sh's max_connections=200 and listen address stay: the stock 100
# connections are plenty for one relay, and neither costs anything.)
DEF_PG_SETTINGS=(fsync=on synchronous_commit=on full_page_writes=on)
# Its databases are made in DEF_LOCALE: en_US.UTF-8, the locale of the
# official container image and the managed services' default, so the
# headline is what most users' outbox costs (pgcluster.sh's C.UTF-8 compares
# text as bytes, which PostgreSQL does for the identifiers since 0032 but not
# for every column: targets.name, relays.relay_id, ordering groups).
# BENCH_DEF_LOCALE=C.UTF-8 gives the tests' locale back.
DEF_LOCALE=${BENCH_DEF_LOCALE:-en_US.UTF-8}
# --poll-interval-ms 100: with --exit-when-idle a relay exits only once no
# row is in flight anywhere (next_due counts other relays' leases), and then
# only at its next poll; at the default 2 s that lag would be counted as
# drain time when two relays share a drain.
if [ -n "$PROFILE" ]; then
    # shellcheck disable=SC2054  # the comma belongs to the setting's value
    PG_SETTINGS+=(shared_preload_libraries=pg_stat_statements,auto_explain pg_stat_statements.track=all
        auto_explain.log_min_duration="$EXPLAIN_MS" auto_explain.log_nested_statements=on
        auto_explain.log_analyze=on auto_explain.log_buffers=on auto_explain.log_timing=off
        track_io_timing=on)
    # The stock cluster's scenarios (held) keep their statements too.
    DEF_PG_SETTINGS+=(shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all)
    KEEP_TMP=1
fi
RELAY_OPTS=(--exit-when-idle --admin-listen "" --log-level warn --grace-ms 2000 --poll-interval-ms 100
    --batch-size "$BATCH_SIZE" --max-in-flight "$MAX_IN_FLIGHT"
    --max-in-flight-per-target "$MAX_IN_FLIGHT")
# The `defaults` relay: no tuning option, only what the harness needs:
# --exit-when-idle ends the drain; --admin-listen "" so a relay or test
# elsewhere on the machine holding the default 127.0.0.1:9464 cannot make the
# bench fail. Log level stays info (the log goes to a file, as above).
DEF_RELAY_OPTS=(--exit-when-idle --admin-listen "")

B=$(mktemp -d /tmp/outbox-bench.XXXXXX)
chmod 755 "$B"
RAW=$B/raw.jsonl
: >"$RAW"
PIDS=()
BROKEN=()
STARTED_S=$SECONDS

# ------------------------------------------------------------------ plumbing

cleanup() {
    local pid i
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${PIDS[@]}"; do
        for i in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$pid" 2>/dev/null
    done
    pgcluster_stop "$B/pg"
    pgcluster_stop "$B/pgdef"
    if [ -n "${KEEP_TMP:-}" ] || [ ${#BROKEN[@]} -gt 0 ]; then
        echo "bench: logs kept in $B" >&2
    else
        rm -rf "$B"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '== %s\n' "$*" >&2; }
warn() { printf 'bench: %s\n' "$*" >&2; }
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
over_budget() { [ $((SECONDS - STARTED_S - ${HEADLINE_S:-0})) -gt "$BUDGET_S" ]; } # headline.sh sets HEADLINE_S
broken() {
    warn "BROKEN: $*"
    BROKEN+=("$*")
}
forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# q DB SQL → values as psql -tA prints them
# q DB SQL [SQL...] → values as psql -tA prints them; each SQL is its own
# -c (its own transaction: VACUUM and CREATE DATABASE need that).
q() {
    local db=$1 a args=()
    shift
    for a in "$@"; do args+=(-c "$a"); done
    timeout 600 psql -X -q -tA -v ON_ERROR_STOP=1 -d "$db" "${args[@]}"
}
dburl() { echo "postgresql://postgres@127.0.0.1:$PGPORT/$1"; }

# One JSON line of raw figures; python (report.py) does the arithmetic.
# emit KEY=VALUE...: numbers and true/false unquoted, else quoted; emit_text
# quotes everything (versions such as 15.18 are text).
EMIT_TEXT=0
emit_text() { EMIT_TEXT=1 emit "$@"; }
emit() {
    local kv k v out=""
    for kv in "$@"; do
        k=${kv%%=*}
        v=${kv#*=}
        if [ "$EMIT_TEXT" = 0 ] && { [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || [ "$v" = true ] || [ "$v" = false ]; }; then
            out+="\"$k\":$v,"
        else
            v=${v//\\/\\\\}
            out+="\"$k\":\"${v//\"/\\\"}\","
        fi
    done
    echo "{${out%,}}" >>"$RAW"
}

# CPU seconds of the whole cluster: the postmaster (with its reaped
# children's time: backends that exited during the window count there) plus
# every live child. Ticks → seconds.
CLK_TCK=$(getconf CLK_TCK)
PGDIR=$B/pg # the cluster measured: drain_once points it at $B/pgdef for `defaults`
pg_cpu() {
    local pm kids
    pm=$(head -1 "$PGDIR/data/postmaster.pid")
    kids=$(ps -o pid= --ppid "$pm" 2>/dev/null)
    {
        awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat"
        for k in $kids; do awk '{print $14 + $15}' "/proc/$k/stat" 2>/dev/null; done
    } | awk -v hz="$CLK_TCK" '{s += $1} END {printf "%.3f\n", s / hz}'
}
pg_children() {
    ps -o pid= --ppid "$(head -1 "$PGDIR/data/postmaster.pid")" 2>/dev/null | wc -l
}
proc_cpu() { # proc_cpu PID → seconds
    awk -v hz="$CLK_TCK" '{printf "%.3f\n", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}
# After a relay exits its backend exits too; wait until the postmaster has
# reaped it so its CPU is in the postmaster's cutime/cstime.
wait_backends() { # wait_backends BASELINE_COUNT
    local i
    for i in $(seq 1 40); do
        [ "$(pg_children)" -le "$1" ] && return 0
        sleep 0.05
    done
    return 0
}

# receiver_start NAME [options] → RECV_PORT_NAME, RECV_PID_NAME
receiver_start() {
    local name=$1 bin=$2 i port=""
    shift 2
    "$bin" "$@" >"$B/recv-$name.out" 2>"$B/recv-$name.err" &
    local pid=$!
    PIDS+=("$pid")
    for i in $(seq 1 100); do
        port=$(sed -n 's/^listening 127.0.0.1://p' "$B/recv-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { broken "receiver $name did not start"; return 1; }
    printf -v "RECV_PORT_$name" '%s' "$port"
    printf -v "RECV_PID_$name" '%s' "$pid"
}
receiver_stat() { # receiver_stat PORT FIELD
    curl -s "http://127.0.0.1:$1/_stats" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"
}

# A fresh database from the migrated template (targets included).
newdb() {
    q postgres "DROP DATABASE IF EXISTS $1" >/dev/null 2>&1
    q postgres "CREATE DATABASE $1 TEMPLATE bench_tmpl" >/dev/null || return 1
    [ -z "$PROFILE" ] || q "$1" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
}
# profile_dump DB LABEL: with BENCH_PROFILE, the statements that took the
# time (nested ones included) since the last reset, then reset.
profile_dump() {
    [ -n "$PROFILE" ] || return 0
    q "$1" "SELECT format('%8s calls %9s ms total %7s ms mean %8s rows %9s hit %7s dirtied  %s', calls,
                round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 2), rows,
                shared_blks_hit, shared_blks_dirtied, left(regexp_replace(query, '\s+', ' ', 'g'), 110))
              FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
             ORDER BY total_exec_time DESC LIMIT 25" >"$B/$2.statements.txt" 2>&1
    q "$1" "SELECT pg_stat_statements_reset()" >/dev/null 2>&1
}
dropdb_quiet() { q postgres "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1; }

# enqueue_intents DB TARGET PREFIX N: N intents through outbox.enqueue, in two
# sessions (both cores), one statement each: a bulk load as an application
# would do it, rows exactly as enqueue makes them.
PAYLOAD_SQL="jsonb_build_object('account', g % 1000, 'amount_cents', 2500 + g % 100,
    'currency', 'EUR', 'reason', 'duplicate charge', 'run_id', 'bench-run', 'step', g)"
enqueue_intents() {
    local db=$1 target=$2 prefix=$3 n=$4 half=$(($4 / 2)) rc=0
    q "$db" "SELECT count(*) FROM (SELECT outbox.enqueue('$prefix' || g, '$target', $PAYLOAD_SQL)
             FROM generate_series(1, $half) g) x" >/dev/null &
    local p1=$!
    q "$db" "SELECT count(*) FROM (SELECT outbox.enqueue('$prefix' || g, '$target', $PAYLOAD_SQL)
             FROM generate_series($half + 1, $n) g) x" >/dev/null &
    local p2=$!
    wait "$p1" || rc=1
    wait "$p2" || rc=1
    return $rc
}

# explain_claim_record DB OUT: the plans (EXPLAIN ANALYZE, BUFFERS, through
# auto_explain so the statements inside the functions show) of one claim of
# up to 256 rows and one record of their outcomes, each in its own
# transaction as the relay issues them (the rows end up succeeded: use it on
# a database that is dropped afterwards).
explain_claim_record() {
    timeout 120 psql -X -q -d "$1" -v ON_ERROR_STOP=1 >"$2" 2>&1 <<'SQL'
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET client_min_messages = log;
CREATE TEMP TABLE claimed AS
    SELECT * FROM outbox.claim('bench-explain', '{bench}', '{256}', 256, 30000);
SELECT outbox.record('bench-explain', array_agg(id), array_agg(attempt),
       array_agg('succeeded'::outbox.intent_state), array_agg(0), array_agg(false),
       array_agg('succeeded'::outbox.attempt_class), array_agg(true), array_agg(200),
       array_agg(NULL::text), array_agg(3), array_agg('{"ok":true}'::text))
  FROM claimed;
SQL
}

# ------------------------------------------------------------------ drains

# drain_once KIND ROUND N RELAYS DB_PREP: a fresh database, N intents, then
# RELAYS relays with --exit-when-idle; time from their start to the last exit.
# KIND defaults: on the stock cluster ($B/pgdef, its own bench_tmpl whose
# target has only name and url), with DEF_RELAY_OPTS; everything else
# (load, ANALYZE, CHECKPOINT, receiver, CPU accounting) as the tuned drain.
drain_once() {
    local kind=$1 round=$2 n=$3 relays=$4 prep=$5
    local db="bench_${kind}_$round" i rc=0
    if [ "$kind" = defaults ]; then
        local -x PGPORT=$DEF_PGPORT
        local PGDIR=$B/pgdef
        local RELAY_OPTS=("${DEF_RELAY_OPTS[@]}")
    fi
    newdb "$db" || { broken "$kind/$round: createdb"; return 1; }
    if [ "$prep" = no_analyze ]; then
        q "$db" "ALTER TABLE outbox.intents SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)" \
            "ALTER TABLE outbox.attempts SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)" >/dev/null
    fi
    local t0=$EPOCHREALTIME
    "${DRAIN_ENQUEUE:-enqueue_intents}" "$db" bench "$kind:$round:" "$n" || { broken "$kind/$round: enqueue"; return 1; }
    local load_s
    load_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}')
    [ "$prep" = analyze ] && q "$db" "ANALYZE outbox.intents" >/dev/null
    q "$db" "CHECKPOINT" >/dev/null
    profile_dump "$db" "$db.load"
    local stats_before
    stats_before=$(q "$db" "SELECT coalesce(last_analyze::text, last_autoanalyze::text, 'never')
                              FROM pg_stat_user_tables WHERE relid = 'outbox.intents'::regclass")
    curl -s -X POST "http://127.0.0.1:$RECV_PORT_main/_reset" >/dev/null

    local base_children pg0 rcv0 pg1 rcv1
    base_children=$(pg_children)
    pg0=$(pg_cpu)
    rcv0=$(proc_cpu "$RECV_PID_main")
    local pids=() start=$EPOCHREALTIME
    for i in $(seq 1 "$relays"); do
        timeout -k 5 240 "$BIN/runstat" -o "$B/$db.relay$i.stat" -- \
            "$RELAY" run --db "$(dburl "$db")" --relay-id "bench-$i" "${RELAY_OPTS[@]}" \
            >"$B/$db.relay$i.log" 2>&1 &
        pids+=($!)
        PIDS+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || rc=$?
        forget_pid "${pids[$i]}"
    done
    local end=$EPOCHREALTIME
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    rcv1=$(proc_cpu "$RECV_PID_main")
    local wall relay_user=0 relay_sys=0 u s
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')
    for i in $(seq 1 "$relays"); do
        read -r _ u s _ _ <"$B/$db.relay$i.stat" || { u=0; s=0; }
        relay_user=$(awk -v a="$relay_user" -v b="$u" 'BEGIN {print a + b}')
        relay_sys=$(awk -v a="$relay_sys" -v b="$s" 'BEGIN {print a + b}')
    done
    profile_dump "$db" "$db.drain"
    local succeeded deliveries last_record_s
    succeeded=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
    # Start to the last outcome written (record's now()): the drain without
    # the relay's start-up and exit.
    last_record_s=$(q "$db" "SELECT round((extract(epoch FROM max(at)) - $start)::numeric, 3) FROM outbox.attempts")
    deliveries=$(receiver_stat "$RECV_PORT_main" deliveries_total)
    if [ "$rc" != 0 ] || [ "$succeeded" != "$n" ]; then
        broken "$kind/$round: relay exit $rc, $succeeded of $n succeeded (log: $B/$db.relay1.log)"
        return 1
    fi
    emit kind=drain variant="$kind" round="$round" intents="$n" relays="$relays" wall_s="$wall" \
        load_s="$load_s" relay_user_s="$relay_user" relay_sys_s="$relay_sys" \
        pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')" \
        receiver_cpu_s="$(awk -v a="$rcv0" -v b="$rcv1" 'BEGIN {printf "%.3f", b - a}')" \
        last_record_s="$last_record_s" succeeded="$succeeded" deliveries="${deliveries:-0}" \
        stats_before_drain="$stats_before"
    say "$kind round $round: $n intents in ${wall}s ($relays relay(s); load ${load_s}s)"
    dropdb_quiet "$db"
}

scenario_drains() {
    local r kinds
    for r in $(seq 1 "$RUNS"); do
        if [ "$r" -gt 1 ] && over_budget; then
            warn "time budget used: skipping drain rounds $r..$RUNS"
            break
        fi
        # Rotate the order so no variant always runs first (caches, drift);
        # `defaults` runs right after the tuned drain it is compared with.
        case $((r % 3)) in
        1) kinds="one defaults no_analyze two four" ;;
        2) kinds="no_analyze two four one defaults" ;;
        0) kinds="four two one defaults no_analyze" ;;
        esac
        for k in $kinds; do
            case $k in
            one) want drain && drain_once one "$r" "$N_DRAIN" 1 analyze ;;
            defaults) want defaults && [ -n "$DEF_PGPORT" ] && drain_once defaults "$r" "$N_DRAIN" 1 analyze ;;
            no_analyze) want no_analyze && drain_once no_analyze "$r" "$N_DRAIN" 1 no_analyze ;;
            two) want two_relays && drain_once two "$r" "$N_DRAIN" 2 analyze ;;
            four) want four_relays && drain_once four "$r" "$N_DRAIN" 4 analyze ;;
            esac
        done
    done
}

# ------------------------------------------------------------------ slow target

# scenario_log_cost: the success log line's CPU without the relay
# (tests/bench/log_cost.c), per line: written once per loop turn (16 lines
# a turn) as the relay does, and with a write(2) per line; beside it the
# headline's info/warn drain pairs, whose difference is the same cost
# measured in the noise of a whole drain. BENCH_LOG_COST_LINES (1,000,000).
scenario_log_cost() {
    local out load
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$("$BIN/log_cost" --out "$B/log_cost.out" --lines "${BENCH_LOG_COST_LINES:-1000000}" --rounds 5 \
        --per-flush 16 2>"$B/log_cost.err") || { broken "log_cost: $(head -2 "$B/log_cost.err" | tr '\n' ' ')"; return 1; }
    rm -f "$B/log_cost.out"
    local -a f
    read -r -a f <<<"$out"
    emit kind=log_cost load1_before="$load" load1_after="$(cut -d' ' -f1 /proc/loadavg)" \
        lines="${f[1]}" rounds="${f[3]}" per_flush="${f[5]}" turn_us="${f[7]}" turn_min="${f[9]}" \
        turn_max="${f[11]}" line_us="${f[13]}" line_min="${f[15]}" line_max="${f[17]}" none_us="${f[19]}" \
        bytes_per_line="${f[21]}"
    say "log_cost: ${f[7]} µs per line written once per turn (${f[9]}–${f[11]}), ${f[13]} µs with a write per line"
}

# scenario_slow_target: N_SLOW intents on the stock cluster, a relay with
# default options, the target (name and url only) a receiver answering each
# request after SLOW_DELAY_MS. The drain is bound by the in-flight cap over
# the latency (1,024 / 2 s); what it measures is the database's side: every
# row is held for seconds, long enough for the relay's lease renewal to run
# over all of them, so PostgreSQL's CPU and WAL per delivery show what
# renewal adds (0033: a lease in its first sixth is left alone).
scenario_slow_target() {
    [ -n "$DEF_PGPORT" ] || { broken "slow_target: no stock cluster"; return 1; }
    local -x PGPORT=$DEF_PGPORT
    local PGDIR=$B/pgdef db=bench_slow rc=0
    receiver_start slow "$RECEIVER" --delay-ms "$SLOW_DELAY_MS" || return 1
    newdb "$db" || { broken "slow_target: createdb"; return 1; }
    q "$db" "UPDATE outbox.targets SET url = 'http://127.0.0.1:$RECV_PORT_slow/deliveries' WHERE name = 'bench'" >/dev/null
    enqueue_intents "$db" bench "slow:" "$N_SLOW" || { broken "slow_target: enqueue"; return 1; }
    q "$db" "ANALYZE outbox.intents" "CHECKPOINT" >/dev/null
    local base_children pg0 pg1 wal0 wal1 start end
    base_children=$(pg_children)
    wal0=$(q "$db" "SELECT pg_current_wal_insert_lsn()")
    pg0=$(pg_cpu)
    start=$EPOCHREALTIME
    timeout -k 5 600 "$BIN/runstat" -o "$B/$db.relay.stat" -- \
        "$RELAY" run --db "$(dburl "$db")" --relay-id bench-slow "${DEF_RELAY_OPTS[@]}" >"$B/$db.relay.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    wait "$pid" || rc=$?
    forget_pid "$pid"
    end=$EPOCHREALTIME
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    wal1=$(q "$db" "SELECT pg_current_wal_insert_lsn() - '$wal0'::pg_lsn")
    local u s succeeded deliveries renewed
    read -r _ u s _ _ <"$B/$db.relay.stat" || { u=0; s=0; }
    succeeded=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
    deliveries=$(receiver_stat "$RECV_PORT_slow" deliveries_total)
    if [ "$rc" != 0 ] || [ "$succeeded" != "$N_SLOW" ]; then
        broken "slow_target: relay exit $rc, $succeeded of $N_SLOW succeeded (log: $B/$db.relay.log)"
        return 1
    fi
    emit kind=slow_target intents="$N_SLOW" delay_ms="$SLOW_DELAY_MS" \
        wall_s="$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')" \
        relay_user_s="$u" relay_sys_s="$s" pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')" \
        wal_bytes="$wal1" succeeded="$succeeded" deliveries="${deliveries:-0}" \
        max_in_flight="$(q "$db" "SELECT max_in_flight FROM outbox.targets WHERE name = 'bench'")"
    say "slow target: $N_SLOW intents in $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')s"
    dropdb_quiet "$db"
}

# ------------------------------------------------------------------ trickle

scenario_trickle() {
    local r db
    for r in $(seq 1 "$OTHER_RUNS"); do
        db=bench_trickle_$r
        newdb "$db" || { broken "trickle: createdb"; return 1; }
        receiver_start stamp "$BIN/stamp_receiver" --out "$B/trickle-$r.arrivals" || return 1
        q "$db" "INSERT INTO outbox.targets (name, url, max_in_flight)
                 VALUES ('trickle', 'http://127.0.0.1:$RECV_PORT_stamp/trickle', 10000)" >/dev/null
        # A long-running relay (no --exit-when-idle): idle, woken by NOTIFY.
        "$RELAY" run --db "$(dburl "$db")" --relay-id bench-trickle --admin-listen "" \
            --log-level warn --grace-ms 2000 >"$B/$db.relay.log" 2>&1 &
        local relay_pid=$!
        PIDS+=("$relay_pid")
        local i idle=""
        for i in $(seq 1 100); do
            idle=$(q "$db" "SELECT idle FROM outbox.relays WHERE relay_id = 'bench-trickle'" 2>/dev/null)
            [ "$idle" = t ] && break
            sleep 0.1
        done
        [ "$idle" = t ] || { broken "trickle: the relay never said it is idle"; return 1; }
        profile_dump "$db" "$db.setup"
        local relay_cpu0 pg0
        relay_cpu0=$(proc_cpu "$relay_pid")
        pg0=$(pg_cpu)
        PGDATABASE=$db timeout -k 5 $((TRICKLE_SECONDS + 60)) "$BIN/trickle" \
            --out "$B/trickle-$r.commits" --seconds "$TRICKLE_SECONDS" --warmup 100 \
            --target trickle --prefix "t$r:" 2>"$B/trickle-$r.err" ||
            { broken "trickle: driver failed: $(cat "$B/trickle-$r.err")"; return 1; }
        local total=$(((TRICKLE_SECONDS * 1000000 / 5000) + 100)) done_n=0
        for i in $(seq 1 100); do
            done_n=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
            [ "$done_n" = "$total" ] && break
            sleep 0.1
        done
        local relay_cpu1 pg1
        relay_cpu1=$(proc_cpu "$relay_pid")
        pg1=$(pg_cpu)
        profile_dump "$db" "$db.trickle"
        kill -TERM "$relay_pid" 2>/dev/null
        wait "$relay_pid"
        forget_pid "$relay_pid"
        kill -TERM "$RECV_PID_stamp" 2>/dev/null
        wait "$RECV_PID_stamp"
        forget_pid "$RECV_PID_stamp"
        [ "$done_n" = "$total" ] || { broken "trickle: $done_n of $total succeeded"; return 1; }
        emit kind=trickle round="$r" commits="$B/trickle-$r.commits" \
            arrivals="$B/trickle-$r.arrivals" seconds="$TRICKLE_SECONDS" rate_per_s=200 \
            relay_cpu_s="$(awk -v a="$relay_cpu0" -v b="$relay_cpu1" 'BEGIN {printf "%.3f", b - a}')" \
            pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')" \
            driver_note="$(cat "$B/trickle-$r.err")"
        say "trickle round $r: $total intents at 200/s"
        dropdb_quiet "$db"
    done
}

# ------------------------------------------------------------------ enqueue cost

scenario_enqueue() {
    local db=bench_enqueue r v
    newdb "$db" || { broken "enqueue: createdb"; return 1; }
    # Same columns, defaults, CHECKs and indexes; no trigger, no FK, no function.
    q "$db" "CREATE TABLE public.plain_intents (LIKE outbox.intents INCLUDING ALL)" >/dev/null
    local payload="jsonb_build_object('account', :n::int % 1000, 'amount_cents', 2500,
        'currency', 'EUR', 'reason', 'duplicate charge', 'client', :client_id::int, 'step', :n::int)"
    cat >"$B/enqueue.sql" <<SQL
\\set n :n + 1
SELECT outbox.enqueue('e' || :client_id::text || ':' || :n::text, 'bench', $payload);
SQL
    cat >"$B/plain.sql" <<SQL
\\set n :n + 1
INSERT INTO public.plain_intents (key, target, payload, fingerprint)
SELECT 'p' || :client_id::text || ':' || :n::text, 'bench', p, sha256(convert_to(p::text, 'UTF8'))
  FROM (SELECT $payload AS p) s;
SQL
    for r in $(seq 1 "$OTHER_RUNS"); do
        # Order within a round: each variant right after a checkpoint on an
        # empty table; the trigger-less variant last (it drops the triggers).
        for v in plain enqueue enqueue_idle_relay enqueue_live_relay enqueue_no_triggers; do
            q "$db" "TRUNCATE outbox.intents, public.plain_intents CASCADE" "DELETE FROM outbox.relays" >/dev/null 2>&1
            local script=$B/enqueue.sql
            case $v in
            plain) script=$B/plain.sql ;;
            enqueue_idle_relay)
                # What a relay does before it sleeps: every enqueue now NOTIFYs.
                q "$db" "INSERT INTO outbox.relays (relay_id, idle) VALUES ('bench-idle', true)" >/dev/null ;;
            enqueue_no_triggers)
                q "$db" "DROP TRIGGER IF EXISTS intents_notify_insert ON outbox.intents" \
                    "DROP TRIGGER IF EXISTS intents_notify_update ON outbox.intents" >/dev/null ;;
            esac
            q "$db" "VACUUM ANALYZE" "CHECKPOINT" >/dev/null 2>&1
            profile_dump "$db" "$db.setup"
            # enqueue_live_relay: a real relay (default options) drains while
            # pgbench enqueues; sampled every 100 ms, how often its idle flag
            # is up (then every enqueue NOTIFYs). It also competes for the CPU.
            local live_pid="" idle_samples=0 samples=0 sampler=""
            if [ "$v" = enqueue_live_relay ]; then
                "$RELAY" run --db "$(dburl "$db")" --relay-id bench-live --admin-listen "" \
                    --log-level warn --grace-ms 2000 >"$B/$db.live-relay.log" 2>&1 &
                live_pid=$!
                PIDS+=("$live_pid")
                sleep 1
                (
                    end=$((SECONDS + PGBENCH_SECONDS))
                    while [ $SECONDS -lt "$end" ]; do
                        q "$db" "SELECT coalesce(bool_or(idle), false) FROM outbox.relays" 2>/dev/null
                        sleep 0.1
                    done
                ) >"$B/$db.idle-samples" &
                sampler=$!
            fi
            local pg0 pg1 out tps txs
            pg0=$(pg_cpu)
            out=$(PGDATABASE=$db timeout -k 5 $((PGBENCH_SECONDS + 60)) "$PGBENCH" -n -c 8 -j 2 \
                -T "$PGBENCH_SECONDS" -M prepared -D n=0 -f "$script" 2>&1)
            pg1=$(pg_cpu)
            if [ -n "$live_pid" ]; then
                wait "$sampler"
                kill -TERM "$live_pid" 2>/dev/null
                wait "$live_pid"
                forget_pid "$live_pid"
                samples=$(grep -c . "$B/$db.idle-samples")
                idle_samples=$(grep -c '^t$' "$B/$db.idle-samples")
            fi
            echo "$out" >"$B/pgbench-$v-$r.log"
            profile_dump "$db" "$db.$v.$r"
            tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
            txs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
            [ -n "$tps" ] || { broken "enqueue: pgbench $v: $(tail -3 <<<"$out")"; return 1; }
            emit kind=pgbench variant="$v" round="$r" tps="$tps" transactions="${txs:-0}" \
                clients=8 threads=2 seconds="$PGBENCH_SECONDS" idle_samples="$idle_samples" \
                idle_sampled="$samples" \
                pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')"
            say "enqueue round $r: $v $tps tx/s"
        done
        # Put the triggers back for the next round.
        if [ "$r" -lt "$OTHER_RUNS" ]; then
            dropdb_quiet "$db"
            newdb "$db"
            q "$db" "CREATE TABLE public.plain_intents (LIKE outbox.intents INCLUDING ALL)" >/dev/null
        fi
    done
    dropdb_quiet "$db"
}

# ------------------------------------------------------------------ memory

# memory_run ROUND VARIANT RECEIVER_NAME IDLE_RSS_KB RESPONSE_BYTES: a fresh
# database, N_MEMORY intents to the receiver, one relay capped at
# MEMORY_IN_FLIGHT; its VmHWM polled while it runs.
memory_run() {
    local r=$1 variant=$2 recv=$3 idle_rss=$4 response_bytes=$5
    local db=bench_memory_${variant}_$r port_var="RECV_PORT_$recv"
    newdb "$db" || { broken "memory $variant: createdb"; return 1; }
    q "$db" "INSERT INTO outbox.targets (name, url, max_in_flight, timeout_ms)
             VALUES ('slow', 'http://127.0.0.1:${!port_var}/slow', $MEMORY_IN_FLIGHT, 30000)" >/dev/null
    enqueue_intents "$db" slow "mem:$variant:$r:" "$N_MEMORY" || { broken "memory $variant: enqueue"; return 1; }
    q "$db" "ANALYZE outbox.intents" >/dev/null
    rm -f "$B/$db.pid"
    timeout -k 5 120 "$BIN/runstat" -o "$B/$db.stat" -p "$B/$db.pid" -- \
        "$RELAY" run --db "$(dburl "$db")" --relay-id "bench-mem-$variant" --exit-when-idle \
        --admin-listen "" --log-level warn --grace-ms 2000 --batch-size "$BATCH_SIZE" \
        --max-in-flight "$MEMORY_IN_FLIGHT" --max-in-flight-per-target "$MEMORY_IN_FLIGHT" \
        --max-response-bytes "$MEMORY_RESPONSE_CAP" >"$B/$db.relay.log" 2>&1 &
    local wrapper=$!
    PIDS+=("$wrapper")
    local relay_pid="" hwm=0 h max_flight=0 f i
    for i in $(seq 1 100); do
        [ -s "$B/$db.pid" ] && { relay_pid=$(cat "$B/$db.pid"); break; }
        sleep 0.02
    done
    # Poll while it runs: VmHWM (monotone, so the last read is the peak)
    # and how many rows are in flight (to show the 1,000 were reached).
    while kill -0 "$wrapper" 2>/dev/null; do
        h=$(awk '/^VmHWM:/ {print $2}' "/proc/$relay_pid/status" 2>/dev/null)
        [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
        f=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 2>/dev/null)
        [ -n "$f" ] && [ "$f" -gt "$max_flight" ] && max_flight=$f
        sleep 0.1
    done
    local rc=0
    wait "$wrapper" || rc=$?
    forget_pid "$wrapper"
    local wall maxrss succeeded
    read -r wall _ _ maxrss _ <"$B/$db.stat"
    succeeded=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
    if [ "$rc" != 0 ] || [ "$succeeded" != "$N_MEMORY" ]; then
        broken "memory $variant: relay exit $rc, $succeeded of $N_MEMORY succeeded"
        return 1
    fi
    emit kind=memory variant="$variant" round="$r" intents="$N_MEMORY" vmhwm_kb="$hwm" \
        maxrss_kb="$maxrss" max_in_flight_seen="$max_flight" wall_s="$wall" receiver_delay_ms=2000 \
        idle_maxrss_kb="$idle_rss" in_flight_cap="$MEMORY_IN_FLIGHT" \
        response_cap_bytes="$MEMORY_RESPONSE_CAP" response_bytes="$response_bytes"
    say "memory round $r, $variant responses: VmHWM ${hwm} kB, up to $max_flight in flight"
    dropdb_quiet "$db"
}

# Two runs per round, both with 1,000 deliveries in flight: small answers
# (the receiver's ~50-byte JSON), then answers padded to the response cap
# (--response-bytes, 64 KiB: every body kept whole). With the idle relay's
# peak they give base and per-delivery overhead of the bound in docs/operations.md ("Memory")
# ("Memory"); report.py judges the 64 KiB peak against it.
scenario_memory() {
    local r
    receiver_start slow "$RECEIVER" --delay-ms 2000 || return 1
    receiver_start slowbig "$RECEIVER" --delay-ms 2000 --response-bytes "$MEMORY_RESPONSE_CAP" || return 1
    for r in $(seq 1 "$OTHER_RUNS"); do
        local db=bench_memory_idle_$r
        newdb "$db" || { broken "memory: createdb"; return 1; }
        q "$db" "INSERT INTO outbox.targets (name, url, max_in_flight, timeout_ms)
                 VALUES ('slow', 'http://127.0.0.1:$RECV_PORT_slow/slow', $MEMORY_IN_FLIGHT, 30000)" >/dev/null
        # Baseline: the same relay with nothing to deliver (libraries, TLS init, buffers).
        timeout -k 5 60 "$BIN/runstat" -o "$B/$db.idle.stat" -- \
            "$RELAY" run --db "$(dburl "$db")" --relay-id bench-mem-idle --exit-when-idle \
            --admin-listen "" --log-level warn >"$B/$db.idle.log" 2>&1
        local idle_rss=0
        read -r _ _ _ idle_rss _ <"$B/$db.idle.stat"
        dropdb_quiet "$db"
        memory_run "$r" small slow "$idle_rss" 0 || return 1
        memory_run "$r" cap slowbig "$idle_rss" "$MEMORY_RESPONSE_CAP" || return 1
    done
    local name pid_var
    for name in slow slowbig; do
        pid_var="RECV_PID_$name"
        kill -TERM "${!pid_var}" 2>/dev/null
        wait "${!pid_var}"
        forget_pid "${!pid_var}"
    done
}

# ------------------------------------------------------------------ history

# history_drain DB KIND ROUND: N_HISTORY intents, ANALYZE, one relay.
history_drain() {
    local db=$1 kind=$2 r=$3 rc=0
    enqueue_intents "$db" bench "h$kind:$r:" "$N_HISTORY" || { broken "history: enqueue"; return 1; }
    q "$db" "ANALYZE outbox.intents" "ANALYZE outbox.attempts" "CHECKPOINT" >/dev/null
    profile_dump "$db" "$db.load"
    curl -s -X POST "http://127.0.0.1:$RECV_PORT_main/_reset" >/dev/null
    local base_children pg0 pg1
    base_children=$(pg_children)
    pg0=$(pg_cpu)
    timeout -k 5 240 "$BIN/runstat" -o "$B/$db.stat" -- \
        "$RELAY" run --db "$(dburl "$db")" --relay-id bench-hist "${RELAY_OPTS[@]}" \
        >"$B/$db.relay.log" 2>&1 &
    local wrapper=$!
    PIDS+=("$wrapper")
    wait "$wrapper" || rc=$?
    forget_pid "$wrapper"
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    profile_dump "$db" "$db.drain"
    local wall user sys succeeded
    read -r wall user sys _ _ <"$B/$db.stat"
    succeeded=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded' AND key LIKE 'h$kind:%'")
    if [ "$rc" != 0 ] || [ "$succeeded" != "$N_HISTORY" ]; then
        broken "history/$kind: relay exit $rc, $succeeded of $N_HISTORY succeeded"
        return 1
    fi
    emit kind=history variant="$kind" round="$r" intents="$N_HISTORY" wall_s="$wall" \
        relay_user_s="$user" relay_sys_s="$sys" history_rows="$([ "$kind" = history ] && echo "$N_HISTORY_ROWS" || echo 0)" \
        pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')"
    say "history round $r: $kind: $N_HISTORY intents in ${wall}s"
}

scenario_history() {
    local r t0
    for r in $(seq 1 "$OTHER_RUNS"); do
        newdb bench_hist_full || { broken "history: createdb"; return 1; }
        t0=$SECONDS
        # Terminal history as years of traffic leave it: succeeded intents,
        # one attempts row each, written long ago; then VACUUM ANALYZE.
        q bench_hist_full "
          INSERT INTO outbox.intents (key, target, payload, fingerprint, state, attempts,
                 first_attempt_at, response_status, response_body, created_at, updated_at,
                 next_attempt_at)
          SELECT 'old:' || g, 'bench', p, sha256(convert_to(p::text, 'UTF8')), 'succeeded', 1,
                 ts, 200, '{\"ok\":true}', ts, ts, ts
            FROM (SELECT g, $PAYLOAD_SQL AS p,
                         now() - interval '30 days' + g * interval '1 second' AS ts
                    FROM generate_series(1, $N_HISTORY_ROWS) g) s;
          INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent,
                 http_status, latency_ms, response_body, at)
          SELECT id, 1, 'old-relay', 'succeeded', true, 200, 3, '{\"ok\":true}', updated_at
            FROM outbox.intents;" >/dev/null || { broken "history: bulk insert"; return 1; }
        q bench_hist_full "VACUUM ANALYZE outbox.intents" "VACUUM ANALYZE outbox.attempts" "CHECKPOINT" >/dev/null
        local load_s=$((SECONDS - t0))
        say "history round $r: $N_HISTORY_ROWS terminal rows loaded in ${load_s}s"
        newdb bench_hist_empty || { broken "history: createdb"; return 1; }
        history_drain bench_hist_empty empty "$r" || return 1
        history_drain bench_hist_full history "$r" || return 1
        if [ "$r" = 1 ]; then
            # Plans on the big table (1,000 pending rows added to claim from).
            enqueue_intents bench_hist_full bench "hexplain:" 1000 &&
                q bench_hist_full "ANALYZE outbox.intents" >/dev/null &&
                explain_claim_record bench_hist_full "$BIN/explain-history.txt"
            # Plans on a freshly bulk-loaded table that was never analyzed.
            newdb bench_explain_fresh &&
                q bench_explain_fresh "ALTER TABLE outbox.intents SET (autovacuum_enabled = false)" >/dev/null &&
                enqueue_intents bench_explain_fresh bench "fresh:" "$N_DRAIN" &&
                explain_claim_record bench_explain_fresh "$BIN/explain-fresh-no-analyze.txt"
            dropdb_quiet bench_explain_fresh
        fi
        emit kind=history_load round="$r" rows="$N_HISTORY_ROWS" load_s="$load_s" \
            intents_mb="$(q bench_hist_full "SELECT pg_total_relation_size('outbox.intents') / 1048576")" \
            attempts_mb="$(q bench_hist_full "SELECT pg_total_relation_size('outbox.attempts') / 1048576")"
        dropdb_quiet bench_hist_empty
        dropdb_quiet bench_hist_full
    done
}

. "$ROOT/tests/bench/retention.sh"
. "$ROOT/tests/bench/headline.sh"
. "$ROOT/tests/bench/mcp.sh"
. "$ROOT/tests/bench/databases.sh"
. "$ROOT/tests/bench/held.sh"

# ------------------------------------------------------------------ ordered

# enqueue_ordered DB TARGET PREFIX N: N intents in groups of ORDERED_STEPS
# steps (ordering key PREFIX<group>, steps enqueued in order), from two
# sessions (half of the groups each), one statement each: the bulk load of
# enqueue_intents, with the same payloads.
enqueue_ordered() {
    local db=$1 target=$2 prefix=$3 groups=$(($4 / ORDERED_STEPS)) rc=0 half p1 p2
    half=$((groups / 2))
    local sql="SELECT count(*) FROM (
                 SELECT outbox.enqueue('$prefix' || gg || ':' || s, '$target', $PAYLOAD_SQL,
                                       p_ordering_key => '$prefix' || gg)
                   FROM (SELECT gg, s, (gg - 1) * $ORDERED_STEPS + s AS g
                           FROM generate_series(@FIRST@, @LAST@) AS gg, generate_series(1, $ORDERED_STEPS) AS s) AS n
                  ORDER BY gg, s) x"
    local first_half=${sql//@FIRST@/1} second_half=${sql//@FIRST@/$((half + 1))}
    q "$db" "${first_half//@LAST@/$half}" >/dev/null &
    p1=$!
    q "$db" "${second_half//@LAST@/$groups}" >/dev/null &
    p2=$!
    wait "$p1" || rc=1
    wait "$p2" || rc=1
    return $rc
}

# Each round: ORDERED_GROUPS x ORDERED_STEPS ordered intents (each group's
# head due, the rest held until the step before succeeds) and as many
# unordered ones, each drained by one relay from a fresh database (load,
# ANALYZE, CHECKPOINT, relay --exit-when-idle: drain_once), in alternating
# order. report.py compares the ordered rate with the unordered drain's.
scenario_ordered() {
    local r n=$((ORDERED_GROUPS * ORDERED_STEPS))
    emit kind=ordered_meta groups="$ORDERED_GROUPS" steps="$ORDERED_STEPS"
    for r in $(seq 1 "$RUNS"); do
        if [ "$r" -gt 1 ] && over_budget; then
            warn "time budget used: skipping ordered rounds $r..$RUNS"
            break
        fi
        if [ $((r % 2)) = 1 ]; then
            DRAIN_ENQUEUE=enqueue_ordered drain_once ordered "$r" "$n" 1 analyze
            drain_once unordered_small "$r" "$n" 1 analyze
        else
            drain_once unordered_small "$r" "$n" 1 analyze
            DRAIN_ENQUEUE=enqueue_ordered drain_once ordered "$r" "$n" 1 analyze
        fi
    done
}

# ------------------------------------------------------------------ main

say "building helpers into build/bench/"
for f in "$RELAY" "$RECEIVER"; do
    [ -x "$f" ] || { echo "bench: $f is missing; run 'make bench'" >&2; exit 1; }
done
for tool in pkg-config python3 curl cc; do
    command -v "$tool" >/dev/null || { echo "bench: needs $tool" >&2; exit 1; }
done
[ -x "$PGBENCH" ] || { echo "bench: $PGBENCH is missing (postgresql-contrib)" >&2; exit 1; }
mkdir -p "$BIN"
CFLAGS_BENCH=(-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter)
read -r -a PKG_FLAGS <<<"$(pkg-config --cflags --libs libpq libuv)"
for p in runstat trickle; do
    cc "${CFLAGS_BENCH[@]}" "tests/bench/$p.c" -o "$BIN/$p" "${PKG_FLAGS[@]}" -lhttp_parser ||
        { echo "bench: cannot build $p" >&2; exit 1; }
done
read -r -a CURL_FLAGS <<<"$(pkg-config --cflags --libs libcurl)"
cc "${CFLAGS_BENCH[@]}" tests/bench/curl_probe.c -o "$BIN/curl_probe" "${CURL_FLAGS[@]}" ||
    { echo "bench: cannot build curl_probe" >&2; exit 1; }
# The log line's micro-benchmark links relay/lib/log.c as the relay does.
read -r -a LOG_FLAGS <<<"$(pkg-config --cflags --libs libuv jansson)"
cc "${CFLAGS_BENCH[@]}" -Irelay tests/bench/log_cost.c relay/lib/log.c -o "$BIN/log_cost" "${LOG_FLAGS[@]}" ||
    { echo "bench: cannot build log_cost" >&2; exit 1; }
# The arrival stamper is built on relay/lib/http_server.c: the Makefile knows how.
make --no-print-directory -C "$ROOT" build/bench/stamp_receiver >/dev/null ||
    { echo "bench: cannot build stamp_receiver" >&2; exit 1; }

say "PostgreSQL in $B/pg (${PG_SETTINGS[*]})"
pgcluster_start "$B/pg" "${PG_SETTINGS[@]}" || { BROKEN+=("postgres"); exit 1; }
q postgres "CREATE DATABASE bench_tmpl" >/dev/null
"$RELAY" migrate --db "$(dburl bench_tmpl)" --migrations-dir "$ROOT/migrations" >"$B/migrate.log" 2>&1 ||
    { cat "$B/migrate.log" >&2; BROKEN+=("migrate"); exit 1; }
receiver_start main "$RECEIVER" || exit 1
q bench_tmpl "INSERT INTO outbox.targets (name, url, max_in_flight)
              VALUES ('bench', 'http://127.0.0.1:$RECV_PORT_main/deliveries', 100000)" >/dev/null

# `defaults`: a second cluster with stock settings, migrated the same way; its
# target has no optional column (the table's defaults apply). pgcluster_start
# exports PG* for its cluster: the tuned cluster's stay the script's own.
DEF_PGPORT=""
if want defaults || want headline || want headline_tls || want headline_h2 || want slow_target || want databases || want held; then
    # A locale that is not there yet is made before the server starts (a
    # server maps the locales it can use when it starts).
    case $DEF_LOCALE in
    C | C.UTF-8 | POSIX) ;;
    *)
        locale -a 2>/dev/null | grep -qix "$(sed 's/\.UTF-8$/.utf8/I' <<<"$DEF_LOCALE")" ||
            localedef -i "${DEF_LOCALE%%.*}" -f UTF-8 "$DEF_LOCALE" >/dev/null 2>&1 ||
            broken "defaults: the locale $DEF_LOCALE is missing and localedef could not make it"
        ;;
    esac
    say "PostgreSQL (stock settings) in $B/pgdef (${DEF_PG_SETTINGS[*]}; databases in $DEF_LOCALE)"
    saved_env=("$PGHOST" "$PGPORT" "$PGUSER" "$PGDATABASE" "$DATABASE_URL")
    if pgcluster_start "$B/pgdef" "${DEF_PG_SETTINGS[@]}"; then
        DEF_PGPORT=$PGPORT
    else
        broken "defaults: the stock PostgreSQL did not start"
    fi
    export PGHOST=${saved_env[0]} PGPORT=${saved_env[1]} PGUSER=${saved_env[2]} \
        PGDATABASE=${saved_env[3]} DATABASE_URL=${saved_env[4]}
    if [ -n "$DEF_PGPORT" ] && ! {
        PGPORT=$DEF_PGPORT q postgres "CREATE DATABASE bench_tmpl TEMPLATE template0 LOCALE '$DEF_LOCALE'" >/dev/null &&
            "$RELAY" migrate --db "postgresql://postgres@127.0.0.1:$DEF_PGPORT/bench_tmpl" \
                --migrations-dir "$ROOT/migrations" >"$B/migrate-defaults.log" 2>&1 &&
            PGPORT=$DEF_PGPORT q bench_tmpl "INSERT INTO outbox.targets (name, url)
                VALUES ('bench', 'http://127.0.0.1:$RECV_PORT_main/deliveries')" >/dev/null
    }; then
        broken "defaults: setup failed (see $B/migrate-defaults.log)"
        DEF_PGPORT=""
    fi
fi

git_commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
git_dirty=$([ -n "$(git -C "$ROOT" status --porcelain -- relay migrations 2>/dev/null)" ] && echo true || echo false)
emit_text kind=meta git_commit="$git_commit" relay_or_migrations_modified="$git_dirty" \
    postgresql="$(q postgres "SHOW server_version")" \
    libcurl="$(pkg-config --modversion libcurl)" libuv="$(pkg-config --modversion libuv)" \
    libpq="$(pkg-config --modversion libpq)" kernel="$(uname -r)" cores="$(nproc)" \
    cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
    pg_settings="${PG_SETTINGS[*]} (pgcluster defaults: max_connections=200, listen 127.0.0.1)" \
    defaults_pg_settings="initdb's postgresql.conf; ${DEF_PG_SETTINGS[*]} (undoing pgcluster's test overrides), max_connections=200, listen 127.0.0.1" \
    defaults_pg_effective="$([ -n "$DEF_PGPORT" ] && PGPORT=$DEF_PGPORT q postgres "SELECT string_agg(name || '=' || current_setting(name), ' ' ORDER BY name) FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'wal_buffers', 'effective_cache_size', 'maintenance_work_mem')")" \
    defaults_relay_options="$(printf '%q ' "${DEF_RELAY_OPTS[@]}")" \
    defaults_db_locale="$([ -n "$DEF_PGPORT" ] && PGPORT=$DEF_PGPORT q bench_tmpl "SELECT datcollate FROM pg_database WHERE datname = current_database()")" \
    defaults_target="name, url only: $([ -n "$DEF_PGPORT" ] && PGPORT=$DEF_PGPORT q bench_tmpl "SELECT format('max_in_flight %s, max_attempts %s, timeout_ms %s', max_in_flight, coalesce(max_attempts::text, 'NULL'), timeout_ms) FROM outbox.targets WHERE name = 'bench'")" \
    profiled="${PROFILE:-no}" relay_options="$(printf '%q ' "${RELAY_OPTS[@]}")" batch_size="$BATCH_SIZE" max_in_flight="$MAX_IN_FLIGHT" \
    only="$ONLY" runs="$RUNS" other_runs="$OTHER_RUNS" drain_intents="$N_DRAIN" \
    history_rows="$N_HISTORY_ROWS" history_intents="$N_HISTORY" \
    payload="$(q postgres "SELECT (jsonb_build_object('account', 1 % 1000, 'amount_cents', 2501,
        'currency', 'EUR', 'reason', 'duplicate charge', 'run_id', 'bench-run', 'step', 1))::text")" \
    receiver="build/test-receiver (no --dedupe), one keep-alive HTTP/1.1 endpoint" \
    trickle="one outbox.enqueue per transaction every 5 ms for ${TRICKLE_SECONDS} s (+100 warm-up); relay with default options, idle and woken by NOTIFY; arrival = first read of the request at tests/bench/stamp_receiver" \
    pgbench="-n -c 8 -j 2 -T $PGBENCH_SECONDS -M prepared; each variant on an emptied table right after VACUUM ANALYZE + CHECKPOINT" \
    memory="$N_MEMORY intents, receiver --delay-ms 2000 (then also --response-bytes $MEMORY_RESPONSE_CAP), relay --max-in-flight $MEMORY_IN_FLIGHT --max-in-flight-per-target $MEMORY_IN_FLIGHT --max-response-bytes $MEMORY_RESPONSE_CAP, target max_in_flight $MEMORY_IN_FLIGHT" \
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

{ want headline || want headline_tls || want headline_h2; } && { scenario_headline || true; }
{ want headline || want log_cost; } && { scenario_log_cost || true; }
want drain || want defaults || want no_analyze || want two_relays || want four_relays && scenario_drains
want slow_target && { scenario_slow_target || true; }
want databases && { scenario_databases || true; }
want held && { scenario_held || true; }
# The stock cluster's work is done: stop it so its checkpoints and
# background writes stay out of the scenarios that follow.
pgcluster_stop "$B/pgdef"
want ordered && { scenario_ordered || true; }
want trickle && { scenario_trickle || true; }
want enqueue && { scenario_enqueue || true; }
want memory && { scenario_memory || true; }
want history && { scenario_history || true; }
want retention && { scenario_retention || true; }
want mcp && { scenario_mcp || true; }
broken_text=""
[ ${#BROKEN[@]} -gt 0 ] && broken_text=$(printf '%s; ' "${BROKEN[@]}")
emit kind=end elapsed_s=$((SECONDS - STARTED_S)) load_after="$(cut -d' ' -f1-3 /proc/loadavg)" \
    broken="$broken_text"

python3 tests/bench/report.py "$RAW" "$ROOT/build/bench.json" || BROKEN+=("report")
[ ${#BROKEN[@]} -eq 0 ]
