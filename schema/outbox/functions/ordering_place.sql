CREATE FUNCTION outbox.ordering_place(p_key text, p_group text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF p_group = '' OR octet_length(p_group) > 255 OR p_group ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'outbox.enqueue: ordering key % for key % is %', quote_literal(p_group), quote_literal(p_key),
                        CASE WHEN p_group = '' THEN 'empty'
                             WHEN octet_length(p_group) > 255 THEN octet_length(p_group) || ' bytes long; the limit is 255'
                             ELSE 'not printable (it contains a control character)' END
            USING ERRCODE = 'OR011',
                  HINT = 'An ordering key names a group of intents sent one at a time, e.g. the run id; NULL for unordered.';
    END IF;
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE key = p_key) THEN
        RETURN false;
    END IF;
    INSERT INTO outbox.ordering_groups AS g (ordering_key) VALUES (p_group)
    ON CONFLICT (ordering_key) DO UPDATE SET enqueued = g.enqueued + 1, last_enqueue_at = now();
    -- A new statement: at READ COMMITTED it sees every intent of the group
    -- committed before the lock above was granted.
    RETURN EXISTS (SELECT 1 FROM outbox.intents l
                    WHERE l.ordering_key = p_group AND l.state NOT IN ('succeeded', 'cancelled'));
END
$$;

REVOKE ALL ON FUNCTION outbox.ordering_place(p_key text, p_group text) FROM PUBLIC;
