CREATE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL::text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'retry_now');   -- 0013
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
    first_age interval;
    note text;
    head outbox.intents;   -- 0013
    unkeyed text;          -- 0025
BEGIN
    SELECT * INTO tgt FROM outbox.targets WHERE name = row.target;
    first_age := date_trunc('second', now() - row.first_attempt_at);
    head := outbox.ordering_head_before(row.ordering_key, row.id);   -- 0013

    IF row.state = 'pending' AND head.id IS NOT NULL THEN   -- 0013
        RAISE EXCEPTION 'outbox.retry_now: key % waits for % (%), the head of its ordering group %: it is sent after that one succeeds or is cancelled',
                        quote_literal(p_key), quote_literal(head.key), outbox.visible_status(head.state, head.ambiguous),
                        quote_literal(row.ordering_key)
            USING ERRCODE = 'OR007',
                  HINT = 'Settle the head: resolve or cancel it (outbox-relay stuck lists it).';
    ELSIF row.state = 'pending' THEN
        note := 'retry requested: pending, due now';
    ELSIF row.state = 'unknown' THEN
        IF tgt.key_header IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and target % cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        unkeyed := outbox.unkeyed_attempt(row.id);   -- 0025
        IF unkeyed = 'without' THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and an attempt that may have executed was sent without a key (target % had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        ELSIF unkeyed = 'not recorded' THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and whether an attempt that may have executed carried the key was not recorded (a lease taken over from a relay older than 0025, or an attempt before 0011): target % may not recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF row.first_attempt_at IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and no recorded first attempt, so whether target % still remembers the key cannot be told: sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF now() - row.first_attempt_at >= tgt.key_ttl THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and its first attempt was % ago, past target %''s key_ttl of %: the target may have forgotten the key, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), first_age, quote_literal(row.target), tgt.key_ttl
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        note := format('retry requested: unknown -> pending with the same key (target %s honours keys; first attempt %s ago, key_ttl %s)',
                       row.target, first_age, tgt.key_ttl);
    ELSIF row.state = 'failed' THEN
        IF row.ambiguous THEN
            RAISE EXCEPTION 'outbox.retry_now: key % failed after an attempt that may have executed: sending it again could execute it twice',
                            quote_literal(p_key)
                USING ERRCODE = 'OR007',
                      HINT = 'A new action needs a new key.';
        END IF;
        note := format('retry requested: failed -> pending (no attempt may have executed; %s attempt(s) before, counted from 0 again)',
                       row.attempts);
    ELSE
        RAISE EXCEPTION 'outbox.retry_now: key % is %, %', quote_literal(p_key), row.state,
                        CASE row.state
                            WHEN 'in_flight' THEN 'being delivered now'
                            WHEN 'awaiting_approval' THEN 'approve it instead'
                            WHEN 'succeeded' THEN 'the target acted; nothing to retry'
                            ELSE 'it is final; nothing to retry'
                        END
            USING ERRCODE = 'OR007';
    END IF;

    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.retry_now: target % of key % is disabled: nothing would be sent',
                        quote_literal(row.target), quote_literal(p_key)
            USING ERRCODE = 'OR007', HINT = 'Enable the target first (outbox.targets.enabled).';
    END IF;

    IF row.state = 'failed' THEN
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = CASE WHEN head.id IS NOT NULL THEN 'infinity' ELSE now() END,   -- 0013
               attempts = 0, first_attempt_at = NULL,
               response_status = NULL, response_body = NULL, updated_at = now()
         WHERE id = row.id;
    ELSE
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = CASE WHEN head.id IS NOT NULL THEN 'infinity' ELSE now() END,   -- 0013
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
         WHERE id = row.id;
    END IF;
    PERFORM outbox.note_decision(row.id, row.attempts, who, note);
    RETURN 'pending';
END
$$;

COMMENT ON FUNCTION outbox.retry_now(p_key text, p_by text) IS 'Send an intent now where that is safe: pending (due now), unknown on a key-honouring target within key_ttl, failed with no ambiguous attempt. Otherwise OR007.';

REVOKE ALL ON FUNCTION outbox.retry_now(p_key text, p_by text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.retry_now(p_key text, p_by text) TO outbox_admin;
