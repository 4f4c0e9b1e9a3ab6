CREATE FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer) RETURNS TABLE(circuit text, gate_ms bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    first_probe_ms constant integer := 1000;
BEGIN
    IF p_event = 'open' THEN
        UPDATE outbox.target_state s
           SET circuit = 'open', circuit_since = now(), circuit_reason = p_reason,
               probe_interval_ms = first_probe_ms,
               probe_at = now() + first_probe_ms * interval '1 millisecond',
               probe_owner = NULL, probe_expires_at = NULL
         WHERE s.target = p_target AND s.circuit = 'closed';
    ELSIF p_event = 'probe_failed' THEN
        UPDATE outbox.target_state s
           SET circuit = 'open', circuit_reason = p_reason,
               probe_interval_ms = least(t.circuit_probe_max_ms, greatest(first_probe_ms, s.probe_interval_ms * 2)),
               probe_at = now() + least(t.circuit_probe_max_ms, greatest(first_probe_ms, s.probe_interval_ms * 2))
                                  * interval '1 millisecond',
               probe_owner = NULL, probe_expires_at = NULL
          FROM outbox.targets t
         WHERE s.target = p_target AND t.name = s.target AND s.circuit = 'half_open'
           AND s.probe_owner = p_relay AND s.probe_at IS DISTINCT FROM 'infinity';
    ELSIF p_event = 'probe_succeeded' THEN
        UPDATE outbox.target_state s
           SET circuit = 'closed', circuit_since = now(), circuit_reason = NULL, probe_interval_ms = 0,
               probe_at = NULL, probe_owner = NULL, probe_expires_at = NULL
         WHERE s.target = p_target AND s.circuit = 'half_open' AND s.probe_owner = p_relay;
        IF FOUND THEN
            PERFORM outbox.retries_due_now(p_target);   -- 0023
        END IF;
    ELSIF p_event = 'gone' THEN
        UPDATE outbox.target_state s
           SET circuit = 'open', circuit_since = CASE WHEN s.circuit = 'closed' THEN now() ELSE s.circuit_since END,
               circuit_reason = p_reason, probe_at = 'infinity', probe_owner = NULL, probe_expires_at = NULL
         WHERE s.target = p_target;
        UPDATE outbox.targets SET enabled = false WHERE name = p_target AND enabled;
    ELSIF p_event = 'pause' THEN
        UPDATE outbox.target_state s
           SET paused_until = greatest(s.paused_until, now() + greatest(p_ms, 0) * interval '1 millisecond')
         WHERE s.target = p_target;
    ELSE
        RAISE EXCEPTION 'outbox.target_event: unknown event %', quote_literal(p_event)
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT s.circuit,
           CASE WHEN g IS NOT NULL AND g > now()
                THEN (extract(epoch FROM g - now()) * 1000)::bigint END
      FROM outbox.target_state s
      JOIN outbox.targets t ON t.name = s.target
     CROSS JOIN LATERAL outbox.target_gate(s, t.rate_limit_per_s) AS g
     WHERE s.target = p_target;
END
$$;

REVOKE ALL ON FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer) TO outbox_relay;
