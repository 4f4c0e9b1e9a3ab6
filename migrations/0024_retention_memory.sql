-- 0024: retention never forgets what the running version remembered, and a
-- failed step of an ordering group is never pruned (issue 24, items 1 and 5).
--
-- 1. Before 0012 every key was remembered for good. 0012 turned retention on
--    for every existing target (retain_for 7 days, dedupe_window 30 days),
--    and the first prune after an upgrade pruned every intent settled more
--    than 30 days before it and forgot its key at once: a replayed step of
--    an old run was then enqueued as new and executed again. Now the moment
--    retention began is kept (outbox.retention_epoch: when 0012 was
--    applied, from outbox_meta.migrations, on a database that had intents
--    then; for one built with psql -f, the moment this file ran), and an
--    intent that settled before it is
--    still pruned but its tombstone is kept for good (forget_at infinity):
--    the key answers as before. An admin who wants those keys forgotten
--    after dedupe_window like any other sets targets.forget_pre_retention.
--    On a database created at 0012 or later nothing changes: no intent
--    settled before retention began.
--
-- 2. 0013 kept a failed intent of an ordering group only while a later
--    intent of its group existed. Once pruned, the group's next step, however
--    much later, was due at once: a step went after a step that did not
--    happen. A failed ordered intent is now never pruned; it holds its group
--    until a person cancels it (outbox.cancel), and then it is pruned like
--    any cancelled intent. There is no race left with an enqueue that
--    commits between a prune's snapshot and its delete: the prune never
--    takes such a row.
--
-- Locks: ALTER TABLE targets ADD COLUMN with a constant default takes
-- targets' ACCESS EXCLUSIVE lock for a moment (no rewrite); the functions
-- take none.

ALTER TABLE outbox.targets ADD COLUMN forget_pre_retention boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN outbox.targets.forget_pre_retention IS
    'false (default): keys of intents that settled before retention began (0012) are remembered for good once pruned; true: forgotten after dedupe_window like the others.';

-- When retention began, on a database that had intents then: the moment
-- 0012 was applied (outbox_meta.migrations), if an intent was created before
-- it. No row (a database created at 0012 or later, or one that had no intent
-- then): nothing settled before retention began, nothing is kept for good.
CREATE TABLE outbox.retention_epoch (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    began timestamptz NOT NULL
);
COMMENT ON TABLE outbox.retention_epoch IS
    'When retention began (0012) on a database that already had intents: keys of intents settled before it are remembered for good.';

DO $do$
DECLARE
    began timestamptz;
BEGIN
    IF to_regclass('outbox_meta.migrations') IS NOT NULL THEN
        EXECUTE 'SELECT applied_at FROM outbox_meta.migrations WHERE name = ''0012_retention.sql''' INTO began;
    END IF;
    began := coalesce(began, now());
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE created_at < began)
       OR EXISTS (SELECT 1 FROM outbox.tombstones WHERE settled_at < began) THEN
        INSERT INTO outbox.retention_epoch (began) VALUES (began);
    END IF;
END
$do$;

-- A tombstone kept for good has forget_at infinity: said as "forever".
CREATE OR REPLACE FUNCTION outbox.utc_text(p_at timestamptz) RETURNS text
LANGUAGE sql STABLE STRICT AS $$
    SELECT CASE WHEN isfinite(p_at) THEN to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                ELSE 'forever' END
$$;

-- ---------------------------------------------------------------------------
-- 1. prune_ids (as in 0012): the tombstone of a pre-retention key is kept for good

CREATE OR REPLACE FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer;
BEGIN
    IF p_ids IS NULL THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM outbox.intents i
         WHERE i.id = ANY (p_ids)
        RETURNING i.id, i.key, i.target, i.fingerprint, i.state, i.response_status, i.updated_at
    )
    INSERT INTO outbox.tombstones (key_hash, intent_id, target, fingerprint, state, response_status,
                                   settled_at, forget_at)
    SELECT outbox.key_hash(g.key), g.id, g.target, substring(g.fingerprint FROM 1 FOR 16), g.state,
           g.response_status, g.updated_at,
           -- 0024: a key that settled before retention began is remembered for good,
           -- unless an admin lets the target forget such keys (forget_pre_retention)
           CASE WHEN g.updated_at < (SELECT e.began FROM outbox.retention_epoch e) AND NOT t.forget_pre_retention
                THEN 'infinity'::timestamptz
                ELSE g.updated_at + coalesce(p_dedupe_window, t.dedupe_window) END
      FROM gone g
      JOIN outbox.targets t ON t.name = g.target;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;


-- ---------------------------------------------------------------------------
-- 2. prune_target, prune_linked and prunable (as in 0013 and 0012): failed ordered intents stay

CREATE OR REPLACE FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval,
                                               p_limit integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    doomed bigint[];
BEGIN
    SELECT array_agg(d.id) INTO doomed
      FROM (SELECT i.id
              FROM outbox.intents i
             WHERE i.target = p_target AND i.state IN ('succeeded', 'failed', 'cancelled')
               AND i.updated_at < now() - p_retain_for
               AND i.compensates IS NULL
               AND NOT EXISTS (SELECT 1 FROM outbox.intents c WHERE c.compensates = i.key)
               -- 0024: a failed intent of an ordering group stays, with or without later
               -- steps: it holds its group until a person cancels it (then the group goes on)
               AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL)
             ORDER BY i.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    RETURN outbox.prune_ids(doomed, p_dedupe_window);
END
$$;


CREATE OR REPLACE FUNCTION outbox.prune_linked(p_limit integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    members bigint[];
    kept    bigint[];
BEGIN
    -- Candidates: prunable compensations and the prunable intents they undo.
    SELECT array_agg(DISTINCT x.id) INTO members
      FROM (SELECT c.id, o.id AS oid
              FROM outbox.intents c
              JOIN outbox.targets tc ON tc.name = c.target
              JOIN outbox.intents o ON o.key = c.compensates
              JOIN outbox.targets t_o ON t_o.name = o.target
             WHERE c.compensates IS NOT NULL
               AND c.state IN ('succeeded', 'failed', 'cancelled') AND c.updated_at < now() - tc.retain_for
               AND o.state IN ('succeeded', 'failed', 'cancelled') AND o.updated_at < now() - t_o.retain_for
               -- 0024: a failed intent of an ordering group stays (it holds its group)
               AND NOT (c.state = 'failed' AND c.ordering_key IS NOT NULL)
               AND NOT (o.state = 'failed' AND o.ordering_key IS NOT NULL)
             LIMIT p_limit) pairs
      CROSS JOIN LATERAL (VALUES (pairs.id), (pairs.oid)) AS x(id);
    IF members IS NULL THEN
        RETURN 0;
    END IF;
    -- Drop every member linked to an intent outside the set, until none is
    -- (a chain: a compensation of a compensation).
    LOOP
        SELECT array_agg(m.id) INTO kept
          FROM outbox.intents m
         WHERE m.id = ANY (members)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents o
                            WHERE o.key = m.compensates AND NOT (o.id = ANY (members)))
           AND NOT EXISTS (SELECT 1 FROM outbox.intents c
                            WHERE c.compensates = m.key AND NOT (c.id = ANY (members)));
        EXIT WHEN coalesce(cardinality(kept), 0) = cardinality(members);
        members := kept;
        IF members IS NULL THEN
            RETURN 0;
        END IF;
    END LOOP;

    -- All of them or none: a member locked by someone else waits for the next run.
    SELECT array_agg(l.id) INTO kept
      FROM (SELECT i.id FROM outbox.intents i WHERE i.id = ANY (members) FOR UPDATE SKIP LOCKED) l;
    IF coalesce(cardinality(kept), 0) <> cardinality(members) THEN
        RETURN 0;
    END IF;
    RETURN outbox.prune_ids(members, NULL);
END
$$;


CREATE OR REPLACE FUNCTION outbox.prunable()
RETURNS TABLE (target text, state outbox.intent_state, intents bigint, oldest_settled timestamptz,
               newest_settled timestamptz, retain_for interval)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT i.target, i.state, count(*), min(i.updated_at), max(i.updated_at), t.retain_for
      FROM outbox.targets t
      JOIN outbox.intents i ON i.target = t.name
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at < now() - t.retain_for
       AND NOT EXISTS (SELECT 1 FROM outbox.intents o JOIN outbox.targets ot ON ot.name = o.target
                        WHERE o.key = i.compensates
                          AND NOT (o.state IN ('succeeded', 'failed', 'cancelled')
                                   AND o.updated_at < now() - ot.retain_for))
       AND NOT EXISTS (SELECT 1 FROM outbox.intents c JOIN outbox.targets ct ON ct.name = c.target
                        WHERE c.compensates = i.key
                          AND NOT (c.state IN ('succeeded', 'failed', 'cancelled')
                                   AND c.updated_at < now() - ct.retain_for))
       -- 0024: as in prune_target, a failed intent of an ordering group stays
       AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL)
     GROUP BY i.target, i.state, t.retain_for
     ORDER BY i.target, i.state
$$;


REVOKE ALL ON outbox.retention_epoch FROM PUBLIC;
