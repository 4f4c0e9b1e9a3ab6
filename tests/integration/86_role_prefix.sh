#!/usr/bin/env bash
# Databases that share a cluster do not share their outboxes (issue 38, item 5;
# migrations/0041_role_prefix.sql, relay/cli/migrate.c's MOVE_GRANTS_SQL).
# One cluster: "postgres" installed as before (no prefix, by itest_setup),
# tenant_a migrated with --role-prefix acme and tenant_b with --role-prefix
# beta, each by outbox_owner (CREATEROLE, not a superuser).
#   - each prefix's five group roles exist, NOLOGIN; no plain outbox_* group
#     role holds any privilege in a prefixed database;
#   - the app login of each prefix enqueues in its own database and is refused
#     in the other's and in the plain one ("permission denied for schema
#     outbox"), as is a login of the plain outbox_app in both prefixed ones;
#     the relay logins likewise; after REVOKE CONNECT ... FROM PUBLIC the
#     other prefix cannot even connect;
#   - a relay logged in with acme's relay role delivers tenant_a's intents,
#     beta's tenant_b's, and a front door with acme's mcp role answers a
#     tools/call in tenant_a; an operator login of acme listed in
#     outbox.isolated_logins is not isolated (outbox.isolated asks for this
#     database's operator role, outbox.role_name);
#   - migrate again: the same prefix or none is a no-op; another prefix, or a
#     prefix on the plain install, is refused with a message naming both;
#   - a first install interrupted before 0041 (migrations up to 0039 with
#     --role-prefix gamma) is finished with the prefix its grants show, and
#     refused with another;
#   - under a prefix, a migration that grants to an outbox_* group role
#     migrate does not know is refused, and nothing of it stays.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

migrate() { # migrate URL [options] → its output; exit status kept
    "$RELAY_BIN" migrate --db "$1" --migrations-dir "$ITEST_ROOT/migrations" "${@:2}" 2>&1
}
url() { echo "postgresql://$1@127.0.0.1:$PGPORT/$2"; }
as() { # as LOGIN DB SQL → psql as that login; stderr kept in $T/as.err
    psql -X -q -tA -v ON_ERROR_STOP=1 "$(url "$1" "$2")" -c "$3" 2>"$T/as.err"
}
first_error() { grep -m1 '^\(ERROR\|psql: error\|FATAL\)' "$T/as.err" | sed 's/^psql: error: .*FATAL:/FATAL:/'; }

A_URL=$(pgcluster_owner_db tenant_a) || bail "no tenant_a"
B_URL=$(pgcluster_owner_db tenant_b) || bail "no tenant_b"
out=$(migrate "$A_URL" --role-prefix acme)
is "$?" 0 "tenant_a migrated with --role-prefix acme as a non-superuser owner"
out=$(migrate "$B_URL" --role-prefix beta)
is "$?" 0 "tenant_b migrated with --role-prefix beta"

is "$(sql "SELECT string_agg(rolname, ' ' ORDER BY rolname) FROM pg_roles
            WHERE rolname LIKE 'acme\_%' AND NOT rolcanlogin AND NOT rolsuper AND NOT rolcreaterole")" \
    "acme_outbox_admin acme_outbox_app acme_outbox_mcp acme_outbox_operator acme_outbox_relay" \
    "acme's five group roles exist, NOLOGIN"
is "$(psql -X -tA -d tenant_a -c "SELECT role_prefix FROM outbox.installation")" acme "tenant_a records acme"
is "$(psql -X -tA -d tenant_b -c "SELECT role_prefix FROM outbox.installation")" beta "tenant_b records beta"
is "$(sql "SELECT role_prefix FROM outbox.installation")" "" "the plain install records no prefix"
plain_grants() { # privileges of plain outbox_* group roles in database $1
    psql -X -tA -d "$1" -c "
      SELECT count(*) FROM (
        SELECT a.grantee FROM pg_namespace n, aclexplode(n.nspacl) a
        UNION ALL SELECT a.grantee FROM pg_class c, aclexplode(c.relacl) a
        UNION ALL SELECT a.grantee FROM pg_attribute t, aclexplode(t.attacl) a
        UNION ALL SELECT a.grantee FROM pg_proc p, aclexplode(p.proacl) a
        UNION ALL SELECT a.grantee FROM pg_type t, aclexplode(t.typacl) a) g
      JOIN pg_roles r ON r.oid = g.grantee WHERE r.rolname LIKE 'outbox\_%' AND NOT r.rolcanlogin"
}
is "$(plain_grants tenant_a):$(plain_grants tenant_b)" "0:0" "no plain outbox_* role holds a privilege in either"
is "$(psql -X -tA -d tenant_a -c "SELECT has_function_privilege('acme_outbox_app',
        'outbox.enqueue(text, text, jsonb, text, timestamptz, text, text)', 'EXECUTE'),
        has_table_privilege('acme_outbox_relay', 'outbox.targets', 'SELECT'),
        pg_has_role('acme_outbox_admin', 'acme_outbox_operator', 'MEMBER')")" "t|t|t" \
    "acme's roles hold what the plain ones hold elsewhere (admin is an operator)"

sql "CREATE ROLE acme_app LOGIN; GRANT acme_outbox_app TO acme_app;
     CREATE ROLE beta_app LOGIN; GRANT beta_outbox_app TO beta_app;
     CREATE ROLE plain_app LOGIN; GRANT outbox_app TO plain_app;
     CREATE ROLE acme_relay LOGIN; GRANT acme_outbox_relay TO acme_relay;
     CREATE ROLE beta_relay LOGIN; GRANT beta_outbox_relay TO beta_relay;
     CREATE ROLE acme_ops LOGIN; GRANT acme_outbox_operator TO acme_ops;
     CREATE ROLE acme_door LOGIN; GRANT acme_outbox_mcp TO acme_door" >/dev/null

receiver_start r
for db in tenant_a tenant_b postgres; do
    psql -X -q -d "$db" -c "INSERT INTO outbox.targets (name, url) VALUES ('api', 'http://127.0.0.1:$RECV_PORT_r/act')"
done
DENIED="ERROR:  permission denied for schema outbox"
ENQ() { echo "SELECT (outbox.enqueue('$1', 'api', '{}')).inserted"; }

is "$(as acme_app tenant_a "$(ENQ a:1)")" t "acme's app login enqueues in tenant_a"
is "$(as beta_app tenant_b "$(ENQ b:1)")" t "beta's app login enqueues in tenant_b"
is "$(as plain_app postgres "$(ENQ p:1)")" t "the plain app login enqueues in the plain install, as before"
for probe in "beta_app tenant_a" "acme_app tenant_b" "plain_app tenant_a" "plain_app tenant_b" "acme_app postgres"; do
    set -- $probe
    as "$1" "$2" "$(ENQ "x:$1")" >/dev/null
    is "$?:$(first_error)" "1:$DENIED" "$1 cannot enqueue into $2's outbox"
done
as beta_relay tenant_a "SELECT outbox.next_due_ms()" >/dev/null
is "$?:$(first_error)" "1:$DENIED" "beta's relay login cannot reach tenant_a's outbox"
is "$(psql -X -tA -d tenant_a -c "SELECT count(*) FROM outbox.intents")" 1 "tenant_a holds only its own intent"

relay_start a --db "$(url acme_relay tenant_a)" --poll-interval-ms 100
relay_start b --db "$(url beta_relay tenant_b)" --poll-interval-ms 100
ok "acme's relay delivers tenant_a's intent" wait_cmd 30 \
    bash -c "[ \"\$(psql -X -tA -d tenant_a -c \"SELECT state FROM outbox.intents WHERE key = 'a:1'\")\" = succeeded ]"
ok "beta's relay delivers tenant_b's intent" wait_cmd 30 \
    bash -c "[ \"\$(psql -X -tA -d tenant_b -c \"SELECT state FROM outbox.intents WHERE key = 'b:1'\")\" = succeeded ]"
is "$(as acme_app tenant_a "SELECT status FROM outbox.outcome('a:1')")" succeeded "acme's app reads its outcome"

# The operator role by name: an acme operator listed as isolated is not isolated.
psql -X -q -d tenant_a -c "INSERT INTO outbox.isolated_logins (login, note) VALUES ('acme_ops', 'by mistake')"
is "$(as acme_ops tenant_a "SELECT count(*) FROM outbox.outcome('a:1')")" 1 \
    "an acme operator listed in isolated_logins still reads every key (outbox.role_name)"
as acme_ops tenant_b "SELECT count(*) FROM outbox.intents" >/dev/null
is "$?:$(first_error)" "1:$DENIED" "acme's operator cannot read tenant_b"

# The front door with acme's mcp role.
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
psql -X -q -d tenant_a -c "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('act', 'api', 'acts')" \
    -c "SELECT outbox.mcp_client('agent', '$TOKEN')" >/dev/null
"$RELAY_BIN" mcp --db "$(url acme_door tenant_a)" --mcp-listen 127.0.0.1:0 >>"$T/mcp.log" 2>&1 &
MCP_PID=$!
ITEST_PIDS+=("$MCP_PID")
wait_cmd 10 grep -q '"event":"mcp_listening"' "$T/mcp.log" || bail "the front door did not start"
MCP_PORT=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$T/mcp.log" | tail -1)
call=$(python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$MCP_PORT" "$TOKEN" call act k-1 '{"n": 1}')
is "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["result"]["structuredContent"]["status"])' "$call" 2>&1)" \
    succeeded "the front door logged in with acme's mcp role: a tools/call in tenant_a succeeds"

# CONNECT: what docs/operations.md tells an operator to revoke.
psql -X -q -d postgres -c "REVOKE CONNECT ON DATABASE tenant_a FROM PUBLIC" \
    -c "GRANT CONNECT ON DATABASE tenant_a TO acme_outbox_app, acme_outbox_relay, acme_outbox_operator,
                                              acme_outbox_admin, acme_outbox_mcp"
as beta_app tenant_a "SELECT 1" >/dev/null
is "$?:$(first_error)" \
    "2:FATAL:  permission denied for database \"tenant_a\"" "after REVOKE CONNECT, beta's login cannot connect to tenant_a"
is "$(as acme_app tenant_a "$(ENQ a:2)")" t "acme's app login still can"

# migrate again.
out=$(migrate "$A_URL" --role-prefix acme)
is "$?:$(tail -1 <<<"$out" | cut -c1-10)" "0:up to date" "migrate again with the same prefix: a no-op"
out=$(migrate "$A_URL")
is "$?:$(tail -1 <<<"$out" | cut -c1-10)" "0:up to date" "and with none: the recorded one"
out=$(migrate "$A_URL" --role-prefix beta)
is "$?:$out" "1:outbox-relay migrate: refusing to run: this database's outbox was installed with role prefix 'acme' (its roles are acme_outbox_app, acme_outbox_relay, ...), not 'beta'; a prefix is taken on a first install only" \
    "another prefix is refused, naming both"
out=$(migrate "$OWNER_URL" --role-prefix acme)
is "$?:$out" "1:outbox-relay migrate: refusing to run: this database's outbox was installed without a role prefix (its roles are outbox_app, outbox_relay, ...); --role-prefix 'acme' is taken on a first install only" \
    "a prefix on the plain install is refused"
is "$(psql -X -tA -d tenant_a -c "SELECT role_prefix FROM outbox.installation")" acme "tenant_a still records acme"

# A first install interrupted before 0041.
mkdir "$T/old"
for f in "$ITEST_ROOT"/migrations/0*.sql "$ITEST_ROOT/migrations/amended"; do
    [[ $(basename "$f") < 0041 || $(basename "$f") = amended ]] && cp "$f" "$T/old/"
done
C_URL=$(pgcluster_owner_db tenant_c) || bail "no tenant_c"
"$RELAY_BIN" migrate --db "$C_URL" --migrations-dir "$T/old" --role-prefix gamma >"$T/c.out" 2>&1
is "$?:$(plain_grants tenant_c)" "0:0" "tenant_c installed up to 0040 with --role-prefix gamma"
out=$(migrate "$C_URL" --role-prefix delta)
is "$?:$out" "1:outbox-relay migrate: refusing to run: this database's outbox was installed with role prefix 'gamma' (its roles are gamma_outbox_app, gamma_outbox_relay, ...), not 'delta'; a prefix is taken on a first install only" \
    "before 0041 the prefix is read from the grants: another one is refused"
out=$(migrate "$C_URL")
is "$?:$(psql -X -tA -d tenant_c -c "SELECT role_prefix FROM outbox.installation")" "0:gamma" \
    "migrate without the option finishes it and records gamma"

# A migration that grants to an outbox_* group role migrate does not know.
mkdir "$T/new"
cp "$ITEST_ROOT"/migrations/0*.sql "$ITEST_ROOT/migrations/amended" "$T/new/"
echo "CREATE ROLE outbox_reader NOLOGIN; GRANT SELECT ON outbox.intents TO outbox_reader;" >"$T/new/0999_reader.sql"
"$RELAY_BIN" migrate --db "$C_URL" --migrations-dir "$T/new" >"$T/reader.out" 2>&1
is "$?:$(grep -c "0999_reader.sql: giving its grants to the roles of prefix 'gamma' failed, nothing of it was applied: ERROR:  it grants to outbox_reader, a role that migrate does not know how to prefix" "$T/reader.out")" \
    "1:1" "a migration granting to an unknown outbox_* role is refused under a prefix"
is "$(sql "SELECT count(*) FROM pg_roles WHERE rolname = 'outbox_reader'")" 0 "and nothing of it stays"

for n in a b; do
    kill -TERM "$(eval echo "\$RELAY_PID_$n")"
    relay_wait "$n" 20
    is "$?" 0 "relay $n exits 0"
done
kill -TERM "$MCP_PID"
ok "no sanitizer report" relay_logs_clean
itest_done
