-- 0006: retry-now, for operators (`outbox-relay retry KEY`).
--
-- "Send now, only where safe" (DESIGN.md, "What follows from ambiguous"):
--   pending   due now (next_attempt_at = now()); its attempts, ambiguity and key clock are kept.
--   unknown   back to pending, due now, only if the target honours keys (key_header is set) and
--             the first attempt is younger than the target's key_ttl: the same key goes out again
--             and the target deduplicates it. attempts and first_attempt_at are kept (key_ttl runs
--             from the first send; outbox.release forgets first_attempt_at when attempts drops back
--             to 0, so attempts must not be reset here), and the row stays ambiguous: the agent
--             keeps seeing "reconciling". Otherwise refused: a person finds out and resolves.
--   failed    back to pending with attempts from 0 and no first attempt, only if no attempt may
--             have executed (ambiguous = false: a 4xx, a key conflict, or attempts that were never
--             sent). A failed row that was ambiguous was settled by a person: refused.
--   others    refused: in_flight is being delivered, awaiting_approval needs approve, succeeded
--             and cancelled are final.
-- Refusals are OR007 (the row is unchanged), an unknown key OR008, both as in 0004. A retry that
-- is done leaves an attempts row of class 'resolved' (outbox.note_decision). The UPDATE leaves
-- the row pending and due, so the NOTIFY trigger of 0002 wakes an idle relay.

CREATE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'retry_now');
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
    first_age interval;
    note text;
BEGIN
    SELECT * INTO tgt FROM outbox.targets WHERE name = row.target;
    first_age := date_trunc('second', now() - row.first_attempt_at);

    IF row.state = 'pending' THEN
        note := 'retry requested: pending, due now';
    ELSIF row.state = 'unknown' THEN
        IF tgt.key_header IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and target % cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it',
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
           SET state = 'pending', next_attempt_at = now(), attempts = 0, first_attempt_at = NULL,
               response_status = NULL, response_body = NULL, updated_at = now()
         WHERE id = row.id;
    ELSE
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = now(), lease_owner = NULL,
               lease_expires_at = NULL, updated_at = now()
         WHERE id = row.id;
    END IF;
    PERFORM outbox.note_decision(row.id, row.attempts, who, note);
    RETURN 'pending';
END
$$;
COMMENT ON FUNCTION outbox.retry_now(text, text) IS
    'Send an intent now where that is safe: pending (due now), unknown on a key-honouring target within key_ttl, failed with no ambiguous attempt. Otherwise OR007.';

REVOKE ALL ON FUNCTION outbox.retry_now(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.retry_now(text, text) TO outbox_admin;
