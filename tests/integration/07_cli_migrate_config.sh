#!/usr/bin/env bash
# migrate is idempotent and refuses edited files; configuration errors name the option.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

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
createdb fresh
( "$RELAY_BIN" migrate --db "dbname=fresh" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m-a.log" 2>&1; echo $? >"$T/m-a.rc" ) &
( "$RELAY_BIN" migrate --db "dbname=fresh" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m-b.log" 2>&1; echo $? >"$T/m-b.rc" ) &
wait
is "$(cat "$T/m-a.rc")$(cat "$T/m-b.rc")" 00 "two concurrent migrates both exit 0"
is "$(psql -X -tA -d fresh -c "SELECT count(*) FROM outbox_meta.migrations")" \
    "$(ls "$ITEST_ROOT"/migrations/0*.sql | wc -l)" "each file applied once"

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
