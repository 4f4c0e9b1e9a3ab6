CREATE FUNCTION outbox.key_hash(p_key text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16)
$$;

REVOKE ALL ON FUNCTION outbox.key_hash(p_key text) FROM PUBLIC;
