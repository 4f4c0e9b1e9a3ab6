/*
 * migrate.c — apply migrations/NNNN_name.sql in order, once each.
 *
 * Shape: a short-lived command, not the daemon, so it uses libpq's blocking
 * API (the event-loop rule applies to `run` only). Safety comes from three
 * things: a session advisory lock (two Jobs started at once apply nothing
 * twice), one transaction per file (a failing file leaves no half of
 * itself), and a SHA-256 per applied file in outbox_meta.migrations (an
 * edited file that already ran is refused, because the database no longer
 * matches what the file says). A second run finds nothing pending: no-op.
 *
 * The one exception is migrations/amended: a file that had to change after
 * release (0008's text could not be applied by a non-superuser owner) is
 * listed there with the checksum of its earlier text, and a database that
 * applied that text is accepted; a later migration brings both to the same
 * state. Any other difference is still refused.
 *
 * Role prefix (--role-prefix P, migrations/0041_role_prefix.sql): group roles
 * are cluster-wide, so two databases of one cluster would share outbox_app
 * and its logins. With a prefix, each migration file still grants to the
 * plain names it was written with (released files never change), and in
 * the same transaction, before its checksum is recorded, MOVE_GRANTS_SQL
 * moves every privilege those roles hold in this database to
 * P_outbox_app, P_outbox_relay, ... (created here when missing), and
 * refuses a file that granted to an outbox_* group role it does not know.
 * The catalog, not the text, is rewritten: no substitution can touch a
 * NOTIFY channel or a comment that happens to spell a role's name. The
 * prefix is taken on the first install only; 0041 records it (the
 * transaction's setting outbox.role_prefix), and a later migrate that asks
 * for another is refused before anything is applied.
 */
#include "cli/migrate.h"
#include "databases.h"

#include "lib/xalloc.h"

#include <dirent.h>
#include <libgen.h>
#include <libpq-fe.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Any constant; the same for every migrate of every version. */
#define MIGRATE_LOCK_KEY "7364202021"

/* The group roles the migrations create (0005, 0022), which a prefix
 * renames; a file that grants to another outbox_* group role is refused
 * under a prefix until it is added here (and to the docs). */
#define PREFIXED_ROLES "ARRAY['app', 'relay', 'operator', 'admin', 'mcp']"

/* Run after each file when the prefix (the setting outbox.role_prefix) is
 * not empty: the prefixed roles exist, have the memberships the plain ones
 * have among themselves (operator in admin), and hold every privilege that
 * the plain ones held on the objects of the schemas outbox and outbox_meta,
 * where the plain ones then hold none. What a DBA granted elsewhere in the
 * database is left alone. */
static const char MOVE_GRANTS_SQL[] =
    "DO $move$\n"
    "DECLARE\n"
    "    prefix text := current_setting('outbox.role_prefix');\n"
    "    roles  text[] := " PREFIXED_ROLES ";\n"
    "    ours   oid[] := ARRAY(SELECT oid FROM pg_namespace\n"
    "                          WHERE nspname IN ('outbox', 'outbox_meta'));\n"
    "    r text; plain oid; mine text; o record; privilege text; unknown text;\n"
    "BEGIN\n"
    "    FOREACH r IN ARRAY roles LOOP\n"
    "        mine := prefix || '_outbox_' || r;\n"
    "        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = mine) THEN\n"
    "            EXECUTE format('CREATE ROLE %I NOLOGIN', mine);\n"
    "        END IF;\n"
    "    END LOOP;\n"
    "    FOR o IN SELECT substr(g.rolname, 8) AS grp, substr(m.rolname, 8) AS mem\n"
    "               FROM pg_auth_members am JOIN pg_roles g ON g.oid = am.roleid\n"
    "               JOIN pg_roles m ON m.oid = am.member\n"
    "              WHERE g.rolname IN (SELECT 'outbox_' || x FROM unnest(roles) x)\n"
    "                AND m.rolname IN (SELECT 'outbox_' || x FROM unnest(roles) x) LOOP\n"
    "        IF NOT pg_has_role(prefix || '_outbox_' || o.mem, prefix || '_outbox_' || o.grp,\n"
    "                           'MEMBER') THEN\n"
    "            EXECUTE format('GRANT %I TO %I', prefix || '_outbox_' || o.grp,\n"
    "                           prefix || '_outbox_' || o.mem);\n"
    "        END IF;\n"
    "    END LOOP;\n"
    "    FOREACH r IN ARRAY roles LOOP\n"
    "        SELECT oid INTO plain FROM pg_roles WHERE rolname = 'outbox_' || r;\n"
    "        CONTINUE WHEN plain IS NULL;\n"
    "        mine := prefix || '_outbox_' || r;\n"
    "        FOR o IN\n"
    "            SELECT format('SCHEMA %I', n.nspname) AS obj, NULL::name AS col,\n"
    "                   a.privilege_type AS priv, a.is_grantable AS grantable\n"
    "              FROM pg_namespace n, aclexplode(n.nspacl) a\n"
    "             WHERE a.grantee = plain AND n.oid = ANY (ours)\n"
    "            UNION ALL\n"
    "            SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END\n"
    "                   || c.oid::regclass, NULL, a.privilege_type, a.is_grantable\n"
    "              FROM pg_class c, aclexplode(c.relacl) a\n"
    "             WHERE a.grantee = plain AND c.relnamespace = ANY (ours)\n"
    "            UNION ALL\n"
    "            SELECT 'TABLE ' || c.oid::regclass, t.attname, a.privilege_type, a.is_grantable\n"
    "              FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid,\n"
    "                   aclexplode(t.attacl) a\n"
    "             WHERE a.grantee = plain AND NOT t.attisdropped\n"
    "               AND c.relnamespace = ANY (ours)\n"
    "            UNION ALL\n"
    "            SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE ' ELSE 'FUNCTION ' END\n"
    "                   || p.oid::regprocedure, NULL, a.privilege_type, a.is_grantable\n"
    "              FROM pg_proc p, aclexplode(p.proacl) a\n"
    "             WHERE a.grantee = plain AND p.pronamespace = ANY (ours)\n"
    "            UNION ALL\n"
    "            SELECT 'TYPE ' || t.oid::regtype, NULL, a.privilege_type, a.is_grantable\n"
    "              FROM pg_type t, aclexplode(t.typacl) a\n"
    "             WHERE a.grantee = plain AND t.typnamespace = ANY (ours)\n"
    "        LOOP\n"
    "            privilege := o.priv || CASE WHEN o.col IS NULL THEN ''\n"
    "                                        ELSE format(' (%I)', o.col) END;\n"
    "            EXECUTE format('GRANT %s ON %s TO %I%s', privilege, o.obj, mine,\n"
    "                           CASE WHEN o.grantable THEN ' WITH GRANT OPTION' ELSE '' END);\n"
    "            EXECUTE format('REVOKE %s ON %s FROM %I CASCADE', privilege, o.obj,\n"
    "                           'outbox_' || r);\n"
    "        END LOOP;\n"
    "    END LOOP;\n"
    "    SELECT string_agg(DISTINCT g.rolname, ', ') INTO unknown FROM (\n"
    "        SELECT a.grantee FROM pg_namespace n, aclexplode(n.nspacl) a\n"
    "         WHERE a.grantee <> n.nspowner AND n.oid = ANY (ours)\n"
    "        UNION ALL SELECT a.grantee FROM pg_class c, aclexplode(c.relacl) a\n"
    "         WHERE a.grantee <> c.relowner AND c.relnamespace = ANY (ours)\n"
    "        UNION ALL SELECT a.grantee FROM pg_attribute t\n"
    "          JOIN pg_class c ON c.oid = t.attrelid, aclexplode(t.attacl) a\n"
    "         WHERE c.relnamespace = ANY (ours)\n"
    "        UNION ALL SELECT a.grantee FROM pg_proc p, aclexplode(p.proacl) a\n"
    "         WHERE a.grantee <> p.proowner AND p.pronamespace = ANY (ours)\n"
    "        UNION ALL SELECT a.grantee FROM pg_type t, aclexplode(t.typacl) a\n"
    "         WHERE a.grantee <> t.typowner AND t.typnamespace = ANY (ours)\n"
    "    ) acl JOIN pg_roles g ON g.oid = acl.grantee\n"
    "     WHERE g.rolname LIKE 'outbox\\_%' AND NOT g.rolcanlogin\n"
    "       AND NOT starts_with(g.rolname, prefix || '_outbox_');\n"
    "    IF unknown IS NOT NULL THEN\n"
    "        RAISE EXCEPTION 'it grants to %, a role that migrate does not know how to prefix '\n"
    "                        '(relay/cli/migrate.c, PREFIXED_ROLES)', unknown;\n"
    "    END IF;\n"
    "END\n"
    "$move$";

struct migration_file {
    char name[256];
    char checksum[65];
    char *sql;
};

/* migrations/amended: "NAME CHECKSUM reason" per line, '#' comments. */
struct amended_text {
    char name[256];
    char checksum[65];
};

static int compare_names(const void *a, const void *b)
{
    return strcmp(((const struct migration_file *)a)->name,
                  ((const struct migration_file *)b)->name);
}

static bool is_migration_name(const char *name)
{
    size_t len = strlen(name);
    if (len < 9 || len >= 256 || strcmp(name + len - 4, ".sql") != 0)
        return false;
    for (int i = 0; i < 4; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    return name[4] == '_';
}

static char *read_whole_file(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            buf = xrealloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    *len_out = len;
    return buf;
}

static void sha256_hex(const char *data, size_t len, char out[65])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    EVP_Digest(data, len, digest, &digest_len, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < digest_len && i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
    out[64] = '\0';
}

/* The migrations directory: the option, else ../migrations beside the
 * binary (build/ in a checkout), else the installed location. */
static void find_migrations_dir(const struct config *cfg, char *out, size_t size)
{
    if (cfg->migrations_dir && *cfg->migrations_dir) {
        snprintf(out, size, "%s", cfg->migrations_dir);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *dir = dirname(exe);
        const char *candidates[] = {"/../migrations", "/../../migrations",
                                    "/../share/outbox-relay/migrations"};
        for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
            struct stat st;
            if ((size_t)snprintf(out, size, "%s%s", dir, candidates[i]) < size &&
                stat(out, &st) == 0 && S_ISDIR(st.st_mode))
                return;
        }
    }
    snprintf(out, size, "/usr/share/outbox-relay/migrations");
}

static int load_files(const char *dir, struct migration_file **files_out, size_t *count_out)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr,
                "outbox-relay migrate: cannot open migrations directory %s: %m (say where they "
                "are with --migrations-dir or OUTBOX_RELAY_MIGRATIONS_DIR)\n",
                dir);
        return -1;
    }
    struct migration_file *files = NULL;
    size_t count = 0;
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        if (!is_migration_name(entry->d_name))
            continue;
        files = xrealloc(files, (count + 1) * sizeof(*files));
        struct migration_file *file = &files[count];
        snprintf(file->name, sizeof(file->name), "%s", entry->d_name);
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
        size_t len = 0;
        file->sql = read_whole_file(path, &len);
        if (file->sql == NULL) {
            fprintf(stderr, "outbox-relay migrate: cannot read %s: %m\n", path);
            closedir(d);
            *files_out = files;
            *count_out = count;
            return -1;
        }
        sha256_hex(file->sql, len, file->checksum);
        count++;
    }
    closedir(d);
    if (count > 1) /* files is NULL when there are none */
        qsort(files, count, sizeof(*files), compare_names);
    *files_out = files;
    *count_out = count;
    return 0;
}

/* The earlier texts of amended files; none when the list is absent. */
static size_t load_amended(const char *dir, struct amended_text **out)
{
    *out = NULL;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/amended", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t count = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL) {
        char name[256], checksum[65];
        if (line[0] == '#' || sscanf(line, "%255s %64s", name, checksum) != 2 ||
            strlen(checksum) != 64)
            continue;
        *out = xrealloc(*out, (count + 1) * sizeof(**out));
        snprintf((*out)[count].name, sizeof((*out)[count].name), "%s", name);
        snprintf((*out)[count].checksum, sizeof((*out)[count].checksum), "%s", checksum);
        count++;
    }
    fclose(f);
    return count;
}

static bool is_amended_text(const struct amended_text *amended, size_t amended_count,
                            const char *name, const char *checksum)
{
    for (size_t i = 0; i < amended_count; i++)
        if (strcmp(amended[i].name, name) == 0 && strcmp(amended[i].checksum, checksum) == 0)
            return true;
    return false;
}

static bool exec_ok(PGconn *conn, const char *sql, const char *what)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType status = PQresultStatus(res);
    bool ok = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "outbox-relay migrate: %s failed: %s", what, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

/* Compares what the database says was applied with the files on disk:
 * marks applied[i] for each file that ran; false (said why) when one ran
 * with other contents or is missing from the directory. */
static bool check_applied(PGconn *conn, const struct migration_file *files, size_t count,
                          const struct amended_text *amended, size_t amended_count, bool *applied)
{
    PGresult *res = PQexec(conn, "SELECT name, checksum FROM outbox_meta.migrations ORDER BY name");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "outbox-relay migrate: cannot read outbox_meta.migrations: %s",
                PQerrorMessage(conn));
        PQclear(res);
        return false;
    }
    bool ok = true;
    for (int row = 0; row < PQntuples(res) && ok; row++) {
        const char *name = PQgetvalue(res, row, 0);
        const char *checksum = PQgetvalue(res, row, 1);
        bool found = false;
        for (size_t i = 0; i < count; i++) {
            if (strcmp(files[i].name, name) != 0)
                continue;
            found = true;
            applied[i] = true;
            if (strcmp(files[i].checksum, checksum) != 0 &&
                !is_amended_text(amended, amended_count, name, checksum)) {
                fprintf(stderr,
                        "outbox-relay migrate: refusing to run: %s was changed after it was "
                        "applied (checksum in the database %.12s, on disk %.12s). Applied "
                        "migrations must not be edited; add a new migration instead.\n",
                        name, checksum, files[i].checksum);
                ok = false;
            }
        }
        if (!found) {
            fprintf(stderr,
                    "outbox-relay migrate: refusing to run: %s was applied but is missing from "
                    "the migrations directory (is this an older release?)\n",
                    name);
            ok = false;
        }
    }
    PQclear(res);
    return ok;
}

/* One file in one transaction, recorded with its checksum: all of it or
 * nothing. Under a role prefix, its grants move to the prefixed roles in the
 * same transaction (MOVE_GRANTS_SQL). */
static bool apply_one(PGconn *conn, const struct migration_file *file, const char *prefix)
{
    if (!exec_ok(conn, "BEGIN", "BEGIN"))
        return false;
    const char *setting[1] = {prefix};
    PGresult *r = PQexecParams(conn, "SELECT set_config('outbox.role_prefix', $1, true)", 1, NULL,
                               setting, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    PQclear(r);
    if (st == PGRES_TUPLES_OK) {
        r = PQexec(conn, file->sql);
        st = PQresultStatus(r);
        PQclear(r);
    }
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
        fprintf(stderr, "outbox-relay migrate: %s failed, nothing of it was applied: %s",
                file->name, PQerrorMessage(conn));
        exec_ok(conn, "ROLLBACK", "ROLLBACK");
        return false;
    }
    if (*prefix != '\0') {
        r = PQexec(conn, MOVE_GRANTS_SQL);
        st = PQresultStatus(r);
        PQclear(r);
        if (st != PGRES_COMMAND_OK) {
            fprintf(stderr,
                    "outbox-relay migrate: %s: giving its grants to the roles of prefix '%s' "
                    "failed, nothing of it was applied: %s",
                    file->name, prefix, PQerrorMessage(conn));
            exec_ok(conn, "ROLLBACK", "ROLLBACK");
            return false;
        }
    }
    const char *params[2] = {file->name, file->checksum};
    r = PQexecParams(conn, "INSERT INTO outbox_meta.migrations (name, checksum) VALUES ($1, $2)", 2,
                     NULL, params, NULL, NULL, 0);
    bool inserted = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!inserted)
        fprintf(stderr, "outbox-relay migrate: recording %s failed: %s", file->name,
                PQerrorMessage(conn));
    PQclear(r);
    if (!inserted || !exec_ok(conn, "COMMIT", "COMMIT")) {
        exec_ok(conn, "ROLLBACK", "ROLLBACK");
        return false;
    }
    printf("applied %s\n", file->name);
    return true;
}

/* A single value of a query without parameters into out; false (said why)
 * on an error. *found is false when it returned no row. */
static bool query_value(PGconn *conn, const char *sql, char *out, size_t size, bool *found)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "outbox-relay migrate: reading the role prefix failed: %s",
                PQerrorMessage(conn));
    *found = ok && PQntuples(res) > 0 && !PQgetisnull(res, 0, 0);
    if (*found)
        snprintf(out, size, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return ok;
}

/* The prefix this database's roles have: what 0041 recorded; before 0041,
 * what the grants say (the role that holds USAGE on the schema outbox and
 * is named ..outbox_app); not found on a database with nothing installed. */
static bool installed_prefix(PGconn *conn, char *out, size_t size, bool *found)
{
    bool recorded = false;
    char flag[8];
    if (!query_value(conn, "SELECT 1 WHERE to_regclass('outbox.installation') IS NOT NULL", flag,
                     sizeof(flag), &recorded))
        return false;
    if (recorded)
        return query_value(conn, "SELECT role_prefix FROM outbox.installation", out, size, found);
    return query_value(conn,
                       "SELECT CASE WHEN r.rolname = 'outbox_app' THEN ''"
                       "            ELSE left(r.rolname, -length('_outbox_app')) END"
                       "  FROM pg_namespace n CROSS JOIN LATERAL aclexplode(n.nspacl) a"
                       "  JOIN pg_roles r ON r.oid = a.grantee"
                       " WHERE n.nspname = 'outbox' AND r.rolname LIKE '%outbox\\_app'"
                       " ORDER BY r.rolname = 'outbox_app' DESC, r.rolname LIMIT 1",
                       out, size, found);
}

/* The prefix to migrate with: the installed one, which --role-prefix may
 * repeat but not change; on a first install, --role-prefix's. */
static bool choose_prefix(PGconn *conn, const struct config *cfg, char *out, size_t size)
{
    const char *asked = cfg->role_prefix ? cfg->role_prefix : "";
    bool found = false;
    if (!installed_prefix(conn, out, size, &found))
        return false;
    if (!found) {
        snprintf(out, size, "%s", asked);
        return true;
    }
    if (*asked != '\0' && strcmp(asked, out) != 0) {
        if (*out == '\0')
            fprintf(stderr,
                    "outbox-relay migrate: refusing to run: this database's outbox was "
                    "installed without a role prefix (its roles are outbox_app, outbox_relay, "
                    "...); --role-prefix '%s' is taken on a first install only\n",
                    asked);
        else
            fprintf(stderr,
                    "outbox-relay migrate: refusing to run: this database's outbox was "
                    "installed with role prefix '%s' (its roles are %s_outbox_app, "
                    "%s_outbox_relay, ...), not '%s'; a prefix is taken on a first install "
                    "only\n",
                    out, out, out, asked);
        return false;
    }
    return true;
}

static int apply_pending(PGconn *conn, struct migration_file *files, size_t count,
                         const struct amended_text *amended, size_t amended_count,
                         const char *prefix)
{
    bool *applied = xcalloc(count + 1, sizeof(bool));
    int rc = check_applied(conn, files, count, amended, amended_count, applied) ? 0 : 1;
    int newly_applied = 0;
    for (size_t i = 0; i < count && rc == 0; i++) {
        if (applied[i])
            continue;
        if (!apply_one(conn, &files[i], prefix))
            rc = 1;
        else
            newly_applied++;
    }
    if (rc == 0) {
        if (newly_applied == 0)
            printf("up to date: %zu migrations applied, nothing pending\n", count);
        else
            printf("applied %d migration(s); %zu in all\n", newly_applied, count);
    }
    free(applied);
    return rc;
}

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* One database: conninfo ("" = libpq's environment). */
static int migrate_one(const struct config *cfg, const char *conninfo)
{
    char dir[PATH_MAX];
    find_migrations_dir(cfg, dir, sizeof(dir));
    struct migration_file *files = NULL;
    size_t count = 0;
    int rc = load_files(dir, &files, &count);
    if (rc == 0 && count == 0) {
        fprintf(stderr,
                "outbox-relay migrate: no NNNN_*.sql files in %s (say where they are with "
                "--migrations-dir or OUTBOX_RELAY_MIGRATIONS_DIR)\n",
                dir);
        rc = -1;
    }
    struct amended_text *amended = NULL;
    size_t amended_count = rc == 0 ? load_amended(dir, &amended) : 0;
    PGconn *conn = NULL;
    char prefix[64] = "";
    if (rc == 0) {
        conn = PQconnectdb(conninfo);
        if (PQstatus(conn) != CONNECTION_OK) {
            fprintf(stderr, "outbox-relay migrate: cannot connect to the database: %s",
                    PQerrorMessage(conn));
            rc = -1;
        }
    }
    if (rc == 0) {
        PQsetNoticeProcessor(conn, quiet_notices, NULL);
        if (!exec_ok(conn, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", "taking the lock") ||
            !exec_ok(conn,
                     "CREATE SCHEMA IF NOT EXISTS outbox_meta;"
                     "CREATE TABLE IF NOT EXISTS outbox_meta.migrations ("
                     " name text PRIMARY KEY, checksum text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())",
                     "creating outbox_meta.migrations"))
            rc = -1;
        else if (!choose_prefix(conn, cfg, prefix, sizeof(prefix)))
            rc = -1;
        else
            rc = apply_pending(conn, files, count, amended, amended_count, prefix);
        /* The lock goes with the session; unlock explicitly all the same. */
        exec_ok(conn, "SELECT pg_advisory_unlock_all()", "unlocking");
    }
    PQfinish(conn);
    for (size_t i = 0; i < count; i++)
        free(files[i].sql);
    free(files);
    free(amended);
    return rc == 0 ? 0 : 1;
}

/* --databases without --database: every line, one after another, in the
 * order of the file; the first that fails stops the run (the ones after it
 * keep their schema, and a relay refuses none of those it already served
 * at this version). Each one's OUTBOX_SECRET_ password is libpq's
 * PGPASSWORD while it runs. */
static int migrate_databases(const struct config *cfg)
{
    struct database_list list = {0};
    char error[512];
    if (!databases_read(cfg->databases, &list, error, sizeof(error))) {
        fprintf(stderr, "outbox-relay migrate: --databases: %s\n", error);
        return 1;
    }
    const char *before = getenv("PGPASSWORD");
    char *saved = before ? xstrdup(before) : NULL;
    int rc = 0;
    for (size_t i = 0; i < list.count && rc == 0; i++) {
        const char *secret = databases_secret(list.items[i].name);
        if (secret)
            setenv("PGPASSWORD", secret, 1);
        else if (saved)
            setenv("PGPASSWORD", saved, 1);
        else
            unsetenv("PGPASSWORD");
        printf("database %s\n", list.items[i].name);
        fflush(stdout);
        rc = migrate_one(cfg, list.items[i].conninfo);
        if (rc != 0)
            fprintf(stderr, "outbox-relay migrate: database %s failed; %zu after it not migrated\n",
                    list.items[i].name, list.count - i - 1);
    }
    if (saved)
        setenv("PGPASSWORD", saved, 1);
    else
        unsetenv("PGPASSWORD");
    free(saved);
    databases_free(&list);
    return rc;
}

int migrate_run(const struct config *cfg)
{
    if (cfg->databases && *cfg->databases && !(cfg->database && *cfg->database))
        return migrate_databases(cfg);
    return migrate_one(cfg, cfg->db ? cfg->db : "");
}
