CREATE FUNCTION outbox.mcp_notify_settled() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('outbox_mcp', NEW.key);
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_notify_settled() FROM PUBLIC;
