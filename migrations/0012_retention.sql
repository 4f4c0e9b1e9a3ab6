-- 0012: retention without re-execution (docs/design.md, "Retention").
--
-- 1. targets.retain_for (default 7 days): how long a final intent (succeeded,
--    failed, cancelled) keeps its row, payload, saved response and history.
--    targets.dedupe_window (default 30 days, never shorter than retain_for):
--    how long its key is remembered after it settled.
-- 2. outbox.tombstones: what a pruned intent leaves behind, one narrow row per
--    key: a hash of the key, the target, a hash prefix of the fingerprint,
--    the final state and HTTP status, when it settled and when it was pruned.
--    enqueue answers a remembered key from it and never delivers it again
--    (the same arguments) or refuses it (OR001, other arguments); outcome
--    answers from it. After dedupe_window the tombstone goes and the key is
--    forgotten.
--    Why a hash of the key: the tombstone is only ever looked up by equality,
--    and 16 bytes of SHA-256 are narrower than most keys (a run id and a step
--    id are 40 to 80 bytes) in the row and in the index. Two keys share a
--    hash with a probability of about n^2 / 2^129: 10^-18 for the 31 billion
--    keys of a year at 1,000/s. The price: a tombstone does not say its key
--    in clear; outbox.outcome(key) still finds it.
-- 3. outbox.prune(limit) deletes at most limit final intents whose retention
--    ended (with their attempts, through the trigger of 0008) and writes
--    their tombstones in the same statement, then forgets at most limit
--    expired tombstones. One short transaction per call, rows taken with
--    SKIP LOCKED, never a live row: claim, record and enqueue of other keys
--    never wait for it. One caller at a time (a transaction-level advisory
--    lock; a second caller returns at once). The relay calls it every minute
--    (--prune-interval-ms) until a call prunes less than its limit;
--    `outbox-relay prune` does the same once, and --dry-run reads
--    outbox.prunable() instead.
--    Intents linked by a compensation are pruned together, when every intent
--    of the link is prunable.
-- 4. intents_target_settled (target, updated_at) over final rows replaces
--    intents_target (0010): prune finds a target's oldest final rows through
--    it, and the target guard of 0010 still finds any final row of a target.
--    Same entries, one more column: a record that settles a row writes as
--    many index entries as before. Built here under the SHARE lock of the
--    migration's transaction (enqueue and record wait for it: about a second
--    per million final rows).
--
-- The tables are not partitioned; docs/design.md, "Retention", gives the
-- measurements behind that choice.

ALTER TABLE outbox.targets
    ADD COLUMN retain_for interval NOT NULL DEFAULT '7 days' CHECK (retain_for >= '1 second'),
    ADD COLUMN dedupe_window interval NOT NULL DEFAULT '30 days',
    ADD CONSTRAINT targets_dedupe_window_covers_retention CHECK (dedupe_window >= retain_for);
COMMENT ON COLUMN outbox.targets.retain_for IS
    'How long a final intent (succeeded, failed, cancelled) keeps its row, payload, response and history before outbox.prune removes them.';
COMMENT ON COLUMN outbox.targets.dedupe_window IS
    'How long a key is remembered after its intent settled (a tombstone once pruned): an enqueue of it within the window never delivers again. At least retain_for.';

CREATE TABLE outbox.tombstones (
    key_hash        bytea NOT NULL,                -- first 16 bytes of sha256(key)
    intent_id       bigint NOT NULL,
    target          text NOT NULL,
    fingerprint     bytea NOT NULL,                -- first 16 bytes of the intent's fingerprint
    state           outbox.intent_state NOT NULL CHECK (state IN ('succeeded', 'failed', 'cancelled')),
    response_status integer,
    settled_at      timestamptz NOT NULL,
    pruned_at       timestamptz NOT NULL DEFAULT now(),
    forget_at       timestamptz NOT NULL
);
COMMENT ON TABLE outbox.tombstones IS
    'Keys of pruned intents, remembered until forget_at (settled_at + dedupe_window): enqueue and outcome answer from them.';
CREATE INDEX tombstones_key ON outbox.tombstones (key_hash);
-- BRIN: tombstones are written roughly in forget_at order, and a BRIN entry
-- costs nothing per row (a B-tree entry per tombstone was a fifth of a
-- prune step).
CREATE INDEX tombstones_forget ON outbox.tombstones USING brin (forget_at);

CREATE INDEX intents_target_settled ON outbox.intents (target, updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
DROP INDEX outbox.intents_target;

-- ---------------------------------------------------------------------------
-- 5. The references to intents.key, checked without per-row triggers on delete
--
-- A prune deletes thousands of rows per statement. The two foreign keys on
-- intents.key (intents.compensates, mismatches.key) ran one query per deleted
-- row, and the history trigger of 0008 joined its transition table by hash
-- over the whole attempts table: three quarters of a prune's time (5,000 rows:
-- 284 ms, of which 200 in those). Now one statement-level trigger deletes the
-- attempts and mismatches of deleted intents by index and refuses a delete
-- that leaves a compensation pointing at nothing (23503, as the foreign key
-- did). outbox.compensate, the writer of compensates, takes the lock the
-- foreign key took (FOR KEY SHARE on the original) before it links, so a
-- concurrent prune waits or is waited for. No row-level trigger: the insert
-- path of intents has none (tests/sql/01_schema.sql). Not checked any more:
-- a superuser who sets compensates by hand, and a mismatch that enqueue
-- (keep_original) records while the same key is pruned (an audit row left
-- without its intent).

ALTER TABLE outbox.intents DROP CONSTRAINT intents_compensates_fkey;
ALTER TABLE outbox.mismatches DROP CONSTRAINT mismatches_key_fkey;
CREATE INDEX mismatches_key ON outbox.mismatches (key);

CREATE OR REPLACE FUNCTION outbox.intents_delete_history() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ids      bigint[];
    keys     text[];
    dangling text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE outbox.attempts, outbox.mismatches;
        RETURN NULL;
    END IF;
    SELECT array_agg(o.id), array_agg(o.key) INTO ids, keys FROM old_intents o;
    DELETE FROM outbox.attempts a WHERE a.intent_id = ANY (ids);
    DELETE FROM outbox.mismatches m WHERE m.key = ANY (keys);
    SELECT c.key INTO dangling FROM outbox.intents c WHERE c.compensates = ANY (keys) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.intents: intent % compensates a deleted intent', quote_literal(dangling)
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'intents.compensates names the key of an existing intent; delete both together.';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.intents_delete_history() IS
    'Deleting intents deletes their attempts and mismatches, and refuses to leave a compensation without its original (0012; replaces ON DELETE CASCADE and the foreign keys on intents.key).';

-- compensate as in 0010, the original locked.
CREATE OR REPLACE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
    PERFORM outbox.refuse_key('compensate', p_key);

    -- 0012: locked, as the foreign key on compensates did (see above).
    SELECT * INTO original FROM outbox.intents WHERE key = p_original_key FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.compensate: no intent with key %', coalesce(quote_literal(p_original_key), 'NULL')
            USING ERRCODE = 'OR008', HINT = 'A compensation undoes an intent that exists: name its key.';
    END IF;

    -- The key exists already: a retried call (same original: enqueue's rules decide
    -- on target and payload and return it), or a key reused for another action.
    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF FOUND THEN
        IF existing.id = original.id THEN
            RAISE EXCEPTION 'outbox.compensate: key % cannot compensate itself', quote_literal(p_key)
                USING ERRCODE = 'OR001', HINT = 'A compensation is a new action: give it its own key, e.g. {original key}:undo.';
        END IF;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
        RETURN outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    END IF;

    IF original.state NOT IN ('succeeded', 'unknown') THEN
        RAISE EXCEPTION 'outbox.compensate: key % is %; only a succeeded or unknown intent can be compensated',
                        quote_literal(p_original_key),
                        CASE WHEN original.state = 'pending' AND original.ambiguous
                             THEN 'pending after an ambiguous attempt (its outcome is not settled yet)'
                             ELSE original.state::text END
            USING ERRCODE = 'OR007',
                  HINT = CASE
                      WHEN original.state IN ('pending', 'awaiting_approval') AND NOT original.ambiguous
                          THEN 'It was never sent: cancel it instead (outbox.cancel, outbox.cancel_run).'
                      WHEN original.state IN ('pending', 'in_flight')
                          THEN 'It is being delivered: compensate once its outcome is succeeded or unknown.'
                      ELSE 'The target did not act on it: there is nothing to compensate.'
                  END;
    END IF;

    result := outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    IF result.inserted THEN
        UPDATE outbox.intents SET compensates = p_original_key WHERE id = result.intent_id;
    ELSE
        -- Enqueued by a concurrent transaction after our look (enqueue waited for it to
        -- commit, and has checked target and payload): is it the same compensation?
        SELECT * INTO existing FROM outbox.intents WHERE id = result.intent_id;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
    END IF;
    RETURN result;
END
$$;

-- The hash a tombstone is found by.
CREATE FUNCTION outbox.key_hash(p_key text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16)
$$;

-- ---------------------------------------------------------------------------
-- 3. prune

-- Deletes the intents of p_ids (locked by the caller), their attempts and
-- mismatches (outbox.intents_delete_history), and writes their tombstones;
-- p_dedupe_window NULL: each intent's target's. Returns how many.
-- By primary key from an array: a join would let the planner hash the
-- whole table.
CREATE FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval)
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
           g.updated_at + coalesce(p_dedupe_window,
                                   (SELECT t.dedupe_window FROM outbox.targets t WHERE t.name = g.target))
      FROM gone g;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The final rows of one target whose retention ended, oldest first, that no
-- compensation links (those go through outbox.prune_linked).
CREATE FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval,
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
             ORDER BY i.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    RETURN outbox.prune_ids(doomed, p_dedupe_window);
END
$$;

-- Intents linked by a compensation (compensates, either end): a link is
-- pruned as a whole, once every intent in it is final and past its
-- target's retain_for; the foreign key compensates → key holds throughout.
CREATE FUNCTION outbox.prune_linked(p_limit integer)
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

-- One bounded step of retention: at most p_limit intents pruned and at most
-- p_limit tombstones forgotten, in the caller's (short) transaction.
-- locked = false: another session is pruning; nothing was done.
CREATE FUNCTION outbox.prune_step(p_limit integer DEFAULT 5000)
RETURNS TABLE (pruned integer, forgotten integer, locked boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t      record;
    budget integer := p_limit;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'outbox.prune: limit must be from 1 to 100000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    pruned := 0;
    forgotten := 0;
    locked := pg_try_advisory_xact_lock(1330774018, 0);
    IF NOT locked THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- Oldest retention first across targets would need a sort over all of
    -- them; targets are few, so each gets the budget that is left in turn.
    FOR t IN SELECT name, retain_for, dedupe_window FROM outbox.targets ORDER BY name LOOP
        EXIT WHEN budget <= 0;
        budget := budget - outbox.prune_target(t.name, t.retain_for, t.dedupe_window, budget);
    END LOOP;
    IF budget > 0 THEN
        budget := budget - outbox.prune_linked(budget);
    END IF;
    pruned := p_limit - budget;

    DELETE FROM outbox.tombstones s
     WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.tombstones x
                                WHERE x.forget_at < now() LIMIT p_limit));
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION outbox.prune_step(integer) IS
    'One bounded step of retention (pruned intents, forgotten tombstones); call again while pruned = the limit.';

CREATE FUNCTION outbox.prune(p_limit integer DEFAULT 5000) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pruned::bigint FROM outbox.prune_step(p_limit)
$$;
COMMENT ON FUNCTION outbox.prune(integer) IS
    'Prunes at most p_limit final intents past their target''s retain_for (tombstones keep their keys); returns how many. One short transaction: call again while it returns p_limit.';

-- What a prune would remove now, per target and final state (the dry run).
-- Linked intents (compensations) are counted where every intent linked to
-- them directly is prunable too.
CREATE FUNCTION outbox.prunable()
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
     GROUP BY i.target, i.state, t.retain_for
     ORDER BY i.target, i.state
$$;
COMMENT ON FUNCTION outbox.prunable() IS 'What outbox.prune would remove now, per target and final state.';

-- ---------------------------------------------------------------------------
-- 2. enqueue and outcome answer remembered keys

-- The answer of enqueue for a key that only a tombstone remembers: the
-- remembered result for the same target and arguments, OR001 otherwise.
-- A time in the messages of retention: UTC, to the second.
CREATE FUNCTION outbox.utc_text(p_at timestamptz) RETURNS text
LANGUAGE sql STABLE STRICT AS $$
    SELECT to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;

CREATE FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea,
                                          s outbox.tombstones)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    result outbox.enqueue_result;
BEGIN
    IF s.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(s.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  DETAIL = format('Its intent settled %s at %s and was pruned at %s; the key is remembered until %s.',
                                  s.state, outbox.utc_text(s.settled_at), outbox.utc_text(s.pruned_at),
                                  outbox.utc_text(s.forget_at)),
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;
    IF s.fingerprint <> substring(p_fingerprint FROM 1 FOR 16)
       AND (SELECT t.on_mismatch FROM outbox.targets t WHERE t.name = p_target) IS DISTINCT FROM 'keep_original' THEN
        RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (its intent was pruned at %: the fields that differ are no longer known)',
                        quote_literal(p_key), outbox.utc_text(s.pruned_at)
            USING ERRCODE = 'OR001',
                  DETAIL = format('target %s, on_mismatch = reject; the key is remembered until %s', s.target,
                                  outbox.utc_text(s.forget_at)),
                  HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
    END IF;
    result := (p_key, s.intent_id, s.target, outbox.visible_status(s.state, false), false,
               CASE WHEN s.state IN ('succeeded', 'failed') THEN s.response_status END, NULL, NULL);
    RETURN result;
END
$$;

-- The newest tombstone of a key, if any.
CREATE FUNCTION outbox.tombstone_of(p_key text) RETURNS outbox.tombstones
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.* FROM outbox.tombstones s
     WHERE s.key_hash = outbox.key_hash(p_key) AND s.forget_at > now()
     ORDER BY s.pruned_at DESC LIMIT 1
$$;

-- enqueue as in 0010, with the tombstone checks marked "0012". A new key is
-- inserted first and then looked up among the tombstones: an intent being
-- pruned while this key is enqueued makes the INSERT wait for the prune to
-- commit, and the look that follows (a new snapshot at READ COMMITTED) then
-- sees its tombstone. At REPEATABLE READ and SERIALIZABLE the row is first
-- share-locked: a prune committed since the snapshot fails that with 40001.
CREATE OR REPLACE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                                          p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$  -- SET outbox.in_enqueue: see 0021
DECLARE
    wake      boolean;
    tgt       outbox.targets;
    existing  outbox.intents;
    stone     outbox.tombstones;
    fp        bytea;
    new_id    bigint;
    new_state outbox.intent_state := 'pending';
    fields    text[];
    result    outbox.enqueue_result;
    payload_text text;
    too_deep  boolean := false;
    locked    boolean;
BEGIN
    -- Every key outside the alphabet matches this (outbox.refuse_key says why).
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 255
       OR p_key ~ '^ | $|^\.\.?$|[\u0001-\u001f\u007f-\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]' THEN
        PERFORM outbox.refuse_key('enqueue', p_key);
    END IF;
    payload_text := p_payload::text;
    -- Only a payload with more than 100 opening brackets can be nested that
    -- deep (replace() counts them faster than anything else here).
    IF 2 * octet_length(payload_text) - octet_length(replace(payload_text, '{', ''))
                                      - octet_length(replace(payload_text, '[', '')) > 100 THEN
        too_deep := jsonb_path_exists(p_payload, 'strict $.**{100} ? (@.type() == "object" || @.type() == "array")');
    END IF;

    -- The target lock of 0010; see there.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM outbox.targets WHERE name = p_target FOR KEY SHARE;
        -- 0012: a prune of this key committed after our snapshot fails this with 40001.
        PERFORM 1 FROM outbox.intents WHERE key = p_key FOR KEY SHARE;
    END IF;
    locked := pg_advisory_xact_lock_shared(1330774017, hashtext(p_target)) IS NOT NULL;

    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at)
    SELECT p_key, t.name, p_payload,
           CASE WHEN cardinality(t.volatile_paths) = 0
                     AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0')
                THEN sha256(convert_to(payload_text, 'UTF8'))
                ELSE outbox.fingerprint(p_payload, t.volatile_paths) END,
           CASE WHEN t.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, t.approval_rule)
                THEN 'awaiting_approval'::outbox.intent_state
                ELSE 'pending'::outbox.intent_state END,
           p_run_id, greatest(now(), coalesce(p_not_before, now()))
      FROM outbox.targets t
     WHERE t.name = p_target AND t.enabled AND jsonb_typeof(p_payload) = 'object'
       AND octet_length(payload_text) <= t.max_payload_bytes AND NOT too_deep
    ON CONFLICT (key) DO NOTHING
    RETURNING i.id, i.state, i.fingerprint,
              i.state = 'pending' AND i.next_attempt_at <= now()
              AND EXISTS (SELECT 1 FROM outbox.relays
                           WHERE idle AND heartbeat_at > now() - interval '2 minutes')
         INTO new_id, new_state, fp, wake;
    IF FOUND THEN
        -- 0012: a pruned key is remembered: take the row back, answer from the tombstone.
        stone := outbox.tombstone_of(p_key);
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = new_id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF wake THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (p_key, new_id, p_target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The careful path (as in 0008).
    new_state := 'pending';
    SELECT * INTO tgt FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.enqueue: unknown target %', coalesce(quote_literal(p_target), 'NULL')
            USING ERRCODE = 'OR002', HINT = 'Targets are registered by an admin in outbox.targets.';
    END IF;
    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.enqueue: target % is disabled', quote_literal(p_target)
            USING ERRCODE = 'OR003';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % must be a JSON object, got %',
                        quote_literal(p_key), coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = 'OR005';
    END IF;
    IF octet_length(payload_text) > tgt.max_payload_bytes THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is % bytes; target % accepts at most %',
                        quote_literal(p_key), octet_length(payload_text), quote_literal(p_target),
                        tgt.max_payload_bytes
            USING ERRCODE = 'OR006';
    END IF;
    IF too_deep THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is nested deeper than 100 levels', quote_literal(p_key)
            USING ERRCODE = 'OR010',
                  HINT = 'At most 100 objects and arrays may enclose one another in a payload.';
    END IF;

    IF cardinality(tgt.volatile_paths) = 0
       AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0') THEN
        fp := sha256(convert_to(payload_text, 'UTF8'));
    ELSE
        fp := outbox.fingerprint(p_payload, tgt.volatile_paths);
    END IF;
    IF tgt.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, tgt.approval_rule) THEN
        new_state := 'awaiting_approval';
    END IF;

    -- Not inserted above, yet every check passed: the key is taken, or the
    -- target changed between the two statements. Insert once more (the
    -- latter), or find the existing row (the former).
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at)
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id, greatest(now(), coalesce(p_not_before, now())))
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    IF FOUND THEN
        -- 0012: as on the fast path.
        stone := outbox.tombstone_of(p_key);
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = existing.id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF existing.state = 'pending' AND existing.next_attempt_at <= now()
           AND EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF NOT FOUND THEN
        -- 0012: pruned after our INSERT saw it.
        stone := outbox.tombstone_of(p_key);
        IF stone.intent_id IS NOT NULL THEN
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        RAISE EXCEPTION 'outbox.enqueue: key % was enqueued by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;

    IF existing.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(existing.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    IF existing.fingerprint <> fp THEN
        fields := outbox.differing_fields(outbox.fingerprint_doc(existing.payload, tgt.volatile_paths),
                                          outbox.fingerprint_doc(p_payload, tgt.volatile_paths));
        IF tgt.on_mismatch = 'keep_original' THEN
            INSERT INTO outbox.mismatches (key, payload, fingerprint, fields)
            VALUES (p_key, p_payload, fp, fields);
            UPDATE outbox.intents SET mismatches = mismatches + 1 WHERE id = existing.id;
        ELSE
            RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (fields that differ: %)',
                            quote_literal(p_key), array_to_string(fields, ', ')
                USING ERRCODE = 'OR001',
                      DETAIL = format('target %s, on_mismatch = reject', existing.target),
                      HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
        END IF;
    END IF;

    result := (existing.key, existing.id, existing.target,
               outbox.visible_status(existing.state, existing.ambiguous), false,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_status END,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_body END,
               fields);
    RETURN result;
END
$$;

-- outcome as in 0002, and for a pruned key the remembered final state.
CREATE OR REPLACE FUNCTION outbox.outcome(p_key text)
RETURNS TABLE (status text, response_status integer, response_body text, attempts integer,
               last_error text, message text, state outbox.intent_state, target text, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    stone outbox.tombstones;
BEGIN
    RETURN QUERY
    SELECT outbox.visible_status(i.state, i.ambiguous),
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_status END,
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_body END,
           i.attempts,
           -- A raw transport error is never the outcome: only final states carry a reason.
           CASE WHEN i.state IN ('failed', 'cancelled') THEN i.last_error END,
           CASE outbox.visible_status(i.state, i.ambiguous)
               WHEN 'reconciling' THEN 'outcome unknown, reconciling'
               WHEN 'awaiting_approval' THEN 'waiting for approval'
               WHEN 'pending' THEN 'waiting for delivery'
               WHEN 'delivering' THEN 'being delivered'
               WHEN 'succeeded' THEN 'the target acted'
               WHEN 'failed' THEN 'the target did not act and will not'
               WHEN 'cancelled' THEN 'cancelled before it was sent'
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key;
    IF FOUND THEN
        RETURN;
    END IF;
    stone := outbox.tombstone_of(p_key);
    IF stone.intent_id IS NULL THEN
        RETURN;
    END IF;
    status := outbox.visible_status(stone.state, false);
    response_status := CASE WHEN stone.state IN ('succeeded', 'failed') THEN stone.response_status END;
    response_body := NULL;
    attempts := NULL;
    last_error := NULL;
    message := format('%s; its details were pruned at %s (the key is remembered until %s)',
                      CASE stone.state
                          WHEN 'succeeded' THEN 'the target acted'
                          WHEN 'failed' THEN 'the target did not act and will not'
                          ELSE 'cancelled before it was sent' END,
                      outbox.utc_text(stone.pruned_at), outbox.utc_text(stone.forget_at));
    state := stone.state;
    target := stone.target;
    updated_at := stone.settled_at;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION outbox.outcome(text) IS
    'The agent-visible outcome of a key, also of a pruned one while its tombstone lasts: no row for an unknown (or forgotten) key.';

-- ---------------------------------------------------------------------------
-- Privileges

REVOKE ALL ON FUNCTION outbox.prune_ids(bigint[], interval),
                       outbox.key_hash(text), outbox.utc_text(timestamptz), outbox.prune_target(text, interval, interval, integer),
                       outbox.prune_linked(integer), outbox.prune_step(integer), outbox.prune(integer),
                       outbox.prunable(), outbox.enqueue_remembered(text, text, bytea, outbox.tombstones),
                       outbox.tombstone_of(text)
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.prune_step(integer), outbox.prune(integer) TO outbox_relay, outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.prunable() TO outbox_operator;
GRANT SELECT ON outbox.tombstones TO outbox_operator;
