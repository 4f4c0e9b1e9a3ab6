#!/usr/bin/env bash
# tests/soak/soak.sh — `make soak` (issue 24, item 12): a long steady run with
# faults, killed relays and retention, judged on what must not drift.
#
# Self-contained like the bench: its own PostgreSQL (tests/lib/pgcluster.sh,
# fsync, synchronous_commit and full_page_writes on), the -O2 relay and
# receiver from build/. Everything it starts is stopped, by PID, on exit.
#
#   1. Drain rate: SOAK_BURST_INTENTS (30,000) intents, half to each of the
#      soak's two targets (below), in a database of their own, drained by one
#      relay with default options: rate = 95 % of them / the time until 95 %
#      had succeeded. Once with receivers without faults (printed only), once
#      with the soak's faults: the soak enqueues at half of that one
#      (SOAK_RATE overrides). Without faults the rate is several times
#      higher: the relay halves its window to a target at a failure or a 429
#      (at most every 100 ms, relay/flow.c), 8 % of deliveries here are one,
#      and 2 % (late) hold their slot for 3 s.
#   2. Soak, SOAK_MINUTES (20): pgbench -R <rate> -T <seconds> as the login
#      soak_app (only outbox_app, plus its own orders table): each transaction
#      is one order, public.place_order(target): an outbox.enqueue and the
#      order's row, committed together (the user's path). Half of the orders
#      go to each target:
#        soak.keyed   Idempotency-Key, receiver with --dedupe: an ambiguous
#                     attempt is sent again with the same key;
#        soak.status  no key header, a status URL, receiver without dedupe:
#                     an ambiguous attempt is never resent blindly, it is
#                     asked about (200: it acted; 404: send again).
#      Both receivers inject 5 kinds of fault at 2 % each (--random-faults
#      0.10 picks uniformly): drop_after (acts, closes without answer), late
#      (acts, answers after 3 s), reset_before (TCP RST, no effect),
#      status_500 (no effect), status_429 (Retry-After: 1, no effect).
#      Both targets keep their history 1 minute (retain_for) and their keys 1
#      minute (dedupe_window, its least: never shorter than retain_for); the
#      relays prune every minute (their default). Two relays (soak_relay:
#      only outbox_relay), default options; every SOAK_KILL_EVERY_S (300) one
#      of them, in turn, gets SIGKILL and is started again.
#   3. Every SOAK_SAMPLE_S (10): each relay's VmRSS, pg_total_relation_size
#      and pg_indexes_size of intents, attempts, tombstones, counts by state,
#      the orders placed, the deliveries that arrived.
#   4. After the enqueue: up to SOAK_SETTLE_S (240) for nothing to be pending
#      or in flight and no status-URL intent left unknown; then every effect
#      the receivers logged (--order-log) is joined with the orders.
#
# Verdicts (exit 1 when one fails; 2 when the soak itself broke):
#   duplicates  orders with more than one effect at their receiver: 0
#   lost        orders that are neither succeeded (exactly one effect at the
#               receiver, and the row, unless retention already pruned it,
#               succeeded) nor explainably settled (failed or cancelled with
#               no effect and no attempt that may have acted, as the sampler
#               saw the row before it was pruned; or unknown and listed by
#               outbox.stuck, "needs a person"): 0
#   wrong       failed/cancelled orders with an effect, effects of keys never
#               ordered: 0
#   rss         per relay lifetime (a kill starts a new one), its samples from
#               its 61st second to the end of the enqueue: max <= 1.10 x min
#   sizes       per table (heap + indexes + TOAST) and per table's indexes: the
#               samples taken after the first retention cycle (retain_for +
#               dedupe_window + one prune interval = 180 s) while enqueueing,
#               split in two halves: max(second half) <= 1.10 x max(first
#               half). Not judged when fewer than 4 such samples (short runs).
# Figures: printed, and written to build/soak.txt (samples: build/soak-samples.tsv).
# shellcheck disable=SC2154  # RPORT_<name>/RPID_<name> are set with printf -v
set -uo pipefail
# The whole script is one block: bash reads it before running any of it, so
# an edit of this file cannot change a run under way.
{
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
. tests/lib/pgcluster.sh

MINUTES=${SOAK_MINUTES:-20}
KILL_EVERY_S=${SOAK_KILL_EVERY_S:-300}
SAMPLE_S=${SOAK_SAMPLE_S:-10}
BURST_N=${SOAK_BURST_INTENTS:-30000}
SETTLE_S=${SOAK_SETTLE_S:-240}
FIXED_RATE=${SOAK_RATE:-}
FAULT_RATE=0.10 # the receiver's five random kinds, 2 % each
CYCLE_S=180     # retain_for + dedupe_window + one prune interval
SOAK_S=$((MINUTES * 60))

RELAY=$ROOT/build/outbox-relay
RECEIVER=$ROOT/build/test-receiver
PGBIN=$(pgcluster_bindir) || exit 2
PGBENCH=$PGBIN/pgbench
PG_SETTINGS=(fsync=on synchronous_commit=on full_page_writes=on shared_buffers=256MB max_wal_size=4GB)
RELAY_OPTS=(--admin-listen "" --log-level warn)

S=$(mktemp -d /tmp/outbox-soak.XXXXXX)
chmod 755 "$S"
# The binaries and migrations as they are now: a rebuild in the tree during
# the 20 minutes (a relay started after a kill would run it) cannot mix
# versions (a newer relay reads target columns the soak's schema lacks).
mkdir -p "$S/bin"
cp "$RELAY" "$RECEIVER" "$S/bin/" && cp -r "$ROOT/migrations" "$S/migrations" || { echo "soak: cannot copy build/" >&2; exit 2; }
RELAY=$S/bin/outbox-relay
RECEIVER=$S/bin/test-receiver
PIDS=()
BROKEN=""
OUT=$ROOT/build/soak.txt
SAMPLES=$ROOT/build/soak-samples.tsv

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$pid" 2>/dev/null
    done
    pgcluster_stop "$S/pg"
    if [ -n "${KEEP_TMP:-}" ] || [ -n "$BROKEN" ]; then
        echo "soak: logs kept in $S" >&2
    else
        rm -rf "$S"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '== %s\n' "$*" >&2; }
broken() {
    BROKEN="$*"
    echo "soak: BROKEN: $*" >&2
    exit 2
}
forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}
# q DB SQL: as postgres, values as psql -tA prints them
q() { timeout 600 psql -X -q -tA -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
url_as() { echo "postgresql://$1@127.0.0.1:$PGPORT/$2"; }
now_s() { awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}'; }

# receiver_start NAME [options] → RPORT_NAME, RPID_NAME
receiver_start() {
    local name=$1 port=""
    shift
    "$RECEIVER" "$@" >"$S/recv-$name.out" 2>"$S/recv-$name.err" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 100); do
        port=$(sed -n 's/^listening 127.0.0.1://p' "$S/recv-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || broken "receiver $name did not start"
    printf -v "RPORT_$name" '%s' "$port"
    printf -v "RPID_$name" '%s' "$pid"
}
stat_of() { # stat_of PORT FIELD
    curl -s "http://127.0.0.1:$1/_stats" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"
}

# ------------------------------------------------------------------ set-up

for f in "$RELAY" "$RECEIVER"; do
    [ -x "$f" ] || { echo "soak: $f is missing; run 'make soak'" >&2; exit 2; }
done
for tool in curl python3 awk; do
    command -v "$tool" >/dev/null || { echo "soak: needs $tool" >&2; exit 2; }
done
[ -x "$PGBENCH" ] || { echo "soak: $PGBENCH is missing (postgresql-contrib)" >&2; exit 2; }
mkdir -p "$ROOT/build"

say "PostgreSQL in $S/pg (${PG_SETTINGS[*]})"
pgcluster_start "$S/pg" "${PG_SETTINGS[@]}" || broken "PostgreSQL did not start"
owner_url=$(pgcluster_owner_db soak) || broken "createdb soak"
"$RELAY" migrate --db "$owner_url" --migrations-dir "$S/migrations" >>"$S/migrate.log" 2>&1 ||
    { cat "$S/migrate.log" >&2; broken "migrate soak"; }
# The logins a deployment has: the relays with outbox_relay only, the
# application with outbox_app only (and its own table).
q postgres "CREATE ROLE soak_relay LOGIN IN ROLE outbox_relay" >/dev/null &&
    q postgres "CREATE ROLE soak_app LOGIN IN ROLE outbox_app" >/dev/null || broken "roles"

# ------------------------------------------------------------------ 1. drain rate

# burst_drain NAME [receiver options]: a database of its own with the soak's
# two targets (without retention), BURST_N intents (half each) enqueued as
# soak_app, one relay with default options; the rate: 95 % of the intents /
# the time from the relay's start until 95 % had succeeded (the rest is the
# tail: retries after back-off, and the status URL's reconcile delay, 30 s
# by default, for the status target's ambiguous attempts), into
# BURST_RESULT ("rate seconds").
burst_drain() {
    local name=$1 half=$((BURST_N / 2)) loaders=() pid relay_pid t0 t95="" ok=0 url
    shift
    url=$(pgcluster_owner_db "$name") || broken "createdb $name"
    "$RELAY" migrate --db "$url" --migrations-dir "$S/migrations" >>"$S/migrate.log" 2>&1 || broken "migrate $name"
    receiver_start "${name}_keyed" --dedupe "$@"
    receiver_start "${name}_status" "$@"
    local pk=RPORT_${name}_keyed ps=RPORT_${name}_status
    q "$name" "INSERT INTO outbox.targets (name, url, key_header, status_url) VALUES
        ('soak.keyed', 'http://127.0.0.1:${!pk}/orders', DEFAULT, NULL),
        ('soak.status', 'http://127.0.0.1:${!ps}/orders', NULL, 'http://127.0.0.1:${!ps}/status/{key}')" \
        >/dev/null || broken "$name targets"
    for t in keyed status; do
        psql -X -q -tA -v ON_ERROR_STOP=1 -d "$(url_as soak_app "$name")" -c "SELECT count(*) FROM (
            SELECT outbox.enqueue('$t:' || g, 'soak.$t', jsonb_build_object('ref', '$t:' || g, 'amount_cents', 2500))
              FROM generate_series(1, $half) g) x" >/dev/null &
        loaders+=($!)
    done
    for pid in "${loaders[@]}"; do wait "$pid" || broken "$name enqueue"; done
    q "$name" "ANALYZE outbox.intents" >/dev/null
    q "$name" "CHECKPOINT" >/dev/null
    t0=$EPOCHREALTIME
    "$RELAY" run --db "$(url_as soak_relay "$name")" --relay-id "soak-$name" "${RELAY_OPTS[@]}" \
        >"$S/relay-$name.log" 2>&1 &
    relay_pid=$!
    PIDS+=("$relay_pid")
    while [ -z "$t95" ]; do
        ok=$(q "$name" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")
        [ $((ok * 100)) -ge $((half * 2 * 95)) ] && t95=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}')
        awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {exit !(b - a > 300)}' && broken "$name: 95 % not succeeded in 300 s"
        sleep 0.2
    done
    local rk=RPID_${name}_keyed rs=RPID_${name}_status
    for pid in "$relay_pid" "${!rk}" "${!rs}"; do
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        forget_pid "$pid"
    done
    q postgres "DROP DATABASE $name WITH (FORCE)" >/dev/null
    BURST_RESULT=$(awk -v n="$((half * 2))" -v t="$t95" 'BEGIN {printf "%d %.2f\n", 0.95 * n / t, t}')
}

say "drain rate: $BURST_N intents (half to each target), one relay with default options"
burst_drain burst_clean
read -r CLEAN_RATE clean_s <<<"$BURST_RESULT"
say "  receivers without faults: $CLEAN_RATE/s (95 % in ${clean_s}s)"
burst_drain burst_faults --random-faults "$FAULT_RATE" --seed 31
read -r DRAIN_RATE drain_s <<<"$BURST_RESULT"
say "  receivers with the soak's faults (5 x 2 %): $DRAIN_RATE/s (95 % in ${drain_s}s)"
RATE=${FIXED_RATE:-$((DRAIN_RATE / 2))}
say "the soak enqueues at $RATE/s: half the drain rate with faults"

# ------------------------------------------------------------------ 2. the soak's database

receiver_start keyed --dedupe --random-faults "$FAULT_RATE" --seed 41 --order-log "$S/effects-keyed.log"
receiver_start status --random-faults "$FAULT_RATE" --seed 42 --order-log "$S/effects-status.log"
psql -X -q -v ON_ERROR_STOP=1 -d soak >/dev/null <<SQL || broken "soak set-up"
INSERT INTO outbox.targets (name, url, retain_for, dedupe_window)
     VALUES ('soak.keyed', 'http://127.0.0.1:$RPORT_keyed/orders', '1 minute', '1 minute');
INSERT INTO outbox.targets (name, url, key_header, status_url, retain_for, dedupe_window)
     VALUES ('soak.status', 'http://127.0.0.1:$RPORT_status/orders', NULL,
             'http://127.0.0.1:$RPORT_status/status/{key}', '1 minute', '1 minute');
-- The application's side: an order and its intent in one transaction.
CREATE TABLE public.soak_orders (key text PRIMARY KEY, target text NOT NULL,
                                 placed_at timestamptz NOT NULL DEFAULT now());
CREATE SEQUENCE public.soak_keys;
CREATE FUNCTION public.place_order(p_target text) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
    k text := 'order-' || nextval('public.soak_keys');
BEGIN
    PERFORM outbox.enqueue(k, p_target, jsonb_build_object('ref', k, 'amount_cents', 2500, 'currency', 'EUR'));
    INSERT INTO public.soak_orders (key, target) VALUES (k, p_target);
END
\$\$;
GRANT INSERT ON public.soak_orders TO soak_app;
GRANT USAGE ON SEQUENCE public.soak_keys TO soak_app;
-- What the sampler saw settle without succeeding, before retention pruned it.
CREATE TABLE public.soak_seen (key text PRIMARY KEY, state text NOT NULL, may_have_acted boolean NOT NULL);
-- Every effect the receivers logged (--order-log), loaded at the end.
CREATE TABLE public.soak_effects (target text NOT NULL, seq bigint NOT NULL, key text NOT NULL);
SQL
for t in keyed status; do
    printf "SELECT public.place_order('soak.%s');\n" "$t" >"$S/order-$t.sql"
done

# Relays a and b; a kill starts a new lifetime of the same name.
declare -A RPID=() RSTART=() RLIFE=()
relay_up() { # relay_up NAME
    local n=$1
    RLIFE[$n]=$((${RLIFE[$n]:-0} + 1))
    "$RELAY" run --db "$(url_as soak_relay soak)" --relay-id "soak-$n" "${RELAY_OPTS[@]}" \
        >>"$S/relay-$n.log" 2>&1 &
    RPID[$n]=$!
    RSTART[$n]=$EPOCHREALTIME
    PIDS+=("${RPID[$n]}")
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# One sample: t phase, per relay (life, age s, VmRSS kB), sizes, counts.
SIZE_SQL="SELECT concat_ws(E'\t',
    pg_total_relation_size('outbox.intents'), pg_indexes_size('outbox.intents'),
    pg_total_relation_size('outbox.attempts'), pg_indexes_size('outbox.attempts'),
    pg_total_relation_size('outbox.tombstones'), pg_indexes_size('outbox.tombstones'),
    (SELECT count(*) FROM outbox.tombstones),
    (SELECT coalesce(string_agg(state || '=' || n, ',' ORDER BY state), '-')
       FROM (SELECT state, count(*) n FROM outbox.intents GROUP BY state) s),
    (SELECT last_value FROM public.soak_keys))"
# Rows that settled without succeeding (expected none), kept before they are
# pruned; may_have_acted: an attempt reached the target and nothing showed
# it did not act (as tests/integration/11_chaos.sh).
SEEN_SQL="INSERT INTO public.soak_seen
    SELECT i.key, i.state::text, EXISTS (
             SELECT 1 FROM outbox.attempts a
              WHERE a.intent_id = i.id AND a.request_sent IS DISTINCT FROM false
                AND a.class NOT IN ('reconciled_not_executed', 'reconcile_inconclusive',
                                    'retry_later', 'permanent_failure', 'key_conflict')
                AND NOT EXISTS (SELECT 1 FROM outbox.attempts r WHERE r.intent_id = i.id AND r.id > a.id
                                                                  AND r.class = 'reconciled_not_executed'))
      FROM outbox.intents i WHERE i.state IN ('failed', 'cancelled')
    ON CONFLICT (key) DO NOTHING"
sample() { # sample PHASE
    local n line pid age tab=$'\t'
    line="$(now_s)$tab$1"
    for n in a b; do
        pid=${RPID[$n]}
        age=$(awk -v a="${RSTART[$n]}" -v b="$EPOCHREALTIME" 'BEGIN {printf "%d", b - a}')
        line+="$tab${RLIFE[$n]}$tab$age$tab$(rss_kb "$pid")"
    done
    line+="$tab$(q soak "$SIZE_SQL")"
    line+="$tab$(($(stat_of "$RPORT_keyed" deliveries_total) + $(stat_of "$RPORT_status" deliveries_total)))"
    printf '%s\n' "$line" >>"$SAMPLES"
    q soak "$SEEN_SQL" >/dev/null
}
printf 't_s\tphase\ta_life\ta_age_s\ta_rss_kb\tb_life\tb_age_s\tb_rss_kb\tintents_b\tintents_idx_b\tattempts_b\tattempts_idx_b\ttombstones_b\ttombstones_idx_b\ttombstone_rows\tstates\torders\tdeliveries\n' >"$SAMPLES"

# ------------------------------------------------------------------ 3. the soak

say "soak: $RATE orders/s for ${MINUTES} min (half per target), faults 5 x 2 %, a relay killed every ${KILL_EVERY_S} s, retention 1 min"
T0=$EPOCHREALTIME
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
relay_up a
relay_up b
(cd "$S" && exec "$PGBENCH" -n -c 8 -j 2 -R "$RATE" -T "$SOAK_S" -M prepared \
    -f "$S/order-keyed.sql@1" -f "$S/order-status.sql@1" "$(url_as soak_app soak)" >"$S/pgbench.out" 2>&1) &
pgb_pid=$!
PIDS+=("$pgb_pid")
KILLS=0
next_kill=$KILL_EVERY_S
victim=a
unexpected=0
next_sample=0
while kill -0 "$pgb_pid" 2>/dev/null; do
    t=$(now_s)
    for n in a b; do
        if ! kill -0 "${RPID[$n]}" 2>/dev/null; then
            echo "soak: relay $n exited by itself at ${t}s; started again" >&2
            unexpected=$((unexpected + 1))
            forget_pid "${RPID[$n]}"
            relay_up "$n"
        fi
    done
    if awk -v t="$t" -v k="$next_kill" -v end="$SOAK_S" 'BEGIN {exit !(t >= k && k < end)}'; then
        kill -KILL "${RPID[$victim]}" 2>/dev/null
        wait "${RPID[$victim]}" 2>/dev/null
        forget_pid "${RPID[$victim]}"
        KILLS=$((KILLS + 1))
        echo "   ${t}s: relay $victim killed (SIGKILL), in flight $(q soak "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'"); started again" >&2
        relay_up "$victim"
        victim=$([ "$victim" = a ] && echo b || echo a)
        next_kill=$((next_kill + KILL_EVERY_S))
    fi
    if awk -v t="$t" -v s="$next_sample" 'BEGIN {exit !(t >= s)}'; then
        sample enqueue
        next_sample=$((next_sample + SAMPLE_S))
    fi
    sleep 0.5
done
wait "$pgb_pid"
pgb_rc=$?
forget_pid "$pgb_pid"
ENQ_END=$(now_s)
[ "$pgb_rc" = 0 ] || { cat "$S/pgbench.out" >&2; broken "pgbench exited $pgb_rc"; }

# ------------------------------------------------------------------ 4. settle

UNSETTLED_SQL="SELECT count(*) FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                WHERE i.state IN ('pending', 'in_flight') OR (i.state = 'unknown' AND t.status_url IS NOT NULL)"
say "enqueue done at ${ENQ_END}s; waiting up to ${SETTLE_S}s for the outbox to settle"
settle_t0=$SECONDS
next_sample=$SECONDS
while :; do
    left=$(q soak "$UNSETTLED_SQL")
    [ "$left" = 0 ] && break
    [ $((SECONDS - settle_t0)) -ge "$SETTLE_S" ] && break
    if [ $SECONDS -ge $next_sample ]; then
        sample settle
        next_sample=$((SECONDS + SAMPLE_S))
    fi
    sleep 1
done
SETTLED_IN=$((SECONDS - settle_t0))
sample end
for n in a b; do kill -TERM "${RPID[$n]}" 2>/dev/null; done
for n in a b; do
    wait "${RPID[$n]}"
    rc=$?
    [ "$rc" = 0 ] || { echo "soak: relay $n exited $rc on SIGTERM" >&2; unexpected=$((unexpected + 1)); }
    forget_pid "${RPID[$n]}"
done

# ------------------------------------------------------------------ 5. accounts

stats_keyed=$(curl -s "http://127.0.0.1:$RPORT_keyed/_stats")
stats_status=$(curl -s "http://127.0.0.1:$RPORT_status/_stats")
for t in keyed status; do
    awk -F'\t' -v t="soak.$t" '$2 == "effect" {print t "\t" $1 "\t" $3}' "$S/effects-$t.log" |
        psql -X -q -v ON_ERROR_STOP=1 -d soak -c "\copy public.soak_effects (target, seq, key) FROM STDIN" ||
        broken "loading the effects of $t"
done
ACCOUNTS=$(psql -X -q -tA -F ' ' -v ON_ERROR_STOP=1 -d soak <<'SQL'
WITH e AS (SELECT key, count(*) AS n FROM public.soak_effects GROUP BY key),
o AS (
    SELECT o.key, o.target, coalesce(e.n, 0) AS n, i.state::text AS state, s.state AS seen, s.may_have_acted,
           EXISTS (SELECT 1 FROM outbox.stuck st WHERE st.key = o.key) AS stuck
      FROM public.soak_orders o
      LEFT JOIN e ON e.key = o.key
      LEFT JOIN outbox.intents i ON i.key = o.key
      LEFT JOIN public.soak_seen s ON s.key = o.key),
c AS (
    SELECT *, (n = 1 AND coalesce(state, 'succeeded') = 'succeeded' AND seen IS NULL) AS succeeded,
              coalesce((n = 0 AND seen IN ('failed', 'cancelled') AND NOT may_have_acted)
                       OR (state = 'unknown' AND stuck), false) AS explained
      FROM o)
SELECT count(*),
       count(*) FILTER (WHERE target = 'soak.keyed'),
       count(*) FILTER (WHERE succeeded),
       count(*) FILTER (WHERE n > 1),
       count(*) FILTER (WHERE NOT succeeded AND NOT explained AND n <= 1),
       count(*) FILTER (WHERE state = 'unknown' AND stuck),
       count(*) FILTER (WHERE n = 0 AND seen IN ('failed', 'cancelled') AND NOT may_have_acted),
       count(*) FILTER (WHERE seen IS NOT NULL AND n > 0),
       (SELECT count(*) FROM e WHERE NOT EXISTS (SELECT 1 FROM public.soak_orders x WHERE x.key = e.key)),
       count(*) FILTER (WHERE state IS NOT NULL),
       (SELECT coalesce(string_agg(key || ':' || coalesce(state, 'no row') || ':' || n, ' '), '')
          FROM (SELECT * FROM c WHERE NOT succeeded AND NOT explained AND n <= 1 ORDER BY key LIMIT 5) x)
  FROM c
SQL
) || broken "accounts"
read -r ORDERS ORDERS_KEYED SUCCEEDED DUPS LOST NEEDS_PERSON FAILED_CLEAN WRONG_FAILED SPURIOUS ROWS_LEFT EXAMPLES <<<"$ACCOUNTS"

num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
fault_line() {
    local mode out=""
    for mode in drop_after late reset_before status_500 status_429; do
        out+="$mode $(($(num "$mode" <<<"$stats_keyed") + $(num "$mode" <<<"$stats_status"))), "
    done
    echo "${out%, }"
}
DELIVERIES=$(($(num deliveries_total <<<"$stats_keyed") + $(num deliveries_total <<<"$stats_status")))
FAULTS=$(($(num faults_total <<<"$stats_keyed") + $(num faults_total <<<"$stats_status")))
pgb_tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$S/pgbench.out" | head -1)
pgb_lag=$(sed -n 's/^rate limit schedule lag: avg \([0-9.]*\) (max \([0-9.]*\)) ms/avg \1 ms, max \2 ms/p' "$S/pgbench.out")
pgb_lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1 ms/p' "$S/pgbench.out")

{
    echo "soak: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load average at the start $LOAD_BEFORE, at the end $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "  drain rate (burst of $BURST_N, one relay with default options, 95 % succeeded): $DRAIN_RATE/s with the soak's faults ($CLEAN_RATE/s without); enqueue rate: $RATE/s"
    echo "  enqueue: ${MINUTES} min, $ORDERS orders committed ($ORDERS_KEYED soak.keyed, $((ORDERS - ORDERS_KEYED)) soak.status), pgbench $pgb_tps tps, latency avg $pgb_lat, schedule lag $pgb_lag"
    echo "  relays: 2, default options; $KILLS killed with SIGKILL (every ${KILL_EVERY_S}s, in turn), $unexpected exits not ours"
    echo "  deliveries $DELIVERIES, faults injected $FAULTS ($(awk -v f="$FAULTS" -v d="$DELIVERIES" 'BEGIN {printf "%.2f", d ? 100 * f / d : 0}') %): $(fault_line)"
    echo "  keyed receiver: $(num effects_total <<<"$stats_keyed") effects, $(num deduplicated_total <<<"$stats_keyed") repeats answered from the key (no effect)"
    echo "  status receiver: $(num effects_total <<<"$stats_status") effects; keys with a second effect: $(num keys_with_duplicate_effects <<<"$stats_status")"
    echo "  settled ${SETTLED_IN}s after the enqueue ended; rows left in the outbox: $ROWS_LEFT"
} >"$OUT"

python3 - "$SAMPLES" "$ENQ_END" "$CYCLE_S" >>"$OUT" <<'PY'
import sys
path, enq_end, cycle = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = [l.rstrip("\n").split("\t") for l in open(path)][1:]
S = []
for r in rows:
    S.append(dict(t=float(r[0]), phase=r[1], a=(int(r[2]), int(r[3]), int(r[4])), b=(int(r[5]), int(r[6]), int(r[7])),
                  sizes=[int(x) for x in r[8:14]], tomb=int(r[14]), states=r[15], orders=int(r[16] or 0),
                  deliveries=int(r[17] or 0)))
mib = lambda b: b / 1048576.0
print("\n   t(s)  relay a MiB (age s)  relay b MiB (age s)  intents/idx MiB  attempts/idx MiB  tombstones/idx MiB  tomb rows  orders  deliveries  states")
last_t = -1e9
for s in S:
    if s["t"] - last_t < 59.5 and s is not S[-1] and s["phase"] == "enqueue":
        continue
    last_t = s["t"]
    z = s["sizes"]
    print("  %5d  %8.1f (%5d)     %8.1f (%5d)     %6.1f / %5.1f    %6.1f / %5.1f     %6.1f / %5.1f       %8d  %7d  %9d  %s%s" % (
        s["t"], s["a"][2] / 1024, s["a"][1], s["b"][2] / 1024, s["b"][1], mib(z[0]), mib(z[1]), mib(z[2]), mib(z[3]),
        mib(z[4]), mib(z[5]), s["tomb"], s["orders"], s["deliveries"], s["states"], "" if s["phase"] == "enqueue" else " (" + s["phase"] + ")"))
fails = []
# RSS: per relay lifetime, from its 61st second, while enqueueing
print("\n  relay RSS per lifetime (samples from its 61st second until the enqueue ended): max <= 1.10 x min")
for name in ("a", "b"):
    lives = {}
    for s in S:
        life, age, rss = s[name]
        if s["phase"] == "enqueue" and age >= 61 and rss > 0:
            lives.setdefault(life, []).append(rss)
    for life, v in sorted(lives.items()):
        if len(v) < 2:
            print("    relay %s life %d: %d sample(s), not judged" % (name, life, len(v)))
            continue
        ratio = max(v) / min(v)
        ok = ratio <= 1.10
        if not ok:
            fails.append("rss %s/%d" % (name, life))
        print("    relay %s life %d: %2d samples, min %.1f MiB, max %.1f MiB, max/min %.3f  %s" % (
            name, life, len(v), min(v) / 1024, max(v) / 1024, ratio, "ok" if ok else "FAIL"))
# sizes after the first retention cycle, while enqueueing
W = [s for s in S if s["phase"] == "enqueue" and cycle <= s["t"] <= enq_end]
print("\n  sizes after the first retention cycle (%d s), while enqueueing: max(second half) <= 1.10 x max(first half)" % cycle)
if len(W) < 4:
    print("    %d sample(s) after %d s: not judged (the run is too short)" % (len(W), cycle))
else:
    h = len(W) // 2
    names = ["intents", "intents indexes", "attempts", "attempts indexes", "tombstones", "tombstones indexes"]
    for i, nm in enumerate(names):
        a = max(s["sizes"][i] for s in W[:h])
        b = max(s["sizes"][i] for s in W[h:])
        ratio = b / a if a else (1.0 if b == 0 else float("inf"))
        ok = ratio <= 1.10
        if not ok:
            fails.append("size " + nm)
        print("    %-19s %4d-%4d s: max %7.1f MiB; %4d-%4d s: max %7.1f MiB; ratio %.3f  %s" % (
            nm, W[0]["t"], W[h - 1]["t"], mib(a), W[h]["t"], W[-1]["t"], mib(b), ratio, "ok" if ok else "FAIL"))
print("FAILS=" + ",".join(fails))
PY
[ $? = 0 ] || broken "report"

SAMPLE_FAILS=$(sed -n 's/^FAILS=//p' "$OUT")
sed -i '/^FAILS=/d' "$OUT"
verdict() { # verdict NAME GOT WANT TEXT
    if [ "$2" = "$3" ]; then
        echo "  $1: $2 (want $3)  ok  $4"
    else
        echo "  $1: $2 (want $3)  FAIL  $4"
        FAILED+=("$1")
    fi
}
FAILED=()
{
    echo
    echo "verdicts"
    verdict duplicates "$DUPS" 0 "orders with more than one effect at their receiver"
    verdict lost "$LOST" 0 "orders neither succeeded (one effect; row succeeded or pruned) nor explainably settled${EXAMPLES:+ (e.g. $EXAMPLES)}"
    verdict wrong "$((WRONG_FAILED + SPURIOUS))" 0 "failed/cancelled with an effect ($WRONG_FAILED), effects of keys never ordered ($SPURIOUS)"
    echo "  succeeded: $SUCCEEDED of $ORDERS; needs a person (unknown, in outbox.stuck): $NEEDS_PERSON (expected 0: a keyed target resends within key_ttl, the other's status URL answers); failed without effect: $FAILED_CLEAN (expected 0: retry_for 3 days)"
    verdict "relay exits not ours" "$unexpected" 0 "a relay that died by itself, or did not exit 0 on SIGTERM"
    if [ -z "$SAMPLE_FAILS" ]; then
        echo "  rss and sizes: ok (above)"
    else
        echo "  rss and sizes: FAIL ($SAMPLE_FAILS)"
        FAILED+=("$SAMPLE_FAILS")
    fi
} >>"$OUT"
cat "$OUT"
echo "samples: $SAMPLES; figures: $OUT" >&2
[ ${#FAILED[@]} -eq 0 ] || { KEEP_TMP=1; exit 1; }
exit 0
}
