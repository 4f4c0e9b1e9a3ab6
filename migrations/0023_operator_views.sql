-- 0023: what an operator needs to see, and a back-off that outlived an
-- outage (issue 22, items 4, 5, 6 and 8).
--
-- 1. An unknown outcome that nothing will settle says so. The relay asks a
--    target about an unknown intent only through its status URL
--    (outbox.claim_unknown); without one, the intent waits for a person, but
--    outbox.outcome said "outcome unknown, reconciling" and outbox.stuck
--    "outcome unknown", so neither an agent nor an operator knew to
--    escalate. outbox.needs_person says why only a person can settle it (no
--    status URL, and: no key header; an attempt that may have executed went
--    without the key; the key is past the target's key_ttl; or, while the
--    target still remembers the key, that a retry with it is safe), and
--    outcome's message and stuck's reason become "outcome unknown: needs a
--    person — no status URL, no key" and the like. With a status URL (and
--    the target enabled) both stay as they were. The MCP front door builds
--    its own message (0022, outbox.mcp_answer_of) and is not changed here.
--
-- 2. outbox.approvals: the intents awaiting approval, with the target's rule
--    and why it holds each one (outbox.approval_reason): the rule is true, a
--    field it reads is missing or null, of another type than the value it
--    is compared with, reached by a lax step over an array written without
--    [*], or the rule cannot be evaluated. The reason names fields and JSON
--    types, never a value of the payload. outbox.stuck listed these only
--    after 24 hours; `outbox-relay approvals` and the status page read this
--    view. outbox_operator reads it.
--
-- 3. After a target's circuit closes (a probe succeeded) or an admin
--    enables it again, its intents that wait on their own back-off are due
--    at once. The circuit opened because deliveries failed, and each failure
--    gave its intent a back-off of up to backoff_cap_ms (5 minutes by
--    default, full jitter); the circuit then kept every intent of the target
--    back, and once it closed the due ones drained at once but those still
--    in their back-off waited it out (3.5 minutes were seen), although the
--    target had just answered. Only pending rows that already had an attempt
--    and are due later (not held by an ordering group, never a first attempt
--    scheduled with p_not_before) move; rows another transaction holds are
--    skipped, and a re-send stays as safe as before: the relay checks it
--    again when it claims the row.
--
-- 4. Smaller:
--    - outbox.stuck no longer repeats the row's last error inside the
--      reason of a pending row behind an open circuit ("…; last: <the same
--      libcurl text>"): the last_error column beside it has it.
--    - A key with a control character is refused (OR004) with the key
--      escaped (E'run-1:\nstep-2') and the code point named, not echoed raw
--      with its newline into the caller's log (outbox.quote_key).
--
-- Locks: CREATE OR REPLACE FUNCTION and VIEW take no lock on the tables;
-- calls already running finish with the old bodies. The new view and
-- functions are granted as 0005 grants the operator's reads.

-- ---------------------------------------------------------------------------
-- 1. unknown outcomes that need a person

-- Why only a person can settle the unknown intent p_intent of p_target, or
-- NULL when the relay asks the target's status URL (outbox.claim_unknown).
-- The conditions are those under which outbox.retry_now refuses (0011), so
-- the message and the refusal agree.
CREATE FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t outbox.targets;
BEGIN
    SELECT * INTO t FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF t.status_url IS NOT NULL THEN
        IF t.enabled THEN
            RETURN NULL;   -- the relay asks the status URL
        END IF;
        RETURN 'needs a person — the target is disabled, so its status URL is not asked: enable it, or resolve the key';
    END IF;
    IF t.key_header IS NULL THEN
        RETURN 'needs a person — no status URL, no key';
    END IF;
    IF EXISTS (SELECT 1 FROM outbox.attempts a
                WHERE a.intent_id = p_intent AND a.key_sent = false
                  AND a.class = 'ambiguous' AND a.request_sent IS DISTINCT FROM false
                  AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                                   WHERE r.intent_id = p_intent AND r.id > a.id
                                     AND r.class = 'reconciled_not_executed')) THEN
        RETURN 'needs a person — no status URL, and an attempt that may have executed went without the key';
    END IF;
    IF p_first_attempt_at IS NULL THEN
        RETURN 'needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key';
    END IF;
    IF now() - p_first_attempt_at >= t.key_ttl THEN
        RETURN format('needs a person — no status URL, and the key is past the target''s key_ttl (%s): the target may have forgotten it',
                      t.key_ttl);
    END IF;
    RETURN format('needs a person — no status URL; the target remembers the key until %s, so a retry with it is safe until then (outbox-relay retry KEY)',
                  outbox.utc_text(p_first_attempt_at + t.key_ttl));
END
$$;
COMMENT ON FUNCTION outbox.needs_person(bigint, text, timestamptz) IS
    'Why only a person can settle an unknown intent ("needs a person — no status URL, no key", …), or NULL when the relay asks the target''s status URL (0023).';

-- outcome as in 0013; an unknown outcome that nothing will settle says so (0023).
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

-- stuck as in 0013, with two changes marked 0023: an unknown intent says
-- whether it needs a person, and a pending row behind an open circuit does
-- not repeat its own last error inside the circuit's reason.
CREATE OR REPLACE VIEW outbox.stuck AS
SELECT i.key, i.target, i.state,
       CASE WHEN g.later > 0
            THEN format('blocks %s later %s of group %s', g.later,
                        CASE WHEN g.later = 1 THEN 'intent' ELSE 'intents' END, i.ordering_key)
                 || coalesce('; ' || s.reason, '')
            ELSE s.reason END AS reason,
       now() - i.created_at AS age, i.attempts, i.last_error, i.updated_at
  FROM (-- as in 0009: each arm on a partial index of its state
        SELECT i.id, false AS head
          FROM outbox.intents i
          LEFT JOIN outbox.target_state ts ON ts.target = i.target AND ts.circuit <> 'closed'
         WHERE (i.state = 'in_flight' AND i.lease_expires_at < now())
            OR i.state = 'unknown'
            OR (i.state = 'pending' AND i.next_attempt_at < 'infinity'   -- 0013: a held intent waits for its group, not its target
                AND (ts.target IS NOT NULL OR i.next_attempt_at < now() - interval '5 minutes'))
            OR (i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours')
        UNION ALL
        -- 0013: the head of each ordering group (intents_ordering) when it is failed,
        -- awaiting approval (under 24 hours; the arm above lists it after that) or held
        SELECT i.id, true
          FROM (SELECT DISTINCT ON (o.ordering_key) o.id
                  FROM outbox.intents o
                 WHERE o.ordering_key IS NOT NULL AND o.state NOT IN ('succeeded', 'cancelled')
                 ORDER BY o.ordering_key, o.id) AS h
          JOIN outbox.intents i ON i.id = h.id
         WHERE i.state = 'failed'
            OR (i.state = 'awaiting_approval' AND i.created_at >= now() - interval '24 hours')
            OR (i.state = 'pending' AND i.next_attempt_at = 'infinity')) AS c
  JOIN outbox.intents i ON i.id = c.id
  LEFT JOIN outbox.target_state ts ON ts.target = i.target AND ts.circuit <> 'closed'
  -- 0013: for the head of an ordering group, how many live intents wait behind it
  LEFT JOIN LATERAL (SELECT count(*) AS later FROM outbox.intents l
                      WHERE i.ordering_key IS NOT NULL AND l.ordering_key = i.ordering_key AND l.id > i.id
                        AND l.state NOT IN ('succeeded', 'cancelled')
                        AND NOT EXISTS (SELECT 1 FROM outbox.intents p
                                         WHERE p.ordering_key = i.ordering_key AND p.id < i.id
                                           AND p.state NOT IN ('succeeded', 'cancelled'))) AS g ON true
 CROSS JOIN LATERAL (SELECT CASE
        WHEN i.state = 'in_flight' AND i.lease_expires_at < now() THEN 'in flight past its lease'
        WHEN i.state = 'unknown'
            THEN 'outcome unknown' || coalesce(': ' || outbox.needs_person(i.id, i.target, i.first_attempt_at), '')   -- 0023
        WHEN i.state = 'pending' AND i.next_attempt_at = 'infinity'
            THEN 'its turn in group ' || i.ordering_key || ' came but it was not released: outbox.retry_now releases it'   -- 0013
        WHEN i.state = 'pending' AND ts.target IS NOT NULL
            THEN 'target unavailable since ' || to_char(ts.circuit_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                 || ' UTC (circuit ' || ts.circuit
                 || coalesce(': ' || CASE WHEN i.last_error <> ''   -- 0023: its last error once, in last_error
                                           AND right(ts.circuit_reason, length(i.last_error) + 8) = '; last: ' || i.last_error
                                          THEN left(ts.circuit_reason, -(length(i.last_error) + 8))
                                          ELSE ts.circuit_reason END, '') || ')'
        WHEN i.state = 'pending' THEN 'pending for over 5 minutes'
        WHEN i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours' THEN 'awaiting approval for over 24 hours'
    END AS reason) AS s
 WHERE NOT c.head OR g.later > 0 OR i.state = 'pending';   -- 0013: a failed or approval-awaiting head only when it blocks something
COMMENT ON VIEW outbox.stuck IS
    'Keys that need a look: in flight past the lease, unknown (saying when it needs a person), pending while the target''s circuit is open or over 5 minutes past due, awaiting approval over 24 hours; '
    'the head of an ordering group that blocks later intents ("blocks N later intents of group G"), and a held intent whose turn came but was not released.';

-- ---------------------------------------------------------------------------
-- 2. what waits for approval, and why

-- Why the approval rule holds this payload, for the person who decides: the
-- rule is true, or which field it reads is missing, null, of another JSON
-- type than what it is compared with, or reached by a lax step that strict
-- mode refuses (an array written without [*], an item without the field),
-- or that the rule cannot be evaluated. Names paths and types, never a
-- value. outbox.needs_approval decides; this only explains, so it never
-- fails: what it cannot tell, it says in general terms.
--
-- The paths are read from the rule's text: $-paths as written, and @-paths
-- of the rule's outer filter resolved against that filter's path ($ ? (@.a
-- > 1) reads $.a). A path inside a nested filter is left out.
CREATE FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    step_re  constant text := '(?:\.[A-Za-z_][A-Za-z0-9_]*|\."(?:[^"\\]|\\.)*"|\[[^]]*\]|\.\*\*(?:\{[^}]*\})?|\.\*)';
    lit_re   constant text := '(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*"|true|false|null)';
    op_re    constant text := '(==|!=|<>|<=|>=|<|>)';
    written  text;
    body     text;
    base     text;
    m        text[];
    seen     text[] := '{}';
    reasons  text[] := '{}';
    p        text;        -- the path as written
    abs_path text;        -- the same from the root
    quoted   text;        -- p as a regular expression
    lit      text;
    want     text;        -- the JSON type p is compared with, if the rule says
    strict_v jsonb;
    lax_v    jsonb;
    v        jsonb;
    is_pred  boolean;
    answer   boolean;
    failure  text;
BEGIN
    IF p_rule IS NULL THEN
        RETURN 'the target has no approval rule now (it had one when the intent was enqueued)';
    END IF;
    IF p_payload IS NULL THEN
        RETURN 'no payload';
    END IF;
    written := p_rule::text;
    body := regexp_replace(written, '^(strict|lax) ', '');

    BEGIN
        -- as needs_approval tells a predicate ($.a > 1) from a path ($ ? (@.a > 1))
        v := jsonb_path_query_array('{}', p_rule, '{}', true);
        is_pred := jsonb_array_length(v) = 1 AND jsonb_typeof(v -> 0) IN ('boolean', 'null');
        answer := CASE WHEN is_pred THEN jsonb_path_match(p_payload, p_rule, '{}', true)
                       ELSE jsonb_path_exists(p_payload, p_rule, '{}', true) END;
        IF answer THEN
            RETURN 'the rule is true for this payload';
        END IF;
        -- Not silent: an error that only hid the answer says what it is.
        PERFORM CASE WHEN is_pred THEN jsonb_path_match(p_payload, p_rule)
                     ELSE jsonb_path_exists(p_payload, p_rule) END;
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;

    base := (regexp_match(body, '^\s*(\$' || step_re || '*)\s*\?\s*\('))[1];
    FOR m IN SELECT regexp_matches(body, '([$@]' || step_re || '*)(\s*\()?', 'g') LOOP
        p := m[1];
        IF m[2] IS NOT NULL THEN   -- $.a.size(): the last step is a method
            p := regexp_replace(p, '\.[A-Za-z_][A-Za-z0-9_]*$', '');
        END IF;
        CONTINUE WHEN length(p) < 2 OR p = ANY (seen);
        seen := seen || p;
        IF left(p, 1) = '@' THEN
            CONTINUE WHEN base IS NULL;
            abs_path := base || substr(p, 2);
        ELSE
            abs_path := p;
        END IF;
        BEGIN
            strict_v := jsonb_path_query_array(p_payload, ('strict ' || abs_path)::jsonpath, '{}', true);
            lax_v := jsonb_path_query_array(p_payload, ('lax ' || abs_path)::jsonpath, '{}', true);
        EXCEPTION WHEN OTHERS THEN
            CONTINUE;   -- not a path on its own
        END;
        -- as people write it: $.amount_cents, not the canonical $."amount_cents"
        abs_path := regexp_replace(abs_path, '\."([A-Za-z_][A-Za-z0-9_]*)"', '.\1', 'g');
        IF jsonb_array_length(lax_v) = 0 THEN
            reasons := reasons || (abs_path || ' is missing');
            CONTINUE;
        END IF;
        IF jsonb_array_length(strict_v) = 0 THEN
            reasons := reasons || (abs_path || ' does not exist as written (strict): an array on the way without [*], or an item without it');
            CONTINUE;
        END IF;
        -- $.items[*].price: fewer values than items
        IF p ~ ('\[\*\]' || step_re || '$') AND jsonb_array_length(lax_v) <
               jsonb_array_length(jsonb_path_query_array(p_payload, ('lax ' || regexp_replace(abs_path, step_re || '$', ''))::jsonpath,
                                                         '{}', true)) THEN
            reasons := reasons || (abs_path || ' is missing in some items');
            CONTINUE;
        END IF;
        -- What the rule compares it with: p OP literal, or literal OP p.
        quoted := regexp_replace(p, '([.^$*+?(){}|\\\[\]])', '\\\1', 'g');
        lit := coalesce((regexp_match(body, quoted || '\s*' || op_re || '\s*' || lit_re))[2],
                        (regexp_match(body, lit_re || '\s*' || op_re || '\s*' || quoted))[1]);
        want := CASE WHEN lit IS NULL THEN
                         CASE WHEN body ~ (quoted || '\s+(like_regex|starts\s+with)') THEN 'string' END
                     WHEN lit ~ '^-?[0-9]' THEN 'number'
                     WHEN lit ~ '^"' THEN 'string'
                     WHEN lit IN ('true', 'false') THEN 'boolean' END;
        FOR v IN SELECT jsonb_array_elements(strict_v) LOOP
            IF jsonb_typeof(v) = 'null' THEN
                reasons := reasons || (abs_path || ' is null');
                EXIT;
            ELSIF want IS NOT NULL AND jsonb_typeof(v) <> want THEN
                reasons := reasons || format('%s is %s %s, compared with a %s', abs_path,
                                             CASE WHEN jsonb_typeof(v) IN ('object', 'array') THEN 'an' ELSE 'a' END,
                                             jsonb_typeof(v), want);
                EXIT;
            END IF;
        END LOOP;
    END LOOP;

    IF cardinality(reasons) > 0 THEN
        RETURN array_to_string(reasons, '; ');
    END IF;
    IF failure IS NOT NULL THEN
        RETURN 'the rule cannot be evaluated on this payload: ' || failure;
    END IF;
    IF NOT outbox.needs_approval(p_payload, p_rule) THEN
        RETURN 'the rule does not hold it now (it changed since the intent was enqueued)';
    END IF;
    RETURN 'the rule is neither true nor false for this payload (an unknown comparison or an error inside it), so it holds';
EXCEPTION WHEN OTHERS THEN
    RETURN 'the rule is neither true nor false for this payload, so it holds';
END
$$;
COMMENT ON FUNCTION outbox.approval_reason(jsonb, jsonpath) IS
    'Why an approval rule holds a payload (true, a missing, null or mistyped field, a lax step, an error): paths and types only, never a value (0023).';

-- A rule as people write it: jsonpath prints $.amount_cents > 1 as
-- ($."amount_cents" > 1); the outer parentheses and the quotes of plain
-- member names go (the meaning is the same).
CREATE FUNCTION outbox.rule_text(p_rule jsonpath) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t     text := regexp_replace(p_rule::text, '\."([A-Za-z_][A-Za-z0-9_]*)"', '.\1', 'g');
    body  text;
    tok   text;
    depth integer := 0;
    n     integer := 0;
BEGIN
    body := regexp_replace(t, '^(strict |lax )', '');
    IF body !~ '^\(.*\)$' THEN
        RETURN t;
    END IF;
    -- Only when the first parenthesis closes at the very end.
    FOR tok IN SELECT m[1] FROM regexp_matches(body, '("(?:[^"\\]|\\.)*"|[()]|[^"()]+)', 'g') AS m LOOP
        n := n + length(tok);
        depth := depth + CASE tok WHEN '(' THEN 1 WHEN ')' THEN -1 ELSE 0 END;
        IF depth = 0 AND n < length(body) THEN
            RETURN t;
        END IF;
    END LOOP;
    RETURN substring(t FROM 1 FOR length(t) - length(body)) || substr(body, 2, length(body) - 2);
END
$$;

CREATE VIEW outbox.approvals AS
SELECT i.key, i.target, now() - i.created_at AS age, i.created_at, i.run_id,
       outbox.rule_text(t.approval_rule) AS rule,
       outbox.approval_reason(i.payload, t.approval_rule) AS reason
  FROM outbox.intents i   -- intents_awaiting
  LEFT JOIN outbox.targets t ON t.name = i.target
 WHERE i.state = 'awaiting_approval';
COMMENT ON VIEW outbox.approvals IS
    'Intents awaiting approval: key, target, age, the target''s rule and why it holds the intent (outbox.approval_reason: never a payload value) (0023).';

-- ---------------------------------------------------------------------------
-- 3. after an outage: the back-off of a target's retries ends with it

-- The pending intents of p_target that had an attempt and wait for a later
-- retry become due now; rows another transaction holds are left as they
-- are. The UPDATE trigger (0017) wakes idle relays. Returns how many moved.
CREATE FUNCTION outbox.retries_due_now(p_target text) RETURNS integer
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    WITH waiting AS (
        SELECT i.id FROM outbox.intents i   -- intents_due
         WHERE i.state = 'pending' AND i.target = p_target
           AND i.next_attempt_at > now() AND i.next_attempt_at < 'infinity' AND i.attempts > 0
           FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE outbox.intents i SET next_attempt_at = now()
          FROM waiting w
         WHERE i.id = w.id
        RETURNING 1
    )
    SELECT count(*)::integer FROM moved
$$;
COMMENT ON FUNCTION outbox.retries_due_now(text) IS
    'After a target''s circuit closed or it was enabled again: its pending retries waiting on their back-off are due now (0023).';

-- target_event as in 0009; a closed circuit ends its target's back-offs (0023).
CREATE OR REPLACE FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer)
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
        IF FOUND THEN
            PERFORM outbox.retries_due_now(p_target);   -- 0023
        END IF;
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

-- targets_state_row as in 0009; a target enabled again ends its back-offs too (0023).
CREATE OR REPLACE FUNCTION outbox.targets_state_row() RETURNS trigger
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
        PERFORM outbox.retries_due_now(NEW.name);   -- 0023
    END IF;
    RETURN NULL;
END
$$;

-- ---------------------------------------------------------------------------
-- 4. a refused key, escaped

-- A key for a message: quote_literal's form, or, when it holds a control
-- character, an escape string (E'run-1:\nstep-2') so that a log line stays
-- one line and the character can be seen.
CREATE FUNCTION outbox.quote_key(p_key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c   text;
    out text := '';
BEGIN
    IF p_key IS NULL THEN
        RETURN 'NULL';
    END IF;
    IF p_key !~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RETURN quote_literal(p_key);
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(p_key, '') LOOP
        out := out || CASE WHEN c = '\' THEN '\\'
                           WHEN c = '''' THEN '\'''
                           WHEN c = E'\n' THEN '\n'
                           WHEN c = E'\r' THEN '\r'
                           WHEN c = E'\t' THEN '\t'
                           WHEN c ~ '[\u0001-\u001f\u007f-\u009f]' THEN '\u' || lpad(upper(to_hex(ascii(c))), 4, '0')
                           ELSE c END;
    END LOOP;
    RETURN 'E''' || out || '''';
END
$$;
COMMENT ON FUNCTION outbox.quote_key(text) IS
    'A key quoted for a message; with a control character, as an escape string (E''a\nb''), never raw (0023).';

-- refuse_key as in 0010; a control character is named and the key escaped (0023).
CREATE OR REPLACE FUNCTION outbox.refuse_key(p_function text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    alphabet constant text :=
        'A key is printable UTF-8 of 1 to 255 bytes: no control characters, no Unicode space other than U+0020 '
        'and no invisible format character (such as U+00A0, U+200B, U+202E, U+2060, U+FEFF), '
        'no space at either end, and not "." or "..". Make it in the deterministic layer, e.g. {run_id}:{step_id}.';
    bad text;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.%: the key must not be empty', p_function
            USING ERRCODE = 'OR004', HINT = 'Make the key in the deterministic layer, e.g. {run_id}:{step_id}.';
    END IF;
    IF octet_length(p_key) > 255 THEN
        RAISE EXCEPTION 'outbox.%: key is % bytes long; the limit is 255', p_function, octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    bad := substring(p_key FROM '[\u0001-\u001f\u007f-\u009f]');   -- 0023: named, and the key escaped
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.%: key % contains a control character (U+%)', p_function, outbox.quote_key(p_key),
                        lpad(upper(to_hex(ascii(bad))), 4, '0')
            USING ERRCODE = 'OR004', HINT = 'Keys travel in HTTP headers; control characters are refused.';
    END IF;
    IF p_key IN ('.', '..') THEN
        RAISE EXCEPTION 'outbox.%: key % is a dot segment: in a status URL it would name another path',
                        p_function, quote_literal(p_key)
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
    IF p_key ~ '^ | $' THEN
        RAISE EXCEPTION 'outbox.%: key % % with a space: receivers strip it from the header, so it would be another key''s duplicate',
                        p_function, quote_literal(p_key), CASE WHEN p_key ~ '^ ' THEN 'begins' ELSE 'ends' END
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
    bad := substring(p_key FROM '[\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.%: key % contains U+%, a Unicode space or invisible format character',
                        p_function, quote_literal(p_key), upper(lpad(to_hex(ascii(bad)), greatest(4, length(to_hex(ascii(bad)))), '0'))
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- Grants (as 0005: nothing to PUBLIC; the operator reads, the admin too)

REVOKE ALL ON FUNCTION outbox.needs_person(bigint, text, timestamptz), outbox.approval_reason(jsonb, jsonpath),
                       outbox.rule_text(jsonpath), outbox.retries_due_now(text), outbox.quote_key(text)
    FROM PUBLIC;
REVOKE ALL ON outbox.approvals FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.needs_person(bigint, text, timestamptz), outbox.approval_reason(jsonb, jsonpath),
                          outbox.rule_text(jsonpath)
    TO outbox_operator, outbox_admin;
GRANT SELECT ON outbox.approvals TO outbox_operator, outbox_admin;
