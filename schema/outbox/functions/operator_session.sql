CREATE FUNCTION outbox.operator_session() RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pg_catalog.pg_has_role(session_user, outbox.role_name('operator'), 'MEMBER')
           OR pg_catalog.pg_has_role(session_user, outbox.role_name('relay'), 'MEMBER')
$$;

COMMENT ON FUNCTION outbox.operator_session() IS 'Whether the session''s login is a member of this database''s operator or relay role: it may read an MCP client''s outcome and cancel its run (0036, 0041).';

REVOKE ALL ON FUNCTION outbox.operator_session() FROM PUBLIC;
