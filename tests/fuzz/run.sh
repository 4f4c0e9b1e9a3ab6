#!/usr/bin/env bash
# tests/fuzz/run.sh — run the libFuzzer targets of tests/fuzz/ for a while each.
#
#   tests/fuzz/run.sh [NAME...]      every target (or the named ones), one after another
#   FUZZ_SECONDS=20                  seconds per target (default 20)
#   FUZZ_ARGS="-jobs=2 -workers=2"   more libFuzzer flags
#
# The binaries come from `make fuzz-build`. Each target starts from its seeds
# (tests/fuzz/corpus/NAME, read-only) and the corpus it grew before
# (build/fuzz/corpus/NAME, kept between runs; `make clean` drops it), with
# its dictionary tests/fuzz/NAME.dict when there is one. A crash, leak, UB,
# broken property or timeout is a failure; its input is saved as
# build/fuzz/artifacts/NAME-crash-* (reproduce: build/fuzz/fuzz_NAME FILE).
# Prints "ok"/"not ok" per target and "N passed, N failed"; exits non-zero
# on any failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SECONDS_EACH=${FUZZ_SECONDS:-20}
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        n=$(basename "$f" .c)
        names+=("${n#fuzz_}")
    done
fi
mkdir -p build/fuzz/artifacts build/fuzz/logs
passed=0
failed=0
for name in "${names[@]}"; do
    bin=build/fuzz/fuzz_$name
    if [ ! -x "$bin" ]; then
        echo "not ok fuzz_$name: $bin missing (make fuzz-build)"
        failed=$((failed + 1))
        continue
    fi
    corpus=build/fuzz/corpus/$name
    mkdir -p "$corpus"
    dict=()
    [ -f "tests/fuzz/$name.dict" ] && dict=("-dict=tests/fuzz/$name.dict")
    log=build/fuzz/logs/$name.log
    start=$(date +%s)
    # -timeout: one input may take at most 10 s (the slowest admin input takes
    # well under one); the rest is libFuzzer's defaults (leaks detected, 2 GB).
    # shellcheck disable=SC2086
    timeout -k 10 $((SECONDS_EACH + 120)) "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 \
        -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$name-" "${dict[@]}" \
        ${FUZZ_ARGS:-} "$corpus" "tests/fuzz/corpus/$name" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    size=$(find "$corpus" -type f | wc -l)
    if [ "$rc" = 0 ]; then
        echo "ok fuzz_$name: ${runs:-?} runs in ${took} s (${rate:-?}/s), ${cov:-cov: ?}, corpus $size"
        passed=$((passed + 1))
    else
        artifact=$(grep -oE 'build/fuzz/artifacts/[^ ]+' "$log" | tail -1)
        echo "not ok fuzz_$name: exit $rc after ${took} s${artifact:+, input saved as $artifact}"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*property broken|.*runtime error)' "$log" | head -5 |
            sed -e 's/^/  /'
        echo "  log: $log"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
