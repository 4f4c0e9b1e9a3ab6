CREATE FUNCTION outbox.target_gate(s outbox.target_state, p_rate real) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN greatest(CASE s.circuit WHEN 'open' THEN s.probe_at
                                             WHEN 'half_open' THEN s.probe_expires_at END,
                              s.paused_until,
                              CASE WHEN p_rate IS NOT NULL AND s.tokens IS NOT NULL
                                        AND s.tokens < outbox.rate_claim_at_least(p_rate)
                                   THEN s.tokens_at + (outbox.rate_claim_at_least(p_rate) - s.tokens)
                                                      / p_rate * interval '1 second' END) IS NOT NULL
                THEN least(now() + interval '1 hour',
                           greatest(CASE s.circuit WHEN 'open' THEN s.probe_at
                                                   WHEN 'half_open' THEN s.probe_expires_at END,
                                    s.paused_until,
                                    CASE WHEN p_rate IS NOT NULL AND s.tokens IS NOT NULL
                                              AND s.tokens < outbox.rate_claim_at_least(p_rate)
                                         THEN s.tokens_at + (outbox.rate_claim_at_least(p_rate) - s.tokens)
                                                            / p_rate * interval '1 second' END))
           END
$$;

REVOKE ALL ON FUNCTION outbox.target_gate(s outbox.target_state, p_rate real) FROM PUBLIC;
