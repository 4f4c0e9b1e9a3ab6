CREATE VIEW outbox.stuck AS
 SELECT i.key,
    i.target,
    i.state,
        CASE
            WHEN (g.later > 0) THEN (format('blocks %s later %s of group %s'::text, g.later,
            CASE
                WHEN (g.later = 1) THEN 'intent'::text
                ELSE 'intents'::text
            END, i.ordering_key) || COALESCE(('; '::text || s.reason), ''::text))
            ELSE s.reason
        END AS reason,
    (now() - i.created_at) AS age,
    i.attempts,
    i.last_error,
    i.updated_at
   FROM ((((( SELECT i_1.id,
            false AS head
           FROM (outbox.intents i_1
             LEFT JOIN outbox.target_state ts_1 ON (((ts_1.target = i_1.target) AND (ts_1.circuit <> 'closed'::text))))
          WHERE (((i_1.state = 'in_flight'::outbox.intent_state) AND (i_1.lease_expires_at < now())) OR (i_1.state = 'unknown'::outbox.intent_state) OR ((i_1.state = 'pending'::outbox.intent_state) AND (i_1.next_attempt_at < 'infinity'::timestamp with time zone) AND ((ts_1.target IS NOT NULL) OR (i_1.next_attempt_at < (now() - '00:05:00'::interval)))) OR ((i_1.state = 'awaiting_approval'::outbox.intent_state) AND (i_1.created_at < (now() - '24:00:00'::interval))))
        UNION ALL
         SELECT i_1.id,
            true
           FROM (( SELECT DISTINCT ON (o.ordering_key) o.id
                   FROM outbox.intents o
                  WHERE ((o.ordering_key IS NOT NULL) AND (o.state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])))
                  ORDER BY o.ordering_key, o.id) h
             JOIN outbox.intents i_1 ON ((i_1.id = h.id)))
          WHERE ((i_1.state = 'failed'::outbox.intent_state) OR ((i_1.state = 'awaiting_approval'::outbox.intent_state) AND (i_1.created_at >= (now() - '24:00:00'::interval))) OR ((i_1.state = 'pending'::outbox.intent_state) AND (i_1.next_attempt_at = 'infinity'::timestamp with time zone)))) c
     JOIN outbox.intents i ON ((i.id = c.id)))
     LEFT JOIN outbox.target_state ts ON (((ts.target = i.target) AND (ts.circuit <> 'closed'::text))))
     LEFT JOIN LATERAL ( SELECT count(*) AS later
           FROM outbox.intents l
          WHERE ((i.ordering_key IS NOT NULL) AND (l.ordering_key = i.ordering_key) AND (l.id > i.id) AND (l.state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])) AND (NOT (EXISTS ( SELECT 1
                   FROM outbox.intents p
                  WHERE ((p.ordering_key = i.ordering_key) AND (p.id < i.id) AND (p.state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])))))))) g ON (true))
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN ((i.state = 'in_flight'::outbox.intent_state) AND (i.lease_expires_at < now())) THEN 'in flight past its lease'::text
                    WHEN (i.state = 'unknown'::outbox.intent_state) THEN ('outcome unknown'::text || COALESCE((': '::text || outbox.needs_person(i.id, i.target, i.first_attempt_at)), ''::text))
                    WHEN ((i.state = 'pending'::outbox.intent_state) AND (i.next_attempt_at = 'infinity'::timestamp with time zone)) THEN (('its turn in group '::text || i.ordering_key) || ' came but it was not released: outbox.retry_now releases it'::text)
                    WHEN ((i.state = 'pending'::outbox.intent_state) AND (ts.target IS NOT NULL)) THEN ((((('target unavailable since '::text || to_char((ts.circuit_since AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD HH24:MI:SS'::text)) || ' UTC (circuit '::text) || ts.circuit) || COALESCE((': '::text ||
                    CASE
                        WHEN ((i.last_error <> ''::text) AND ("right"(ts.circuit_reason, (length(i.last_error) + 8)) = ('; last: '::text || i.last_error))) THEN "left"(ts.circuit_reason, (- (length(i.last_error) + 8)))
                        ELSE ts.circuit_reason
                    END), ''::text)) || ')'::text)
                    WHEN (i.state = 'pending'::outbox.intent_state) THEN 'pending for over 5 minutes'::text
                    WHEN ((i.state = 'awaiting_approval'::outbox.intent_state) AND (i.created_at < (now() - '24:00:00'::interval))) THEN 'awaiting approval for over 24 hours'::text
                    ELSE NULL::text
                END AS reason) s)
  WHERE ((NOT c.head) OR (g.later > 0) OR (i.state = 'pending'::outbox.intent_state));

COMMENT ON VIEW outbox.stuck IS 'Keys that need a look: in flight past the lease, unknown (saying when it needs a person), pending while the target''s circuit is open or over 5 minutes past due, awaiting approval over 24 hours; the head of an ordering group that blocks later intents ("blocks N later intents of group G"), and a held intent whose turn came but was not released.';

GRANT SELECT ON TABLE outbox.stuck TO outbox_operator;
