-- 0010: hardening (security review, issue "Hardening").
--
-- New SQLSTATEs (class "OR", as in 0002):
--   OR009 key outside the key alphabet (other than empty, too long or a
--         control character, which stay OR004)
--   OR010 payload nested deeper than 100 levels
--
-- 1. The key alphabet. A key travels as an HTTP header value and inside the
--    status URL (.../status/{key}). Receivers strip the whitespace around a
--    header value, so ' refund-7' and 'refund-7' were two intents for us and
--    one key for the target: the second was recorded as succeeded with the
--    first's response and never executed. libcurl removes dot segments from
--    a URL's path, so the key '..' asked GET / and read its 404 as "not
--    executed". A key is now printable UTF-8 of 1 to 255 bytes: no control
--    character (C0, DEL, C1: OR004 as before), no Unicode space other than
--    U+0020 and no invisible format character (NBSP, zero-width and bidi
--    controls, BOM, tags, variation selectors, fillers: Unicode White_Space
--    and Default_Ignorable_Code_Point), no space at either end, and not '.'
--    or '..': OR009, naming the key and what is wrong. outbox.enqueue checks
--    with one regex on its fast path (outbox.refuse_key explains a refusal);
--    outbox.compensate checks the key of the compensation first. Rows that
--    exist are not touched; enqueue refuses such a key from now on, so a
--    caller gets OR009 rather than the old row (outbox.outcome still reads it).
--
-- 2. Deleting or renaming a target. The guard of 0008 locked intents in
--    SHARE mode and scanned them without an index: one open enqueueing
--    transaction (of any target) made a DELETE of an unused target wait, and
--    every enqueue queued behind that DELETE. Now the reference is guarded
--    per target name by a transaction-level advisory lock, class 1330774017
--    (0x4F520001), key hashtext(name): enqueue takes its shared form for its
--    target before it inserts, the guard the exclusive form (waiting only for
--    enqueues of that target that have not ended), then looks for an intent
--    through intents_due (pending rows) and the new partial index
--    intents_target (final rows) and the small live partial indexes (enqueue writes no
--    entry in it). Still 23503 with the message of 0008. In READ COMMITTED each statement sees what committed before it, so
--    no intent can name the target behind the check; a transaction at
--    REPEATABLE READ or SERIALIZABLE cannot see rows committed after its
--    snapshot, so there enqueue first share-locks the target row too (FOR
--    KEY SHARE: a delete committed meanwhile fails it with 40001; only such
--    transactions pay the MultiXact 0008 removed), and the guard refuses to
--    delete or rename a target no intent names (55000: do it at READ
--    COMMITTED).
--    Building intents_target reads the table once, under a SHARE lock
--    (migrations run in a transaction): enqueues wait for it.
--
-- 3. The approval rule fails closed for every form. A filter rule
--    ($ ? (@.amount_cents > 100000)) dropped a payload whose amount was a
--    string, and in both forms a missing or null member compared false. Now
--    the intent is held unless the rule is definitely false: the rule is
--    evaluated as written, and in strict mode on the payload with null
--    members removed (a missing member, at any depth, is then an error, that
--    is unknown), each also with every filter ?(C) widened to
--    ?((C) || ((C) is unknown)); any answer that is true or unknown holds.
--    Consequences: null counts as missing; exists() or a bare path ($.flag)
--    over a missing member is unknown, so it holds too; a lax-style step over
--    an array without [*] is an error in strict mode and holds. Rules are
--    read as predicates when they answer one boolean (or null) on {}, else as
--    paths that hold when they select an item.
--
-- 4. Canonical numbers in linear time. outbox.canonical walked the document
--    in plpgsql (1 MB of 1.0 values: over a second; 2,000 levels deep:
--    "stack depth limit exceeded", only when some number had a trailing
--    zero). Numbers in jsonb's text are plain decimals, so the canonical form
--    is that text with the trailing zeros of every decimal removed, outside
--    strings: replace() and regex passes over the text, no recursion (see
--    below). outbox.fingerprint hashes that text without parsing it back.
--    Fingerprints do not change (tests/sql/13_hardening.sql pins them,
--    computed before this migration). enqueue refuses a payload nested
--    deeper than 100 levels (OR010); only a payload with more than 100
--    brackets is looked at.
--
-- 5. The lost wake-up (0008, item 3), bounded. enqueue decides at its INSERT
--    whether to NOTIFY; a relay that turned idle between that INSERT and the
--    caller's COMMIT claimed once more without seeing the row, and slept until
--    its poll timer (--poll-interval-ms, 2 s). Deciding at commit (a deferred
--    constraint trigger) closes that window but cost every enqueuing
--    transaction a row trigger event and a SECURITY DEFINER call at commit:
--    measured (shared 2-core machine, noisy) at about +20-40 us of backend
--    CPU per enqueuing transaction (median 94 -> 132 us, with a commit-time
--    lock that closed the last gap) and 15-30 % fewer enqueues/s with 8
--    pgbench clients.
--    Instead the window is bounded where the relay looks: an enqueuing
--    transaction holds the shared lock of item 2 until it ends, and
--    outbox.next_due_ms answers 0 ("look again") while one holds it for a
--    target the relay asked about whose gate is open. A relay that found
--    nothing then claims again after 1, 4, 8, ... ms, backing off to at most
--    256 ms between claims (relay/relay.c, on_next_due), until those
--    transactions end: a row committed after its relay went idle waits at
--    most ~256 ms more (poll interval before), whatever the poll interval.
--    The check is a try-lock per target (session level, released at once);
--    enqueue pays nothing for it. Rows inserted other than by enqueue (a
--    backfill by the table owner) are not covered: they wait for the poll.
--
-- 6. approve and reject recorded only the self-declared p_by. decided_by stays
--    p_by; the attempts row's note now also names session_user (the login
--    role, which SET ROLE does not change).
--
-- Cost on the path of a new key (pgbench, 8 clients, 10 s, distinct keys, as
-- tests/bench's enqueue scenario, on the same noisy machine): median of six
-- alternating rounds 9.6k -> 8.8k enqueues/s (rounds vary by +-20 %); one
-- session, backend CPU per enqueuing transaction about +6 us (~64 -> ~70 us
-- at best): the advisory lock of item 2, then the key regex and the bracket
-- count. intents_target adds an index entry where a record settles a row,
-- not to enqueue.

-- ---------------------------------------------------------------------------
-- 1. keys

-- Why a key is refused (OR004 or OR009), raised; returns if the key is fine.
-- The regex of enqueue's fast path is the union of these conditions.
CREATE FUNCTION outbox.refuse_key(p_function text, p_key text) RETURNS void
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
    IF p_key ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'outbox.%: key % contains a control character', p_function, quote_literal(p_key)
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
COMMENT ON FUNCTION outbox.refuse_key(text, text) IS
    'Raises OR004 or OR009 with the reason when a key is outside the key alphabet (see migration 0010); returns otherwise.';

-- ---------------------------------------------------------------------------
-- 2. the target reference

-- Every intent of a target: intents_due (0001) holds the pending rows by
-- target, this index the final ones, and the live rows in between (in
-- flight, unknown, awaiting approval) are few and have partial indexes of
-- their own. Final states only, on purpose: an index of every state but
-- pending was picked by the planner for the relay's `state = 'in_flight'`
-- statements whenever statistics were stale (it looked empty), and then
-- walked every final row: a drain of 30,000 fell from ~12k to ~700 intents/s.
-- A record that settles a row writes one entry here.
CREATE INDEX intents_target ON outbox.intents (target) WHERE state IN ('succeeded', 'failed', 'cancelled');

CREATE OR REPLACE FUNCTION outbox.targets_guard_references() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    -- Waits for the enqueues of this target that have not ended (they hold
    -- the shared form) and holds new ones off until this transaction ends.
    PERFORM pg_advisory_xact_lock(1330774017, hashtext(OLD.name));
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'pending')       -- intents_due
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name
                     AND state IN ('succeeded', 'failed', 'cancelled'))                         -- intents_target
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'in_flight')   -- intents_in_flight
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'unknown')     -- intents_unknown
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name
                     AND state = 'awaiting_approval') THEN                                       -- intents_awaiting
        RAISE EXCEPTION 'outbox.targets: target % is named by intents; disable it instead (enabled = false)',
                        quote_literal(OLD.name)
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Intents keep the name of their target for their whole history.';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'outbox.targets: delete or rename target % at READ COMMITTED: this % transaction cannot see intents enqueued after it began',
                        quote_literal(OLD.name), current_setting('transaction_isolation')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
COMMENT ON FUNCTION outbox.targets_guard_references() IS
    'Refuses to delete or rename a target that intents name (replaces the intents.target foreign key; advisory lock per target name since migration 0010).';

-- ---------------------------------------------------------------------------
-- 3. the approval rule

CREATE OR REPLACE FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    written   text := rule::text;      -- canonical text: 'strict ' or nothing, then the path
    body      text;
    widened   text;
    probe     jsonb;
    predicate boolean;
    bufs      text[];
    filters   boolean[];
    tok       text;
    n         integer;
    answer    boolean;
    doc       jsonb;
    path      text;
BEGIN
    IF payload IS NULL OR rule IS NULL THEN
        RETURN true;
    END IF;
    body := regexp_replace(written, '^(strict|lax) ', '');

    -- Every filter ?(C) widened to ?((C) || ((C) is unknown)): an item goes
    -- through unless C is definitely false. Tokens: strings, parentheses, the rest.
    IF strpos(body, '?(') > 0 THEN
        bufs := ARRAY[''];
        filters := ARRAY[false];
        FOR tok IN SELECT m[1] FROM regexp_matches(body, '("(?:[^"\\]|\\.)*"|[()]|[^"()]+)', 'g') AS m LOOP
            n := cardinality(bufs);
            IF tok = '(' THEN
                filters := filters || (rtrim(bufs[n]) LIKE '%?');
                bufs := bufs || ''::text;
            ELSIF tok = ')' AND n > 1 THEN
                tok := bufs[n];
                bufs[n - 1] := bufs[n - 1] || CASE WHEN filters[n]
                    THEN '((' || tok || ') || ((' || tok || ') is unknown))'
                    ELSE '(' || tok || ')' END;
                bufs := bufs[1:n - 1];
                filters := filters[1:n - 1];
            ELSE
                bufs[n] := bufs[n] || tok;
            END IF;
        END LOOP;
        IF cardinality(bufs) <> 1 THEN
            RETURN true;   -- not understood: hold
        END IF;
        widened := bufs[1];
    END IF;

    -- A predicate ($.a > 1) answers one boolean or null, even on an empty
    -- object; a path ($ ? (...)) answers items: it holds if there is one.
    probe := jsonb_path_query_array('{}', rule, '{}', true);
    predicate := jsonb_array_length(probe) = 1 AND jsonb_typeof(probe -> 0) IN ('boolean', 'null');

    FOR doc, path IN
        SELECT d, p FROM (VALUES (1, payload, written),
                                 (2, payload, CASE WHEN written LIKE 'strict %' THEN 'strict ' ELSE '' END || widened),
                                 (3, jsonb_strip_nulls(payload), 'strict ' || body),
                                 (4, jsonb_strip_nulls(payload), 'strict ' || widened)) AS v(o, d, p)
         WHERE p IS NOT NULL ORDER BY o
    LOOP
        IF predicate THEN
            answer := jsonb_path_match(doc, path::jsonpath, '{}', true);
        ELSE
            answer := jsonb_path_exists(doc, path::jsonpath, '{}', true);
        END IF;
        IF answer IS DISTINCT FROM false THEN
            RETURN true;   -- true, or unknown
        END IF;
    END LOOP;
    RETURN false;
EXCEPTION WHEN OTHERS THEN
    RETURN true;           -- cannot be evaluated on this payload: a person decides
END
$$;
COMMENT ON FUNCTION outbox.needs_approval(jsonb, jsonpath) IS
    'Whether a payload is held for approval: unless the rule is definitely false (as written, and in strict mode with null members as missing; filters widened to let unknown through), it holds.';

-- ---------------------------------------------------------------------------
-- 4. canonical numbers

-- jsonb prints numbers as plain decimals (no exponent), so a number has
-- another spelling only through trailing zeros after its point: remove them
-- outside strings. Escaped backslashes and quotes are set aside first (as
-- bytes 0x01 and 0x02, which jsonb's text never holds: it escapes every
-- control character), so that a string is "[^"]*". When no string holds a
-- point followed by a zero (one anchored match, which PostgreSQL decides
-- without backtracking), the text is rewritten as a whole: plain replace()
-- for the common X.0 and a regex for the rest; otherwise one regex that
-- steps over strings. Each step is linear in the text.
CREATE OR REPLACE FUNCTION outbox.canonical(doc jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    t text := doc::text;
BEGIN
    IF t !~ '[0-9]\.[0-9]*0' THEN
        RETURN doc;
    END IF;
    -- (the same rewrite as in outbox.fingerprint)
    t := replace(replace(t, '\\', E'\x01'), '\"', E'\x02');
    IF t ~ '^(?:[^"]*"[^"]*")*[^"]*"[^"]*\.[0-9]*0' THEN
        t := regexp_replace(t, '("[^"]*")|([0-9]\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g');
    ELSE
        t := regexp_replace(regexp_replace(replace(replace(replace(t, '.0,', ','), '.0]', ']'), '.0}', '}'),
                                           '([0-9]\.[0-9]*[1-9])0+\M', '\1', 'g'),
                            '\.0+\M', '', 'g');
    END IF;
    RETURN replace(replace(t, E'\x02', '\"'), E'\x01', '\\')::jsonb;
END
$$;
COMMENT ON FUNCTION outbox.canonical(jsonb) IS
    'Canonical form of a JSON document: numbers at their shortest scale (jsonb orders keys and drops whitespace). Linear in the text; any depth.';

-- The same on the text, without parsing the result back into jsonb (which
-- alone costs more than the rewrite): the canonical text is exactly what
-- outbox.canonical(...)::text prints.
CREATE OR REPLACE FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc  jsonb := payload;
    path text;
    t    text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    t := doc::text;
    IF t ~ '[0-9]\.[0-9]*0' THEN
        -- (the same rewrite as in outbox.canonical)
        t := replace(replace(t, '\\', E'\x01'), '\"', E'\x02');
        IF t ~ '^(?:[^"]*"[^"]*")*[^"]*"[^"]*\.[0-9]*0' THEN
            t := regexp_replace(t, '("[^"]*")|([0-9]\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g');
        ELSE
            t := regexp_replace(regexp_replace(replace(replace(replace(t, '.0,', ','), '.0]', ']'), '.0}', '}'),
                                               '([0-9]\.[0-9]*[1-9])0+\M', '\1', 'g'),
                                '\.0+\M', '', 'g');
        END IF;
        t := replace(replace(t, E'\x02', '\"'), E'\x01', '\\');
    END IF;
    RETURN sha256(convert_to(t, 'UTF8'));
END
$$;

-- ---------------------------------------------------------------------------
-- 5. the lost wake-up, bounded: next_due_ms sees enqueues in progress

-- As in 0009, and 0 while an enqueue for one of p_targets (enabled, its gate
-- open) has not ended: the relay claims again soon, with its back-off.
CREATE OR REPLACE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    due_ms bigint;
    name   text;
BEGIN
    due_ms := (SELECT CASE WHEN due IS NOT NULL
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
    IF due_ms = 0 THEN
        RETURN 0;
    END IF;
    -- An enqueue holds the shared form of its target's lock until its
    -- transaction ends (outbox.enqueue); the exclusive form is free only
    -- when none does. Taken at session level so that it is released at once.
    FOR name IN
        SELECT t.name FROM unnest(p_targets) AS u(name)
          JOIN outbox.targets t ON t.name = u.name AND t.enabled
          LEFT JOIN outbox.target_state s ON s.target = u.name
         WHERE s.target IS NULL OR coalesce(outbox.target_gate(s, t.rate_limit_per_s) <= now(), true)
    LOOP
        IF pg_try_advisory_lock(1330774017, hashtext(name)) THEN
            PERFORM pg_advisory_unlock(1330774017, hashtext(name));
        ELSE
            RETURN 0;
        END IF;
    END LOOP;
    RETURN due_ms;
END
$$;

-- ---------------------------------------------------------------------------
-- enqueue: the key alphabet (1), the target lock (2, 5), the depth bound (4)

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

    -- The target may not be deleted or renamed until this transaction ends
    -- (outbox.targets_guard_references), and a relay sees that an enqueue is
    -- in progress (outbox.next_due_ms). Taken before the INSERT below, which
    -- takes its snapshot after the lock (an expression, not a PERFORM: a
    -- tenth of the cost). A snapshot older than this (REPEATABLE READ,
    -- SERIALIZABLE) could still show a target deleted meanwhile: there the
    -- target row is share-locked first, which fails with 40001 if it was.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM outbox.targets WHERE name = p_target FOR KEY SHARE;
    END IF;
    locked := pg_advisory_xact_lock_shared(1330774017, hashtext(p_target)) IS NOT NULL;

    -- The path of a new key: every check of the careful path below that can
    -- pass or fail on the target row is a condition here; a row that is not
    -- inserted (unknown, disabled, too large, too deep, key already there)
    -- goes on to the careful path, which names the reason.
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
-- compensate: the key of the compensation is checked first (as in 0007 otherwise)

CREATE OR REPLACE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
    PERFORM outbox.refuse_key('compensate', p_key);

    SELECT * INTO original FROM outbox.intents WHERE key = p_original_key;
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

-- ---------------------------------------------------------------------------
-- 6. approve, reject: who was logged in, next to who they said they were

CREATE OR REPLACE FUNCTION outbox.approve(p_key text, p_by text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'approve');
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.approve: say who approves (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.approve: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'pending', next_attempt_at = now(), decided_by = p_by,
           decision_note = 'approved', updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('approved by %s (session user %s)', p_by, session_user));
    RETURN 'pending';
END
$$;

CREATE OR REPLACE FUNCTION outbox.reject(p_key text, p_by text, p_reason text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'reject');
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.reject: say who rejects (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.reject: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled', decided_by = p_by,
           last_error = 'rejected: ' || coalesce(p_reason, 'no reason given'),
           decision_note = p_reason, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('rejected by %s (session user %s): %s', p_by, session_user, coalesce(p_reason, '')));
    RETURN 'cancelled';
END
$$;

-- ---------------------------------------------------------------------------
-- Privileges: the new functions are internals; nobody calls them directly.
-- (CREATE OR REPLACE keeps the grants of the functions it replaces.)

REVOKE ALL ON FUNCTION outbox.refuse_key(text, text) FROM PUBLIC;
