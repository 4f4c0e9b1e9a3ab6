# tests/lib/pgcluster.sh — a throwaway PostgreSQL cluster for tests, demo and bench.
#
# Source it, then:
#   pgcluster_start DIR [extra postgres -c settings...]
#       initdb in DIR/data, start on a free 127.0.0.1 port (and a socket in DIR),
#       export PGHOST PGPORT PGUSER PGDATABASE DATABASE_URL for the caller.
#       It also creates the login role outbox_owner: CREATEROLE, not a
#       superuser, with CREATE on the database "postgres" (what a managed
#       PostgreSQL gives a schema owner). Migrations run as that role
#       (OWNER_URL, pgcluster_owner_db), so that nothing needing a superuser
#       can come back into them unseen; the tests' own set-up stays postgres.
#   pgcluster_owner_db NAME   a new database NAME owned by outbox_owner; prints
#       its connection string for outbox_owner
#   pgcluster_stop DIR        fast shutdown; safe to call twice or on a dead cluster
#   pgcluster_restart DIR     pg_ctl restart on the same port (fault injection)
#   pgcluster_kill DIR        SIGKILL the postmaster (crash fault)
#
# Why so: tests must never touch a system cluster, must run side by side
# (no fixed port), and must run as root in CI, where initdb refuses to run:
# then the cluster belongs to the unprivileged "postgres" user. Callers put
# pgcluster_stop in an EXIT trap so a failed or interrupted test stops it too.

pgcluster_bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
    echo "pgcluster: no PostgreSQL server binaries (initdb) found; install postgresql" >&2
    return 1
}

# Run a command as the cluster owner: ourselves, or "postgres" when we are root.
pgcluster_as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pgcluster_port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pgcluster_start() {
    local dir=$1; shift
    local bin port try
    bin=$(pgcluster_bindir) || return 1
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
        chown postgres "$dir"
        chmod 755 "$dir"
    fi
    pgcluster_as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
        >"$dir/initdb.log" 2>&1 || { echo "pgcluster: initdb failed, see $dir/initdb.log" >&2; cat "$dir/initdb.log" >&2; return 1; }
    for try in 1 2 3 4 5 6 7 8; do
        port=$(( 20000 + (RANDOM * 7 + $$ + try * 131) % 40000 ))
        pgcluster_port_free "$port" || continue
        local opts="-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200"
        opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        local extra
        for extra in "$@"; do opts="$opts -c $extra"; done
        if pgcluster_as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "$opts" -w -t 60 start \
            >"$dir/pg_ctl.log" 2>&1; then
            echo "$port" >"$dir/port"
            export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
            export DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
            export OWNER_URL="postgresql://outbox_owner@127.0.0.1:$port/postgres"
            psql -X -q -v ON_ERROR_STOP=1 -d postgres \
                -c "CREATE ROLE outbox_owner LOGIN CREATEROLE NOSUPERUSER" \
                -c "GRANT CREATE ON DATABASE postgres TO outbox_owner" >/dev/null ||
                { echo "pgcluster: could not create the role outbox_owner" >&2; return 1; }
            return 0
        fi
        grep -q "could not bind\|Address already in use" "$dir/server.log" 2>/dev/null || break
    done
    echo "pgcluster: could not start PostgreSQL in $dir" >&2
    cat "$dir/pg_ctl.log" "$dir/server.log" >&2 2>/dev/null
    return 1
}

pgcluster_stop() {
    local dir=$1 bin
    [ -f "$dir/data/postmaster.pid" ] || return 0
    bin=$(pgcluster_bindir) || return 0
    pgcluster_as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        pgcluster_kill "$dir"
    return 0
}

pgcluster_restart() {
    local dir=$1 bin
    bin=$(pgcluster_bindir) || return 1
    pgcluster_as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart \
        >>"$dir/pg_ctl.log" 2>&1
}

pgcluster_kill() {
    local dir=$1 pid
    [ -f "$dir/data/postmaster.pid" ] || return 0
    pid=$(head -1 "$dir/data/postmaster.pid")
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    return 0
}

pgcluster_owner_db() {
    local name=$1
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$name\" OWNER outbox_owner" >/dev/null ||
        return 1
    echo "postgresql://outbox_owner@127.0.0.1:$PGPORT/$name"
}

# Create a fresh database NAME holding the migrated schema (fast: from a template).
pgcluster_createdb() {
    local name=$1 template=${2:-template0}
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE \"$name\" TEMPLATE \"$template\"" >/dev/null
}
