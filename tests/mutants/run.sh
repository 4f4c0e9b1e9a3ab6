#!/usr/bin/env bash
# tests/mutants/run.sh — `make mutants`: every mutation of tests/mutants/mutations
# must be caught by the tests it names.
#
# The tree under test is the working tree, not HEAD: the files git knows plus
# the untracked ones it does not ignore, as they are on disk, are copied (with
# their times, and with the build's object files, so that a build after a
# mutation recompiles only what changed) into a directory under /tmp. That
# copy is built and every test named in the list is run on it once unchanged
# (the baseline: a test that fails without a mutation would "catch" anything).
# Then, for each mutation in turn, on a fresh copy of it: apply the mutation
# (tests/mutants/mutate.py: its text must occur exactly once, else it is
# STALE), build what the named tests need, run them until one fails.
#
# Tests: sql:NN[,NN]  those pgTAP files (tests/sql/NN_*.sql), each in a fresh
#                     database built from the copy's migrations, on one cluster
#                     started for the run (not tests/sql/run.sh: its schema
#                     equivalence check would fail on every SQL mutation for the
#                     wrong reason)
#        unit         build/asan/unit-tests (ONLY=unit)
#        integration:NN   ONLY=integration FILTER=NN_ tests/run.sh in the copy
#
# Prints one line per mutation as it ends, then the table: name, tests,
# caught / SURVIVED / STALE / BUILD-FAILED / BASELINE-FAILED (a named test
# fails unmutated) / NO-SUCH-TEST, seconds, and the first failed assertion
# (what caught it, so that a catch for the wrong reason shows). Exit
# status 0 only if every mutation was caught. MUTANT=text runs only the
# mutations whose name contains text; MUTATIONS_FILE=path reads another list.
# The logs (each mutation's diff and test output) are kept; the path is printed.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LIST=${MUTATIONS_FILE:-$ROOT/tests/mutants/mutations}
PICK=${MUTANT:-}
MUTATE="python3 $ROOT/tests/mutants/mutate.py"
unset RELAY_BIN RECEIVER_BIN ONLY FILTER PGHOST PGPORT PGDATABASE DATABASE_URL

work=$(mktemp -d /tmp/outbox-mutants.XXXXXX)
chmod 755 "$work"
logs="$work/logs"
mkdir -p "$logs"
cleanup() {
    [ -n "${PGPORT:-}" ] && pgcluster_stop "$work/pg" >/dev/null 2>&1
    rm -rf "$work/base" "$work/m" "$work/pg"
    echo "logs: $logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the mutations to run ------------------------------------------------------
names=()
tests_of=()
while IFS=$'\t' read -r name tests; do
    [ -n "$PICK" ] && [[ "$name" != *"$PICK"* ]] && continue
    names+=("$name")
    tests_of+=("$tests")
done < <($MUTATE list "$LIST")
[ ${#names[@]} -gt 0 ] || { echo "mutants: no mutation selected" >&2; exit 1; }

# --- the copy -------------------------------------------------------------------
base="$work/base"
mkdir -p "$base/build/asan"
(cd "$ROOT" && git ls-files --cached --others --exclude-standard -z |
    while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$base" || { echo "mutants: cannot copy the tree" >&2; exit 1; }
for d in build/obj build/asan/obj; do
    [ -d "$ROOT/$d" ] && cp -a "$ROOT/$d" "$base/$d"
done
for b in build/outbox-relay build/test-receiver build/asan/outbox-relay build/asan/test-receiver \
    build/asan/unit-tests; do
    [ -f "$ROOT/$b" ] && cp -a "$ROOT/$b" "$base/$b"
done

# What the named tests need built.
targets_for() { # targets_for TESTS...
    local t out=()
    for t in "$@"; do
        case $t in
        unit) out+=(build/asan/unit-tests) ;;
        integration:*) out+=(build/outbox-relay build/asan/outbox-relay build/test-receiver) ;;
        esac
    done
    [ ${#out[@]} -gt 0 ] && printf '%s\n' "${out[@]}" | sort -u
}
build() { # build TREE LOG TESTS...
    local tree=$1 log=$2; shift 2
    local targets
    targets=$(targets_for "$@")
    [ -z "$targets" ] && return 0
    # shellcheck disable=SC2086
    make --no-print-directory -C "$tree" $targets >>"$log" 2>&1
}

# --- running one test -------------------------------------------------------------
sql_n=0
run_sql() { # run_sql TREE FILES LOG: 0 if every file passes
    local tree=$1 files=$2 log=$3 m n f db rc=0
    sql_n=$((sql_n + 1))
    local tmpl="mutants_$$_${sql_n}_tmpl"
    q() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 "$@"; }
    q -d postgres -c "CREATE DATABASE \"$tmpl\" OWNER outbox_owner TEMPLATE template0" >>"$log" 2>&1 || return 1
    for m in "$tree"/migrations/*.sql; do
        PGUSER=outbox_owner q -d "$tmpl" -f "$m" >>"$log" 2>&1 ||
            { echo "migration $(basename "$m") failed" >>"$log"; rc=1; break; }
    done
    [ "$rc" = 0 ] && { q -d "$tmpl" -c "CREATE EXTENSION pgtap; CREATE EXTENSION dblink;" >>"$log" 2>&1 || rc=1; }
    if [ "$rc" = 0 ]; then
        for n in ${files//,/ }; do
            f=$(ls "$tree"/tests/sql/"${n}"_*.sql 2>/dev/null | head -1)
            [ -n "$f" ] || { echo "no tests/sql/${n}_*.sql" >>"$log"; rc=1; break; }
            db="mutants_$$_${sql_n}_$n"
            q -d postgres -c "CREATE DATABASE \"$db\" TEMPLATE \"$tmpl\"" >>"$log" 2>&1 || { rc=1; break; }
            PGOPTIONS="-c statement_timeout=60s -c lock_timeout=30s" \
                timeout 180 pg_prove --dbname "$db" "$f" >>"$log" 2>&1 || rc=1
            psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
            [ "$rc" = 0 ] || break
        done
    fi
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$tmpl\" WITH (FORCE)" >/dev/null 2>&1
    return $rc
}
test_exists() { # test_exists TREE TEST
    local tree=$1 t=$2 n
    case $t in
    sql:*)
        for n in $(tr ',' ' ' <<<"${t#sql:}"); do
            compgen -G "$tree/tests/sql/${n}_*.sql" >/dev/null || return 1
        done ;;
    unit) ;;
    integration:*) compgen -G "$tree/tests/integration/${t#integration:}_*.sh" >/dev/null ;;
    *) return 1 ;;
    esac
}
run_test() { # run_test TREE TEST LOG: 0 if the test passes
    local tree=$1 t=$2 log=$3
    echo "--- $t" >>"$log"
    case $t in
    sql:*) run_sql "$tree" "${t#sql:}" "$log" ;;
    unit) timeout 300 "$tree/build/asan/unit-tests" >>"$log" 2>&1 ;;
    integration:*)
        (cd "$tree" && ONLY=integration FILTER="${t#integration:}_" timeout -k 10 900 tests/run.sh) >>"$log" 2>&1 ;;
    *) echo "unknown test $t" >>"$log"; return 2 ;;
    esac
}

if printf '%s\n' "${tests_of[@]}" | grep -q 'sql:'; then
    . "$ROOT/tests/lib/pgcluster.sh"
    pgcluster_start "$work/pg" >"$logs/cluster.log" 2>&1 || { echo "mutants: cannot start PostgreSQL" >&2; exit 1; }
    export PGUSER=postgres
fi

# --- the baseline: every named test passes on the unmutated copy -------------------
all_tests=$(printf '%s\n' "${tests_of[@]}" | tr ' ' '\n' | grep -v '^$' | sort -u)
# shellcheck disable=SC2086
if ! build "$base" "$logs/baseline.log" $all_tests; then
    echo "mutants: the unmutated tree does not build (see $logs/baseline.log)" >&2
    exit 1
fi
declare -A baseline
start=$(date +%s)
for t in $all_tests; do
    if ! test_exists "$base" "$t"; then baseline[$t]=NO-SUCH-TEST
    elif run_test "$base" "$t" "$logs/baseline.log"; then baseline[$t]=pass
    else baseline[$t]=FAILED; fi
    printf '%-36s %-16s %s\n' "(baseline)" "$t" "${baseline[$t]}"
done
echo "baseline: $(( $(date +%s) - start )) s"

# --- the mutations -----------------------------------------------------------------
results=()
bad=0
for i in "${!names[@]}"; do
    name=${names[$i]}
    tests=${tests_of[$i]}
    log="$logs/$name.log"
    start=$(date +%s)
    result=""
    why=""
    for t in $tests; do
        case ${baseline[$t]} in
        NO-SUCH-TEST) result=NO-SUCH-TEST ;;
        FAILED) result=BASELINE-FAILED ;;
        esac
    done
    if [ -z "$result" ]; then
        rm -rf "$work/m"
        cp -a "$base" "$work/m"
        if ! $MUTATE apply "$LIST" "$name" "$work/m" >"$log" 2>&1; then
            result=STALE
        else
            changed=$(tail -1 "$log")
            (cd "$work/m" && diff -u "$base/$changed" "$changed") >>"$log" 2>&1
            # shellcheck disable=SC2086
            case $changed in
            *.c | *.h) build "$work/m" "$log" $tests || result=BUILD-FAILED ;;
            esac
        fi
    fi
    if [ -z "$result" ]; then
        result=SURVIVED
        for t in $tests; do
            if ! run_test "$work/m" "$t" "$log"; then
                result="caught"
                [ "$t" != "${tests%% *}" ] && result="caught ($t)"
                # what caught it: the first failed assertion after this test's header
                why=$(sed -n "/^--- $t\$/,\$p" "$log" |
                    grep -m1 -E '^ *not ok |Failed test|:[FE]:|^psql:.*ERROR' |
                    sed -E 's/^ +//; s/\s+/ /g' | cut -c1-90)
                break
            fi
        done
    fi
    [[ "$result" == caught* ]] || bad=$((bad + 1))
    secs=$(( $(date +%s) - start ))
    row=$(printf '%-36s %-16s %-16s %4s  %s' "$name" "$tests" "$result" "$secs" "$why")
    results+=("$row")
    echo "$row"
done
rm -rf "$work/m"

echo
printf '%-36s %-16s %-16s %4s  %s\n' mutation tests result s "caught by (the first failure)"
printf '%s\n' "${results[@]}"
echo "${#names[@]} mutations: $(( ${#names[@]} - bad )) caught, $bad not"
[ "$bad" = 0 ]
