CREATE FUNCTION outbox.caller_may_see(p_enqueued_by text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT p_enqueued_by IS NOT DISTINCT FROM session_user::text OR NOT outbox.isolated()
$$;

COMMENT ON FUNCTION outbox.caller_may_see(p_enqueued_by text) IS 'true for an intent the caller''s login enqueued, or for any when the login is not isolated (0026).';

REVOKE ALL ON FUNCTION outbox.caller_may_see(p_enqueued_by text) FROM PUBLIC;
