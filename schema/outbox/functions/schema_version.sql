CREATE FUNCTION outbox.schema_version() RETURNS integer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

COMMENT ON FUNCTION outbox.schema_version() IS 'The number of the newest migration applied (outbox_meta.migrations); NULL when not migrated by migrate.';

REVOKE ALL ON FUNCTION outbox.schema_version() FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.schema_version() TO outbox_relay;
GRANT ALL ON FUNCTION outbox.schema_version() TO outbox_operator;
GRANT ALL ON FUNCTION outbox.schema_version() TO outbox_admin;
