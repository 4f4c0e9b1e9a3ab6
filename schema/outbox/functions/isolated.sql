CREATE FUNCTION outbox.isolated() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.isolated_logins l WHERE l.login = session_user::text)
           AND NOT pg_catalog.pg_has_role(session_user, outbox.role_name('operator'), 'MEMBER')
           AND NOT pg_catalog.pg_has_role(session_user, outbox.role_name('relay'), 'MEMBER')
$$;

COMMENT ON FUNCTION outbox.isolated() IS 'Whether the session''s login is isolated (outbox.isolated_logins), unless it is a member of this database''s operator or relay role (0026, 0041).';

REVOKE ALL ON FUNCTION outbox.isolated() FROM PUBLIC;
