#!/usr/bin/env bash
# tests/lib/lint-selftest.sh — the document and commit lints fail on a planted
# contradiction, and pass on the tree as it is.
#
# A lint that never fails proves nothing. Each case copies what the lint reads
# into a temp tree, plants one contradiction (a default that --help does not
# give, an option or a function that does not exist, a link to a missing
# section, a commit subject too long), runs the lint with ROOT=that tree and
# expects it to fail, naming the planted thing; and the unplanted copy passes.
# The commit check is tried on a throwaway clone: a long subject and a
# measurement after the cutoff fail, the same before it pass, and a shallow
# clone or a clone without the cutoff says so and passes.
# Run by the lint suite (tests/run.sh); TAP on stdout, exit 1 on a failure.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$root/tests/lib
export RELAY_BIN=${RELAY_BIN:-$root/build/outbox-relay}
T=$(mktemp -d /tmp/outbox-lint-selftest.XXXXXX)
trap 'rm -rf "$T"' EXIT
n=0 failed=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; sed -e 's/^/#   /' "$T/out"; }

# fresh_tree DIR: the documents, the schema and the tests' index, as they are.
fresh_tree() {
    rm -rf "$1"
    mkdir -p "$1/docs" "$1/deploy" "$1/schema" "$1/tests/mutants"
    cp "$root"/README.md "$root"/HACKING.md "$root"/CHANGELOG.md "$1/"
    cp "$root"/docs/*.md "$1/docs/"
    cp "$root"/deploy/*.md "$1/deploy/"
    cp -r "$root/schema/outbox" "$1/schema/"
    cp "$root/tests/README.md" "$1/tests/"
    cp "$root/tests/mutants/mutations" "$1/tests/mutants/"
    (cd "$root" && find tests -path '*/node_modules' -prune -o -type f \( -name '*.sh' -o -name '*.sql' \
        -o -name '*.c' -o -name '*.h' -o -name '*.py' \) -exec cp --parents -t "$1" {} +)
}

# expect_fail LINT NEEDLE DESCRIPTION: the lint, on $T/tree, exits non-zero and says NEEDLE.
expect_fail() {
    ROOT=$T/tree "$lib/$1" >"$T/out" 2>&1
    local rc=$?
    if [ "$rc" != 0 ] && grep -qF -- "$2" "$T/out"; then ok "$3"; else not_ok "$3 (exit $rc)"; fi
}
expect_pass() {
    ROOT=$T/tree "$lib/$1" >"$T/out" 2>&1
    local rc=$?
    if [ "$rc" = 0 ]; then ok "$2"; else not_ok "$2 (exit $rc)"; fi
}

if [ ! -x "$RELAY_BIN" ]; then
    echo "not ok 1 - no relay binary at $RELAY_BIN (make build/outbox-relay)"
    exit 1
fi

# ---- the unplanted tree passes every lint
fresh_tree "$T/tree"
for lint in options-doc.py docs-names.py docs-toc.py tests-readme.py; do
    expect_pass "$lint" "$lint passes on the documents as they are"
done

# ---- docs/options.md against --help
sed -i 's/^| `--lease-ms=VALUE` | `OUTBOX_RELAY_LEASE_MS` | `30000` |/| `--lease-ms=VALUE` | `OUTBOX_RELAY_LEASE_MS` | `60000` |/' "$T/tree/docs/options.md"
expect_fail options-doc.py "--lease-ms: docs/options.md says default '60000', --help '30000'" \
    "options-doc: a default that --help does not give fails"
fresh_tree "$T/tree"
echo '| `--lease-secs=VALUE` | `OUTBOX_RELAY_LEASE_SECS` | `30` | lease in seconds |' >>"$T/tree/docs/options.md"
expect_fail options-doc.py "documents --lease-secs, which --help does not have" \
    "options-doc: an option --help does not have fails"
fresh_tree "$T/tree"
sed -i '/^| `--grace-ms=VALUE`/d' "$T/tree/docs/options.md"
expect_fail options-doc.py "--grace-ms is in --help, not in docs/options.md" \
    "options-doc: an option of --help left out fails"
fresh_tree "$T/tree"
sed -i '/^| `redrive/d' "$T/tree/docs/options.md"
expect_fail options-doc.py "command redrive is in --help, not in docs/options.md" \
    "options-doc: a command of --help left out fails"

# ---- names in the documents: schema objects, commands, options
fresh_tree "$T/tree"
echo 'Call `outbox.take_over_all(10)`.' >>"$T/tree/docs/operations.md"
expect_fail docs-names.py "outbox.take_over_all is not in the schema" \
    "docs-names: an outbox. function the schema does not have fails"
fresh_tree "$T/tree"
echo 'Its `outbox.targets.retry_budget_ratio` is gone.' >>"$T/tree/docs/targets.md"
expect_fail docs-names.py "targets has no column retry_budget_ratio" \
    "docs-names: a column the table does not have fails"
fresh_tree "$T/tree"
printf '\n```sh\nbuild/outbox-relay requeue run-7f3a:step-4\n```\n' >>"$T/tree/README.md"
expect_fail docs-names.py "outbox-relay requeue: no such command" \
    "docs-names: a command --help does not list fails"
fresh_tree "$T/tree"
printf '\n```sh\noutbox-relay run --db "$URL" \\\n    --max-inflight 10\n```\n' >>"$T/tree/deploy/README.md"
expect_fail docs-names.py "--max-inflight: no such option" \
    "docs-names: an option on a continued command line that --help does not have fails"
fresh_tree "$T/tree"
echo 'Raise `--mcp-wait-seconds`.' >>"$T/tree/docs/mcp.md"
expect_fail docs-names.py "--mcp-wait-seconds: no such option" \
    "docs-names: an option named alone that --help does not have fails"

fresh_tree "$T/tree"
sed -i '/^| `forget_pre_retention`/d' "$T/tree/docs/targets.md"
expect_fail docs-names.py "docs/targets.md does not name the column forget_pre_retention of outbox.targets" \
    "docs-names: a column of outbox.targets left out of docs/targets.md fails"

fresh_tree "$T/tree"
sed -i '/^| `approvals`/d' "$T/tree/docs/operations.md"
expect_fail docs-names.py "docs/operations.md's command table has no row for approvals" \
    "docs-names: a command of --help without its row in docs/operations.md fails"

# ---- section links
fresh_tree "$T/tree"
echo 'See [the front door](docs/mcp.md#the-backdoor).' >>"$T/tree/README.md"
expect_fail docs-toc.py "links to docs/mcp.md#the-backdoor, which has no such section" \
    "docs-toc: a link to a missing section fails"

# ---- tests/README.md names only files that exist
fresh_tree "$T/tree"
echo '- The ghost: tests/integration/99_ghost.sh.' >>"$T/tree/tests/README.md"
expect_fail tests-readme.py "names tests/integration/99_ghost.sh, which does not exist" \
    "tests-readme: a test file that does not exist fails"

# ---- commit subjects, on a throwaway clone
G=$T/repo
git init -q "$G"
commit() { git -C "$G" -c user.name=t -c user.email=t@t commit -q --allow-empty -m "$1"; }
commit "a subject before the cutoff that is much longer than seventy-two characters, which is allowed"
commit "the cutoff"
cutoff=$(git -C "$G" rev-parse HEAD)
commit "a short subject"
CUTOFF=$cutoff ROOT=$G "$lib/commit-subjects.py" >"$T/out" 2>&1
if [ $? = 0 ]; then ok "commit-subjects: short subjects after the cutoff pass, a long one before it is left alone"
else not_ok "commit-subjects: short subjects after the cutoff pass"; fi
commit "a subject after the cutoff that is much longer than seventy-two characters, which is refused"
CUTOFF=$cutoff ROOT=$G "$lib/commit-subjects.py" >"$T/out" 2>&1
if [ $? != 0 ] && grep -q 'the subject has 92 characters' "$T/out"; then ok "commit-subjects: a long subject fails"
else not_ok "commit-subjects: a long subject fails"; fi
git -C "$G" reset -q --hard HEAD~1
commit "claims answered in 875 ms"
CUTOFF=$cutoff ROOT=$G "$lib/commit-subjects.py" >"$T/out" 2>&1
if [ $? != 0 ] && grep -q 'names a measurement (875 ms)' "$T/out"; then ok "commit-subjects: a measurement in the subject fails"
else not_ok "commit-subjects: a measurement in the subject fails"; fi
git clone -q --depth 1 "file://$G" "$T/shallow" 2>/dev/null
CUTOFF=$cutoff ROOT=$T/shallow "$lib/commit-subjects.py" >"$T/out" 2>&1
if [ $? = 0 ] && grep -q 'shallow' "$T/out"; then ok "commit-subjects: a shallow clone says so and passes"
else not_ok "commit-subjects: a shallow clone says so and passes"; fi
CUTOFF=0123456789abcdef0123456789abcdef01234567 ROOT=$G "$lib/commit-subjects.py" >"$T/out" 2>&1
if [ $? = 0 ] && grep -q 'is not in this clone' "$T/out"; then ok "commit-subjects: a clone without the cutoff says so and passes"
else not_ok "commit-subjects: a clone without the cutoff says so and passes"; fi

echo "1..$n"
[ "$failed" = 0 ]
