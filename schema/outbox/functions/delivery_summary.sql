CREATE FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer, OUT status_url_said_no boolean, OUT story text) RETURNS record
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT s.sent, s.doubtful, s.url_no,
           CASE WHEN s.sent > 0 THEN
               CASE WHEN s.sent = 1 THEN '1 attempt was sent: ' ELSE s.sent || ' attempts were sent: ' END
               || CASE WHEN s.doubtful = 0 AND s.sent = 1
                       THEN format('the target refused it with HTTP %s and did not act', coalesce(s.last_http::text, '4xx'))
                       WHEN s.doubtful = 0
                       THEN format('the target refused each, the last with HTTP %s, and did not act',
                                   coalesce(s.last_http::text, '4xx'))
                       WHEN s.url_no AND s.sent = 1 THEN 'the target''s status URL reported that it did not execute'
                       WHEN s.url_no THEN 'the target''s status URL reported that none executed'
                       WHEN s.person_no THEN 'a person resolved that the target did not act'
                       WHEN s.sent = 1 THEN 'it may have executed'
                       ELSE 'one of them may have executed' END
           END
      FROM (SELECT count(*) FILTER (WHERE x.delivery)::integer AS sent,
                   count(*) FILTER (WHERE outbox.attempt_may_have_executed(x.class, x.request_sent, x.http_status))::integer
                       AS doubtful,
                   (array_agg(x.http_status ORDER BY x.id DESC) FILTER (WHERE x.delivery))[1] AS last_http,
                   coalesce(bool_or(x.class = 'reconciled_not_executed'), false) AS url_no,
                   coalesce(bool_or(x.class = 'resolved' AND x.error LIKE 'resolved failed:%'), false) AS person_no
              FROM (SELECT a.id, a.class, a.request_sent, a.http_status, a.error,
                           a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict',
                                       'permanent_failure')
                           AND a.request_sent IS DISTINCT FROM false AS delivery
                      FROM outbox.attempts a
                     WHERE a.intent_id = p_intent) x) s
$$;

COMMENT ON FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer, OUT status_url_said_no boolean, OUT story text) IS 'What the attempts of an intent amount to: requests that reached (or may have reached) the target, attempts that may have executed, a status URL''s "not executed", and the story in words (NULL: nothing reached the target) (0026).';

REVOKE ALL ON FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer, OUT status_url_said_no boolean, OUT story text) FROM PUBLIC;
