-- 0020: fewer writes per delivery (issue 17; docs/design.md, "Cost per
-- delivery").
--
-- 1. Room on intents' pages (fillfactor 50). A claim and a record each write
--    a new version of the intent's row (state is in the partial indexes'
--    predicates, so neither update is HOT). On a full page the new version
--    goes to another page: heap_update first marks the old version locked in
--    a WAL record of its own, lets go of the page, finds one with room (often
--    a fresh page at the end of the table) and dirties both. With half of
--    every page left free at insert, the new version stays on its page:
--    measured on a 60,000-intent drain against stock settings, WAL per
--    delivered intent went from 1,621 to 1,277 bytes, the row-lock records
--    from 2.9 to 1.15 per intent, buffers touched from 43 to 40, and the
--    table after the drain was 26 % smaller (3,714 pages, not 5,010: the new
--    versions fill the room instead of new pages). Only pages written from
--    now on are affected; nothing is rewritten. The lock is SHARE UPDATE
--    EXCLUSIVE (held to the end of this migration): enqueues, claims and
--    records go on meanwhile; only VACUUM and ANALYZE of intents wait.
-- 2. attempts had two B-trees that every history row entered: the primary key
--    (id) and attempts_intent (intent_id, id), the one every reader uses (a
--    key's life is read by intent, in id order; nothing looks an attempt up
--    by id alone). The primary key becomes (intent_id, id), built here, and
--    attempts_intent goes: an attempt writes one B-tree entry, not two. id
--    is still drawn from its identity sequence, so still distinct.
--    Lock cost: the unique index is built under the SHARE lock of this
--    migration's transaction (records wait for it; enqueues, claims and reads
--    do not), about 0.3 s per million attempts rows on 2 cores (0.27 s
--    measured); swapping the primary key onto it takes ACCESS EXCLUSIVE
--    from the swap to this migration's commit, a few milliseconds later
--    (readers of attempts wait that long). With a long history, run it after
--    a prune or at a quiet hour.
-- 3. record inserted every outcome's history row under
--    EXISTS (SELECT 1 FROM outbox.intents ...), a probe of intents_pkey per
--    row, to skip intents deleted meanwhile. An outcome that record applied
--    updated its intent a moment before, in this transaction, and holds its
--    row lock: it cannot have been deleted. The probe now runs only for the
--    outcomes that were not applied (fenced off: late, or superseded).
-- 4. That reference check (attempts_check_intents, an anti-join of the
--    statement's new rows with intents) no longer runs for record's own
--    history INSERT: about 7 % of a backend's CPU in a SQL-only drain
--    profile, for rows record has just shown to reference a live intent.
--    record now proves it for all of them: an applied outcome's intent is
--    row-locked by its UPDATE; the intents of outcomes it did not apply are
--    locked FOR KEY SHARE (a delete waits for record's commit, and prune,
--    which skips locked rows, passes them by) before the INSERT looks for
--    them. The trigger gets a WHEN clause that is false while
--    outbox.in_record is 'on', which only record sets (a SET clause of the
--    function, as enqueue sets outbox.in_enqueue since 0008). Every other
--    INSERT into attempts is checked as before. A role that may insert into
--    attempts directly may also set that variable; such a role is an owner
--    or an admin, who could drop the trigger too.
--
-- In a transaction of its own (as 0018): the index build waits for no one
-- but holds attempts' SHARE lock until commit.

ALTER TABLE outbox.intents SET (fillfactor = 50);

CREATE UNIQUE INDEX attempts_intent_id ON outbox.attempts (intent_id, id);
ALTER TABLE outbox.attempts
    DROP CONSTRAINT attempts_pkey,
    ADD CONSTRAINT attempts_pkey PRIMARY KEY USING INDEX attempts_intent_id;
DROP INDEX outbox.attempts_intent;
COMMENT ON INDEX outbox.attempts_pkey IS
    'A key''s life in order (intent_id, id): the only B-tree every attempt enters (0020).';

DROP TRIGGER attempts_reference_insert ON outbox.attempts;
CREATE TRIGGER attempts_reference_insert AFTER INSERT ON outbox.attempts
    REFERENCING NEW TABLE AS new_attempts FOR EACH STATEMENT
    WHEN (current_setting('outbox.in_record', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION outbox.attempts_check_intents();

-- outbox.record, as in 0015 but for the history INSERT (marked 0020).
CREATE OR REPLACE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
                                         p_states outbox.intent_state[], p_delay_ms integer[],
                                         p_ambiguous boolean[], p_classes outbox.attempt_class[],
                                         p_sent boolean[], p_http integer[], p_errors text[],
                                         p_latency_ms integer[], p_bodies text[], p_key_sent boolean[])
RETURNS integer
-- Generic plan always, as the 12-array form (0003). Two statements, each
-- linear in the batch: the generic plan guesses 10 rows for an unnest and
-- would join two CTEs of the batch in a nested loop (quadratic: 380 ms for
-- 1,500 outcomes); which outcomes were applied travels in an array indexed
-- by their place in the batch instead.
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    updated integer := 0;
    applied boolean[] := array_fill(false, ARRAY[coalesce(cardinality(p_ids), 0)]);
    o       bigint;
    grp     text;     -- 0013
    settled text[];   -- 0013: groups whose intent succeeded here
    ev      jsonb;    -- 0015
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o, grp, ev IN
        WITH u AS (
            SELECT x.*,
                   row_number() OVER (PARTITION BY x.id ORDER BY x.sent IS NULL, x.ord) = 1 AS chosen
              FROM unnest(p_ids, p_attempts, p_states, p_delay_ms, p_ambiguous, p_classes, p_sent,
                          p_http, p_errors, p_bodies) WITH ORDINALITY
                   AS x(id, attempt, state, delay_ms, ambiguous, class, sent, http, error, body, ord)
        )
        UPDATE outbox.intents i
           SET state = u.state,
               next_attempt_at = CASE WHEN u.state IN ('pending', 'unknown')
                                      THEN now() + coalesce(u.delay_ms, 0) * interval '1 millisecond'
                                      ELSE i.next_attempt_at END,
               lease_owner = NULL,
               lease_expires_at = NULL,
               ambiguous = CASE WHEN u.class = 'reconciled_not_executed' THEN false
                                ELSE i.ambiguous OR u.ambiguous END,
               response_status = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.http
                                      ELSE i.response_status END,
               response_body = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.body
                                    ELSE i.response_body END,
               last_error = u.error,
               updated_at = now()
          FROM u
         WHERE u.chosen AND i.id = u.id AND i.state IN ('in_flight', 'unknown') AND i.lease_owner = p_relay
           AND i.attempts = u.attempt
        RETURNING u.ord, CASE WHEN u.state = 'succeeded' THEN i.ordering_key END,  -- 0013
                  -- 0015: what a person may have to act on
                  CASE WHEN u.state = 'failed'
                         OR (u.state = 'unknown' AND u.class NOT IN ('reconcile_inconclusive', 'reconciled_executed',
                                                                      'reconciled_not_executed'))
                       THEN outbox.intent_event(i, u.class, u.http, u.error) END
    LOOP
        applied[o] := true;
        updated := updated + 1;
        IF grp IS NOT NULL THEN          -- 0013
            settled := settled || grp;
        END IF;
        IF ev IS NOT NULL THEN           -- 0015
            PERFORM pg_notify('outbox_events', ev::text);
            IF ev ? 'blocks' THEN
                PERFORM pg_notify('outbox_events',
                                  jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                     'head', ev->>'key', 'blocks', ev->'blocks',
                                                     'at', ev->>'at')::text);
            END IF;
        END IF;
    END LOOP;

    -- 0020: the intents of outcomes not applied are kept from being deleted
    -- until this commits (the INSERT below is not reference-checked).
    IF updated < coalesce(cardinality(p_ids), 0) THEN
        PERFORM 1 FROM outbox.intents i
         WHERE i.id IN (SELECT x.id FROM unnest(p_ids) WITH ORDINALITY AS x(id, ord) WHERE NOT applied[x.ord])
           FOR KEY SHARE OF i;
    END IF;

    -- Every outcome into the history, in the order the relay saw them; not
    -- for an intent deleted meanwhile (its history would break the reference).
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                 error, latency_ms, response_body, key_sent, recorded)
    SELECT x.id, x.attempt, p_relay, x.class, x.sent, x.http, x.error, x.latency_ms,
           left(x.body, 4096), x.key_sent, applied[x.ord]
      FROM unnest(p_ids, p_attempts, p_classes, p_sent, p_http, p_errors, p_latency_ms, p_bodies,
                  p_key_sent) WITH ORDINALITY
           AS x(id, attempt, class, sent, http, error, latency_ms, body, key_sent, ord)
     WHERE applied[x.ord] OR EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = x.id)   -- 0020
     ORDER BY x.ord;

    -- 0013: the next intent of each group whose intent succeeded is due now.
    IF settled IS NOT NULL THEN
        PERFORM outbox.ordering_release(settled);
    END IF;
    RETURN updated;
END
$$;
