#!/usr/bin/env bash
# tests/bench/databases.sh — one relay over four databases (--databases)
# against four relays of one database each, on the same load: N intents
# (BENCH_DB_N, 10,000) in each of four databases of one throwaway cluster
# (tests/lib/pgcluster.sh's settings: fsync off), a receiver that answers at
# once, the -O2 relay. Three rounds of each, alternating; per round:
# deliveries/s until all four are drained, the relays' CPU per delivery
# (/proc utime + stime), RSS (VmHWM: the sum, and the largest process).
# Not yet a row of `make bench` (tests/bench/run.sh): run it by hand,
#   tests/bench/databases.sh
# Figures of a run are in docs/design.md, "Many databases".
cd "$(dirname "$0")/../.."
. tests/lib/itest.sh
. tests/lib/multidb.sh
RELAY_BIN=$PWD/build/outbox-relay
itest_setup
for n in d1 d2 d3 d4; do multidb_add $n; done
multidb_migrate
receiver_start r
for n in d1 d2 d3 d4; do dtarget $n hook "http://127.0.0.1:$RECV_PORT_r/effects"; done
N=${BENCH_DB_N:-10000}
cpu_of() { awk '{print $14+$15}' /proc/$1/stat; }
hwm_of() { awk '/VmHWM/ {print $2}' /proc/$1/status; }
all_done() { local n; for n in d1 d2 d3 d4; do [ "$(dsql $n "SELECT count(*) FROM outbox.intents WHERE state <> 'succeeded'")" = 0 ] || return 1; done; }
run_round() {
  local mode=$1 tag=$2 p
  for n in d1 d2 d3 d4; do dsql $n "SELECT count(*) FROM (SELECT outbox.enqueue('$mode$tag:' || g, 'hook', '{}'::jsonb) FROM generate_series(1,$N) g) x" >/dev/null; done
  local t0=$(date +%s.%N) pids=()
  if [ $mode = one ]; then
    $RELAY_BIN run --databases $T/relay.databases --admin-listen "" > $T/b-one.log 2>&1 & pids+=($!)
  else
    for n in d1 d2 d3 d4; do $RELAY_BIN run --db "postgresql://itest_relay@127.0.0.1:$PGPORT/$n" --admin-listen "" > $T/b-$n.log 2>&1 & pids+=($!); done
  fi
  ITEST_PIDS+=("${pids[@]}")
  until all_done; do sleep 0.2; done
  local t1=$(date +%s.%N) cpu=0 rss=0 maxrss=0 c h
  for p in "${pids[@]}"; do c=$(cpu_of $p); h=$(hwm_of $p); cpu=$((cpu + c)); rss=$((rss + h)); [ $h -gt $maxrss ] && maxrss=$h; done
  for p in "${pids[@]}"; do kill -TERM $p; wait $p; done
  python3 -c "
import sys; t=float('$t1')-float('$t0'); n=4*$N
print('$mode: %d deliveries in %.1f s = %.0f/s; relay CPU %.1f us/delivery; RSS sum %d KiB, largest %d KiB' % (n, t, n/t, $cpu*1e6/100/n, $rss, $maxrss))"
}
run_round one 1
run_round four 1
run_round one 2
run_round four 2
run_round one 3
run_round four 3
itest_done >/dev/null
