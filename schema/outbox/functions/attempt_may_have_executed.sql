CREATE FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean, p_http_status integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT NOT coalesce(
        (p_class = 'not_sent' AND p_request_sent = false)
        OR (p_class IN ('retry_later', 'key_conflict', 'permanent_failure') AND p_http_status BETWEEN 400 AND 499)
        OR (p_class = 'resolved' AND p_request_sent = false),
        false)
$$;

COMMENT ON FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean, p_http_status integer) IS 'Whether an attempts row leaves open that the target acted: true unless it is not_sent with nothing sent, a 4xx answer (retry_later, key_conflict, permanent_failure) or a decision that sent nothing.';

REVOKE ALL ON FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean, p_http_status integer) FROM PUBLIC;
