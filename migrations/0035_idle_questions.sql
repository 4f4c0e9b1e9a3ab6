-- 0035: what an idle relay asks costs what it should (issue 26: PostgreSQL's
-- share of a delivery, at a trickle).
--
-- At a trickle (one enqueue every 5 ms, each delivered before the next
-- arrives) every delivery ends with the relay idle: it claims once more,
-- finds nothing, and asks outbox.next_due_ms when to look again. Counted with
-- pg_stat_statements and track_functions = all over 20 s of it, that question
-- cost more than the claim or the record: 4.8 ms of the backend per call,
-- more than a millisecond per delivery.
--   - Its first statement was planned again at every call (895 plans in 895
--     calls, 3.2 ms each): without the argument's value PostgreSQL takes
--     unnest(p_targets) for ten targets, so the generic plan never looked as
--     cheap as the ones made with the value. Every plan it can make reads each
--     target's due index and the in-flight and unknown indexes for their
--     least value, so the generic plan is kept now (plan_cache_mode), as
--     0034 did for the claim.
--   - outbox.target_gate, called for each target in two of its statements,
--     was a SQL function whose body read FROM a subquery, which PostgreSQL
--     cannot inline: each call was planned as a query of its own (0.47 ms).
--     It is now one expression, the same value, and is inlined where it is
--     used (next_due_ms, target_event).
-- The signatures, the answers and the grants are unchanged.

CREATE OR REPLACE FUNCTION outbox.target_gate(s outbox.target_state, p_rate real)
    RETURNS timestamp with time zone
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

ALTER FUNCTION outbox.next_due_ms(text[]) SET plan_cache_mode = force_generic_plan;
