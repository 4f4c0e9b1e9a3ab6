CREATE FUNCTION outbox.intent_event(i outbox.intents, p_class outbox.attempt_class, p_http integer, p_error text) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'event', CASE WHEN i.state = 'failed' THEN 'intent_failed' ELSE 'intent_unknown' END,
               'key', i.key, 'target', i.target, 'class', p_class, 'http_status', p_http,
               'error', left(p_error, 200), 'at', outbox.utc_text(now()),
               'ordering_key', i.ordering_key,
               'blocks', CASE WHEN i.ordering_key IS NOT NULL THEN
                             nullif((SELECT count(*) FROM outbox.intents l
                                      WHERE l.ordering_key = i.ordering_key AND l.id > i.id
                                        AND l.state NOT IN ('succeeded', 'cancelled')), 0) END))
$$;

REVOKE ALL ON FUNCTION outbox.intent_event(i outbox.intents, p_class outbox.attempt_class, p_http integer, p_error text) FROM PUBLIC;
