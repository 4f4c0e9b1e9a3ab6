CREATE FUNCTION outbox.differing_fields(a jsonb, b jsonb) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(array_agg(k ORDER BY k), '{}')
      FROM (SELECT jsonb_object_keys(a) AS k UNION SELECT jsonb_object_keys(b)) AS keys
     WHERE a -> k IS DISTINCT FROM b -> k
$$;

REVOKE ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_app;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_admin;
