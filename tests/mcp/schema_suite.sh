#!/usr/bin/env bash
# schema_suite.sh — the official JSON Schema test suite (Debian's
# json-schema-test-suite) against the MCP front door's validator
# (relay/mcp/json_schema.c), built with ASan+UBSan as build/schema-suite.
#
#   tests/mcp/schema_suite.sh         the newest draft the package ships, then
#                                     tests/mcp/schema_exact (our cases of exact
#                                     numbers, in the suite's format: 19.99 and
#                                     multipleOf 0.01, 2^53 + 1, 1e400), then
#                                     tests/mcp/schema_2020_12 (the upstream
#                                     suite's draft2020-12 files of the keywords
#                                     added for issue 36: applicators, $ref/$defs,
#                                     format, prefixItems, patternProperties...;
#                                     see its README), then tests/mcp/schema_subset
#                                     (our own: FastMCP and zod schemas, and what
#                                     the check must refuse, with its message)
#   tests/mcp/schema_suite.sh DIR...  those folders instead
#
# Then tests/mcp/schema_agreement.sh hands every schema met, with the C
# check's verdict, to the SQL check of registration (a throwaway cluster with
# migrations/): one more TAP line per schema, "ok - agreement: ...".
#
# The package's draft2020-12 folder is used when it has one; Debian 12's
# (2.0.0) stops at draft7, whose tests of the subset's keywords mean the same
# (json_schema.h). TAP on stdout, with the lines "schema-suite: N passed,
# N failed, N skipped" and "schema-agreement: N agree, N disagree, N
# skipped"; exit 0 only when nothing failed or disagreed.
set -euo pipefail
cd "$(dirname "$0")/../.."

pkg=json-schema-test-suite
if ! dpkg -s "$pkg" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y "$pkg" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "$pkg" >/dev/null; }
    else
        echo "schema_suite: $pkg is missing: apt-get install -y $pkg" >&2
        exit 1
    fi
fi

if [ $# -gt 0 ]; then
    dirs=("$@")
else
    tests=$(dpkg -L "$pkg" | grep -E '/tests/draft[^/]+$' || true)
    dir=""
    for draft in draft2020-12 draft2019-09 draft7; do
        dir=$(printf '%s\n' "$tests" | grep -E "/$draft\$" | head -n 1 || true)
        [ -n "$dir" ] && break
    done
    if [ -z "$dir" ]; then
        echo "schema_suite: no draft2020-12, draft2019-09 or draft7 folder in $pkg" >&2
        exit 1
    fi
    dirs=("$dir" tests/mcp/schema_exact tests/mcp/schema_2020_12 tests/mcp/schema_subset)
fi

make --no-print-directory build/schema-suite >&2
verdicts=$(mktemp)
trap 'rm -f "$verdicts"' EXIT
rc=0
build/schema-suite --verdicts "$verdicts" "${dirs[@]}" || rc=$?
# the same schemas, judged by the SQL check at registration: the same verdict
tests/mcp/schema_agreement.sh "$verdicts" || rc=1
exit "$rc"
