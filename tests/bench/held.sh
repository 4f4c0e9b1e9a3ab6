# tests/bench/held.sh — the held-snapshot scenario of `make bench` (issue 40,
# item 6; sourced by tests/bench/run.sh, which provides q, emit, pg_cpu, ...).
#
# A forgotten BEGIN holds back vacuum while intents flow at a steady rate.
# On the stock cluster ($B/pgdef: initdb's settings, autovacuum as shipped)
# one relay with default options delivers to tests/bench/stamp_receiver what
# tests/bench/trickle enqueues: BENCH_HELD_RATE (400) intents a second, one
# per transaction, for BENCH_HELD_BEFORE_S (60) s, then BENCH_HELD_S (240) s
# with a session sitting in `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1`,
# then BENCH_HELD_AFTER_S (120) s after that session ended. Sampled every
# 10 s ("SECONDS PHASE PG_CPU_S TOTAL_BYTES HEAP_BYTES DEAD LIVE AUTOVACUUMS
# INSERTS HEAP_BLKS DUE_BLKS IN_FLIGHT_BLKS RELAYS_BLKS IN_FLIGHT_TUPS
# RELAYS_UPDATES"): PostgreSQL's CPU, intents' size (heap + indexes +
# TOAST, and heap alone), its dead and live versions (as pgstat counts
# them), autovacuum's runs on it, rows inserted, the buffers read (hit or
# not) in its heap, intents_due and intents_in_flight, in the heap of
# outbox.relays (every enqueue reads it), the index tuples read in
# intents_in_flight and the updates of outbox.relays (the idle flag): per
# intent, figures that do not move with the machine's load.
# BENCH_PROFILE=1: the statements before the hold and during it (by total
# time, with their buffers) in $B/held-before.statements.txt and
# $B/held-hold.statements.txt.
# report.py prints commit → arrival per minute (before, each minute of the
# hold, after) beside the target (p99 ≤ 2 × the p99 before the hold), and
# the size before, at the end of the hold and at the end.
# Where each intent falls: the trickle enqueues at a fixed schedule, so the
# position of an intent in its series says when it was enqueued; the hold's
# start and end are recorded as the number of intents committed by then.

HELD_RATE=${BENCH_HELD_RATE:-400}
HELD_BEFORE_S=${BENCH_HELD_BEFORE_S:-60}
HELD_S=${BENCH_HELD_S:-240}
HELD_AFTER_S=${BENCH_HELD_AFTER_S:-120}

# held_sample DB PHASE: one line of the samples file
held_sample() {
    local row
    row=$(PGPORT=$DEF_PGPORT q "$1" "SELECT pg_total_relation_size('outbox.intents') || ' ' ||
            pg_relation_size('outbox.intents') || ' ' || n_dead_tup || ' ' || n_live_tup || ' ' ||
            autovacuum_count || ' ' || n_tup_ins || ' ' ||
            (SELECT heap_blks_hit + heap_blks_read FROM pg_statio_user_tables WHERE relid = 'outbox.intents'::regclass) || ' ' ||
            (SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE indexrelid = 'outbox.intents_due'::regclass) || ' ' ||
            (SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE indexrelid = 'outbox.intents_in_flight'::regclass) || ' ' ||
            (SELECT heap_blks_hit + heap_blks_read FROM pg_statio_user_tables WHERE relid = 'outbox.relays'::regclass) || ' ' ||
            (SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'outbox.intents_in_flight'::regclass) || ' ' ||
            (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'outbox.relays'::regclass)
          FROM pg_stat_user_tables WHERE relid = 'outbox.intents'::regclass")
    echo "$(($(date +%s) - HELD_T0)) $2 $(pg_cpu) $row" >>"$B/held-samples.txt"
}

# held_until DB PHASE END: a sample every 10 s until the clock reaches END
held_until() {
    local next
    while [ "$(date +%s)" -lt "$3" ]; do
        next=$(($(date +%s) + 10))
        [ "$next" -gt "$3" ] && next=$3
        sleep $((next - $(date +%s) > 0 ? next - $(date +%s) : 0))
        held_sample "$1" "$2"
    done
}

scenario_held() {
    [ -n "$DEF_PGPORT" ] || { broken "held: the stock PostgreSQL is not running"; return 1; }
    local db=bench_held total secs=$((HELD_BEFORE_S + HELD_S + HELD_AFTER_S)) relay_pid trickle_pid
    local hold_pid from_n to_n i n=0 saved_pgdir=$PGDIR
    local interval_us=$((1000000 / HELD_RATE))
    PGPORT=$DEF_PGPORT q postgres "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
    PGPORT=$DEF_PGPORT q postgres "CREATE DATABASE $db TEMPLATE bench_tmpl" >/dev/null ||
        { broken "held: createdb"; return 1; }
    receiver_start held "$BIN/stamp_receiver" --out "$B/held.arrivals" || return 1
    [ -z "$PROFILE" ] || PGPORT=$DEF_PGPORT q "$db" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
    PGPORT=$DEF_PGPORT q "$db" "INSERT INTO outbox.targets (name, url)
             VALUES ('held', 'http://127.0.0.1:$RECV_PORT_held/held')" >/dev/null
    local url="postgresql://postgres@127.0.0.1:$DEF_PGPORT/$db"
    PGDIR=$B/pgdef
    : >"$B/held-samples.txt"
    say "held: ${HELD_RATE}/s one per transaction; ${HELD_BEFORE_S} s, then a snapshot held ${HELD_S} s, then ${HELD_AFTER_S} s"
    "$RELAY" run --db "$url" --relay-id bench-held --admin-listen "" >"$B/relay-held.log" 2>&1 &
    relay_pid=$!
    PIDS+=("$relay_pid")
    HELD_T0=$(date +%s)
    PGPORT=$DEF_PGPORT PGDATABASE=$db timeout -k 5 $((2 * secs + 300)) "$BIN/trickle" \
        --out "$B/held.commits" --seconds "$secs" --warmup "$HELD_RATE" --interval-us "$interval_us" \
        --target held --prefix "h:" 2>"$B/held-trickle.err" &
    trickle_pid=$!
    PIDS+=("$trickle_pid")
    held_sample "$db" before
    held_until "$db" before $((HELD_T0 + HELD_BEFORE_S))
    # The hold: idle in a transaction whose snapshot is taken (SELECT 1).
    PGAPPNAME=bench-hold psql -X -q -p "$DEF_PGPORT" -h 127.0.0.1 -U postgres -d "$db" >/dev/null 2>&1 <<SQL &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1;
SELECT pg_sleep($((HELD_S + 600)));
SQL
    hold_pid=$!
    PIDS+=("$hold_pid")
    from_n=$(PGPORT=$DEF_PGPORT q "$db" "SELECT count(*) FROM outbox.intents WHERE key LIKE 'h:%' AND key NOT LIKE 'h:warmup:%'")
    held_sample "$db" hold_start
    PGPORT=$DEF_PGPORT profile_dump "$db" held-before # BENCH_PROFILE: the statements before the hold
    held_until "$db" hold $(($(date +%s) + HELD_S))
    to_n=$(PGPORT=$DEF_PGPORT q "$db" "SELECT count(*) FROM outbox.intents WHERE key LIKE 'h:%' AND key NOT LIKE 'h:warmup:%'")
    PGPORT=$DEF_PGPORT q "$db" "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                                 WHERE application_name = 'bench-hold'" >/dev/null
    wait "$hold_pid" 2>/dev/null
    forget_pid "$hold_pid"
    held_sample "$db" hold_end
    PGPORT=$DEF_PGPORT profile_dump "$db" held-hold # and during it
    held_until "$db" after $(($(date +%s) + HELD_AFTER_S))
    wait "$trickle_pid" || broken "held: the driver failed: $(cat "$B/held-trickle.err")"
    forget_pid "$trickle_pid"
    total=$((secs * HELD_RATE + HELD_RATE))
    for i in $(seq 1 300); do
        n=$(PGPORT=$DEF_PGPORT q "$db" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
        [ "$n" = "$total" ] && break
        sleep 0.2
    done
    held_sample "$db" end
    PGPORT=$DEF_PGPORT q "$db" "COPY (SELECT key, (extract(epoch FROM updated_at) * 1000000)::bigint
                                        FROM outbox.intents WHERE key LIKE 'h:%') TO STDOUT" >"$B/held.settled"
    kill -TERM "$relay_pid" 2>/dev/null
    wait "$relay_pid"
    forget_pid "$relay_pid"
    kill -TERM "$RECV_PID_held" 2>/dev/null
    wait "$RECV_PID_held"
    forget_pid "$RECV_PID_held"
    PGDIR=$saved_pgdir
    [ "$n" = "$total" ] || { broken "held: $n of $total succeeded"; return 1; }
    emit kind=held commits="$B/held.commits" arrivals="$B/held.arrivals" settled="$B/held.settled" \
        samples="$B/held-samples.txt" rate_per_s="$HELD_RATE" before_s="$HELD_BEFORE_S" hold_s="$HELD_S" \
        after_s="$HELD_AFTER_S" hold_from_n="$from_n" hold_to_n="$to_n" \
        realtime_minus_monotonic_us="$(python3 -c 'import time; print(int((time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)) * 1e6))')" \
        driver_note="$(cat "$B/held-trickle.err")"
    say "held: $total intents at ${HELD_RATE}/s, hold from intent $from_n to $to_n"
    PGPORT=$DEF_PGPORT q postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
}
