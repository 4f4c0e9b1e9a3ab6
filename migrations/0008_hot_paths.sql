-- 0008: the hot paths without a lock or a per-row trigger they did not need.
--
-- Measured with `make bench` and by hand (numbers in tests/bench/README.md):
--
-- 1. outbox.attempts → outbox.intents. The foreign key checked every history
--    row with a query of its own that also locked the intent FOR KEY SHARE: a
--    second write to a row the same statement had just updated, ~10 % of
--    PostgreSQL's CPU in a drain. The reference is now kept by statement-level
--    triggers: one anti-join per INSERT or UPDATE statement on attempts
--    (SQLSTATE 23503 when an intent is missing, as before), and deleting or
--    truncating intents deletes their history (the old ON DELETE CASCADE).
--    What the lock bought: a history row written for an intent that another
--    transaction deletes at the same moment. Where outbox.record changes the
--    intent it holds the row lock anyway (the deleting transaction waits for
--    it, then its cascade sees the new rows); only a fenced-out outcome of a
--    row being deleted right then could leave an orphan history row. The
--    product never deletes intents; a DBA's retention job deletes old final
--    rows, which only a writer late by that long could still be recording.
--
-- 2. outbox.intents → outbox.targets. The foreign key share-locked the target
--    row in every enqueuing transaction. Many transactions enqueueing to one
--    target at once (the common case) made each lock a new MultiXact, written
--    to the WAL and the multixact SLRU: ~7 % of enqueue throughput with 8
--    clients, and a known way to exhaust multixact space on busy systems.
--    outbox.enqueue refuses an unknown or disabled target itself (OR002,
--    OR003); a guard trigger on targets refuses to delete or rename a target
--    that intents still name (23503, as the foreign key did), after locking
--    intents against concurrent writers for the length of that check. A raw
--    INSERT by the table owner now skips the target check, as it skips every
--    other rule of enqueue (key, fingerprint, size, approval); the roles of
--    0005 cannot write intents directly.
--
-- 3. The INSERT NOTIFY trigger fired for every enqueue and captured a
--    transition table of its rows to decide whether to wake an idle relay:
--    ~7 % of enqueue throughput even without the transition table. Enqueue
--    knows what it inserted: it now asks, in the RETURNING of its own INSERT,
--    whether the row is due and a relay idle, and notifies itself. It runs
--    with the setting outbox.in_enqueue = on (a SET of the function, undone
--    when it returns), and the statement-level INSERT trigger has
--    WHEN (outbox.in_enqueue is not on): it stays for every other INSERT (a
--    backfill by the table owner, say), where it no longer needs a transition
--    table: rows written due by the transaction have next_attempt_at = now()
--    (its start), one probe of intents_due per enabled target. A raw INSERT
--    with a next_attempt_at in the past wakes nobody; the relay's poll finds
--    it. The UPDATE trigger keeps its transition table. The cases
--    07_concurrency pins keep their answers (a new due key notifies; an
--    existing key, not_before, awaiting approval do not).
--
-- 4. outbox.enqueue: one INSERT ... SELECT FROM targets carries the target
--    checks, the fingerprint and the approval rule (one statement instead of
--    two on the path of a new key); anything else (an error to explain, a key
--    seen before) falls through to the unchanged careful path. The payload is
--    scanned for trailing-zero decimals only when it has a '.' at all.

-- ---------------------------------------------------------------------------
-- 1. attempts → intents

ALTER TABLE outbox.attempts DROP CONSTRAINT attempts_intent_id_fkey;

CREATE FUNCTION outbox.attempts_check_intents() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT a.intent_id INTO missing
      FROM new_attempts a
     WHERE NOT EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = a.intent_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.attempts: intent % does not exist', coalesce(missing::text, 'NULL')
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'Every attempts row belongs to a row of outbox.intents (attempts.intent_id = intents.id).';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.attempts_check_intents() IS
    'Statement-level reference check attempts.intent_id → intents.id (replaces a per-row foreign key; see migration 0008).';

CREATE TRIGGER attempts_reference_insert AFTER INSERT ON outbox.attempts
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.attempts_check_intents();
CREATE TRIGGER attempts_reference_update AFTER UPDATE ON outbox.attempts
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.attempts_check_intents();

CREATE FUNCTION outbox.intents_delete_history() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE outbox.attempts;
    ELSE
        DELETE FROM outbox.attempts a USING old_intents o WHERE a.intent_id = o.id;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.intents_delete_history() IS
    'Deleting or truncating intents deletes their attempts (the former ON DELETE CASCADE).';

CREATE TRIGGER intents_delete_history AFTER DELETE ON outbox.intents
    REFERENCING OLD TABLE AS old_intents
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.intents_delete_history();
CREATE TRIGGER intents_truncate_history AFTER TRUNCATE ON outbox.intents
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.intents_delete_history();

-- ---------------------------------------------------------------------------
-- 2. intents → targets

ALTER TABLE outbox.intents DROP CONSTRAINT intents_target_fkey;

CREATE FUNCTION outbox.targets_guard_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    -- SHARE mode waits for transactions writing intents and holds new ones
    -- off until this one ends: no intent can name the target behind the check.
    LOCK TABLE outbox.intents IN SHARE MODE;
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name) THEN
        RAISE EXCEPTION 'outbox.targets: target % is named by intents; disable it instead (enabled = false)',
                        quote_literal(OLD.name)
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Intents keep the name of their target for their whole history.';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
COMMENT ON FUNCTION outbox.targets_guard_references() IS
    'Refuses to delete or rename a target that intents name (replaces the intents.target foreign key; see migration 0008).';

CREATE TRIGGER targets_guard_references BEFORE DELETE OR UPDATE OF name ON outbox.targets
    FOR EACH ROW EXECUTE FUNCTION outbox.targets_guard_references();

-- ---------------------------------------------------------------------------
-- 3. NOTIFY on INSERT without a transition table

CREATE OR REPLACE FUNCTION outbox.notify_relays() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
        RETURN NULL; -- every relay is busy (or none runs): they claim again on their own
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- Rows enqueued due by this transaction have next_attempt_at = now(): one
        -- probe of intents_due per enabled target finds them.
        IF EXISTS (SELECT 1 FROM outbox.targets t
                    WHERE t.enabled
                      AND EXISTS (SELECT 1 FROM outbox.intents i
                                   WHERE i.state = 'pending' AND i.target = t.name
                                     AND i.next_attempt_at = now())) THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
    ELSIF EXISTS (SELECT 1 FROM changed_rows WHERE state = 'pending' AND next_attempt_at <= now()) THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER intents_notify_insert ON outbox.intents;
CREATE TRIGGER intents_notify_insert AFTER INSERT ON outbox.intents
    FOR EACH STATEMENT
    WHEN (current_setting('outbox.in_enqueue', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION outbox.notify_relays();

-- ---------------------------------------------------------------------------
-- 4. enqueue: one statement for a new key

CREATE OR REPLACE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                                          p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$  -- SET outbox.in_enqueue: see 0021
DECLARE
    wake      boolean;
    tgt       outbox.targets;
    existing  outbox.intents;
    fp        bytea;
    new_id    bigint;
    new_state outbox.intent_state := 'pending';
    fields    text[];
    result    outbox.enqueue_result;
    payload_text text;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.enqueue: the key must not be empty'
            USING ERRCODE = 'OR004', HINT = 'Make the key in the deterministic layer, e.g. {run_id}:{step_id}.';
    END IF;
    IF octet_length(p_key) > 255 THEN
        RAISE EXCEPTION 'outbox.enqueue: key is % bytes long; the limit is 255', octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    IF p_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox.enqueue: key % contains a control character', quote_literal(p_key)
            USING ERRCODE = 'OR004', HINT = 'Keys travel in HTTP headers; control characters are refused.';
    END IF;
    payload_text := p_payload::text;

    -- The path of a new key: every check of the careful path below that can
    -- pass or fail on the target row is a condition here; a row that is not
    -- inserted (unknown, disabled, too large, key already there) goes on to
    -- the careful path, which names the reason.
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
       AND octet_length(payload_text) <= t.max_payload_bytes
    ON CONFLICT (key) DO NOTHING
    RETURNING i.id, i.state,
              i.state = 'pending' AND i.next_attempt_at <= now()
              AND EXISTS (SELECT 1 FROM outbox.relays
                           WHERE idle AND heartbeat_at > now() - interval '2 minutes')
         INTO new_id, new_state, wake;
    IF FOUND THEN
        IF wake THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (p_key, new_id, p_target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The careful path (as in 0002).
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
        IF existing.state = 'pending' AND existing.next_attempt_at <= now()
           AND EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF NOT FOUND THEN
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

-- ---------------------------------------------------------------------------
-- Privileges: the new functions are internals (triggers); nobody calls them.

REVOKE ALL ON FUNCTION outbox.attempts_check_intents(), outbox.intents_delete_history(),
                       outbox.targets_guard_references() FROM PUBLIC;
