#!/usr/bin/env bash
# tests/model/run.sh — model-check the delivery protocol (protocol.pml) with SPIN.
#
# Prints one line per check, "ok N - ..." or "not ok N - ...", and ends with
# "N passed, N failed"; exits non-zero on any failure. The checks:
#   properties   each property on the model of the committed protocol, all four
#                target kinds at once, with relay ids per incarnation and with a
#                restarted relay keeping its id ("(same id after restart)");
#                each must hold, and the search must be exhaustive (full state
#                storage, stopped neither by the depth nor by the memory bound)
#   seeded bugs  a variant with one bug (-DSEEDED_BUG_...); its property must
#                be violated: a seeded bug that passes is a failure
#   assumptions  a variant without one timing assumption (README.md, "Timing
#                assumptions"); its property must be violated, which shows
#                the protocol relies on it; the counterexample is printed
#
# MODEL_JOBS (default 2) compiles and searches that many variants at once.
# MODEL_DEFINES adds -D options to the property checks, e.g.
# MODEL_DEFINES="-DSLOWS=2" for a deeper (minutes) search, or
# "-DTAKEOVER_0003" for take_over_expired before migration 0011.
# MODEL_KEEP=1 keeps the work directory (pan sources, trails, logs).
# MODEL_MEMLIM and MODEL_CFLAGS: see PAN_CFLAGS below.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
JOBS=${MODEL_JOBS:-2}
DEFINES=${MODEL_DEFINES:-}
CC=${CC:-cc}
# -m: search depth bound, far above the deepest path of the model (~200);
# a truncated search is reported as a failure, not as a pass.
PAN_DEPTH=100000
# MODEL_MEMLIM: MB a verifier may use (4096); MODEL_CFLAGS: more options for
# its compiler, e.g. -DCOLLAPSE (a third of the memory, slower) for deep runs.
# A search that reaches the memory bound stops early: reported as a failure.
# shellcheck disable=SC2206 # MODEL_CFLAGS: several options
PAN_CFLAGS=(-w "-DMEMLIM=${MODEL_MEMLIM:-4096}" ${MODEL_CFLAGS:-})

if ! command -v spin >/dev/null 2>&1; then
    echo "not ok 1 - spin is not installed (make deps, or: apt-get install spin)"
    echo "0 passed, 1 failed"
    exit 1
fi

WORK=$(mktemp -d /tmp/outbox-model.XXXXXX)
cleanup() {
    if [ "${MODEL_KEEP:-}" = 1 ]; then echo "work directory: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# One line per check: name | group | spin -D options | claim (- for none) | expect | what
# A group is one compiled verifier; checks of a group run one after another.
# The properties are checked twice: each relay incarnation with an id of its
# own (hostname:pid on a host), and a restarted relay keeping its
# predecessor's id (a container restarted in its pod: same hostname, pid 1).
properties() { # GROUP DEFINES LABEL
    cat <<EOF
no_dead_end$3|$1|$2|-|hold|no reachable state leaves the intent unsettled with nothing left to move it (and the model's own assertions)
no_second_effect$3|$1|$2|no_second_effect|hold|no target executes the intent twice: keyless targets never see a second effect; keyed ones deduplicate within key_ttl and get no re-send after it
failed_only_if_not_executed$3|$1|$2|failed_only_if_not_executed|hold|failed is never reached after an attempt that may have executed
succeeded_only_if_executed$3|$1|$2|succeeded_only_if_executed|hold|succeeded only if the target executed it
never_lost$3|$1|$2|never_lost|hold|<>[] settled (succeeded, failed, or unknown without a status URL: visible in outbox.stuck), whatever the scheduling
EOF
}
CHECKS="
$(properties main "$DEFINES" "")
$(properties same_id "-DSAME_ID $DEFINES" " (same id after restart)")
SEEDED_BUG_NO_FENCE|bug1|-DPROPERTIES_ONLY -DSEEDED_BUG_NO_FENCE|no_second_effect|violate|outbox.record without the (lease_owner, attempts) fence
SEEDED_BUG_TAKEOVER_NOT_AMBIGUOUS|bug2|-DPROPERTIES_ONLY -DSEEDED_BUG_TAKEOVER_NOT_AMBIGUOUS|no_second_effect|violate|a take-over decided as 'not sent' (skips the ambiguous flag)
SEEDED_BUG_FAIL_AFTER_AMBIGUOUS|bug3|-DPROPERTIES_ONLY -DSEEDED_BUG_FAIL_AFTER_AMBIGUOUS|failed_only_if_not_executed|violate|outcome_decide: a 4xx is 'failed' even after an ambiguous attempt
SEEDED_BUG_RESEND_UNCHECKED|bug4|-DPROPERTIES_ONLY -DSEEDED_BUG_RESEND_UNCHECKED|no_second_effect|violate|on_claimed sends without outcome_resend_allowed
SEEDED_BUG_RELEASE_SENT|bug5|-DPROPERTIES_ONLY -DSEEDED_BUG_RELEASE_SENT|no_second_effect|violate|shutdown releases (outbox.release) a row whose request was sent
SEEDED_BUG_STATUS_LEASE_NULL|bug6|-DPROPERTIES_ONLY -DSEEDED_BUG_STATUS_LEASE_NULL|never_lost|violate|outbox.claim_unknown only takes rows whose lease is NULL (a crashed status check strands the row)
NO_SEND_DEADLINE|asm1|-DPROPERTIES_ONLY -DTARGET=3 -DNO_SEND_DEADLINE|no_second_effect|violate|without T3 (a relay sends before the lease of its claim expires); keyless target with a status URL
NO_REQUEST_BOUND|asm2|-DPROPERTIES_ONLY -DTARGET=3 -DNO_REQUEST_BOUND|no_second_effect|violate|without T2 (no request outlives reconcile_delay_ms); keyless target with a status URL
"

# Compiles the verifier of one group and runs its checks; writes, per check,
# CHECK.out (pan's output), CHECK.trail.txt (a counterexample, replayed) and
# CHECK.result ("ok ..." or "not ok ...", without the number).
run_group() {
    local group=$1 defines=$2 dir="$WORK/$1"
    mkdir -p "$dir"
    cp "$HERE/protocol.pml" "$dir/"
    cd "$dir" || return 1
    # The property checks search the whole state space: an optimised
    # verifier. A seeded bug is found in a fraction of it: -O0 compiles in a
    # tenth of the time. The run without a claim is one search: -O0 too.
    local opt=-O0 noclaim=0
    case "$group" in main | same_id) opt=-O2 noclaim=1 ;; esac
    # shellcheck disable=SC2086 # $defines: several -D options
    if ! spin $defines -a protocol.pml >spin.log 2>&1 ||
        ! $CC $opt "${PAN_CFLAGS[@]}" -o pan pan.c >cc.log 2>&1 ||
        { [ "$noclaim" = 1 ] && ! $CC -O0 "${PAN_CFLAGS[@]}" -DNOCLAIM -o pan_noclaim pan.c >>cc.log 2>&1; }; then
        while IFS='|' read -r name g _ c _ _; do
            [ "$g" = "$group" ] || continue
            { echo "not ok - $name: spin or cc failed:"; tail -n 20 spin.log cc.log | sed 's/^/#   /'; } >"${c/#-/noclaim}.result"
        done <<<"$CHECKS"
        return 0
    fi
    while IFS='|' read -r name g _ claim expect what; do
        [ "$g" = "$group" ] || continue
        local key=${claim/#-/noclaim}
        local args=("-m$PAN_DEPTH") bin=./pan start end secs
        if [ "$claim" = - ]; then bin=./pan_noclaim; else args+=(-N "$claim"); fi
        [ "$claim" = never_lost ] && args+=(-a)
        rm -f protocol.pml.trail
        start=$(date +%s.%N)
        "$bin" "${args[@]}" >"$key.out" 2>&1
        end=$(date +%s.%N)
        secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
        local errors states depth full truncated
        errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$key.out" | tail -1)
        states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$key.out" | tail -1)
        depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$key.out" | tail -1)
        full=$(grep -c 'Full statespace search' "$key.out")
        truncated=$(grep -c -e 'max search depth too small' -e 'reached -DMEMLIM bound' -e 'out of memory' "$key.out")
        if [ -z "$errors" ]; then
            { echo "not ok - $name: the verifier did not finish ($what)"; tail -n 20 "$key.out" | sed 's/^/#   /'; } >"$key.result"
            continue
        fi
        local how="exhaustive: $states states, depth $depth, ${secs} s"
        [ "$full" = 1 ] && [ "$truncated" = 0 ] ||
            how="NOT exhaustive (stopped at the depth or memory bound: depth $depth of $PAN_DEPTH, $states states), ${secs} s"
        [ "$errors" = 0 ] || how="violated after $states states, ${secs} s"
        if [ "$errors" != 0 ] && [ -f protocol.pml.trail ]; then
            # shellcheck disable=SC2086 # $defines: several -D options
            spin $defines -t protocol.pml 2>&1 | sed -n '/^ *target: keyed/,/trail ends/p' |
                grep -v -e '^spin: text of' -e '^Never claim moves' | sed -e 's/^ *//' >"$key.trail.txt"
        fi
        local steps
        steps=$(sed -n 's/.*trail ends after \([0-9]*\) steps.*/\1/p' "$key.trail.txt" 2>/dev/null)
        local violation
        violation=$(grep -m1 -E '^pan:[0-9]+:' "$key.out" | sed 's/^pan:[0-9]*: *//')
        if [ "$expect" = hold ]; then
            if [ "$errors" = 0 ] && [ "$full" = 1 ] && [ "$truncated" = 0 ]; then
                echo "ok - $name holds ($how): $what" >"$key.result"
            else
                {
                    echo "not ok - $name ($how): $what: $violation"
                    sed 's/^/#   /' "$key.trail.txt" 2>/dev/null
                } >"$key.result"
            fi
        else
            # The violation must be the property's (the claim's assertion, or
            # an acceptance cycle for never_lost), not anything else.
            local own=0
            case "$claim" in
            never_lost) grep -q 'acceptance cycle' "$key.out" && own=1 ;;
            *) grep -q 'assertion violated  !( !(' "$key.out" && own=1 ;;
            esac
            if [ "$errors" != 0 ] && [ "$own" = 1 ]; then
                echo "ok - $name caught by $claim (counterexample of ${steps:-?} steps, ${secs} s): $what" >"$key.result"
            elif [ "$errors" != 0 ]; then
                { echo "not ok - $name: expected $claim to be violated, got: $violation"; sed 's/^/#   /' "$key.trail.txt" 2>/dev/null; } >"$key.result"
            else
                echo "not ok - $name NOT caught: $claim holds ($how): $what" >"$key.result"
            fi
        fi
    done <<<"$CHECKS"
}

groups=$(awk -F'|' 'NF > 1 { print $2 "|" $3 }' <<<"$CHECKS" | awk '!seen[$0]++')
echo "# SPIN $(spin -V 2>&1 | sed -n 's/Spin Version \([0-9.]*\).*/\1/p'): tests/model/protocol.pml, $JOBS at a time${DEFINES:+, defines: $DEFINES}"
started=$(date +%s)
running=0
while IFS='|' read -r group defines; do
    [ -n "$group" ] || continue
    (run_group "$group" "$defines") &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then
        wait -n
        running=$((running - 1))
    fi
done <<<"$groups"
wait

n=0 ok=0 bad=0
while IFS='|' read -r name group _ claim expect _; do
    [ -n "$name" ] || continue
    n=$((n + 1))
    f="$WORK/$group/${claim/#-/noclaim}.result"
    if [ ! -f "$f" ]; then
        echo "not ok $n - $name: no result"
        bad=$((bad + 1))
        continue
    fi
    line=$(head -1 "$f")
    case "$line" in
    "ok - "*) ok=$((ok + 1)); echo "ok $n - ${line#ok - }" ;;
    *) bad=$((bad + 1)); echo "not ok $n - ${line#not ok - }" ;;
    esac
    tail -n +2 "$f"
    # The counterexamples that show what the protocol relies on.
    if [ "$expect" = violate ] && [[ "$name" != SEEDED_BUG_* ]] && [ -f "${f%.result}.trail.txt" ]; then
        sed -e 's/^/#     /' "${f%.result}.trail.txt"
    fi
done <<<"$CHECKS"
echo "# model bounds (defaults, README.md): 2 relays, 1 stop each, 1 lease lost by a live relay, 2 attempts, 4 target kinds; $(($(date +%s) - started)) s"
echo "$ok passed, $bad failed"
[ "$bad" = 0 ]
