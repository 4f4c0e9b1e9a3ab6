#!/usr/bin/env bash
# The examples to start from (issue 22, item 7), run as a user would run them:
#   - docs/examples/node/refund-step.mjs (pg, pinned by its package-lock.json; npm ci into
#     build/examples/node) and docs/examples/python/refund_step.py (Debian's psycopg 3),
#     each run three times with one key as a login that has only outbox_app (and its
#     accounts), with a real relay delivering to the test receiver (Node) and to the
#     example inbox receiver (Python): inserted only the first time, one debit, one effect
#     at the receiver, "outcome: succeeded" every time; a target that is down makes the
#     step stop at its bound with exit 2; no such account rolls back the intent too
#   - docs/examples/python/inbox_receiver.py (schema/inbox.sql in its own database, as a
#     non-superuser owner): a second delivery of a key, sent directly, gets the stored
#     answer byte for byte and no second refund; four at once the same; another body 422;
#     its status URL
#   - deploy/docker-compose.yml: Debian's `docker-compose config -q` accepts it, and a copy
#     with one unknown key is refused (so the check is not vacuous); its services and their
#     wiring; then the stack's own SQL, without Docker, on a fresh PostgreSQL 15 with
#     password authentication: deploy/compose/initdb.sql with the db service's environment,
#     `outbox-relay migrate` with the migrate service's, deploy/compose/setup.sql with the
#     setup service's, the receiver with --install and the relay with theirs, and the Python
#     step as the compose's application login: succeeded; the MCP front door with its
#     service's environment: ready as its outbox_mcp login, listing setup.sql's tool.
# Installs what is missing (python3-psycopg, docker-compose, npm) with apt-get as root.
. "$(dirname "$0")/../lib/itest.sh"

# Debian's python3: python3-psycopg is installed for it (a python3 earlier on PATH, such
# as a pyenv one, would not see it).
PY=/usr/bin/python3
NODE_SRC=$ITEST_ROOT/docs/examples/node
NODE_DIR=$ITEST_ROOT/build/examples/node
COMPOSE_FILE=$ITEST_ROOT/deploy/docker-compose.yml

# --- what the examples need ----------------------------------------------------------
missing=()
"$PY" -c 'import psycopg, yaml' 2>/dev/null || missing+=(python3-psycopg python3-yaml)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    # --no-install-recommends: docker-compose recommends the Docker daemon, which
    # `docker-compose config` does not use.
    line="apt-get install -y -q --no-install-recommends ${missing[*]}"
    [ "$(id -u)" = 0 ] || bail "missing: ${missing[*]}; run: sudo $line"
    mkdir -p "$ITEST_ROOT/build/examples"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive $line; } >"$ITEST_ROOT/build/examples/apt.log" 2>&1 ||
        bail "$line failed: $(tail -n 3 "$ITEST_ROOT/build/examples/apt.log")"
fi
"$PY" -c 'import psycopg' || bail "python3-psycopg is not importable by $PY"

# npm ci of the Node example (pg, exact versions from its lock file), cached by the
# hash of package.json and package-lock.json; the script itself is copied every time.
want=$(cat "$NODE_SRC/package.json" "$NODE_SRC/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$NODE_DIR/.installed" 2>/dev/null)" != "$want" ] || [ ! -d "$NODE_DIR/node_modules/pg" ]; then
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$NODE_SRC/package.json" "$NODE_SRC/package-lock.json" "$NODE_DIR/"
    (cd "$NODE_DIR" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts --fetch-retries 2 \
        --fetch-timeout 60000 --loglevel error) >"$NODE_DIR/npm-ci.log" 2>&1 ||
        bail "npm ci of docs/examples/node failed (is the npm registry reachable?): $(tail -n 3 "$NODE_DIR/npm-ci.log")"
    echo "$want" >"$NODE_DIR/.installed"
fi
cp "$NODE_SRC/refund-step.mjs" "$NODE_DIR/"

itest_setup
trap 'pgcluster_stop "$T/pg2"; itest_cleanup' EXIT

echo "# node $(node --version), pg $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$NODE_DIR/node_modules/pg/package.json"),"\
     "psycopg $("$PY" -c 'import psycopg; print(psycopg.__version__)'), $(docker-compose version --short 2>/dev/null)"

# --- the application's login and its table ----------------------------------------------
sql "CREATE TABLE accounts (id int PRIMARY KEY, balance_cents bigint NOT NULL);
     INSERT INTO accounts SELECT g, 100000 FROM generate_series(40, 45) g;
     CREATE ROLE example_app LOGIN; GRANT outbox_app TO example_app;
     GRANT SELECT, UPDATE ON accounts TO example_app" >/dev/null
is "$(sql "SELECT string_agg(r.rolname, ',') FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid
            WHERE m.member = 'example_app'::regrole")" "outbox_app" "the steps' login has only outbox_app"
APP_URL="postgresql://example_app@127.0.0.1:$PGPORT/postgres"

# --- the receivers: the test receiver, and the example inbox receiver in its own database
receiver_start node
sql "CREATE ROLE payments_receiver LOGIN" >/dev/null
sql "CREATE DATABASE payments OWNER payments_receiver" >/dev/null
RECEIVER_URL="postgresql://payments_receiver@127.0.0.1:$PGPORT/payments"
# inbox_start NAME DB_URL: the python inbox receiver, installing its schema; sets INBOX_PORT_<NAME>
inbox_start() {
    local name=$1 db=$2 i port=""
    "$PY" "$ITEST_ROOT/docs/examples/python/inbox_receiver.py" --db "$db" \
        --install "$ITEST_ROOT/schema/inbox.sql" >"$T/inbox-$name.out" 2>"$T/inbox-$name.err" &
    ITEST_PIDS+=("$!")
    for i in $(seq 1 100); do
        port=$(sed -n 's/^listening 127.0.0.1://p' "$T/inbox-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || bail "inbox receiver $name did not start: $(cat "$T/inbox-$name.err")"
    printf -v "INBOX_PORT_$name" '%s' "$port"
}
inbox_start py "$RECEIVER_URL"
INBOX="http://127.0.0.1:$INBOX_PORT_py"
ok "the inbox receiver installed schema/inbox.sql as its database's owner (not a superuser)" \
    test "$(psql -X -tA -d payments -c "SELECT count(*) FROM pg_proc WHERE proname IN ('begin', 'finish')
                                         AND pronamespace = 'inbox'::regnamespace")" = 2
# rpsql SQL: in the receiver's database
rpsql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d payments -c "$1"; }

refusing_port DOWN_PORT
target_add payments.refund "http://127.0.0.1:$RECV_PORT_node/refunds" \
    status_url="'http://127.0.0.1:$RECV_PORT_node/status/{key}'" backoff_base_ms=50 backoff_cap_ms=500
target_add payments.refund-py "$INBOX/refunds" status_url="'$INBOX/by-key/{key}'" \
    backoff_base_ms=50 backoff_cap_ms=500
target_add payments.down "http://127.0.0.1:$DOWN_PORT/refunds" backoff_base_ms=50 backoff_cap_ms=500
relay_start a --poll-interval-ms 100

# step LANG NAME KEY ACCOUNT CENTS [VAR=VALUE...]: run one example step with a 60 s bound;
# its output in $T/NAME.out, its exit status appended to $T/NAME.rc
step() {
    local lang=$1 name=$2 key=$3 account=$4 cents=$5
    shift 5
    if [ "$lang" = node ]; then
        (cd "$NODE_DIR" && env DATABASE_URL="$APP_URL" WAIT_SECONDS=20 "$@" \
            timeout 60 node refund-step.mjs "$key" "$account" "$cents") >>"$T/$name.out" 2>&1
    else
        env DATABASE_URL="$APP_URL" WAIT_SECONDS=20 "$@" \
            timeout 60 "$PY" "$ITEST_ROOT/docs/examples/python/refund_step.py" "$key" "$account" "$cents" \
            >>"$T/$name.out" 2>&1
    fi
    echo $? >>"$T/$name.rc"
}
rcs() { tr '\n' ' ' <"$T/$1.rc"; }
insertions() { grep -o 'inserted=[a-z]*' "$T/$1.out" | tr '\n' ' '; }

# --- the Node step, three times with one key (a crash and resume, twice) -----------------
for run in 1 2 3; do
    step node node run-node:step-4 40 2500 OUTBOX_TARGET=payments.refund
done
is "$(rcs node)" "0 0 0 " "node: three runs of the step exit 0"
is "$(insertions node)" "inserted=true inserted=false inserted=false " "node: inserted only the first time"
is "$(grep -c '^outcome: succeeded — the target acted (HTTP 200)$' "$T/node.out")" 3 \
    "node: every run prints the final status succeeded"
is "$(sql "SELECT balance_cents FROM accounts WHERE id = 40")" 97500 "node: one debit of 2500, not three"
is "$(curl -s -m 5 "http://127.0.0.1:$RECV_PORT_node/_effects")" '{"run-node:step-4":1}' \
    "node: one effect at the test receiver, for that key"

# --- the Python step, three times with one key, to the inbox receiver --------------------
for run in 1 2 3; do
    step py py run-py:step-4 41 2500 OUTBOX_TARGET=payments.refund-py
done
is "$(rcs py)" "0 0 0 " "python: three runs of the step exit 0"
is "$(insertions py)" "inserted=true inserted=false inserted=false " "python: inserted only the first time"
is "$(grep -c '^outcome: succeeded — the target acted (HTTP 200)$' "$T/py.out")" 3 \
    "python: every run prints the final status succeeded"
is "$(sql "SELECT balance_cents FROM accounts WHERE id = 41")" 97500 "python: one debit of 2500, not three"
is "$(rpsql "SELECT string_agg(key || ' ' || n, ', ') FROM (SELECT key, count(*) n FROM refunds GROUP BY key) r")" \
    "run-py:step-4 1" "python: one refund at the inbox receiver, for that key"
saved=$(sql "SELECT response_body FROM outbox.outcome('run-py:step-4')")
stored=$(rpsql "SELECT response::text FROM inbox.processed WHERE key = 'run-py:step-4'")
ok "python: the intent's saved response is the receiver's stored answer ($saved)" \
    test -n "$saved" -a "$saved" = "$stored"
is "$(grep '^response: ' "$T/py.out" | sort -u)" "response: $saved" "python: each run printed that response"

# --- a target that is down: the wait ends at its bound, exit 2, the debit stays ----------
step node node-down run-node:step-9 42 100 OUTBOX_TARGET=payments.down WAIT_SECONDS=1
step py py-down run-py:step-9 42 100 OUTBOX_TARGET=payments.down WAIT_SECONDS=1
is "$(rcs node-down)$(rcs py-down)" "2 2 " "a target that is down: both steps stop at WAIT_SECONDS with exit 2"
ok "...saying the outcome is not final, and to run the step again with the same key" \
    test "$(cat "$T/node-down.out" "$T/py-down.out" | grep -cE '^outcome: (pending|delivering) |^not final after 1 s: run the step again later with the same key$')" = 4
is "$(sql "SELECT balance_cents FROM accounts WHERE id = 42")" 99800 \
    "...and their debits are committed with their intents (the relay delivers them later)"

# --- no such account: the intent rolls back with the debit ------------------------------
step node node-none run-node:step-7 999 100 OUTBOX_TARGET=payments.refund
step py py-none run-py:step-7 999 100 OUTBOX_TARGET=payments.refund-py
is "$(rcs node-none)$(rcs py-none)" "1 1 " "no such account: both steps exit 1"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE '%:step-7'")" 0 \
    "...and nothing was enqueued: the intent and the debit commit together or not at all"

# --- the inbox receiver, sent duplicates directly ------------------------------------------
# post KEY BODY OUT: the answer's body in OUT, its status in OUT.code
post() {
    curl -s -m 30 -X POST -H "Idempotency-Key: $1" -H 'Content-Type: application/json' -d "$2" \
        -o "$3" -w '%{http_code}\n' "$INBOX/refunds" >"$3.code"
}
post run-py:step-4 '{"amount_cents": 2500, "account": 41}' "$T/dup"
is "$(cat "$T/dup.code")" 200 "inbox receiver: the same key and body again (keys reordered): 200"
is "$(cat "$T/dup")" "$saved" "...with the stored answer, byte for byte the relay's saved response"
is "$(rpsql "SELECT count(*) FROM refunds WHERE key = 'run-py:step-4'")" 1 "...and no second refund"
is "$(grep -c '^delivery run-py:step-4 duplicate 200$' "$T/inbox-py.err")" 1 "...answered from the inbox"
post run-py:step-4 '{"account": 41, "amount_cents": 9999}' "$T/reuse"
is "$(cat "$T/reuse.code")" 422 "the key with another body: 422"
is "$(rpsql "SELECT count(*) FROM refunds WHERE key = 'run-py:step-4'")" 1 "...and no refund"
posts=()
for i in 1 2 3 4; do
    post direct:conc '{"account": 7, "amount_cents": 5}' "$T/conc.$i" &
    posts+=("$!")
done
wait "${posts[@]}"   # each curl is bounded by -m 30
is "$(cat "$T"/conc.*.code | sort | uniq -c | tr -s ' ')" " 4 200" "four deliveries of a new key at once: four 200"
ok "...all four the same answer" sh -c "cmp -s '$T/conc.1' '$T/conc.2' && cmp -s '$T/conc.1' '$T/conc.3' && cmp -s '$T/conc.1' '$T/conc.4'"
is "$(rpsql "SELECT count(*) FROM refunds WHERE key = 'direct:conc'")" 1 "...and one refund"
is "$(curl -s -m 5 "$INBOX/by-key/run-py%3Astep-4")" \
    "$(rpsql "SELECT jsonb_build_object('key', 'run-py:step-4', 'status', 200, 'response', '$saved'::jsonb)::text")" \
    "status URL: a processed key, 200 with its stored answer"
is "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$INBOX/by-key/never")" 404 "status URL: an unknown key, 404"
post "" '{"account": 1, "amount_cents": 1}' "$T/nokey"
post no-object '[1, 2]' "$T/array"
is "$(cat "$T/nokey.code") $(cat "$T/array.code")" "400 400" "no key, or a body that is not an object: 400"

# --- deploy/docker-compose.yml -------------------------------------------------------------
docker-compose -f "$COMPOSE_FILE" config -q >"$T/compose.err" 2>&1
is "$?" 0 "docker-compose config -q accepts deploy/docker-compose.yml"
[ -s "$T/compose.err" ] && sed 's/^/# /' "$T/compose.err"
# The same file beside a copy of itself with one unknown key: the copy is refused, the
# original (at the same place, so that relative paths resolve alike) is not.
mkdir -p "$T/compose/deploy"
cp "$COMPOSE_FILE" "$T/compose/deploy/docker-compose.yml"
sed 's/^    stop_grace_period: 15s$/&\n    stop_grace_periods: 15s/' "$COMPOSE_FILE" >"$T/compose/deploy/broken.yml"
is "$(diff "$T/compose/deploy/docker-compose.yml" "$T/compose/deploy/broken.yml" | grep -c '^>')" 1 \
    "the broken copy differs by one line"
docker-compose -f "$T/compose/deploy/docker-compose.yml" config -q >/dev/null 2>&1
is "$?" 0 "...the copied original is accepted"
docker-compose -f "$T/compose/deploy/broken.yml" config -q >"$T/broken.err" 2>&1
rc=$?
ok "...and the copy with an unknown key is refused ($(tr '\n' ' ' <"$T/broken.err" | cut -c1-120))" \
    sh -c "[ $rc != 0 ] && grep -q stop_grace_periods '$T/broken.err'"

docker-compose -f "$COMPOSE_FILE" config >"$T/compose.yml" 2>/dev/null
OUTBOX_RELAY_PASSWORD=from-the-shell docker-compose -f "$COMPOSE_FILE" config >"$T/compose-env.yml" 2>/dev/null
"$PY" - "$T/compose.yml" "$T/compose-env.yml" "$ITEST_ROOT" >"$T/compose-checks" <<'PY'
import os, sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
env_doc = yaml.safe_load(open(sys.argv[2]))
root = sys.argv[3]
s = doc["services"]
p = []
def want(cond, what):
    if not cond:
        p.append(what)
want(sorted(s) == ["db", "mcp", "migrate", "receiver", "relay", "setup"], "services: %s" % sorted(s))
want(s["db"]["image"].startswith("postgres:15"), "db is not postgres:15")
for name in ("migrate", "relay", "mcp"):
    b = s[name].get("build") or {}
    want(b.get("dockerfile") == "deploy/Dockerfile" and os.path.realpath(b.get("context", "")) == root,
         "%s is not built from deploy/Dockerfile in the repository root" % name)
want(s["migrate"]["image"] == s["relay"]["image"] == s["mcp"]["image"], "migrate, relay and mcp use different images")
want(s["migrate"]["command"] == ["migrate"] and s["relay"]["command"] == ["run"] and s["mcp"]["command"] == ["mcp"],
     "commands")
want(s["mcp"]["environment"]["PGUSER"] == "outbox_mcp_local", "the front door does not log in as outbox_mcp_local")
want(s["mcp"]["environment"].get("OUTBOX_RELAY_MCP_LISTEN") == "0.0.0.0:9465", "the front door does not listen on 0.0.0.0:9465")
want(s["migrate"]["environment"]["PGUSER"] == "outbox_migrate", "migrate does not log in as outbox_migrate")
want(s["relay"]["environment"]["PGUSER"] == "outbox_relay_local", "the relay does not log in as outbox_relay_local")
def dep(svc, on, cond):
    want((s[svc].get("depends_on") or {}).get(on, {}).get("condition") == cond,
         "%s does not wait for %s: %s" % (svc, on, cond))
dep("migrate", "db", "service_healthy")
dep("setup", "migrate", "service_completed_successfully")
dep("relay", "setup", "service_completed_successfully")
dep("mcp", "setup", "service_completed_successfully")
dep("receiver", "db", "service_healthy")
rb = s["receiver"].get("build") or {}
want(os.path.isfile(os.path.join(rb.get("context", ""), rb.get("dockerfile", ""))), "the receiver's Dockerfile is missing")
for svc in s.values():
    for v in svc.get("volumes") or []:
        src = v.split(":")[0]
        want(not src.startswith("/") or os.path.exists(src), "a mounted file is missing: %s" % src)
    for port in svc.get("ports") or []:
        want(str(port).startswith("127.0.0.1:"), "a port published beyond 127.0.0.1: %s" % port)
    for k, v in (svc.get("environment") or {}).items():
        if "PASSWORD" in k:
            want(str(v).startswith("local-only-"), "%s is not a local-only value" % k)
want(env_doc["services"]["relay"]["environment"]["PGPASSWORD"] == "from-the-shell" and
     env_doc["services"]["db"]["environment"]["OUTBOX_RELAY_PASSWORD"] == "from-the-shell",
     "OUTBOX_RELAY_PASSWORD from the shell does not reach the relay and the db")
print("\n".join(p))
# The environments of the services, for the stack's SQL below (NAME=VALUE lines).
for name in ("db", "migrate", "setup", "relay", "mcp", "receiver"):
    with open(os.path.join(os.path.dirname(sys.argv[1]), "env-" + name), "w") as f:
        for k, v in (s[name].get("environment") or {}).items():
            f.write("%s=%s\n" % (k, v))
PY
is "$(cat "$T/compose-checks")" "" \
   "compose: six services, wired in order (db healthy, migrate and setup done), images, logins, mounts, ports on 127.0.0.1, passwords local-only and taken from the environment"

# --- the stack's SQL on a fresh PostgreSQL 15 with passwords, as the services run it ------
# A cluster of its own (the postgres image's: a superuser, the database "app"), started
# with pgcluster.sh and then switched from trust to scram-sha-256 over TCP.
saved_env=$(declare -p PGHOST PGPORT PGUSER PGDATABASE DATABASE_URL OWNER_URL)
pgcluster_start "$T/pg2" || bail "a second PostgreSQL did not start"
P2=$PGPORT
eval "$saved_env"
pgcluster_as_owner sed -i '/^host/s/trust$/scram-sha-256/' "$T/pg2/data/pg_hba.conf"
psql2() { psql -X -q -tA -v ON_ERROR_STOP=1 -h "$T/pg2" -p "$P2" -U postgres "$@"; }
psql2 -d postgres -c "SELECT pg_reload_conf()" -c "CREATE DATABASE app" >/dev/null || bail "cluster 2: set-up"
mapfile -t DB_ENV <"$T/env-db"
# service_env ARRAY SERVICE: env(1) arguments giving a command the compose service's
# environment, connecting to cluster 2 over TCP (so with its password). Run as
# `env "${ARRAY[@]}" CMD`: env execs CMD, so a background one's $! is CMD's own PID.
service_env() {
    local -n args=$1
    mapfile -t args <"$T/env-$2"
    args=(-u PGHOST -u PGPORT -u PGUSER -u PGDATABASE -u DATABASE_URL "${args[@]}" PGHOST=127.0.0.1 "PGPORT=$P2")
}
service_env MIGRATE_ENV migrate
service_env SETUP_ENV setup
service_env RELAY_ENV relay
service_env MCP_ENV mcp
service_env RECEIVER_ENV receiver
env "${DB_ENV[@]}" psql -X -q -v ON_ERROR_STOP=1 -h "$T/pg2" -p "$P2" -U postgres -d app \
    -f "$ITEST_ROOT/deploy/compose/initdb.sql" >"$T/initdb.out" 2>&1
is "$?" 0 "compose: initdb.sql runs with the db service's environment"
[ -s "$T/initdb.out" ] && sed 's/^/# /' "$T/initdb.out"
is "$(psql2 -d postgres -c "SELECT rolsuper || ' ' || rolcreaterole FROM pg_roles WHERE rolname = 'outbox_migrate'")" \
    "false true" "compose: the schema owner outbox_migrate is CREATEROLE, not a superuser"
env "${MIGRATE_ENV[@]}" "$RELAY_BIN" migrate --migrations-dir "$ITEST_ROOT/migrations" >"$T/migrate2.log" 2>&1
rc=$?
is "$rc" 0 "compose: outbox-relay migrate as outbox_migrate, with the migrate service's environment (password)"
[ "$rc" = 0 ] || tail -n 5 "$T/migrate2.log" | sed 's/^/# /'
env "${SETUP_ENV[@]}" psql -X -q -v ON_ERROR_STOP=1 -f "$ITEST_ROOT/deploy/compose/setup.sql" >"$T/setup.out" 2>&1 &&
    env "${SETUP_ENV[@]}" psql -X -q -v ON_ERROR_STOP=1 -f "$ITEST_ROOT/deploy/compose/setup.sql" >>"$T/setup.out" 2>&1
is "$?" 0 "compose: setup.sql with the setup service's environment, twice"
[ -s "$T/setup.out" ] && sed 's/^/# /' "$T/setup.out"
is "$(psql2 -d app -c "SELECT m.rolname || ':' || string_agg(r.rolname, ',' ORDER BY r.rolname)
                         FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
                        WHERE m.rolname IN ('refund_app', 'outbox_relay_local', 'outbox_mcp_local') GROUP BY m.rolname ORDER BY 1")" \
    "$(printf 'outbox_mcp_local:outbox_mcp\noutbox_relay_local:outbox_operator,outbox_relay\nrefund_app:outbox_app')" \
    "compose: the relay's login has outbox_relay and outbox_operator, the front door's outbox_mcp only, the application's outbox_app"
ok "compose: a wrong password is refused (the passwords are checked)" \
    sh -c "! PGPASSWORD=wrong psql -X -h 127.0.0.1 -p $P2 -U refund_app -d app -c 'SELECT 1' >/dev/null 2>&1"

# The receiver and the relay with their services' environments; the target registered by
# setup.sql pointed at this receiver instead of the service name "receiver".
env "${RECEIVER_ENV[@]}" "$PY" "$ITEST_ROOT/docs/examples/python/inbox_receiver.py" \
    --install "$ITEST_ROOT/schema/inbox.sql" >"$T/inbox-compose.out" 2>"$T/inbox-compose.err" &
ITEST_PIDS+=("$!")
wait_cmd 10 grep -q '^listening 127.0.0.1:' "$T/inbox-compose.out" ||
    bail "the receiver did not start as payments_receiver: $(cat "$T/inbox-compose.err")"
CPORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/inbox-compose.out")
psql2 -d app -c "UPDATE outbox.targets SET url = 'http://127.0.0.1:$CPORT/refunds',
                        status_url = 'http://127.0.0.1:$CPORT/by-key/{key}' WHERE name = 'payments.refund'" >/dev/null
env "${RELAY_ENV[@]}" "$RELAY_BIN" run --relay-id relay-compose --admin-listen "" --poll-interval-ms 100 \
    >>"$T/relay-compose.log" 2>&1 &
ITEST_PIDS+=("$!")
# The application's login, with the password the db service gave it.
APP_PASSWORD=$(sed -n 's/^REFUND_APP_PASSWORD=//p' "$T/env-db")
env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE -u DATABASE_URL PGHOST=127.0.0.1 "PGPORT=$P2" \
    PGUSER=refund_app PGDATABASE=app "PGPASSWORD=$APP_PASSWORD" WAIT_SECONDS=20 \
    timeout 60 "$PY" "$ITEST_ROOT/docs/examples/python/refund_step.py" compose:step-1 42 2500 \
    >"$T/compose-step.out" 2>&1
is "$?" 0 "compose: the Python step as refund_app, delivered by the relay as outbox_relay_local to the receiver as payments_receiver"
ok "...outcome: succeeded" grep -q '^outcome: succeeded ' "$T/compose-step.out"
is "$(psql2 -d payments -c "SELECT count(*) FROM refunds WHERE key = 'compose:step-1'")" 1 "...one refund"

# The front door with its service's environment (its port: a free one here): ready, so
# logged in as outbox_mcp_local, and the tool setup.sql registered is listed to a client.
env "${MCP_ENV[@]}" OUTBOX_RELAY_MCP_LISTEN=127.0.0.1:0 "$RELAY_BIN" mcp >>"$T/mcp-compose.log" 2>&1 &
ITEST_PIDS+=("$!")
wait_cmd 10 grep -q '"event":"mcp_listening"' "$T/mcp-compose.log" || bail "the compose front door did not start"
CMCP=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$T/mcp-compose.log" | tail -1)
ok "compose: the front door as outbox_mcp_local is ready" \
    wait_cmd 10 sh -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$CMCP/readyz)\" = 200 ]"
CTOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
psql2 -d app -c "SELECT outbox.mcp_client('compose-agent', '$CTOKEN', ARRAY['refund'])" >/dev/null
tools=$(curl -s -H "Authorization: Bearer $CTOKEN" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' "http://127.0.0.1:$CMCP/mcp")
ok "compose: the front door lists setup.sql's tool refund to a client" grep -q '"name":"refund"' <<<"$tools"
[ -n "$tools" ] && echo "# tools/list: $(cut -c1-200 <<<"$tools")"

ok "no sanitizer report in the relay logs" relay_logs_clean
itest_done
