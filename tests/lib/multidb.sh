# tests/lib/multidb.sh — several outbox databases for one relay (--databases),
# for the scenarios 82-85. Source after tests/lib/itest.sh and itest_setup.
#
#   multidb_add NAME [DIR]   a database NAME owned by outbox_owner in the
#                            cluster of DIR (default $T/pg, itest_setup's), with
#                            a line in $T/owner.databases (the schema owner's,
#                            for migrate) and in $T/relay.databases (itest_relay's,
#                            for the relay); DIR's cluster gets itest_relay too
#   multidb_migrate          migrate --databases $T/owner.databases
#   dsql NAME "SQL"          psql in database NAME (of the cluster it was added in)
#   dtarget NAME TARGET URL  a target in database NAME
#   denqueue NAME TARGET N   N intents, keys NAME:1..N
#
# The databases of one scenario may live in several clusters (pgcluster_start
# in another DIR): a cluster stopped with pg_ctl stop -m immediate takes only
# its own databases down.

declare -A MULTIDB_PORT

multidb_add() {
    local name=$1 dir=${2:-$T/pg} port
    port=$(cat "$dir/port")
    if [ "$dir" != "$T/pg" ] && [ ! -f "$dir/.relay_login" ]; then
        PGPORT=$port psql -X -q -v ON_ERROR_STOP=1 -d postgres \
            -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'itest_relay') THEN
                    CREATE ROLE itest_relay LOGIN; END IF; END \$\$" >/dev/null || bail "no relay login in $dir"
        touch "$dir/.relay_login"
    fi
    PGPORT=$port psql -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "CREATE DATABASE \"$name\" OWNER outbox_owner" >/dev/null || bail "could not create $name"
    MULTIDB_PORT[$name]=$port
    echo "$name postgresql://outbox_owner@127.0.0.1:$port/$name" >>"$T/owner.databases"
    echo "$name postgresql://itest_relay@127.0.0.1:$port/$name" >>"$T/relay.databases"
}

multidb_migrate() {
    "$ITEST_ROOT/build/outbox-relay" migrate --databases "$T/owner.databases" \
        --migrations-dir "$ITEST_ROOT/migrations" >"$T/migrate-databases.log" 2>&1 ||
        { cat "$T/migrate-databases.log" >&2; bail "migrate --databases failed"; }
    local name
    for name in "${!MULTIDB_PORT[@]}"; do
        dsql "$name" "DO \$\$ BEGIN IF NOT pg_has_role('itest_relay', 'outbox_relay', 'MEMBER') THEN
                          GRANT outbox_relay TO itest_relay; END IF; END \$\$" >/dev/null
    done
}

dsql() {
    PGPORT=${MULTIDB_PORT[$1]} psql -X -q -tA -v ON_ERROR_STOP=1 -d "$1" -c "$2"
}

dtarget() {
    dsql "$1" "INSERT INTO outbox.targets (name, url) VALUES ('$2', '$3')" >/dev/null
}

denqueue() {
    dsql "$1" "SELECT count(*) FROM (SELECT outbox.enqueue('$1:' || g, '$2', jsonb_build_object('n', g))
                 FROM generate_series(1, $3) g) x" >/dev/null
}

# multidb_cluster DIR [settings...]: one more throwaway cluster
# (pgcluster_start in a subshell, so the scenario's PG* environment stays the
# first cluster's), stopped on exit with the first.
MULTIDB_CLUSTERS=()
multidb_cluster() {
    (pgcluster_start "$@") || bail "PostgreSQL did not start in $1"
    MULTIDB_CLUSTERS+=("$1")
    trap multidb_cleanup EXIT
}

multidb_cleanup() {
    local dir
    for dir in "${MULTIDB_CLUSTERS[@]}"; do pgcluster_stop "$dir"; done
    itest_cleanup
}

# multidb_crash DIR: pg_ctl stop -m immediate (no checkpoint, as a crash).
multidb_crash() {
    local bin
    bin=$(pgcluster_bindir) || return 1
    pgcluster_as_owner "$bin/pg_ctl" -D "$1/data" -m immediate -w -t 60 stop >>"$1/pg_ctl.log" 2>&1
}

# effects_of PREFIX RECEIVER: "keys effects duplicated" of the receiver's
# effects whose key starts with PREFIX:
effects_of() {
    local port_var=RECV_PORT_$2
    curl -s "http://127.0.0.1:${!port_var}/_effects" | python3 -c '
import json, sys
e = {k: v for k, v in json.load(sys.stdin).items() if k.startswith(sys.argv[1] + ":")}
print(len(e), sum(e.values()), sum(1 for v in e.values() if v > 1))' "$1"
}
