-- 0042: outbox.schema_version(), the schema's version for the relay (issue 38,
-- deliverable 1: one relay, many databases).
--
-- A relay that serves several databases (--databases) checks at each connect
-- that the database runs the schema it was built for: a database still on an
-- older schema is refused with a clear log line and retried, instead of
-- failing statement by statement. The version is the number of the newest
-- migration applied (outbox_meta.migrations, written by `migrate`), which
-- the relay's login may not read: this function, SECURITY DEFINER, tells it
-- that number and nothing else. NULL when outbox_meta.migrations is not
-- there (a schema loaded from schema/outbox/load.sql, not by migrate) or
-- belongs to a role this schema's owner may not read.
--
-- Locks: none (one function created). Relays of earlier releases do not
-- call it.

CREATE FUNCTION outbox.schema_version()
RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v integer;
BEGIN
    IF to_regclass('outbox_meta.migrations') IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE $q$SELECT max(substr(name, 1, 4)::integer) FROM outbox_meta.migrations
                WHERE name ~ '^[0-9]{4}_'$q$ INTO v;
    RETURN v;
EXCEPTION WHEN insufficient_privilege THEN
    RETURN NULL; -- outbox_meta belongs to another role than this schema's owner
END
$$;

COMMENT ON FUNCTION outbox.schema_version() IS
    'The number of the newest migration applied (outbox_meta.migrations); NULL when not migrated by migrate.';

REVOKE ALL ON FUNCTION outbox.schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.schema_version() TO outbox_relay, outbox_operator, outbox_admin;
