-- 0009: flow control per target (docs/design.md, "Flow control").
--
-- A relay decides what to claim from each target's state, and never polls
-- for rows it will not take. What must be the same for every relay lives
-- here; what each relay observes for itself (its adaptive concurrency
-- window, its count of consecutive failures) lives in relay/flow.c.
--
-- 1. outbox.target_state, one row per target: the circuit breaker (closed,
--    open, half_open with one probe out), a pause that a 429 or 503 with
--    Retry-After asked for, and the token bucket of a rate limit. The
--    state rows are locked only by claims of targets that are gated (a
--    circuit not closed, a pause, or a rate limit): the common target, closed
--    and unlimited, is claimed without touching this table's rows.
-- 2. outbox.claim applies the gates, in one transaction with the claim: a
--    probe is claimed by one relay only, and tokens are taken for exactly the
--    rows claimed, so a rate limit holds across relays.
-- 3. outbox.next_due_ms(targets) answers for the targets the relay can take
--    now, gate included. The old form counted rows of disabled and saturated
--    targets, so a relay woke every millisecond to claim nothing.
-- 4. outbox.target_event: a relay reports what it saw (failures enough to
--    open the circuit, a probe's result, 410 Gone, a Retry-After).
-- 5. The retry budget is retired. It counted retries against first
--    attempts; after an outage there are no first attempts, so a recovered
--    target got one retry per second, and every refused retry was written
--    back to the table to be claimed again. A failing target now gets fewer
--    requests through the circuit and the relay's adaptive window, and
--    nothing is claimed that will not be sent. The relay of this release
--    reads neither retry_budget_ratio/floor nor outbox.defer and the old
--    outbox.next_due_ms(); they stay, unused, so that the previous release's
--    relay still runs against this schema during a rollback (deploy/README.md,
--    "Roll back"), and a later migration drops them.
-- 6. The retry horizon is time: targets.retry_for (default 3 days), with
--    max_attempts an optional cap (NULL by default). Existing targets keep
--    the max_attempts they have; set it to NULL to retry for retry_for.
--    Concurrency defaults are aligned with the relay's: 1024 per target.

-- ---------------------------------------------------------------------------
-- targets: new settings, the budget dropped

DROP VIEW outbox.target_health;   -- recreated below without the budget, with the circuit

ALTER TABLE outbox.targets
    ADD COLUMN rate_limit_per_s real CHECK (rate_limit_per_s > 0 AND rate_limit_per_s <= 1000000),
    ADD COLUMN retry_for interval NOT NULL DEFAULT '3 days' CHECK (retry_for > '0'),
    ADD COLUMN circuit_failure_threshold integer NOT NULL DEFAULT 10
        CHECK (circuit_failure_threshold BETWEEN 1 AND 100000),
    ADD COLUMN circuit_probe_max_ms integer NOT NULL DEFAULT 30000
        CHECK (circuit_probe_max_ms BETWEEN 100 AND 3600000);
ALTER TABLE outbox.targets
    ALTER COLUMN max_attempts DROP NOT NULL,
    ALTER COLUMN max_attempts SET DEFAULT NULL,
    ALTER COLUMN max_in_flight SET DEFAULT 1024;
COMMENT ON COLUMN outbox.targets.rate_limit_per_s IS
    'Requests per second to this target, all relays together (NULL = unlimited). No 1-second window carries more than 1.025 x this, plus one.';
COMMENT ON COLUMN outbox.targets.retry_for IS
    'Retry horizon: an intent not sent, or told to retry later, is retried until this long after its first attempt.';
COMMENT ON COLUMN outbox.targets.max_attempts IS
    'Optional cap on attempts (NULL = none: retry_for bounds the retries).';
COMMENT ON COLUMN outbox.targets.circuit_failure_threshold IS
    'Consecutive failures not of the intent''s making (refused, timeout, reset, 5xx) that open the circuit.';
COMMENT ON COLUMN outbox.targets.retry_budget_ratio IS
    'Retired in 0009 (read only by relays of earlier releases; to be dropped).';
COMMENT ON COLUMN outbox.targets.retry_budget_floor IS
    'Retired in 0009 (read only by relays of earlier releases; to be dropped).';
COMMENT ON COLUMN outbox.targets.circuit_probe_max_ms IS
    'While the circuit is open, one probe goes after 1 s, then at doubling intervals up to this.';

-- ---------------------------------------------------------------------------
-- 1. target_state

CREATE TABLE outbox.target_state (
    target           text PRIMARY KEY REFERENCES outbox.targets (name) ON DELETE CASCADE ON UPDATE CASCADE,
    circuit          text NOT NULL DEFAULT 'closed' CHECK (circuit IN ('closed', 'open', 'half_open')),
    circuit_since    timestamptz NOT NULL DEFAULT now(),
    circuit_reason   text,
    probe_interval_ms integer NOT NULL DEFAULT 0,
    probe_at         timestamptz,   -- open: the next probe may go then
    probe_owner      text,          -- half_open: the relay whose probe is out
    probe_expires_at timestamptz,   -- half_open: after this, another relay may probe
    paused_until     timestamptz,   -- a 429/503 with Retry-After paused the whole target
    tokens           double precision, -- rate limit: tokens at tokens_at (NULL = a full bucket)
    tokens_at        timestamptz,
    CHECK (circuit <> 'open' OR probe_at IS NOT NULL),
    CHECK (circuit <> 'half_open' OR (probe_owner IS NOT NULL AND probe_expires_at IS NOT NULL))
);
COMMENT ON TABLE outbox.target_state IS
    'Flow control state shared by all relays: circuit breaker, Retry-After pause, rate-limit tokens. Written by outbox.claim and outbox.target_event.';

INSERT INTO outbox.target_state (target) SELECT name FROM outbox.targets;

CREATE FUNCTION outbox.targets_state_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO outbox.target_state (target) VALUES (NEW.name) ON CONFLICT DO NOTHING;
    ELSE
        -- Enabled again by an admin: whatever opened the circuit (410 Gone, say) is over.
        UPDATE outbox.target_state
           SET circuit = 'closed', circuit_since = now(), circuit_reason = NULL, probe_interval_ms = 0,
               probe_at = NULL, probe_owner = NULL, probe_expires_at = NULL, paused_until = NULL
         WHERE target = NEW.name AND circuit <> 'closed';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER targets_state_insert AFTER INSERT ON outbox.targets
    FOR EACH ROW EXECUTE FUNCTION outbox.targets_state_row();
CREATE TRIGGER targets_state_enable AFTER UPDATE OF enabled ON outbox.targets
    FOR EACH ROW WHEN (NEW.enabled AND NOT OLD.enabled) EXECUTE FUNCTION outbox.targets_state_row();

-- The rate limit's bucket: a burst of 2.5 % of a second's worth (at least one
-- token), and a claim waits for half of it, so that a rate-limited target is
-- claimed in handfuls rather than one row per statement.
CREATE FUNCTION outbox.rate_burst(p_rate real) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$ SELECT greatest(1.0, p_rate * 0.025) $$;
CREATE FUNCTION outbox.rate_claim_at_least(p_rate real) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$ SELECT greatest(1.0, floor(outbox.rate_burst(p_rate) / 2)) $$;

-- ---------------------------------------------------------------------------
-- 2. claim, gated

DROP FUNCTION outbox.claim(text, text[], integer[], integer, integer);
CREATE FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                             p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    g        record;
    a        double precision;
BEGIN
    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows.
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        IF g.paused_until > now() THEN
            rooms[g.ord] := 0;
        ELSIF (g.circuit = 'open' AND g.probe_at <= now())
           OR (g.circuit = 'half_open' AND g.probe_expires_at <= now()) THEN
            rooms[g.ord] := least(rooms[g.ord], 1);   -- one probe, by this relay
            probing := probing || g.target;
        ELSIF g.circuit <> 'closed' THEN
            rooms[g.ord] := 0;
        END IF;
        IF g.rate IS NOT NULL AND rooms[g.ord] > 0 THEN
            a := least(outbox.rate_burst(g.rate),
                       coalesce(g.tokens + g.rate * extract(epoch FROM now() - g.tokens_at),
                                outbox.rate_burst(g.rate)));
            IF a < outbox.rate_claim_at_least(g.rate) THEN
                rooms[g.ord] := 0;   -- next_due_ms says when there will be enough
            ELSE
                rooms[g.ord] := least(rooms[g.ord], floor(a)::integer);
            END IF;
            metered := metered || g.target;
            avail := avail || a;
        END IF;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT c.id
          FROM unnest(p_targets, rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    ), claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               updated_at = now()
          FROM due
         WHERE i.id = due.id
        RETURNING i.id, i.key, i.target, i.payload::text AS payload, i.attempts, i.ambiguous,
                  (extract(epoch FROM i.first_attempt_at) * 1000)::bigint AS first_attempt_ms
    ), probed AS (
        -- A probe is out only if a row was claimed for it.
        UPDATE outbox.target_state s
           SET circuit = 'half_open', probe_owner = p_relay,
               probe_expires_at = now() + p_lease_ms * interval '1 millisecond'
         WHERE s.target = ANY (probing) AND EXISTS (SELECT 1 FROM claimed c WHERE c.target = s.target)
        RETURNING s.target
    ), spent AS (
        UPDATE outbox.target_state s
           SET tokens = m.avail - (SELECT count(*) FROM claimed c WHERE c.target = s.target),
               tokens_at = now()
          FROM unnest(metered, avail) AS m(target, avail)
         WHERE s.target = m.target
        RETURNING s.target
    )
    SELECT c.id, c.key, c.target, c.payload, c.attempts, c.ambiguous, c.first_attempt_ms,
           c.target = ANY (probing)
      FROM claimed c;
END
$$;

-- ---------------------------------------------------------------------------
-- 3. next_due_ms for the targets a relay can take

-- When a target's gate opens: the probe time of an open circuit, the expiry
-- of another relay's probe, the end of a pause, the time the bucket holds
-- enough tokens for a claim. NULL: no gate. Never later than an hour from now
-- (a 410 opens the circuit until an admin acts; the poll covers that).
CREATE FUNCTION outbox.target_gate(s outbox.target_state, p_rate real) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN g.at IS NOT NULL THEN least(now() + interval '1 hour', g.at) END
      FROM (SELECT greatest(
                CASE s.circuit WHEN 'open' THEN s.probe_at WHEN 'half_open' THEN s.probe_expires_at END,
                s.paused_until,
                CASE WHEN p_rate IS NOT NULL AND s.tokens IS NOT NULL
                          AND s.tokens < outbox.rate_claim_at_least(p_rate)
                     THEN s.tokens_at + (outbox.rate_claim_at_least(p_rate) - s.tokens) / p_rate * interval '1 second'
                END) AS at) AS g
$$;

-- In ms from now, the earliest of: a pending row of one of p_targets (the
-- targets this relay has room for) that is due and whose gate is open; an
-- in_flight lease that will expire (take-over); an unknown row to reconcile
-- through a status URL. NULL when there is none.
CREATE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT CASE WHEN due IS NOT NULL
                THEN greatest(0, (extract(epoch FROM (due - now())) * 1000)::bigint) END
      FROM (SELECT least(
                (SELECT min(greatest(d.due, outbox.target_gate(s, t.rate_limit_per_s)))
                   FROM unnest(p_targets) AS u(name)
                   JOIN outbox.targets t ON t.name = u.name AND t.enabled
                   LEFT JOIN outbox.target_state s ON s.target = u.name
                  CROSS JOIN LATERAL (SELECT min(i.next_attempt_at) AS due FROM outbox.intents i
                                       WHERE i.state = 'pending' AND i.target = u.name) d
                  WHERE d.due IS NOT NULL),   -- a gate alone (a pause that ended) is nothing due
                (SELECT min(lease_expires_at) FROM outbox.intents WHERE state = 'in_flight'),
                (SELECT min(greatest(i.next_attempt_at, coalesce(i.lease_expires_at, i.next_attempt_at)))
                   FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                  WHERE i.state = 'unknown' AND t.status_url IS NOT NULL AND t.enabled)) AS due) AS next);
END
$$;

-- ---------------------------------------------------------------------------
-- 4. target_event: what a relay saw

-- p_event:
--   open            consecutive failures reached the threshold: closed → open
--                   (an open or half-open circuit is left as it is)
--   probe_failed    this relay's probe failed: half_open → open, the interval doubled
--   probe_succeeded this relay's probe succeeded: half_open → closed
--   gone            410 Gone: open until an admin enables the target again, which
--                   is set to enabled = false here (the Standard Webhooks convention)
--   pause           Retry-After on a 429 or 503: no claim for p_ms
-- Returns the circuit after the event, and ms until its gate opens.
CREATE FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer)
RETURNS TABLE (circuit text, gate_ms bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

COMMENT ON FUNCTION outbox.next_due_ms() IS
    'Retired in 0009: counts rows the relay will not claim. Kept for relays of earlier releases.';
COMMENT ON FUNCTION outbox.defer(text, bigint[], integer[], integer) IS
    'Retired in 0009 with the retry budget. Kept for relays of earlier releases.';

-- ---------------------------------------------------------------------------
-- Views: the circuit in target_health and in stuck

CREATE VIEW outbox.target_health AS
WITH live_rows AS (        -- every row not final, each state through its partial index (0001)
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'awaiting_approval'
), settled_rows AS (       -- intents_settled: rows that reached a final state in the last 5 minutes
    SELECT i.id, i.target, i.state
      FROM outbox.intents i
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at > now() - interval '5 minutes'
), live AS (
    SELECT l.target,
           count(*) FILTER (WHERE l.state = 'pending') AS pending,
           count(*) FILTER (WHERE l.state = 'in_flight') AS in_flight,
           count(*) FILTER (WHERE l.state = 'unknown') AS unknown,
           count(*) FILTER (WHERE l.state = 'awaiting_approval') AS awaiting_approval,
           min(l.next_attempt_at) FILTER (WHERE l.state = 'pending' AND l.next_attempt_at <= now()) AS oldest_due
      FROM live_rows l GROUP BY l.target
), settled AS (
    SELECT s.target,
           count(*) FILTER (WHERE s.state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE s.state = 'failed') AS failed,
           count(*) FILTER (WHERE s.state = 'cancelled') AS cancelled
      FROM settled_rows s GROUP BY s.target
), recent_intents AS (
    -- As in 0007: the intents that can have an attempt in the last 5 minutes.
    SELECT s.id, s.target FROM settled_rows s
    UNION ALL
    SELECT l.id, l.target FROM live_rows l WHERE l.updated_at > now() - interval '5 minutes'
), deliveries AS (         -- attempts_at: delivery attempts of the last 5 minutes
    SELECT r.target,
           count(*) AS n,
           count(*) FILTER (WHERE a.class = 'succeeded') AS succeeded,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) FILTER (WHERE a.class = 'succeeded') AS p95_ok_ms
      FROM outbox.attempts a
      JOIN recent_intents r ON r.id = a.intent_id
     WHERE a.at > now() - interval '5 minutes'
       AND a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict', 'permanent_failure')
     GROUP BY r.target
)
SELECT t.name AS target,
       t.enabled,
       coalesce(l.pending, 0) AS pending,
       coalesce(l.in_flight, 0) AS in_flight,
       coalesce(l.unknown, 0) AS unknown,
       coalesce(l.awaiting_approval, 0) AS awaiting_approval,
       coalesce(s.succeeded, 0) AS succeeded_5m,
       coalesce(s.failed, 0) AS failed_5m,
       coalesce(s.cancelled, 0) AS cancelled_5m,
       coalesce(d.n, 0) AS attempts_5m,
       coalesce(d.succeeded, 0) AS attempts_succeeded_5m,
       round(d.succeeded::numeric / nullif(d.n, 0), 4) AS success_ratio_5m,
       round(d.p95_ms::numeric, 1) AS p95_latency_ms_5m,
       round(d.p95_ok_ms::numeric, 1) AS p95_succeeded_latency_ms_5m,
       coalesce(now() - l.oldest_due, interval '0') AS oldest_pending_age,
       coalesce(ts.circuit, 'closed') AS circuit,
       ts.circuit_since,
       ts.circuit_reason,
       CASE WHEN ts.circuit = 'open' AND ts.probe_at < 'infinity' THEN ts.probe_at END AS next_probe_at,
       CASE WHEN ts.paused_until > now() THEN ts.paused_until END AS paused_until,
       t.rate_limit_per_s
  FROM outbox.targets t
  LEFT JOIN outbox.target_state ts ON ts.target = t.name
  LEFT JOIN live l ON l.target = t.name
  LEFT JOIN settled s ON s.target = t.name
  LEFT JOIN deliveries d ON d.target = t.name;
COMMENT ON VIEW outbox.target_health IS
    'Per target: live rows by state; rows settled, delivery attempts, success ratio and p95 latency over the last 5 minutes; '
    'the age of the oldest due pending row; the circuit breaker (closed, open, half_open) and since when, a Retry-After pause, the rate limit.';
COMMENT ON COLUMN outbox.target_health.oldest_pending_age IS
    'How long the oldest due pending row has waited past its due time (0 when none is due): the target''s lag.';
COMMENT ON COLUMN outbox.target_health.success_ratio_5m IS
    'Delivery attempts of class succeeded / all delivery attempts (not reconciliations or decisions), last 5 minutes; NULL without any.';
COMMENT ON COLUMN outbox.target_health.p95_latency_ms_5m IS
    'p95 (percentile_cont, to 0.1 ms) of latency_ms over the delivery attempts of the last 5 minutes; NULL without any.';
COMMENT ON COLUMN outbox.target_health.circuit IS
    'closed: delivering; open: the target failed repeatedly (or answered 410), nothing is claimed but one probe at a time; '
    'half_open: a probe is out. Shared by all relays (outbox.target_state).';

CREATE OR REPLACE VIEW outbox.stuck AS
SELECT i.key, i.target, i.state, s.reason, now() - i.created_at AS age, i.attempts, i.last_error,
       i.updated_at
  FROM outbox.intents i
  LEFT JOIN outbox.target_state ts ON ts.target = i.target AND ts.circuit <> 'closed'
 CROSS JOIN LATERAL (SELECT CASE
        WHEN i.state = 'in_flight' AND i.lease_expires_at < now() THEN 'in flight past its lease'
        WHEN i.state = 'unknown' THEN 'outcome unknown'
        WHEN i.state = 'pending' AND ts.target IS NOT NULL
            THEN 'target unavailable since ' || to_char(ts.circuit_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                 || ' UTC (circuit ' || ts.circuit || coalesce(': ' || ts.circuit_reason, '') || ')'
        WHEN i.state = 'pending' THEN 'pending for over 5 minutes'
        WHEN i.state = 'awaiting_approval' THEN 'awaiting approval for over 24 hours'
    END AS reason) AS s
 WHERE (i.state = 'in_flight' AND i.lease_expires_at < now())
    OR i.state = 'unknown'
    OR (i.state = 'pending' AND (ts.target IS NOT NULL OR i.next_attempt_at < now() - interval '5 minutes'))
    OR (i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours');
COMMENT ON VIEW outbox.stuck IS
    'Keys that need a look: in flight past the lease, unknown, pending while the target''s circuit is open or over 5 minutes past due, awaiting approval over 24 hours.';

-- ---------------------------------------------------------------------------
-- grants (0005's roles)

-- Internals of claim, next_due_ms and target_event (which run as the owner): nobody calls them.
REVOKE ALL ON FUNCTION outbox.rate_burst(real), outbox.rate_claim_at_least(real),
                       outbox.target_gate(outbox.target_state, real)
       FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.claim(text, text[], integer[], integer, integer),
                       outbox.next_due_ms(text[]),
                       outbox.target_event(text, text, text, text, integer),
                       outbox.targets_state_row()
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.claim(text, text[], integer[], integer, integer),
                          outbox.next_due_ms(text[]),
                          outbox.target_event(text, text, text, text, integer)
      TO outbox_relay;
GRANT SELECT ON outbox.target_state TO outbox_relay, outbox_operator;
REVOKE ALL ON outbox.target_health FROM PUBLIC;
GRANT SELECT ON outbox.target_health TO outbox_operator;
