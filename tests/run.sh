#!/usr/bin/env bash
# tests/run.sh — every test suite, against real PostgreSQL and real HTTP.
#
#   lint         clang-format, banned calls, released migrations unchanged, every migration
#                in CHANGELOG.md (deploy/README.md only links to it), HACKING.md's map,
#                the documents' contents and section links, docs/options.md against
#                outbox-relay --help, the names the documents use (outbox. objects,
#                commands, options) against the schema and --help, commit subjects
#                after the cutoff (tests/lib/commit-subjects.py), those lints on
#                planted contradictions (tests/lib/lint-selftest.sh), tests/README.md's
#                index of tests by behaviour (every mutation named, every file there),
#                cppcheck
#   unit         Check, relay modules under ASan+UBSan (build/asan/unit-tests)
#   schema       the official JSON Schema test suite against the MCP front door's validator
#   sql          pgTAP via pg_prove, plus schema equivalence and the generated schema
#                loaded into a fresh cluster (tests/sql/run.sh)
#   scale        operator views on a million rows (tests/sql/scale_views.sh)
#   model        SPIN model of the delivery protocol, seeded bugs (tests/model/run.sh)
#   integration  scenarios with the sanitizer-built relay (tests/integration/*.sh)
#   fuzz         libFuzzer targets, FUZZ_SECONDS (12) each (tests/fuzz/run.sh), last
#
# Each suite starts what it needs (its own PostgreSQL clusters on free ports)
# and stops it, also on failure. Ends with "N passed, N failed"; exits
# non-zero on any failure. ONLY=sql|unit|schema|fuzz|model|scale|integration|lint runs
# one suite; ONLY=integration FILTER=03 runs matching scenarios; INTEGRATION_JOBS=N
# runs N scenarios at a time (default 2; 1: one after another).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export RELAY_BIN=${RELAY_BIN:-$ROOT/build/asan/outbox-relay}
export RECEIVER_BIN=${RECEIVER_BIN:-$ROOT/build/test-receiver}
ONLY=${ONLY:-}
FILTER=${FILTER:-}
passed=0
failed=0
failures=()
LOG_DIR=$(mktemp -d /tmp/outbox-tests.XXXXXX)

count() { # count NAME PASSED FAILED
    passed=$((passed + $2))
    failed=$((failed + $3))
    [ "$3" -gt 0 ] && failures+=("$1")
    echo "== $1: $2 passed, $3 failed"
}

want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

if want lint; then
    if make --no-print-directory format-check >"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/banned-calls.sh >>"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/released-migrations.sh >>"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/changelog-migrations.sh >>"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/hacking-map.sh >>"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/docs-toc.py >>"$LOG_DIR/lint.log" 2>&1 &&
        RELAY_BIN=$ROOT/build/outbox-relay tests/lib/options-doc.py >>"$LOG_DIR/lint.log" 2>&1 &&
        RELAY_BIN=$ROOT/build/outbox-relay tests/lib/docs-names.py >>"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/commit-subjects.py >>"$LOG_DIR/lint.log" 2>&1 &&
        RELAY_BIN=$ROOT/build/outbox-relay tests/lib/lint-selftest.sh >>"$LOG_DIR/lint.log" 2>&1 &&
        tests/lib/tests-readme.py >>"$LOG_DIR/lint.log" 2>&1 &&
        make --no-print-directory cppcheck >>"$LOG_DIR/lint.log" 2>&1; then
        count lint 1 0
    else
        cat "$LOG_DIR/lint.log"
        count lint 0 1
    fi
fi

if want unit; then
    build/asan/unit-tests >"$LOG_DIR/unit.log" 2>&1
    rc=$?
    tail -n 20 "$LOG_DIR/unit.log"
    line=$(grep -E '^[0-9]+%: Checks: ' "$LOG_DIR/unit.log" | tail -1)
    checks=$(sed -n 's/.*Checks: \([0-9]*\).*/\1/p' <<<"$line")
    bad=$(( $(sed -n 's/.*Failures: \([0-9]*\).*/\1/p' <<<"$line") + $(sed -n 's/.*Errors: \([0-9]*\).*/\1/p' <<<"$line") ))
    if [ -z "$checks" ]; then count unit 0 1
    elif [ "$rc" != 0 ] && [ "$bad" = 0 ]; then count unit "$checks" 1
    else count unit $((checks - bad)) "$bad"; fi
fi

if want schema; then
    # The MCP front door's JSON Schema subset against the official JSON Schema
    # test suite (tests/mcp/schema_suite.sh): one pass per test.
    tests/mcp/schema_suite.sh >"$LOG_DIR/schema.tap" 2>&1
    rc=$?
    tail -n 3 "$LOG_DIR/schema.tap" | sed -e "s/^/  /"
    ok_n=$(grep -c '^ok ' "$LOG_DIR/schema.tap")
    bad_n=$(grep -c '^not ok ' "$LOG_DIR/schema.tap")
    if [ "$rc" != 0 ] && [ "$bad_n" = 0 ]; then bad_n=1; fi
    [ "$bad_n" != 0 ] && grep '^not ok ' "$LOG_DIR/schema.tap" | head -20
    count schema "$ok_n" "$bad_n"
fi

if want model; then
    # The SPIN model of the delivery protocol (tests/model/README.md): one
    # pass per property checked and per seeded bug caught.
    tests/model/run.sh >"$LOG_DIR/model.tap" 2>&1
    rc=$?
    sed -e "s/^/  /" "$LOG_DIR/model.tap"
    ok_n=$(grep -c '^ok ' "$LOG_DIR/model.tap")
    bad_n=$(grep -c '^not ok ' "$LOG_DIR/model.tap")
    if [ "$rc" != 0 ] && [ "$bad_n" = 0 ]; then bad_n=1; fi
    count model "$ok_n" "$bad_n"
fi

if want sql; then
    tests/sql/run.sh 2>&1 | tee "$LOG_DIR/sql.log" | tail -n 30
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOG_DIR/sql.log" | tail -1)
    if [ -n "$line" ]; then
        count sql "$(cut -d' ' -f1 <<<"$line")" "$(cut -d' ' -f3 <<<"$line")"
    else
        count sql 0 1
    fi
fi

if want scale; then
    # The operator views on a table of a million rows, with their query times.
    tests/sql/scale_views.sh >"$LOG_DIR/scale.tap" 2>"$LOG_DIR/scale.err"
    rc=$?
    sed -e "s/^/  /" "$LOG_DIR/scale.tap"
    ok_n=$(grep -c '^ok ' "$LOG_DIR/scale.tap")
    bad_n=$(grep -c '^not ok ' "$LOG_DIR/scale.tap")
    if [ "$rc" != 0 ] && [ "$bad_n" = 0 ]; then bad_n=1; tail -n 20 "$LOG_DIR/scale.err"; fi
    count scale "$ok_n" "$bad_n"
fi

# One scenario, in the background: its TAP, stderr, exit code and seconds
# go to $LOG_DIR/NAME.{tap,err,rc,secs}.
run_scenario() {
    local scenario=$1 name start rc
    name=$(basename "$scenario" .sh)
    start=$(date +%s)
    timeout -k 10 900 bash "$scenario" >"$LOG_DIR/$name.tap" 2>"$LOG_DIR/$name.err"
    rc=$?
    echo $(( $(date +%s) - start )) >"$LOG_DIR/$name.secs"
    echo "$rc" >"$LOG_DIR/$name.rc"
}

report_scenario() {
    local name=$1 rc ok_n bad_n
    rc=$(cat "$LOG_DIR/$name.rc")
    ok_n=$(grep -c '^ok ' "$LOG_DIR/$name.tap")
    bad_n=$(grep -c '^not ok ' "$LOG_DIR/$name.tap")
    if [ "$rc" != 0 ] && [ "$bad_n" = 0 ]; then bad_n=1; fi # crashed, timed out or bailed
    sed -e "s/^/  /" "$LOG_DIR/$name.tap"
    [ "$rc" != 0 ] && tail -n 20 "$LOG_DIR/$name.err" | sed -e "s/^/  stderr: /"
    count "integration/$name ($(cat "$LOG_DIR/$name.secs") s)" "$ok_n" "$bad_n"
}

if want integration; then
    # Each scenario has its own cluster, ports and temp dir, so they run
    # INTEGRATION_JOBS (2) at a time; a scenario that measures time or load
    # against a bound (a line "# itest: alone" in it) runs after them, alone.
    # Output is printed per scenario as each ends.
    jobs_max=${INTEGRATION_JOBS:-2}
    together=() alone=()
    for scenario in tests/integration/*.sh; do
        name=$(basename "$scenario" .sh)
        [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && continue
        if grep -q '^# itest: alone' "$scenario"; then alone+=("$scenario"); else together+=("$scenario"); fi
    done
    declare -A running=()
    for scenario in "${together[@]}"; do
        while [ "${#running[@]}" -ge "$jobs_max" ]; do
            wait -n -p ended
            report_scenario "${running[$ended]}"
            unset "running[$ended]"
        done
        run_scenario "$scenario" &
        running[$!]=$(basename "$scenario" .sh)
    done
    while [ "${#running[@]}" -gt 0 ]; do
        wait -n -p ended
        report_scenario "${running[$ended]}"
        unset "running[$ended]"
    done
    for scenario in "${alone[@]}"; do
        run_scenario "$scenario"
        report_scenario "$(basename "$scenario" .sh)"
    done
fi

if want fuzz; then
    # A short corpus run of every libFuzzer target (tests/fuzz/README.md):
    # FUZZ_SECONDS each (default 12), one pass per target without a finding.
    # Last: the admin target leaves thousands of loopback sockets in
    # TIME_WAIT for a minute, which must not crowd the scenarios' ports.
    FUZZ_SECONDS=${FUZZ_SECONDS:-12} tests/fuzz/run.sh >"$LOG_DIR/fuzz.tap" 2>&1
    rc=$?
    sed -e "s/^/  /" "$LOG_DIR/fuzz.tap"
    ok_n=$(grep -c '^ok ' "$LOG_DIR/fuzz.tap")
    bad_n=$(grep -c '^not ok ' "$LOG_DIR/fuzz.tap")
    if [ "$rc" != 0 ] && [ "$bad_n" = 0 ]; then bad_n=1; fi
    count fuzz "$ok_n" "$bad_n"
fi

echo
if [ ${#failures[@]} -gt 0 ]; then
    echo "failed suites: ${failures[*]} (logs in $LOG_DIR)"
else
    rm -rf "$LOG_DIR"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
