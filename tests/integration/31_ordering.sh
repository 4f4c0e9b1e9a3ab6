#!/usr/bin/env bash
# Ordered delivery per ordering key (issue 14; migrations/0013_ordering.sql):
# 100 groups x 10 steps to a keyed (deduplicating) target, two relays, faults
# at the receiver: 5 % of the steps are dropped after the effect (drop_after),
# 5 % get a 500 before it, 2 % answer late (after the 1 s timeout). Steps are
# enqueued while the relays run, each step of a group in its own transaction
# after the one before, from two sessions at once (groups 1-50 and 51-100).
#   - every step delivered, each acted on exactly once;
#   - 0 out of order: the receiver's order log (--order-log) never shows a
#     request for step s before the effect of step s-1 of its group;
#   - a slow group (its first step answers late 4 times) holds back only itself;
#   - a group whose head gets 400 (failed): steps 2 and 3 are never sent, the
#     head is in outbox.stuck ("blocks 2 later intents of group fail"),
#     outbox.outcome of step 3 names the head; `outbox-relay cancel` of the head
#     releases the group, and steps 2 and 3 are delivered in order.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

GROUPS_N=100
STEPS=10
receiver_start keyed --dedupe --late-ms 1500 --order-log "$T/order.log"
# The 400: a POST to the receiver's /_mode with a body that is no mode
# ("unknown field") is refused and changes nothing; its own receiver.
receiver_start bad
target_add keyed "http://127.0.0.1:$RECV_PORT_keyed/act" timeout_ms=1000 backoff_base_ms=50 backoff_cap_ms=200
target_add bad "http://127.0.0.1:$RECV_PORT_bad/_mode" timeout_ms=1000

relay_start a --poll-interval-ms 100
relay_start b --poll-interval-ms 100

# The head of group "fail" gets 400; steps 2 and 3 wait for it.
sql "SELECT outbox.enqueue('fail:1', 'bad', '{\"step\": 1}', p_ordering_key => 'fail')" >/dev/null
sql "SELECT outbox.enqueue('fail:' || s, 'keyed', jsonb_build_object('step', s), p_ordering_key => 'fail')
       FROM generate_series(2, 3) AS s" >/dev/null
# A slow group: its first step answers after the timeout four times.
sql "SELECT outbox.enqueue('slow:1', 'keyed', '{\"step\": 1, \"_fault\": \"late\", \"_fault_times\": 4}',
                           p_ordering_key => 'slow')" >/dev/null
sql "SELECT outbox.enqueue('slow:2', 'keyed', '{\"step\": 2}', p_ordering_key => 'slow')" >/dev/null

# enqueue_steps FIRST LAST: steps 1..STEPS of groups FIRST..LAST, one
# transaction per step (all its groups), each after the previous committed.
# Faults by a hash of (group, step): 5 % drop_after, 5 % status_500, 2 % late.
enqueue_steps() {
    local first=$1 last=$2 s
    for s in $(seq 1 "$STEPS"); do
        sql "SELECT count(*) FROM (
               SELECT outbox.enqueue(format('g%s:%s', g, $s), 'keyed',
                          jsonb_build_object('group', g, 'step', $s)
                          || CASE WHEN h < 5 THEN '{\"_fault\": \"drop_after\"}'::jsonb
                                  WHEN h < 10 THEN '{\"_fault\": \"status_500\"}'::jsonb
                                  WHEN h < 12 THEN '{\"_fault\": \"late\"}'::jsonb
                                  ELSE '{}'::jsonb END,
                          p_ordering_key => 'g' || g)
                 FROM generate_series($first, $last) AS g
                CROSS JOIN LATERAL (SELECT abs(hashint4(g * 1000 + $s)) % 100 AS h) AS f) x" >/dev/null || return 1
        sleep 0.05
    done
}
t0=$SECONDS
enqueue_steps 1 $((GROUPS_N / 2)) &
e1=$!
enqueue_steps $((GROUPS_N / 2 + 1)) "$GROUPS_N" &
e2=$!
wait "$e1"; r1=$?
wait "$e2"; r2=$?
is "$r1$r2" 00 "two sessions enqueued $GROUPS_N groups x $STEPS steps, step by step"
total=$((GROUPS_N * STEPS))
ok "all $total steps succeeded within 60 s" wait_for 60 \
    "SELECT count(*) FROM outbox.intents WHERE key ~ '^g[0-9]+:' AND state = 'succeeded'" "$total"
echo "# $total steps delivered $((SECONDS - t0)) s after the first enqueue"
ok "the slow group finished too" wait_for 20 "SELECT count(*) FROM outbox.intents WHERE ordering_key = 'slow' AND state = 'succeeded'" 2

# --- every step, once, in order -----------------------------------------------
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key ~ '^g[0-9]+:' AND state <> 'succeeded'")" 0 "no step left undelivered"
is "$(receiver_stat keyed keys_with_duplicate_effects)" 0 "no step acted on twice"
is "$(awk -F'\t' '$2 == "effect" && $3 ~ /^g[0-9]+:/ { n[$3]++ } END { print length(n) }' "$T/order.log")" "$total" \
    "the order log has an effect for every step"
faults=$(curl -s "http://127.0.0.1:$RECV_PORT_keyed/_stats" | sed -n 's/.*"faults":{\([^}]*\)}.*/\1/p')
echo "# receiver faults: $faults"
ok "faults were injected: drops and 500s" \
    test "$(sed -n 's/.*"drop_after":\([0-9]*\).*/\1/p' <<<"$faults")" -gt 20 -a \
         "$(sed -n 's/.*"status_500":\([0-9]*\).*/\1/p' <<<"$faults")" -gt 20
ok "the relays saw them: ambiguous attempts, re-sent with the same key" \
    test "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                 WHERE i.key ~ '^g[0-9]+:' AND a.class = 'ambiguous'")" -gt 40
# For every group g and step s >= 2: the first request for g:s comes after the
# first effect of g:s-1 (sequence numbers of the order log).
out_of_order=$(awk -F'\t' '
    $3 ~ /^g[0-9]+:[0-9]+$/ {
        split($3, p, ":")
        if ($2 == "request" && !(($3) in req)) req[$3] = $1
        if ($2 == "effect" && !(($3) in eff)) eff[$3] = $1
        groups[p[1]] = 1
    }
    END {
        bad = 0
        for (g in groups)
            for (s = 2; s <= '"$STEPS"'; s++) {
                prev = g ":" (s - 1); cur = g ":" s
                if (!(cur in req) || !(prev in eff) || req[cur] + 0 < eff[prev] + 0) {
                    bad++
                    if (bad <= 5) printf "# out of order: %s requested at %s, %s took effect at %s\n", cur, req[cur], prev, eff[prev] > "/dev/stderr"
                }
            }
        print bad
    }' "$T/order.log")
is "$out_of_order" 0 "0 out-of-order requests: no step requested before the step before it took effect"
requests=$(awk -F'\t' '$2 == "request" && $3 ~ /^g[0-9]+:/' "$T/order.log" | wc -l)
echo "# $requests requests for $total steps (retries after faults included)"
is "$(sql "SELECT count(DISTINCT a.relay) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key ~ '^g[0-9]+:'")" 2 "both relays delivered steps"

# --- no head-of-line blocking across groups ------------------------------------
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.key = 'slow:1' AND a.class = 'ambiguous'")" 4 "the slow group's first step: 4 late answers (timeouts), then its stored response"
# Between the first and the last request of slow:1 (its 4 timeouts and back-offs),
# the other groups went on: later steps of theirs took effect meanwhile.
meanwhile=$(awk -F'\t' '
    $3 == "slow:1" && $2 == "request" { if (!first) first = $1; last = $1 }
    $2 == "effect" && $3 ~ /^g[0-9]+:([2-9]|10)$/ { eff[NR] = $1 }
    END { n = 0; for (k in eff) if (eff[k] > first && eff[k] < last) n++; print n }' "$T/order.log")
echo "# $meanwhile later steps of other groups took effect while slow:1 was retried"
ok "no head-of-line blocking: other groups' later steps took effect while the slow head was retried" \
    test "$meanwhile" -gt 50
slow2_req=$(awk -F'\t' '$2 == "request" && $3 == "slow:2" { print $1; exit }' "$T/order.log")
slow1_eff=$(awk -F'\t' '$2 == "effect" && $3 == "slow:1" { print $1; exit }' "$T/order.log")
ok "the slow group's step 2 came after its step 1 took effect" test "${slow2_req:-0}" -gt "${slow1_eff:-999999999}"

# --- a failed head blocks its group until it is cancelled ------------------------
is "$(sql "SELECT state || ' ' || response_status FROM outbox.intents WHERE key = 'fail:1'")" "failed 400" \
    "the head of group fail got 400: failed"
is "$(sql "SELECT string_agg(key || '=' || state || '/' || attempts, ' ' ORDER BY id) FROM outbox.intents
           WHERE ordering_key = 'fail' AND key <> 'fail:1'")" "fail:2=pending/0 fail:3=pending/0" \
    "steps 2 and 3 wait: pending, never attempted"
is "$(awk -F'\t' '$3 ~ /^fail:/' "$T/order.log" | wc -l)" 0 "steps 2 and 3 never reached the receiver"
is "$(sql "SELECT reason FROM outbox.stuck WHERE key = 'fail:1'")" "blocks 2 later intents of group fail" \
    "outbox.stuck lists the head: blocks 2 later intents of group fail"
is "$(sql "SELECT status || ': ' || message FROM outbox.outcome('fail:3')")" \
    "pending: waiting for fail:1 (failed), the head of ordering group fail: it is sent once that one succeeded or was cancelled" \
    "outcome of step 3: pending, waiting for the failed head"
stuck_cli=$("$RELAY_BIN" stuck 2>&1)
ok "outbox-relay stuck shows it" grep -q 'fail:1.*blocks 2 later intents of group fail' <<<"$stuck_cli"
cancel_out=$("$RELAY_BIN" cancel fail:1 --reason "step 1 is not needed" 2>&1)
is "$?" 0 "outbox-relay cancel fail:1 (a failed head of a group): exit 0"
ok "steps 2 and 3 are delivered once the head is cancelled" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key IN ('fail:2', 'fail:3') AND state = 'succeeded'" 2
fail2_eff=$(awk -F'\t' '$2 == "effect" && $3 == "fail:2" { print $1; exit }' "$T/order.log")
fail3_req=$(awk -F'\t' '$2 == "request" && $3 == "fail:3" { print $1; exit }' "$T/order.log")
ok "... in order: step 3 requested after step 2 took effect" test "${fail3_req:-0}" -gt "${fail2_eff:-999999999}"
is "$(sql "SELECT count(*) FROM outbox.stuck")" 0 "nothing left in outbox.stuck"
is "$(sql "SELECT count(*) FROM outbox.ordering_groups")" 0 "no ordering group left (every group's row went with its last intent)"

for r in a b; do pid_var=RELAY_PID_$r; kill -TERM "${!pid_var}"; done
for r in a b; do relay_wait $r 30; is "$?" 0 "relay $r exits 0 on SIGTERM"; done
ok "no sanitizer report" relay_logs_clean
itest_done
