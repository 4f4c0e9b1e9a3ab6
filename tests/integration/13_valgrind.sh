#!/usr/bin/env bash
# The optimised relay under valgrind's memcheck: a short drain with a SIGTERM
# and an idle exit leaves no leak and no memory error (ASan covers the rest).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup
command -v valgrind >/dev/null || bail "valgrind is not installed"

receiver_start keyed --dedupe
target_add api "http://127.0.0.1:$RECV_PORT_keyed/calls" \
    "status_url='http://127.0.0.1:$RECV_PORT_keyed/status/{key}'" timeout_ms=300 reconcile_delay_ms=100
enqueue_many api "vg:" 300
sql "SELECT outbox.enqueue('vg:late', 'api', '{\"_fault\": \"late\", \"_fault_times\": 1}')" >/dev/null

vg() {
    exec valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
        --suppressions="$ITEST_ROOT/tests/lib/valgrind.supp" \
        "$ITEST_ROOT/build/outbox-relay" "$@"
}
(vg run --relay-id vg --admin-listen "127.0.0.1:0" --exit-when-idle --poll-interval-ms 100 \
    >"$T/relay-vg.log" 2>&1)
is "$?" 0 "drain with an ambiguous attempt and a reconciliation: exit 0, no leak or error"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'")" 301 "all delivered"

enqueue_many api "vg2:" 200
(vg run --relay-id vg2 --admin-listen "" --poll-interval-ms 100 >"$T/relay-vg2.log" 2>&1) &
pid=$!
ITEST_PIDS+=("$pid")
ok "second relay drains under valgrind" wait_for 60 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 501
kill -TERM "$pid"
wait "$pid"
is "$?" 0 "SIGTERM: exit 0, no leak or error"
ok "valgrind reported nothing" bash -c "! grep -q '==[0-9]*==' '$T/relay-vg.log' '$T/relay-vg2.log'"
itest_done
