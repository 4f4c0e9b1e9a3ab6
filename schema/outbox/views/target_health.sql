CREATE VIEW outbox.target_health AS
 WITH live_rows AS (
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'pending'::outbox.intent_state)
        UNION ALL
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'in_flight'::outbox.intent_state)
        UNION ALL
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'unknown'::outbox.intent_state)
        UNION ALL
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'awaiting_approval'::outbox.intent_state)
        ), settled_rows AS (
         SELECT i.id,
            i.target,
            i.state
           FROM (outbox.targets tt
             CROSS JOIN LATERAL ( SELECT i_1.id,
                    i_1.target,
                    i_1.state
                   FROM outbox.intents i_1
                  WHERE ((i_1.target = tt.name) AND (i_1.state = ANY (ARRAY['succeeded'::outbox.intent_state, 'failed'::outbox.intent_state, 'cancelled'::outbox.intent_state])) AND (i_1.updated_at > (now() - '00:05:00'::interval)))
                 OFFSET 0) i)
        ), live AS (
         SELECT l_1.target,
            count(*) FILTER (WHERE (l_1.state = 'pending'::outbox.intent_state)) AS pending,
            count(*) FILTER (WHERE (l_1.state = 'in_flight'::outbox.intent_state)) AS in_flight,
            count(*) FILTER (WHERE (l_1.state = 'unknown'::outbox.intent_state)) AS unknown,
            count(*) FILTER (WHERE (l_1.state = 'awaiting_approval'::outbox.intent_state)) AS awaiting_approval,
            min(l_1.next_attempt_at) FILTER (WHERE ((l_1.state = 'pending'::outbox.intent_state) AND (l_1.next_attempt_at <= now()))) AS oldest_due
           FROM live_rows l_1
          GROUP BY l_1.target
        ), settled AS (
         SELECT s_1.target,
            count(*) FILTER (WHERE (s_1.state = 'succeeded'::outbox.intent_state)) AS succeeded,
            count(*) FILTER (WHERE (s_1.state = 'failed'::outbox.intent_state)) AS failed,
            count(*) FILTER (WHERE (s_1.state = 'cancelled'::outbox.intent_state)) AS cancelled
           FROM settled_rows s_1
          GROUP BY s_1.target
        ), recent_intents AS (
         SELECT s_1.id,
            s_1.target
           FROM settled_rows s_1
        UNION ALL
         SELECT l_1.id,
            l_1.target
           FROM live_rows l_1
          WHERE (l_1.updated_at > (now() - '00:05:00'::interval))
        ), deliveries AS (
         SELECT r.target,
            count(*) AS n,
            count(*) FILTER (WHERE (a.class = 'succeeded'::outbox.attempt_class)) AS succeeded,
            percentile_cont((0.95)::double precision) WITHIN GROUP (ORDER BY ((a.latency_ms)::double precision)) AS p95_ms,
            percentile_cont((0.95)::double precision) WITHIN GROUP (ORDER BY ((a.latency_ms)::double precision)) FILTER (WHERE (a.class = 'succeeded'::outbox.attempt_class)) AS p95_ok_ms
           FROM (outbox.attempts a
             JOIN recent_intents r ON ((r.id = a.intent_id)))
          WHERE ((a.at > (now() - '00:05:00'::interval)) AND (a.class = ANY (ARRAY['not_sent'::outbox.attempt_class, 'ambiguous'::outbox.attempt_class, 'succeeded'::outbox.attempt_class, 'retry_later'::outbox.attempt_class, 'key_conflict'::outbox.attempt_class, 'permanent_failure'::outbox.attempt_class])))
          GROUP BY r.target
        )
 SELECT t.name AS target,
    t.enabled,
    COALESCE(l.pending, (0)::bigint) AS pending,
    COALESCE(l.in_flight, (0)::bigint) AS in_flight,
    COALESCE(l.unknown, (0)::bigint) AS unknown,
    COALESCE(l.awaiting_approval, (0)::bigint) AS awaiting_approval,
    COALESCE(s.succeeded, (0)::bigint) AS succeeded_5m,
    COALESCE(s.failed, (0)::bigint) AS failed_5m,
    COALESCE(s.cancelled, (0)::bigint) AS cancelled_5m,
    COALESCE(d.n, (0)::bigint) AS attempts_5m,
    COALESCE(d.succeeded, (0)::bigint) AS attempts_succeeded_5m,
    round(((d.succeeded)::numeric / (NULLIF(d.n, 0))::numeric), 4) AS success_ratio_5m,
    round((d.p95_ms)::numeric, 1) AS p95_latency_ms_5m,
    round((d.p95_ok_ms)::numeric, 1) AS p95_succeeded_latency_ms_5m,
    COALESCE((now() - l.oldest_due), '00:00:00'::interval) AS oldest_pending_age,
    COALESCE(ts.circuit, 'closed'::text) AS circuit,
    ts.circuit_since,
    ts.circuit_reason,
        CASE
            WHEN ((ts.circuit = 'open'::text) AND (ts.probe_at < 'infinity'::timestamp with time zone)) THEN ts.probe_at
            ELSE NULL::timestamp with time zone
        END AS next_probe_at,
        CASE
            WHEN (ts.paused_until > now()) THEN ts.paused_until
            ELSE NULL::timestamp with time zone
        END AS paused_until,
    t.rate_limit_per_s
   FROM ((((outbox.targets t
     LEFT JOIN outbox.target_state ts ON ((ts.target = t.name)))
     LEFT JOIN live l ON ((l.target = t.name)))
     LEFT JOIN settled s ON ((s.target = t.name)))
     LEFT JOIN deliveries d ON ((d.target = t.name)));

COMMENT ON VIEW outbox.target_health IS 'Per target: live rows by state; rows settled, delivery attempts, success ratio and p95 latency over the last 5 minutes; the age of the oldest due pending row; the circuit breaker (closed, open, half_open) and since when, a Retry-After pause, the rate limit.';

COMMENT ON COLUMN outbox.target_health.success_ratio_5m IS 'Delivery attempts of class succeeded / all delivery attempts (not reconciliations or decisions), last 5 minutes; NULL without any.';

COMMENT ON COLUMN outbox.target_health.p95_latency_ms_5m IS 'p95 (percentile_cont, to 0.1 ms) of latency_ms over the delivery attempts of the last 5 minutes; NULL without any.';

COMMENT ON COLUMN outbox.target_health.oldest_pending_age IS 'How long the oldest due pending row has waited past its due time (0 when none is due): the target''s lag.';

COMMENT ON COLUMN outbox.target_health.circuit IS 'closed: delivering; open: the target failed repeatedly (or answered 410), nothing is claimed but one probe at a time; half_open: a probe is out. Shared by all relays (outbox.target_state).';

GRANT SELECT ON TABLE outbox.target_health TO outbox_operator;


--
