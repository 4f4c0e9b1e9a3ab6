CREATE FUNCTION outbox.unkeyed_attempt(p_intent bigint) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE WHEN bool_or(a.key_sent = false) THEN 'without' ELSE 'not recorded' END
      FROM outbox.attempts a
     WHERE a.intent_id = p_intent AND a.key_sent IS NOT TRUE
       AND a.class = 'ambiguous' AND a.request_sent IS DISTINCT FROM false
       AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                        WHERE r.intent_id = p_intent AND r.id > a.id
                          AND r.class = 'reconciled_not_executed')
    HAVING count(*) > 0
$$;

COMMENT ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) IS 'Whether an attempt of the intent that may have executed went without the key (''without'') or without a record of it (''not recorded''); NULL: neither.';

REVOKE ALL ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) TO outbox_admin;
