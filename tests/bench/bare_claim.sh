# shellcheck shell=bash
# tests/bench/bare_claim.sh — the database's share of the limit per delivery
# (issue 26, item 4), sourced by tests/bench/headline.sh (which provides
# N_HEADLINE, and run.sh q, pg_cpu, pg_children, wait_backends, PAYLOAD_SQL,
# DEF_PGPORT and the stock cluster $B/pgdef).
#
# The limit is what any relay must spend per delivery, whatever its code:
# libcurl sending the request alone (curl_probe), nginx answering it, and the
# least PostgreSQL work that hands a row out once and records that it is
# done, durably. This file measures the last: a bare SKIP LOCKED
# claim-and-complete on a minimal table, on the headline's cluster (stock
# postgresql.conf, fsync and synchronous_commit on), right after the round's
# drain and probes:
#   - table `bare`: id (identity, primary key), payload jsonb (the bench's
#     payload), state smallint (0 pending, 1 claimed, 2 done), a partial
#     index on id WHERE state = 0 (the claim's path; without it every claim
#     would step over the rows already done); N_HEADLINE rows, ANALYZE,
#     CHECKPOINT (as before the drain);
#   - procedure `bare_drain(256)`: until nothing is left, claim 256 rows
#     (UPDATE ... WHERE id IN (SELECT ... ORDER BY id LIMIT 256 FOR UPDATE
#     SKIP LOCKED) RETURNING id, payload), COMMIT, mark them done, COMMIT:
#     two durable commits per batch of 256, as the relay's claim and record
#     (the relay's default batch size), one session;
#   - its cost: the whole cluster's CPU before and after (postmaster with its
#     reaped children + live children, /proc ticks: the same accounting as
#     the relay's PostgreSQL figure) / N_HEADLINE.
# No history row, no attempt count, no lease time, no NOTIFY: what is left
# out is what the relay's PostgreSQL figure has on top of the bare claim.
#
# headline_bare ROUND: appends bare_* fields to PROBE_FIELDS.
headline_bare() {
    local r=$1 db=bench_bare_$1 base_children pg0 pg1 t0 t1 left
    local -x PGPORT=$DEF_PGPORT
    # shellcheck disable=SC2034  # read by pg_cpu, pg_children (run.sh)
    local PGDIR=$B/pgdef
    q postgres "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
    q postgres "CREATE DATABASE $db" >/dev/null || { broken "headline/$r: bare claim: createdb"; return 1; }
    q "$db" "CREATE TABLE bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL,
                                state smallint NOT NULL DEFAULT 0)" \
        "CREATE INDEX bare_pending ON bare (id) WHERE state = 0" \
        "INSERT INTO bare (payload) SELECT $PAYLOAD_SQL FROM generate_series(1, $N_HEADLINE) g" \
        "CREATE PROCEDURE bare_drain(batch int) LANGUAGE plpgsql AS \$\$
         DECLARE
             ids bigint[];
         BEGIN
             LOOP
                 WITH claimed AS (
                     UPDATE bare SET state = 1
                      WHERE id IN (SELECT id FROM bare WHERE state = 0 ORDER BY id LIMIT batch
                                      FOR UPDATE SKIP LOCKED)
                  RETURNING id, payload)
                 SELECT array_agg(id) INTO ids FROM claimed;
                 COMMIT;
                 EXIT WHEN ids IS NULL;
                 UPDATE bare SET state = 2 WHERE id = ANY (ids);
                 COMMIT;
             END LOOP;
         END \$\$" \
        "ANALYZE bare" "CHECKPOINT" >/dev/null || { broken "headline/$r: bare claim: set-up"; return 1; }
    base_children=$(pg_children)
    pg0=$(pg_cpu)
    t0=$EPOCHREALTIME
    q "$db" "CALL bare_drain(256)" >/dev/null || { broken "headline/$r: bare claim: bare_drain"; return 1; }
    t1=$EPOCHREALTIME
    wait_backends "$base_children"
    pg1=$(pg_cpu)
    left=$(q "$db" "SELECT count(*) FROM bare WHERE state <> 2")
    [ "$left" = 0 ] || { broken "headline/$r: bare claim left $left rows not done"; return 1; }
    PROBE_FIELDS+=("bare_rows=$N_HEADLINE" "bare_batch=256"
        "bare_wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')"
        "bare_pg_cpu_s=$(awk -v a="$pg0" -v b="$pg1" 'BEGIN {printf "%.3f", b - a}')")
    say "headline round $r: bare claim-and-complete: $N_HEADLINE rows in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')s, $(awk -v a="$pg0" -v b="$pg1" -v n="$N_HEADLINE" 'BEGIN {printf "%.1f", (b - a) * 1e6 / n}') µs of PostgreSQL CPU each"
    q postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
}
