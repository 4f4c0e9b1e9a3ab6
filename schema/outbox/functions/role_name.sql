CREATE FUNCTION outbox.role_name(p_role text) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE WHEN coalesce(i.role_prefix, '') = '' THEN 'outbox_' || p_role
                ELSE i.role_prefix || '_outbox_' || p_role END
      FROM (SELECT) AS one_row LEFT JOIN outbox.installation i ON true
$$;

COMMENT ON FUNCTION outbox.role_name(p_role text) IS 'The name of this database''s role p_role (app, relay, operator, admin, mcp): outbox_<role>, or <prefix>_outbox_<role> when installed with a role prefix (0041).';

REVOKE ALL ON FUNCTION outbox.role_name(p_role text) FROM PUBLIC;
