#!/usr/bin/env bash
# schema_agreement.sh — the registration check in SQL and the front door's
# check in C decide alike (issue 36, deliverable 5).
#
#   tests/mcp/schema_agreement.sh VERDICTS
#
# VERDICTS is what `build/schema-suite --verdicts FILE DIR...` wrote: every
# schema of the JSON Schema test suite (and of tests/mcp/schema_subset), with
# json_schema_check's verdict and message. A throwaway cluster gets
# migrations/, and outbox.mcp_schema_problem (what the mcp_tools trigger
# refuses with OR020) judges each schema. One TAP line per schema:
#   - C accepts: SQL must find no problem (the tool registers);
#   - C refuses: SQL must find one, and when C's message names a keyword
#     ("unsupported keyword \"if\"", "\"$ref\" loops ..."), SQL's names it too;
#     a refused "pattern" is refused with the same words.
# Listed exception, counted as skipped: a schema jsonb cannot hold (a string
# with \u0000) can never be registered, so SQL has nothing to judge.
# The last line: "schema-agreement: N agree, N disagree, N skipped"; exit 0
# only when none disagree.
set -euo pipefail
cd "$(dirname "$0")/../.."
verdicts=$(realpath "$1")
. tests/lib/pgcluster.sh
work=$(mktemp -d)
chmod 755 "$work"
trap 'pgcluster_stop "$work/pg" >/dev/null 2>&1; rm -rf "$work"' EXIT
pgcluster_start "$work/pg" >/dev/null 2>&1 || { echo "schema_agreement: cannot start PostgreSQL" >&2; exit 1; }
for m in migrations/0*.sql; do
    PGUSER=outbox_owner psql -X -q -v ON_ERROR_STOP=1 -d postgres -f "$m" >/dev/null 2>"$work/err" ||
        { cat "$work/err" >&2; echo "schema_agreement: $(basename "$m") failed" >&2; exit 1; }
done
cp "$verdicts" "$work/verdicts.jsonl"
chmod 644 "$work/verdicts.jsonl"
psql -X -q -v ON_ERROR_STOP=1 -At -d postgres <<SQL >"$work/out"
CREATE TEMP TABLE v (n serial, line text);
-- one JSON line per row, read raw (no quote or delimiter can occur)
\copy v (line) FROM '$work/verdicts.jsonl' WITH (FORMAT csv, QUOTE E'\x01', DELIMITER E'\x02')
CREATE TEMP TABLE r (n int, verdict text, what text, detail text);
DO \$\$
DECLARE
    row     record;
    doc     json;
    schema  jsonb;
    problem text;
    keyword text;
    ok      boolean;
BEGIN
    FOR row IN SELECT * FROM v ORDER BY n LOOP
        doc := row.line::json;
        BEGIN
            schema := (doc -> 'schema')::jsonb;
        EXCEPTION WHEN untranslatable_character OR invalid_text_representation THEN
            INSERT INTO r VALUES (row.n, 'skip', (doc ->> 'file') || ': ' || (doc ->> 'group'),
                                  'jsonb cannot hold this schema (\\u0000): it can never be registered');
            CONTINUE;
        END;
        problem := outbox.mcp_schema_problem(schema);
        keyword := substring(doc ->> 'error' from '"([^"]+)"');
        IF (doc ->> 'accepted')::boolean THEN
            ok := problem IS NULL;
        ELSE
            ok := problem IS NOT NULL AND (keyword IS NULL OR position(keyword IN problem) > 0);
            -- a refused pattern: the same words ("has a lookahead (?=: ...")
            IF ok AND doc ->> 'error' ~ '^"pattern" ' THEN
                keyword := ': ' || substring(doc ->> 'error' from '^"pattern" (.*) at /.*$');
                ok := right(problem, length(keyword)) = keyword;
            END IF;
        END IF;
        INSERT INTO r VALUES (row.n, CASE WHEN ok THEN 'ok' ELSE 'not ok' END,
                              (doc ->> 'file') || ': ' || (doc ->> 'group'),
                              'C: ' || coalesce(nullif(doc ->> 'error', ''), 'accepted') ||
                              ' | SQL: ' || coalesce(problem, 'accepted'));
    END LOOP;
END
\$\$;
SELECT CASE verdict WHEN 'skip' THEN 'ok - agreement: ' || what || ' # SKIP ' || detail
                    ELSE verdict || ' - agreement: ' || what || ' # ' || detail END
  FROM r ORDER BY n;
SELECT format('schema-agreement: %s agree, %s disagree, %s skipped',
              count(*) FILTER (WHERE verdict = 'ok'), count(*) FILTER (WHERE verdict = 'not ok'),
              count(*) FILTER (WHERE verdict = 'skip'))
  FROM r;
SQL
cat "$work/out"
! grep -q '^not ok' "$work/out" && grep -q '^schema-agreement: ' "$work/out"
