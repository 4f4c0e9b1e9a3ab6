# tests/bench/databases.sh — the `databases` scenario of `make bench`
# (sourced by tests/bench/run.sh, which provides q, newdb, emit, pg_cpu,
# runstat, the stock cluster $B/pgdef and the receiver).
#
# One relay over four databases (`run --databases FILE`) against four relays
# of one database each (`run --db`), on the same load: BENCH_DATABASES_INTENTS
# (10,000) intents in each of four fresh databases of the stock cluster
# (initdb's postgresql.conf, fsync and synchronous_commit on), the `bench`
# target with only name and url, the relays with default options
# (DEF_RELAY_OPTS: only --exit-when-idle and --admin-listen ""). Rounds
# (BENCH_DATABASES_RUNS, 3) alternate which side goes first. Per drain, from
# the relays' start to the last one's exit (runstat: wall, user, sys, peak
# RSS of each process): deliveries/s, relay CPU per delivery, PostgreSQL CPU
# per delivery, the peak RSS of each process; every intent must succeed and
# reach the receiver (more requests than intents, retries of requests that
# timed out, are counted and shown). report.py takes the ratios
# within a round (one relay's rate / four relays' rate; the one process's
# RSS / the mean of the four one-database relays') and prints their medians
# against the issue's aims: ≥ 0.9 × the four relays' throughput, RSS ≤ 1.5 ×.

DB_BENCH_N=${BENCH_DATABASES_INTENTS:-10000}
DB_BENCH_RUNS=${BENCH_DATABASES_RUNS:-3}
DB_BENCH_NAMES=(tenant_a tenant_b tenant_c tenant_d)

# databases_drain MODE ROUND: MODE one (one relay, --databases) or four (a
# relay per database). Fresh databases, the load, ANALYZE, CHECKPOINT, then
# the relays until they exit; checks every row succeeded and the receiver saw
# exactly 4 × N.
databases_drain() {
    local mode=$1 r=$2 n db i rc=0 pids=() stats=()
    local -x PGPORT=$DEF_PGPORT
    local PGDIR=$B/pgdef file=$B/databases-$mode-$r.conf
    : >"$file"
    for n in "${DB_BENCH_NAMES[@]}"; do
        db=bench_${n}
        newdb "$db" || { broken "databases/$mode/$r: createdb"; return 1; }
        echo "$n postgresql://postgres@127.0.0.1:$DEF_PGPORT/$db" >>"$file"
    done
    local loads=()
    for n in "${DB_BENCH_NAMES[@]}"; do
        enqueue_intents "bench_$n" bench "$mode:$r:" "$DB_BENCH_N" &
        loads+=($!)
    done
    for i in "${loads[@]}"; do wait "$i" || { broken "databases/$mode/$r: enqueue"; return 1; }; done
    for n in "${DB_BENCH_NAMES[@]}"; do q "bench_$n" "ANALYZE outbox.intents" >/dev/null; done
    q postgres "CHECKPOINT" >/dev/null
    curl -s -X POST "http://127.0.0.1:$RECV_PORT_main/_reset" >/dev/null

    local base_children pg0 pg1 start end
    base_children=$(pg_children)
    pg0=$(pg_cpu)
    start=$EPOCHREALTIME
    if [ "$mode" = one ]; then
        stats=("$B/databases-$mode-$r.stat")
        timeout -k 5 300 "$BIN/runstat" -o "${stats[0]}" -- \
            "$RELAY" run --databases "$file" --relay-id bench-dbs "${DEF_RELAY_OPTS[@]}" \
            >"$B/databases-$mode-$r.log" 2>&1 &
        pids+=($!)
    else
        for n in "${DB_BENCH_NAMES[@]}"; do
            stats+=("$B/databases-$mode-$r-$n.stat")
            timeout -k 5 300 "$BIN/runstat" -o "${stats[-1]}" -- \
                "$RELAY" run --db "$(dburl "bench_$n")" --relay-id "bench-$n" "${DEF_RELAY_OPTS[@]}" \
                >"$B/databases-$mode-$r-$n.log" 2>&1 &
            pids+=($!)
        done
    fi
    PIDS+=("${pids[@]}")
    for i in "${pids[@]}"; do
        wait "$i" || rc=$?
        forget_pid "$i"
    done
    end=$EPOCHREALTIME
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    local user=0 sys=0 rss_sum=0 rss_max=0 rss_list="" u s m
    for i in "${stats[@]}"; do
        read -r _ u s m _ <"$i" || { u=0; s=0; m=0; }
        user=$(awk -v a="$user" -v b="$u" 'BEGIN {print a + b}')
        sys=$(awk -v a="$sys" -v b="$s" 'BEGIN {print a + b}')
        rss_sum=$((rss_sum + m))
        [ "$m" -gt "$rss_max" ] && rss_max=$m
        rss_list+="${rss_list:+ }$m"
    done
    local succeeded=0 attempts=0 c deliveries
    for n in "${DB_BENCH_NAMES[@]}"; do
        c=$(q "bench_$n" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
        succeeded=$((succeeded + c))
        c=$(q "bench_$n" "SELECT count(*) FROM outbox.attempts")
        attempts=$((attempts + c))
    done
    # More requests than intents is at-least-once at work (a request that
    # timed out is retried: on a loaded machine four relays' 4 × 1,024 in
    # flight can keep the receiver past the target's 10 s); fewer is a loss.
    deliveries=$(receiver_stat "$RECV_PORT_main" deliveries_total)
    local total=$((4 * DB_BENCH_N))
    if [ "$rc" != 0 ] || [ "$succeeded" != "$total" ] || [ "${deliveries:-0}" -lt "$total" ]; then
        broken "databases/$mode/$r: relay exit $rc, $succeeded of $total succeeded, receiver saw ${deliveries:-0} (logs: $B/databases-$mode-$r*.log)"
        return 1
    fi
    emit kind=databases variant="$mode" round="$r" intents="$total" databases=4 \
        processes="${#stats[@]}" wall_s="$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')" \
        relay_user_s="$user" relay_sys_s="$sys" rss_sum_kb="$rss_sum" rss_max_kb="$rss_max" \
        rss_kb="$rss_list" pg_cpu_s="$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')" \
        attempts="$attempts" deliveries="${deliveries:-0}" load1="$(cut -d' ' -f1 /proc/loadavg)"
    say "databases round $r: $mode: $total intents in $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')s"
    for n in "${DB_BENCH_NAMES[@]}"; do dropdb_quiet "bench_$n"; done
}

scenario_databases() {
    [ -n "$DEF_PGPORT" ] || { broken "databases: no stock cluster"; return 1; }
    emit kind=databases_meta intents_per_database="$DB_BENCH_N" databases=4 \
        relay_options="$(printf '%q ' "${DEF_RELAY_OPTS[@]}")"
    local r
    for r in $(seq 1 "$DB_BENCH_RUNS"); do
        if [ $((r % 2)) = 1 ]; then
            databases_drain one "$r" && databases_drain four "$r" || return 1
        else
            databases_drain four "$r" && databases_drain one "$r" || return 1
        fi
    done
}
