#!/usr/bin/env bash
# migrate is idempotent and refuses edited files; configuration errors name the option.
# Every migrate here runs as outbox_owner, a CREATEROLE owner that is not a
# superuser (tests/lib/pgcluster.sh), except the legacy database of part D,
# built as a superuser built it before 0021.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

export DATABASE_URL=$OWNER_URL
out=$("$RELAY_BIN" migrate --migrations-dir "$ITEST_ROOT/migrations" 2>&1)
is "$?" 0 "second migrate exits 0"
ok "second migrate is a no-op" grep -q '^up to date: .* nothing pending' <<<"$out"
schema_digest() { pg_dump --schema-only --schema=outbox | grep -v restrict | md5sum; }
before=$(schema_digest)
is "$(sql "SELECT count(*) FROM outbox_meta.migrations")" "$(ls "$ITEST_ROOT"/migrations/0*.sql | wc -l)" \
    "one row per migration file"

edited=$T/migrations-edited
cp -r "$ITEST_ROOT/migrations" "$edited"
echo "-- an innocent-looking edit" >>"$edited/0002_enqueue.sql"
out=$("$RELAY_BIN" migrate --migrations-dir "$edited" 2>&1)
is "$?" 1 "migrate with an edited applied file exits 1"
ok "and says which file changed" grep -q 'refusing to run: 0002_enqueue.sql was changed after it was applied' <<<"$out"
is "$(schema_digest)" "$before" "and changed nothing"

echo "SELECT 1/0;" >"$T/0099_broken.sql"
cp -r "$ITEST_ROOT/migrations" "$T/m2" && cp "$T/0099_broken.sql" "$T/m2/"
echo "CREATE TABLE outbox.should_vanish (x int);" >"$T/m2/0098_ok.sql"
out=$("$RELAY_BIN" migrate --migrations-dir "$T/m2" 2>&1)
is "$?" 1 "a failing migration exits 1"
ok "naming the file" grep -q '0099_broken.sql failed, nothing of it was applied' <<<"$out"
is "$(sql "SELECT count(*) FROM outbox_meta.migrations WHERE name = '0098_ok.sql'")" 1 "earlier files stay applied"
is "$(sql "SELECT count(*) FROM outbox_meta.migrations WHERE name = '0099_broken.sql'")" 0 "the failed file is not recorded"

# Two migrates at once: the advisory lock serialises them; both succeed.
fresh=$(pgcluster_owner_db fresh) || bail "cannot create database fresh"
( "$RELAY_BIN" migrate --db "$fresh" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m-a.log" 2>&1; echo $? >"$T/m-a.rc" ) &
( "$RELAY_BIN" migrate --db "$fresh" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m-b.log" 2>&1; echo $? >"$T/m-b.rc" ) &
wait
is "$(cat "$T/m-a.rc")$(cat "$T/m-b.rc")" 00 "two concurrent migrates both exit 0"
is "$(psql -X -tA -d fresh -c "SELECT count(*) FROM outbox_meta.migrations")" \
    "$(ls "$ITEST_ROOT"/migrations/0*.sql | wc -l)" "each file applied once"

# D. A database migrated before 0021, by a superuser, with the texts of
# 0008-0020 as they were (function SET clauses of custom settings, which only
# a superuser may create): migrate accepts those texts (migrations/amended),
# applies 0021, and the schema is then the same as a fresh one's.
mkdir -p "$T/legacy"
cp "$ITEST_ROOT"/migrations/00{0,1}*.sql "$ITEST_ROOT"/migrations/0020_*.sql "$T/legacy/"
python3 - "$T/legacy" <<'PY'
import glob, os, sys
d = sys.argv[1]
for p in glob.glob(os.path.join(d, "*.sql")):
    t = open(p).read()
    t = t.replace(" SET search_path = pg_catalog, pg_temp AS $$  -- SET outbox.in_enqueue: see 0021",
                  " SET search_path = pg_catalog, pg_temp SET outbox.in_enqueue = 'on' AS $$")
    if os.path.basename(p).startswith("0020_"):
        t = t.replace("SET plan_cache_mode = force_generic_plan AS $$",
                      "SET plan_cache_mode = force_generic_plan\nSET \"outbox.in_record\" = 'on' AS $$")
    open(p, "w").write(t)
PY
rm -f "$T"/legacy/0021_*.sql
sql "CREATE DATABASE legacy" >/dev/null
legacy="postgresql://postgres@127.0.0.1:$PGPORT/legacy"
"$RELAY_BIN" migrate --db "$legacy" --migrations-dir "$T/legacy" >"$T/legacy.log" 2>&1
is "$?" 0 "D: a superuser applies the texts of 0001-0020 as they were before 0021"
is "$(sha256sum "$T"/legacy/00{08,10,12,13,16,17,20}_*.sql | awk '{ print $1 }' | sort | tr '\n' ' ')" \
    "$(grep -v '^#' "$ITEST_ROOT/migrations/amended" | awk '{ print $2 }' | sort | tr '\n' ' ')" \
    "D: those texts are the ones migrations/amended names (not vacuous)"
out=$("$RELAY_BIN" migrate --db "$legacy" --migrations-dir "$ITEST_ROOT/migrations" 2>&1)
is "$?" 0 "D: migrate accepts the amended texts and applies what follows"
ok "D: it applied 0021 only" grep -q '^applied 0021_owner_without_superuser.sql' <<<"$out"
norm_dump() { pg_dump --schema-only --schema=outbox --no-owner -d "$1" | grep -v -E '^--|^$|restrict'; }
norm_dump legacy >"$T/legacy.dump"
norm_dump fresh >"$T/fresh.dump"
ok "D: its schema is now the same as a fresh one's" diff -u "$T/fresh.dump" "$T/legacy.dump"
psql -X -q -d legacy -c "UPDATE outbox_meta.migrations SET checksum = repeat('ab', 32) WHERE name = '0013_ordering.sql'"
out=$("$RELAY_BIN" migrate --db "$legacy" --migrations-dir "$ITEST_ROOT/migrations" 2>&1)
is "$?" 1 "D: a checksum that is neither the file's nor an amended one is still refused"
ok "D: naming the file" grep -q 'refusing to run: 0013_ordering.sql was changed after it was applied' <<<"$out"
out=$("$RELAY_BIN" migrate --db "$legacy" --migrations-dir "$T/nowhere" 2>&1)
ok "D: a missing directory's error says how to point at the migrations" \
    grep -q 'cannot open migrations directory .*/nowhere: No such file or directory (say where they are with --migrations-dir or OUTBOX_RELAY_MIGRATIONS_DIR)' <<<"$out"

out=$("$RELAY_BIN" run --batch-size abc 2>&1)
is "$?" 2 "bad value exits 2"
is "$out" "outbox-relay: invalid value 'abc' for --batch-size (OUTBOX_RELAY_BATCH_SIZE, from command line): expected an integer from 1 to 10000" \
    "bad value message names the option and its variable"
out=$(OUTBOX_RELAY_LEASE_MS=5 "$RELAY_BIN" run 2>&1)
is "$?" 2 "bad environment value exits 2"
ok "names the variable" grep -q "invalid value '5' for --lease-ms (OUTBOX_RELAY_LEASE_MS, from OUTBOX_RELAY_LEASE_MS)" <<<"$out"
out=$("$RELAY_BIN" run --no-such-thing 2>&1)
is "$?" 2 "unknown option exits 2"
is "$out" "outbox-relay: unknown option '--no-such-thing' (see --help)" "unknown option message"
ok "--help lists every option with its variable" bash -c "'$RELAY_BIN' --help | grep -q OUTBOX_RELAY_GRACE_MS"
out=$("$RELAY_BIN" migrate --db "postgresql://nobody@127.0.0.1:1/none" 2>&1)
is "$?" 1 "migrate against an unreachable database exits 1"
ok "with a clear message" grep -q '^outbox-relay migrate: cannot connect to the database' <<<"$out"
itest_done
