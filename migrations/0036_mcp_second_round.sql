-- 0036: the MCP front door, second round (issue 35, items 5, 6, 7, 11, 13,
-- 18, 19; docs/design.md, "The MCP front door").
--
-- 5. `mcp:` keys belong to the front door. A login granted outbox_app could
--    take an agent's future key, read its saved outcome, cancel its run and
--    block its ordering group. Now outbox.enqueue, compensate, cancel_run and
--    outcome refuse a key, run id or ordering key that starts with `mcp:`
--    with OR026 (traceparent_of answers NULL, as for a key never used). The front door's functions (outbox.mcp_*, SECURITY DEFINER)
--    call outbox.enqueue_any and outbox.outcome_any, the bodies the public
--    functions now wrap: they are executable by their owner only, so no
--    login can reach them but through an mcp_* function, which derives every
--    key from a client's token (nothing a session can set: no setting, no
--    role switch). Operators keep what they had: approve, reject, resolve,
--    cancel take any key; outcome and cancel_run refuse `mcp:` only to a
--    login that is neither outbox_operator (outbox_admin is one) nor
--    outbox_relay (the relay's /ui and the CLI read an agent's outcome).
--    enqueue and compensate refuse `mcp:` keys to everyone: nothing but the
--    front door has a reason to make one.
-- 6. Tasks go away. A task is deleted with its intent (outbox.prune_ids, so
--    outbox.prune and prune_step), and at its TTL (mcp_tasks.expires_at:
--    every read ignores an expired task at once, prune_step's tombstone
--    phase deletes it). The same key called again then gets a new task id
--    (an expired task's row is replaced). tasks/list pages through an index
--    (client, created_at, task_id) with one row comparison, so a page reads
--    about 50 rows, not every task the client ever made.
-- 7. The front door's identity for isolation is the MCP client (in the key),
--    not the login: login isolation (0026, outbox.isolated_logins) does not
--    apply to `mcp:` intents, so two replicas with different logins see the
--    same tasks and outcomes. Only the front door (and operators, never
--    isolated) reaches an `mcp:` intent since item 5.
-- 11. key_conflict for another tool (another target) or ordering group names
--    it: conflict_fields has "tool" or "ordering_key", and the message says
--    which tool the key was used with.
-- 13. outbox.mcp_outcomes(bytea[], text[]): the batched look-up carries each
--    waiting call's token hash, and answers only a key of that client. The
--    0.1.0 front door calls mcp_outcomes(text[]) (the rollback window,
--    deploy/README.md): it is kept, answering no row, so that no login of
--    outbox_mcp reads any client's outcome without a token. A 0.1.0 front
--    door then answers each waiting call at the end of its wait
--    (--mcp-wait-ms) from its token-scoped last look (mcp_outcome): right,
--    only later. It is dropped in the release after this one.
-- 18. What the model reads (outbox.mcp_message) is written for the model,
--    which controls no key: wait, ask for the outcome of this same call, do
--    not repeat the action, tell the user it is being confirmed; an unknown
--    outcome that only a person can settle says the target cannot be asked
--    and a person will settle it (it keeps its first words, "outcome
--    unknown: needs a person", which the 0.1.0 front door matches).
-- 19. A call held by an approval rule says which rule holds it and why
--    (outbox.rule_text, outbox.approval_reason); a pending call that no relay
--    has claimed while none is alive (outbox.relays, a heartbeat in the last
--    2 minutes) says "no relay has claimed it yet". The front door answers
--    both at once instead of waiting for nothing.
--
-- Locks: ADD COLUMN on mcp_tasks (ACCESS EXCLUSIVE, no rewrite: no default),
-- its back-fill UPDATE and the new indexes (SHARE) hold mcp_tasks for as long
-- as it takes to read it once (0.3 s at 300,000 tasks); front-door calls
-- that make a task wait that long. Functions replaced take no table lock.

-- ---------------------------------------------------------------------------
-- 5. The reservation.

-- Whether the session's login may look at and act on a front-door key
-- where an application may not (0026's rule for who is never isolated).
-- session_user is the login: SET ROLE does not change it.
CREATE FUNCTION outbox.operator_session() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_catalog.pg_has_role(session_user, 'outbox_operator', 'MEMBER')
           OR pg_catalog.pg_has_role(session_user, 'outbox_relay', 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.operator_session() IS
    'Whether the session''s login is a member of outbox_operator or outbox_relay: it may read an MCP client''s outcome and cancel its run (0036).';

CREATE FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'outbox.%: the % % starts with "mcp:", which is reserved for the MCP front door',
                    p_function, p_what, outbox.quote_key(p_value)
        USING ERRCODE = 'OR026',
              DETAIL = 'Keys, run ids and ordering keys that start with "mcp:" are the MCP clients'' (outbox-relay mcp names them mcp:<client>:<key>); only the front door''s functions (outbox.mcp_*) make, read or cancel them.',
              HINT = 'Use a key, run id or ordering key that does not start with "mcp:", e.g. one that starts with your service''s name.';
END
$$;
COMMENT ON FUNCTION outbox.refuse_front_door(text, text, text) IS
    'Raises OR026 for a key, run id or ordering key of the MCP front door (mcp:…) given to a function an application calls (0036).';

-- enqueue as it was (0035's net text), but for login isolation, which does
-- not apply to the front door's keys. Executable by its owner only: the
-- front door's mcp_call calls it; everyone else calls outbox.enqueue.
CREATE FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL,
                                   p_not_before timestamptz DEFAULT NULL, p_ordering_key text DEFAULT NULL,
                                   p_traceparent text DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $_$
DECLARE
    flag      text;     -- 0021: set_config's answer, unused (an assignment keeps FOUND)
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
    wait      boolean := false;   -- 0013: held behind a live intent of its group
    trace     text := coalesce(p_traceparent, nullif(current_setting('outbox.traceparent', true), ''));   -- 0016
BEGIN
    -- Every key outside the alphabet matches this (outbox.refuse_key says why).
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 255
       OR p_key ~ '^ | $|^\.\.?$|[\u0001-\u001f\u007f-\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]' THEN
        PERFORM outbox.refuse_key('enqueue', p_key);
    END IF;
    -- 0016: the caller's W3C trace context, checked (outbox.refuse_traceparent says why).
    IF trace IS NOT NULL AND (trace !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                              OR substr(trace, 4, 32) = '00000000000000000000000000000000'
                              OR substr(trace, 37, 16) = '0000000000000000') THEN
        PERFORM outbox.refuse_traceparent(trace, p_traceparent IS NULL);
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
    -- 0013: an ordered intent takes its place in its group (the group's lock, until
    -- this transaction ends: the id drawn below follows every earlier enqueue of the
    -- group); wait: an earlier intent of the group is live, the new one is held.
    IF p_ordering_key IS NOT NULL THEN
        wait := outbox.ordering_place(p_key, p_ordering_key);
    END IF;

    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    SELECT p_key, t.name, p_payload,
           CASE WHEN cardinality(t.volatile_paths) = 0
                     AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0')
                THEN sha256(convert_to(payload_text, 'UTF8'))
                ELSE outbox.fingerprint(p_payload, t.volatile_paths) END,
           CASE WHEN t.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, t.approval_rule)
                THEN 'awaiting_approval'::outbox.intent_state
                ELSE 'pending'::outbox.intent_state END,
           p_run_id, CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
           p_ordering_key, CASE WHEN wait THEN p_not_before END, trace   -- 0013, 0016
      FROM outbox.targets t
     WHERE t.name = p_target AND t.enabled AND jsonb_typeof(p_payload) = 'object'
       AND octet_length(payload_text) <= t.max_payload_bytes AND NOT too_deep
    ON CONFLICT (key) DO NOTHING
    RETURNING i.id, i.state, i.fingerprint,
              i.state = 'pending' AND i.next_attempt_at <= now()
              AND EXISTS (SELECT 1 FROM outbox.relays
                           WHERE idle AND heartbeat_at > now() - interval '2 minutes')
         INTO new_id, new_state, fp, wake;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: a pruned key is remembered: take the row back, answer from the tombstone.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
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
    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id,
            CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
            p_ordering_key, CASE WHEN wait THEN p_not_before END, trace)   -- 0013, 0016
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: as on the fast path.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
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
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        RAISE EXCEPTION 'outbox.enqueue: key % was enqueued by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;

    -- 0026: another login's key, for an isolated caller: taken, and nothing more.
    -- 0036: not for the front door's keys (its isolation is by MCP client, in the key).
    IF existing.enqueued_by IS DISTINCT FROM session_user::text AND NOT starts_with(p_key, 'mcp:')
       AND outbox.isolated() THEN
        PERFORM outbox.refuse_others_key('enqueue', p_key);
    END IF;

    IF existing.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(existing.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    -- 0013: the ordering key is part of the action, as the target is.
    IF existing.ordering_key IS DISTINCT FROM p_ordering_key THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used %, not %', quote_literal(p_key),
                        coalesce('in ordering group ' || quote_literal(existing.ordering_key), 'without an ordering key'),
                        coalesce('in ordering group ' || quote_literal(p_ordering_key), 'without one')
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
$_$;
COMMENT ON FUNCTION outbox.enqueue_any(text, text, jsonb, text, timestamptz, text, text) IS
    'outbox.enqueue without the reservation of mcp: keys, for the front door''s functions only (0036); executable by no role.';

-- The public enqueue: the same arguments and answers, and OR026 for a key,
-- run id or ordering key of the front door's.
CREATE OR REPLACE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL,
                                          p_not_before timestamptz DEFAULT NULL, p_ordering_key text DEFAULT NULL,
                                          p_traceparent text DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF starts_with(p_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'key', p_key);
    ELSIF starts_with(p_run_id, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'run id', p_run_id);
    ELSIF starts_with(p_ordering_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'ordering key', p_ordering_key);
    END IF;
    RETURN outbox.enqueue_any(p_key, p_target, p_payload, p_run_id, p_not_before, p_ordering_key, p_traceparent);
END
$$;

-- enqueue_remembered as in 0026, but for login isolation on mcp: keys.
CREATE OR REPLACE FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea, s outbox.tombstones)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    result outbox.enqueue_result;
BEGIN
    IF s.enqueued_by IS DISTINCT FROM session_user::text AND NOT starts_with(p_key, 'mcp:')   -- 0036
       AND outbox.isolated() THEN   -- 0026
        PERFORM outbox.refuse_others_key('enqueue', p_key);
    END IF;
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

-- outcome as it was (0026), but for login isolation on mcp: keys; for the
-- front door's functions only.
CREATE FUNCTION outbox.outcome_any(p_key text)
RETURNS TABLE(status text, response_status integer, response_body text, attempts integer, last_error text,
              message text, state outbox.intent_state, target text, updated_at timestamptz)
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
               WHEN 'reconciling' THEN coalesce(CASE WHEN i.state = 'unknown'   -- 0023
                                                     THEN 'outcome unknown: ' || outbox.needs_person(i.id, i.target, i.first_attempt_at) END,
                                                'outcome unknown, reconciling')
               WHEN 'awaiting_approval' THEN 'waiting for approval'
               WHEN 'pending' THEN CASE WHEN i.next_attempt_at = 'infinity' AND i.ordering_key IS NOT NULL
                                        THEN outbox.ordering_waits_for(i.ordering_key, i.id)   -- 0013
                                        ELSE 'waiting for delivery' END
               WHEN 'delivering' THEN 'being delivered'
               WHEN 'succeeded' THEN 'the target acted'
               WHEN 'failed' THEN 'the target did not act and will not'
               WHEN 'cancelled' THEN coalesce('cancelled after ' || (SELECT d.story FROM outbox.delivery_summary(i.id) d),
                                              'cancelled before it was sent')   -- 0026
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key
       AND (starts_with(p_key, 'mcp:') OR outbox.caller_may_see(i.enqueued_by));   -- 0026, 0036
    IF FOUND THEN
        RETURN;
    END IF;
    stone := outbox.tombstone_of(p_key);
    IF stone.intent_id IS NULL
       OR NOT (starts_with(p_key, 'mcp:') OR outbox.caller_may_see(stone.enqueued_by)) THEN   -- 0026, 0036
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
                          ELSE 'cancelled (the target did not act)' END,   -- 0026: whether it was sent is not kept
                      outbox.utc_text(stone.pruned_at), outbox.utc_text(stone.forget_at));
    state := stone.state;
    target := stone.target;
    updated_at := stone.settled_at;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION outbox.outcome_any(text) IS
    'outbox.outcome without the reservation of mcp: keys, for the front door''s functions only (0036); executable by no role.';

-- The public outcome: OR026 for a front-door key, unless the login is an
-- operator's or a relay's.
CREATE OR REPLACE FUNCTION outbox.outcome(p_key text)
RETURNS TABLE(status text, response_status integer, response_body text, attempts integer, last_error text,
              message text, state outbox.intent_state, target text, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF starts_with(p_key, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('outcome', 'key', p_key);
    END IF;
    RETURN QUERY SELECT * FROM outbox.outcome_any(p_key);
END
$$;

-- ordering_waits_for as in 0026, but an MCP client's group (mcp:<client>:…)
-- holds only that client's intents: its head is named whoever's login
-- enqueued it.
CREATE OR REPLACE FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT CASE WHEN starts_with(p_group, 'mcp:') OR outbox.caller_may_see(h.enqueued_by)
                                 THEN format('waiting for %s (%s), the head of ordering group %s: it is sent once that one succeeded or was cancelled',
                                             h.key, outbox.visible_status(h.state, h.ambiguous), p_group)
                                 ELSE format('waiting for its turn in ordering group %s, behind an intent of another login',
                                             p_group) END
                       FROM outbox.ordering_head_before(p_group, p_id) h WHERE h.id IS NOT NULL),
                    'waiting for its turn in ordering group ' || p_group)
$$;

-- cancel_run as in 0031, refusing an MCP client's run to an application.
CREATE OR REPLACE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    candidate bigint;
    grp       text;
    groups    text[];
    locked    boolean := false;
    row       outbox.intents;
    everyone  boolean := NOT outbox.isolated();   -- else only the caller's own intents (enqueued_by)
    story     text;
    final_ids    bigint[] := '{}';   -- for outbox.settle
    final_groups text[] := '{}';
BEGIN
    IF p_run_id IS NULL OR p_run_id = '' THEN
        RAISE EXCEPTION 'outbox.cancel_run: say which run (p_run_id)' USING ERRCODE = '22023';
    END IF;
    -- 0036: an MCP client's run is the front door's (an operator may still cancel it).
    IF starts_with(p_run_id, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('cancel_run', 'run id', p_run_id);
    END IF;
    -- Lock the candidates (in id order: two cancel_runs cannot deadlock), waiting for a
    -- relay that is recording one of them. Once a row is locked, the UPDATE below looks
    -- again with a fresh snapshot, so it sees the attempts row a relay committed with the
    -- change we waited for; while we hold the lock, no relay can claim the row.
    -- Unordered candidates first (waiting for their locks), then the ordered ones, after
    -- the settle locks of their groups (all at once, in one order: outbox.ordering_lock_groups),
    -- and only rows nobody else holds: a relay recording one waits for those locks.
    SELECT array_agg(DISTINCT i.ordering_key) INTO groups FROM outbox.intents i
     WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
       AND NOT i.ambiguous AND i.compensates IS NULL AND i.ordering_key IS NOT NULL
       AND (everyone OR i.enqueued_by = session_user::text);
    FOR candidate, grp IN
        SELECT i.id, i.ordering_key FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
           AND (everyone OR i.enqueued_by = session_user::text)
         ORDER BY i.ordering_key IS NOT NULL, i.id
    LOOP
        IF grp IS NULL THEN
            PERFORM 1 FROM outbox.intents i WHERE i.id = candidate FOR UPDATE;
        ELSE
            CONTINUE WHEN NOT grp = ANY (groups);   -- no longer a candidate when groups was read
            IF NOT locked THEN
                PERFORM outbox.ordering_lock_groups(groups);
                locked := true;
            END IF;
            PERFORM 1 FROM outbox.intents i WHERE i.id = candidate FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
        END IF;
        -- As outbox.cancel: no attempt that may have executed; what they were goes
        -- into the reason.
        story := (SELECT d.story FROM outbox.delivery_summary(candidate) d);
        UPDATE outbox.intents i
           SET state = 'cancelled',
               last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given') || coalesce(' (after ' || story || ')', ''),
               decision_note = p_reason, decided_by = session_user, updated_at = now()
         WHERE i.id = candidate AND i.state IN ('pending', 'awaiting_approval') AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id
                              AND outbox.attempt_may_have_executed(a.class, a.request_sent, a.http_status))
        RETURNING i.* INTO row;
        IF FOUND THEN
            PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                         format('cancelled with run %s: %s', p_run_id, coalesce(p_reason, ''))
                                         || coalesce(' (after ' || story || ')', ''));
            final_ids := final_ids || row.id;
            final_groups := final_groups || row.ordering_key;
        END IF;
    END LOOP;
    IF cardinality(final_ids) > 0 THEN
        PERFORM outbox.settle(final_ids, array_fill('cancelled'::outbox.intent_state, ARRAY[cardinality(final_ids)]),
                              final_groups);
    END IF;
    RETURN cardinality(final_ids);
END
$$;

-- traceparent_of as in 0026: an agent's trace context is not an
-- application's either (NULL, as for a key never used; operators see it).
CREATE OR REPLACE FUNCTION outbox.traceparent_of(p_key text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT i.traceparent FROM outbox.intents i
     WHERE i.key = p_key AND outbox.caller_may_see(i.enqueued_by)   -- 0026
       AND (NOT starts_with(p_key, 'mcp:') OR outbox.operator_session())   -- 0036
$$;

-- compensate as in 0026, refusing a front-door key (the new one always, the
-- original unless the login is an operator's).
CREATE OR REPLACE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
    -- 0036: the front door's keys are its own.
    IF starts_with(p_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('compensate', 'key', p_key);
    END IF;
    IF starts_with(p_original_key, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('compensate', 'key', p_original_key);
    END IF;
    PERFORM outbox.refuse_key('compensate', p_key);

    -- 0012: locked, as the foreign key on compensates did (see above).
    SELECT * INTO original FROM outbox.intents WHERE key = p_original_key FOR KEY SHARE;
    IF NOT FOUND
       OR (original.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated()) THEN   -- 0026
        RAISE EXCEPTION 'outbox.compensate: no intent with key %', coalesce(quote_literal(p_original_key), 'NULL')
            USING ERRCODE = 'OR008', HINT = 'A compensation undoes an intent that exists: name its key.';
    END IF;

    -- The key exists already: a retried call (same original: enqueue's rules decide
    -- on target and payload and return it), or a key reused for another action.
    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF FOUND THEN
        IF existing.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated() THEN   -- 0026
            PERFORM outbox.refuse_others_key('compensate', p_key);
        END IF;
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
                           AND (SELECT d.may_have_executed FROM outbox.delivery_summary(original.id) d) = 0   -- 0026
                          THEN 'The target has not acted on it: cancel it instead (outbox.cancel, outbox.cancel_run).'
                      WHEN original.state IN ('pending', 'in_flight', 'awaiting_approval')
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

-- ---------------------------------------------------------------------------
-- 6. Tasks go away: with their intents, or at their TTL.

ALTER TABLE outbox.mcp_tasks ADD COLUMN expires_at timestamptz;   -- created_at + ttl_ms; NULL: no TTL
UPDATE outbox.mcp_tasks SET expires_at = created_at + ttl_ms * interval '1 millisecond' WHERE ttl_ms IS NOT NULL;
-- tasks/list: newest first, after a cursor (created_at, task_id).
CREATE INDEX mcp_tasks_list ON outbox.mcp_tasks (client, created_at, task_id);
-- prune_step: the expired ones.
CREATE INDEX mcp_tasks_expiry ON outbox.mcp_tasks (expires_at) WHERE expires_at IS NOT NULL;

-- prune_ids as in 0026, deleting the tasks of the pruned intents.
CREATE OR REPLACE FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval) RETURNS integer
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
        RETURNING i.id, i.key, i.target, i.fingerprint, i.state, i.response_status, i.updated_at,
                  i.enqueued_by   -- 0026
    )
    -- 0036: an MCP client's task goes with its intent (the key is remembered by
    -- the tombstone; the same key called again gets a new task).
    , tasks AS (
        DELETE FROM outbox.mcp_tasks k
         USING gone g
         WHERE starts_with(g.key, 'mcp:') AND k.client = split_part(g.key, ':', 2)
           AND k.intent_key = g.key COLLATE "default"
    )
    INSERT INTO outbox.tombstones (key_hash, intent_id, target, fingerprint, state, response_status,
                                   settled_at, forget_at, enqueued_by)   -- 0026
    SELECT outbox.key_hash(g.key), g.id, g.target, substring(g.fingerprint FROM 1 FOR 16), g.state,
           g.response_status, g.updated_at,
           -- 0024: a key that settled before retention began is remembered for good,
           -- unless an admin lets the target forget such keys (forget_pre_retention)
           CASE WHEN g.updated_at < (SELECT e.began FROM outbox.retention_epoch e) AND NOT t.forget_pre_retention
                THEN 'infinity'::timestamptz
                ELSE g.updated_at + coalesce(p_dedupe_window, t.dedupe_window) END,
           g.enqueued_by   -- 0026
      FROM gone g
      JOIN outbox.targets t ON t.name = g.target;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- prune_step as in 0012, deleting the tasks past their TTL after the
-- tombstones past theirs.
CREATE OR REPLACE FUNCTION outbox.prune_step(p_limit integer DEFAULT 5000)
RETURNS TABLE(pruned integer, forgotten integer, locked boolean)
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
    -- 0036: MCP tasks past their TTL (not counted: forgotten counts tombstones).
    DELETE FROM outbox.mcp_tasks k
     WHERE k.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.mcp_tasks x
                                WHERE x.expires_at <= now() LIMIT p_limit));
    RETURN NEXT;
END
$$;

-- ---------------------------------------------------------------------------
-- 18, 19. What the model reads. The model controls no key: it is told what
-- to do (wait, ask for the outcome of this same call, not repeat the action,
-- tell the user), never to call "with the same key". p_outcome_message: for
-- pending, what it waits for; for awaiting_approval, the rule that holds it
-- and why. p_person_reason: not NULL when only a person can settle it (the
-- reason itself is for operators: outbox.outcome, stuck, /ui).
-- (No SET clause: see 0027.)
CREATE OR REPLACE FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_status
        WHEN 'succeeded' THEN 'succeeded: the target acted; this is its saved response'
        WHEN 'failed' THEN 'failed: the target did not act and will not: ' || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'cancelled' THEN 'cancelled: the target did not act, and nothing more will be sent: '
                              || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'reconciling' THEN
            CASE WHEN p_person_reason IS NOT NULL
                 THEN 'outcome unknown: needs a person to settle it. The target may have acted, and it cannot be asked '
                      'whether it did, so a person will check and settle this call. Do not repeat the action; tell the '
                      'user it may have happened and that a person is confirming it. You may ask for the outcome of '
                      'this same call later.'
                 ELSE 'outcome unknown, being confirmed: the target may have acted, and it is being asked whether it did. '
                      'Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is '
                      'being confirmed.' END
        WHEN 'delivering' THEN 'not yet confirmed: being delivered to the target. Wait, then ask for the outcome of '
                               'this same call; do not repeat the action; tell the user it is being confirmed.'
        WHEN 'pending' THEN 'not yet confirmed: ' || coalesce(p_outcome_message, 'waiting for delivery')
                            || '. Wait, then ask for the outcome of this same call; do not repeat the action; tell '
                               'the user it is being confirmed.'
        WHEN 'awaiting_approval' THEN 'not yet confirmed: held until a person approves it'
                                      || coalesce(' (' || p_outcome_message || ')', '')
                                      || '. Wait, then ask for the outcome of this same call; do not repeat the '
                                         'action; tell the user it is waiting for a person''s approval.'
        ELSE p_status END
$$;

-- Whether a live relay may claim what is pending: one heartbeat in the
-- last 2 minutes (as enqueue's wake-up asks; a relay that stops cleanly
-- removes its row, outbox.relay_gone).
CREATE FUNCTION outbox.relay_alive() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.relays WHERE heartbeat_at > now() - interval '2 minutes')
$$;
COMMENT ON FUNCTION outbox.relay_alive() IS 'Whether some relay sent a heartbeat in the last 2 minutes (0036).';

-- What holds an intent for approval, for the model: the rule as written and
-- why it holds this payload (names and types, never a value: 0023).
CREATE FUNCTION outbox.mcp_held_by(p_target text, p_payload jsonb) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rule jsonpath := (SELECT t.approval_rule FROM outbox.targets t WHERE t.name = p_target);
BEGIN
    RETURN coalesce('rule ' || outbox.rule_text(rule) || ': ', '') || outbox.approval_reason(p_payload, rule);
END
$$;

-- mcp_answer_of as in 0022, with: a task past its TTL is no task (0036,
-- item 6), a task's fields are filled whatever its intent's (a row of
-- tasks/list always has its id and time: the cursor), the front door's
-- keys are read without login isolation (outcome_any), and the note of a
-- held or unclaimed call (items 18, 19).
CREATE OR REPLACE FUNCTION outbox.mcp_answer_of(p_client text, p_key text, p_tool text, p_inserted boolean,
                                                p_task boolean DEFAULT true)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql STABLE AS $$
DECLARE
    a    outbox.mcp_answer;
    i    outbox.intents;
    o    record;
    tk   outbox.mcp_tasks;
    note text;
    person text;   -- why only a person can settle it (outbox.needs_person, 0023), or NULL
BEGIN
    a.client := p_client;
    a.key := p_key;
    a.intent_key := 'mcp:' || p_client || ':' || p_key;
    a.tool := p_tool;
    a.inserted := p_inserted;
    IF p_task THEN
        SELECT * INTO tk FROM outbox.mcp_tasks
         WHERE client = p_client AND intent_key = a.intent_key AND (expires_at IS NULL OR expires_at > now());
        IF FOUND THEN
            a.task_id := tk.task_id;
            a.task_created_at := tk.created_at;
            a.task_ttl_ms := tk.ttl_ms;
            a.tool := coalesce(a.tool, tk.tool);
        END IF;
    END IF;
    SELECT * INTO i FROM outbox.intents WHERE key = a.intent_key;
    IF FOUND AND NOT (i.state = 'pending' AND i.next_attempt_at = 'infinity' AND i.ordering_key IS NOT NULL) THEN
        a.status := outbox.visible_status(i.state, i.ambiguous);
        a.state := i.state;
        a.target := i.target;
        a.attempts := i.attempts;
        a.updated_at := i.updated_at;
        IF i.state IN ('succeeded', 'failed') THEN
            a.response_status := i.response_status;
            a.response_body := i.response_body;
        END IF;
        IF i.state IN ('failed', 'cancelled') THEN
            note := i.last_error;
        ELSIF i.state = 'awaiting_approval' THEN
            note := outbox.mcp_held_by(i.target, i.payload);
        ELSIF i.state = 'pending' AND i.attempts = 0 AND NOT i.ambiguous AND NOT outbox.relay_alive() THEN
            note := 'no relay has claimed it yet: none is running';
        END IF;
    ELSE
        SELECT * INTO o FROM outbox.outcome_any(a.intent_key);
        IF NOT FOUND THEN
            a.status := 'not_found';
            a.final := false;
            a.message := 'no call with this key';
            a.updated_at := a.task_created_at;
            RETURN a;
        END IF;
        a.status := o.status;
        a.state := o.state;
        a.target := o.target;
        a.response_status := o.response_status;
        a.response_body := o.response_body;
        a.attempts := o.attempts;
        a.updated_at := o.updated_at;
        note := coalesce(o.last_error, o.message);
    END IF;
    a.final := a.status IN ('succeeded', 'failed', 'cancelled');
    IF a.state = 'unknown' THEN   -- the same reason as outcome and stuck give
        person := outbox.needs_person(i.id, a.target, i.first_attempt_at);
    END IF;
    a.message := outbox.mcp_message(a.status, note, person);
    IF a.task_id IS NOT NULL THEN
        a.updated_at := greatest(a.updated_at, a.task_created_at);   -- a task made after its intent's last change
    END IF;
    RETURN a;
END
$$;

-- mcp_call as in 0022, with: enqueue_any (the front door's keys, no login
-- isolation: items 5, 7), a key_conflict that names another tool or
-- ordering group (item 11), a task's TTL (an expired task of the key is
-- replaced by a new one: item 6), and the note of a new call that is held
-- or that no relay will claim (item 19).
CREATE OR REPLACE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb,
                                           p_run_id text DEFAULT NULL, p_ordering_key text DEFAULT NULL,
                                           p_traceparent text DEFAULT NULL, p_task boolean DEFAULT false,
                                           p_task_ttl_ms bigint DEFAULT NULL)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c      outbox.mcp_clients;
    m      outbox.mcp_tools;
    r      outbox.enqueue_result;
    a      outbox.mcp_answer;
    ikey   text;
    args   jsonb := coalesce(p_arguments, '{}'::jsonb);
    existing_payload jsonb;
    existing_target  text;
    existing_group   text;
    stone  outbox.tombstones;
    fields text[] := '{}';
    why    text[] := '{}';
    others text;
    grp    text;
    run    text;
BEGIN
    SELECT * INTO c FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO m FROM outbox.mcp_tools
     WHERE tool = p_tool AND enabled AND (c.tools IS NULL OR tool = ANY (c.tools));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: no tool % for client %', quote_literal(p_tool), quote_literal(c.name)
            USING ERRCODE = 'OR023';
    END IF;
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.mcp_call: no idempotency key' USING ERRCODE = 'OR004';
    END IF;
    ikey := 'mcp:' || c.name || ':' || p_key;
    -- A client's ordering groups and runs are its own, like its keys: another
    -- client naming the same group neither waits behind it nor holds it.
    grp := 'mcp:' || c.name || ':' || p_ordering_key;
    run := 'mcp:' || c.name || ':' || p_run_id;
    IF octet_length(ikey) > 255 THEN
        RAISE EXCEPTION 'the idempotency key is % bytes long; the limit for client % is % bytes',
                        octet_length(p_key), quote_literal(c.name), 255 - octet_length(ikey) + octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    -- The same call again (the same key and arguments): its answer, with no
    -- enqueue. A new key: enqueue, with no subtransaction (a concurrent call
    -- of the same key with other arguments then raises OR001 to the caller,
    -- which answers key_conflict). Other arguments for a known key: enqueue
    -- decides (volatile fields, keep_original), and OR001 is caught here to
    -- name what differs.
    SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
      FROM outbox.intents i WHERE i.key = ikey;
    IF FOUND AND existing_payload = args AND existing_target = m.target
       AND existing_group IS NOT DISTINCT FROM grp AND NOT p_task THEN
        RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, false, false);
    END IF;
    IF existing_payload IS NULL THEN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    ELSE BEGIN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    EXCEPTION WHEN SQLSTATE 'OR001' THEN
        a.client := c.name;
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := 'key_conflict';
        a.final := true;
        a.inserted := false;
        SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
          FROM outbox.intents i WHERE i.key = ikey;
        IF NOT FOUND THEN   -- pruned since: what its tombstone remembers
            stone := outbox.tombstone_of(ikey);
            existing_target := stone.target;
            existing_group := grp;
        END IF;
        -- 0036: another tool (its target differs), another ordering group,
        -- then the arguments' fields.
        IF existing_target IS DISTINCT FROM m.target THEN
            fields := fields || 'tool'::text;
            others := (SELECT string_agg(quote_literal(t.tool), ' or ' ORDER BY t.tool) FROM outbox.mcp_tools t
                        WHERE t.target = existing_target AND (c.tools IS NULL OR t.tool = ANY (c.tools)));
            why := why || ('it was used with another tool' || coalesce(' (' || others || ')', '') || ', not '
                           || quote_literal(p_tool));
        END IF;
        IF existing_group IS DISTINCT FROM grp THEN
            fields := fields || 'ordering_key'::text;
            why := why || ('it was used ' || CASE WHEN existing_group IS NULL THEN 'without an ordering key'
                                                  ELSE 'with another ordering key' END);
        END IF;
        IF existing_payload IS NOT NULL AND existing_payload <> args THEN
            fields := fields || outbox.differing_fields(existing_payload, args);
            why := why || ('it was used with other arguments'
                           || coalesce(' (fields that differ: '
                                       || array_to_string(outbox.differing_fields(existing_payload, args), ', ') || ')', ''));
        END IF;
        a.conflict_fields := nullif(fields, '{}');
        a.message := 'key_conflict: this key was already used for another action: '
                     || coalesce(nullif(array_to_string(why, '; '), ''), 'it was used with other arguments')
                     || '; nothing was sent. Use the same tool and arguments, or a new key for a new action.';
        RETURN a;
    END;
    END IF;
    IF p_task THEN
        -- 0036: an expired task of this key is replaced (a new id); a live one stays.
        INSERT INTO outbox.mcp_tasks AS k (task_id, client, intent_key, tool, ttl_ms, expires_at)
        VALUES ('task-' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''),
                c.name, ikey, p_tool, p_task_ttl_ms, now() + p_task_ttl_ms * interval '1 millisecond')
        ON CONFLICT (client, intent_key) DO UPDATE
           SET task_id = excluded.task_id, tool = excluded.tool, ttl_ms = excluded.ttl_ms,
               expires_at = excluded.expires_at, created_at = now()
         WHERE k.expires_at <= now();
    END IF;
    IF r.inserted AND NOT p_task THEN
        -- A new intent: what enqueue said is all there is to say (no second look).
        a.client := c.name;
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := r.status;
        a.state := r.status::outbox.intent_state;
        a.final := false;
        a.inserted := true;
        a.attempts := 0;
        a.message := outbox.mcp_message(r.status,
                                        CASE WHEN r.status = 'awaiting_approval' THEN outbox.mcp_held_by(m.target, args)
                                             WHEN r.status = 'pending' AND NOT outbox.relay_alive()
                                                 THEN 'no relay has claimed it yet: none is running'
                                             WHEN r.status = 'pending' THEN 'waiting for delivery' END, NULL);
        a.updated_at := now();
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, r.inserted, p_task);
END
$$;

-- ---------------------------------------------------------------------------
-- 13. The batched look-up, scoped by token: each waiting call's token hash
-- with its intent's key; a key of another client than the token's, or an
-- unknown token, gets no row (the call waits on, and its own last look,
-- mcp_outcome, answers it).
CREATE FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[])
RETURNS SETOF outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h      bytea;
    k      text;
    client text;
BEGIN
    IF cardinality(p_token_hashes) IS DISTINCT FROM cardinality(p_intent_keys) THEN
        RAISE EXCEPTION 'outbox.mcp_outcomes: % token hashes for % keys', cardinality(p_token_hashes),
                        cardinality(p_intent_keys)
            USING ERRCODE = '22023';
    END IF;
    FOR h, k IN SELECT x.h, x.k FROM unnest(p_token_hashes, p_intent_keys) AS x(h, k) LOOP
        client := (SELECT c.name FROM outbox.mcp_clients c WHERE c.token_hash = h);
        CONTINUE WHEN client IS NULL OR NOT starts_with(k, 'mcp:' || client || ':');
        RETURN NEXT outbox.mcp_answer_of(client, substr(k, length('mcp:' || client || ':') + 1), NULL, false, false);
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox.mcp_outcomes(bytea[], text[]) IS
    'The MCP front door''s batched look-up: the answer for each (token hash, intent key) whose key is that client''s (0036).';

-- The 0.1.0 front door's batched look-up had no token: it now answers no
-- row (the 0.1.0 front door then answers at the end of each wait, from its
-- token-scoped mcp_outcome). Dropped in the release after this one.
CREATE OR REPLACE FUNCTION outbox.mcp_outcomes(p_intent_keys text[])
RETURNS SETOF outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN;
END
$$;
COMMENT ON FUNCTION outbox.mcp_outcomes(text[]) IS
    'Retired in 0036 (it read any client''s outcome without a token): answers no row; kept for the 0.1.0 front door, dropped in the next release.';

-- mcp_task as in 0022, for a task within its TTL.
CREATE OR REPLACE FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
    a  outbox.mcp_answer;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_task: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO tk FROM outbox.mcp_tasks
     WHERE task_id = p_task_id AND client = client_name AND (expires_at IS NULL OR expires_at > now());   -- 0036
    IF NOT FOUND THEN
        a.client := client_name;
        a.status := 'not_found';
        a.final := false;
        a.message := 'no such task';
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                tk.tool, false);
END
$$;

-- mcp_tasks_list as in 0022, within their TTL, and through the index
-- mcp_tasks_list: one row comparison (no cursor: after the end of time),
-- so a page reads its rows, not every task the client ever made.
CREATE OR REPLACE FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamptz DEFAULT NULL,
                                                 p_after_id text DEFAULT NULL, p_limit integer DEFAULT 50)
RETURNS SETOF outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_tasks_list: unknown client' USING ERRCODE = 'OR022';
    END IF;
    FOR tk IN SELECT * FROM outbox.mcp_tasks
               WHERE client = client_name
                 AND (created_at, task_id) < (coalesce(p_after_created, 'infinity'), coalesce(p_after_id, ''))
                 AND (expires_at IS NULL OR expires_at > now())
               ORDER BY created_at DESC, task_id DESC
               LIMIT greatest(1, least(coalesce(p_limit, 50), 200)) LOOP
        RETURN NEXT outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                         tk.tool, false);
    END LOOP;
END
$$;

-- mcp_task_cancel as in 0022, for a task within its TTL.
CREATE OR REPLACE FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
    i  outbox.intents;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_task_cancel: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO tk FROM outbox.mcp_tasks
     WHERE task_id = p_task_id AND client = client_name AND (expires_at IS NULL OR expires_at > now());   -- 0036
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such task' USING ERRCODE = 'OR024';
    END IF;
    -- No row lock here: outbox.cancel takes the group's lock before the row's
    -- (ordering_locked_intent), as every settle does; taking the row's first
    -- would deadlock with a relay settling the group's head.
    SELECT * INTO i FROM outbox.intents WHERE key = tk.intent_key;
    IF FOUND AND i.state IN ('pending', 'awaiting_approval') AND i.attempts = 0 AND NOT i.ambiguous THEN
        PERFORM outbox.cancel(tk.intent_key, 'cancelled by MCP client ' || client_name);
    ELSIF FOUND AND i.state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'the call cannot be cancelled: it may already have been sent (%)',
                        outbox.visible_status(i.state, i.ambiguous)
            USING ERRCODE = 'OR007';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'Cannot cancel task: already in terminal status ''%''', i.state USING ERRCODE = 'OR025';
    END IF;
    RETURN outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                tk.tool, false);
END
$$;

-- ---------------------------------------------------------------------------
-- Grants: the bodies behind the public functions are their owner's alone.

REVOKE ALL ON FUNCTION outbox.enqueue_any(text, text, jsonb, text, timestamptz, text, text),
                       outbox.outcome_any(text), outbox.operator_session(), outbox.refuse_front_door(text, text, text),
                       outbox.relay_alive(), outbox.mcp_held_by(text, jsonb), outbox.mcp_outcomes(bytea[], text[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_outcomes(bytea[], text[]) TO outbox_mcp;
