# tests/bench/retention.sh — the steady-state scenario of `make bench`
# (sourced by tests/bench/run.sh, which provides q, newdb, emit, PGBENCH...).
#
# Enqueue at a fixed rate (pgbench -R, BENCH_STEADY_RATE, default 2,000/s)
# for BENCH_STEADY_SECONDS (300) into a target with retain_for = 1 minute
# and dedupe_window = 1 minute (its least), while one relay with default options
# delivers and prunes (every minute, its default). Every 10 s it samples the
# sizes of intents, attempts and tombstones (heap + indexes + TOAST) and the
# receiver's delivery count. Raw figures go to one kind=retention line; the
# arithmetic is report.py's:
#   - table sizes after the first 180 s (intents and tombstones have reached
#     retain_for + dedupe_window + one prune interval) and at the end: flat means the end is not larger;
#   - deliveries in the first and in the last minute;
#   - prune cost per row (the relay's prune_run log lines);
#   - p99 enqueue latency inside prune runs and outside them (pgbench -l,
#     schedule lag taken out).

STEADY_S=${BENCH_STEADY_SECONDS:-300}
STEADY_RATE=${BENCH_STEADY_RATE:-2000}

scenario_retention() {
    local db=bench_ret script=$B/ret-enqueue.sql samples=$B/ret-samples.txt t0 pgb_pid relay_pid
    newdb "$db" || { broken "retention: createdb"; return 1; }
    q "$db" "UPDATE outbox.targets SET retain_for = '1 minute', dedupe_window = '1 minute'" \
        "CREATE SEQUENCE public.steady_keys" >/dev/null || { broken "retention: setup"; return 1; }
    cat >"$script" <<'SQL'
SELECT outbox.enqueue('steady:' || nextval('public.steady_keys'), 'bench',
       '{"account": 17, "amount_cents": 2501, "currency": "EUR", "reason": "duplicate charge", "run_id": "bench-run", "step": 1}'::jsonb);
SQL
    local base_deliveries
    base_deliveries=$(receiver_stat "$RECV_PORT_main" deliveries_total)
    say "retention: ${STEADY_RATE}/s for ${STEADY_S}s, retain_for 1 minute, relay with default options"
    "$RELAY" run --db "$(dburl $db)" --admin-listen "" >"$B/relay-retention.log" 2>&1 &
    relay_pid=$!
    PIDS+=("$relay_pid")
    mkdir -p "$B/ret-pgb"
    (cd "$B/ret-pgb" && PGDATABASE=$db exec "$PGBENCH" -n -c 16 -j 2 -R "$STEADY_RATE" -T "$STEADY_S" \
        -M prepared -l -f "$script" >"$B/ret-pgbench.out" 2>&1) &
    pgb_pid=$!
    t0=$(date +%s.%N)
    : >"$samples"
    while kill -0 "$pgb_pid" 2>/dev/null; do
        printf '%s %s %s\n' "$(date +%s.%N)" \
            "$(q "$db" "SELECT pg_total_relation_size('outbox.intents') || ' ' || pg_total_relation_size('outbox.attempts')
                         || ' ' || pg_total_relation_size('outbox.tombstones')
                         || ' ' || (SELECT count(*) FROM outbox.intents) || ' ' || (SELECT count(*) FROM outbox.tombstones)")" \
            "$(receiver_stat "$RECV_PORT_main" deliveries_total)" >>"$samples"
        sleep 10
    done
    wait "$pgb_pid"
    # The tail of the last enqueues is delivered before the relay stops.
    local i
    for i in $(seq 1 100); do
        [ "$(q "$db" "SELECT count(*) FROM outbox.intents WHERE state IN ('pending', 'in_flight')")" = 0 ] && break
        sleep 0.2
    done
    kill -TERM "$relay_pid" 2>/dev/null
    wait "$relay_pid" 2>/dev/null
    forget_pid "$relay_pid"
    local tomb_rows tomb_heap tomb_idx
    read -r tomb_rows tomb_heap tomb_idx <<<"$(q "$db" "SELECT count(*) || ' ' || pg_relation_size('outbox.tombstones')
        || ' ' || pg_indexes_size('outbox.tombstones') FROM outbox.tombstones")"
    python3 - "$samples" "$B/relay-retention.log" "$B/ret-pgb" "$t0" "$base_deliveries" >"$B/ret-figures.txt" <<'PY' ||
import glob, json, sys
samples_path, log_path, pgb_dir, t0, base = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5] or 0)
samples = []
for line in open(samples_path):
    p = line.split()
    if len(p) == 7:
        samples.append([float(p[0]) - t0] + [int(x) for x in p[1:6]] + [int(p[6]) - base])
def at(t):  # the first sample at or after t seconds
    return next((s for s in samples if s[0] >= t), samples[-1])
# steady: intents and tombstones have reached retain_for + dedupe_window +
# one prune interval (180 s), or half the run in a shorter one
start, end = at(180 if samples[-1][0] >= 240 else samples[-1][0] / 2), samples[-1]
# deliveries in the first and the last full minute
first_min = at(60)[6] - samples[0][6]
last_t = end[0]
last_min = end[6] - at(last_t - 60)[6]
last_span = end[0] - at(last_t - 60)[0]
first_span = at(60)[0] - samples[0][0]
runs = []
from datetime import datetime, timezone
for line in open(log_path):
    if '"event":"prune_run"' in line:
        d = json.loads(line)
        end_s = datetime.strptime(d["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
        runs.append((end_s - d["duration_ms"] / 1e3, end_s, d["pruned"], d["forgotten"], d["duration_ms"]))
pruned = sum(r[2] for r in runs)
prune_ms = sum(r[4] for r in runs)
inside, outside, done_times = [], [], []
for f in glob.glob(pgb_dir + "/pgbench_log.*"):
    for line in open(f):
        p = line.split()
        if len(p) < 6:
            continue
        # with -R, pgbench counts latency from the scheduled start: take the
        # schedule lag (the last column) out, to keep the enqueue's own time
        lat_ms = (int(p[2]) - (int(p[6]) if len(p) > 6 else 0)) / 1e3
        done = int(p[4]) + int(p[5]) / 1e6
        (inside if any(a <= done <= b for a, b, *_ in runs) else outside).append(lat_ms)
        done_times.append(done - t0)
def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else None
print(json.dumps({
    "start_t": round(start[0]), "end_t": round(end[0]),
    "intents_b_start": start[1], "intents_b_end": end[1],
    "attempts_b_start": start[2], "attempts_b_end": end[2],
    "tombstones_b_start": start[3], "tombstones_b_end": end[3],
    "intent_rows_start": start[4], "intent_rows_end": end[4],
    "first_min_rate": first_min / first_span if first_span else 0,
    "last_min_rate": last_min / last_span if last_span else 0,
    "first_min_enqueued": sum(1 for t in done_times if t < 60) / 60.0,
    "last_min_enqueued": sum(1 for t in done_times if last_t - 60 <= t < last_t) / 60.0,
    "prune_runs": len(runs), "pruned": pruned, "prune_ms": prune_ms,
    "enqueues": len(inside) + len(outside), "enq_in_prune": len(inside),
    "p99_in_prune_ms": p99(inside), "p99_outside_ms": p99(outside),
    "sizes": [[round(s[0]), s[1], s[2], s[3]] for s in samples],
}))
PY
        { broken "retention: analysis"; return 1; }
    local fig
    fig=$(cat "$B/ret-figures.txt")
    emit kind=retention seconds="$STEADY_S" rate="$STEADY_RATE" tombstone_rows="$tomb_rows" \
        tombstone_heap_b="$tomb_heap" tombstone_index_b="$tomb_idx" \
        pgbench_tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$B/ret-pgbench.out" | head -1)" \
        figures="$fig"
    dropdb_quiet "$db"
}
