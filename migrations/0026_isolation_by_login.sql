-- 0026: cancel says what happened, and agrees with cancel_run on what may be
-- cancelled; isolation by login, opt-in (issue 24, items 8 and 9).
--
-- 1. What may be cancelled. outbox.cancel took any pending intent whose
--    ambiguous flag was clear, and outbox.outcome then said "cancelled
--    before it was sent", also for an intent that had been sent: after a
--    status URL answered "not executed" (the flag is cleared and the row is
--    pending again), or after a 429. outbox.cancel_run took only intents with
--    no attempts row that reached or may have reached the target (request_sent
--    true or NULL), so the two disagreed, and neither took an intent that the
--    target had refused with a 4xx: a step of an abandoned run that got a 429
--    was sent again after its run was cancelled, and nothing could stop it.
--
--    Decided: both cancel exactly the intents that the target never acted
--    on, by the facts that outbox.redrive (0014) trusts: pending or awaiting
--    approval, not ambiguous, and no attempt that may have executed
--    (outbox.attempt_may_have_executed: each request was refused before a
--    byte was sent, or answered with a 4xx). cancel still also takes a
--    failed intent of an ordering group (0013). What a user expects of
--    "cancelled" is that the action did not happen and will not: an intent
--    the target refused is safe to cancel, and leaving it to be sent again
--    after its run was abandoned is what nobody expects. An intent whose
--    doubt only a status URL cleared is not cancelled, by either: the status
--    URL may have answered while the target was still working on the request
--    (why redrive leaves such rows too), and a wrong "cancelled" is worse than
--    a re-send. The re-send carries the key, so the target can deduplicate
--    it, and its outcome is then known and can be compensated. Cancelling it
--    would record "did not act" for an action that may yet complete, and a
--    cancelled intent cannot be compensated: the caller would be told
--    nothing happened, and might do it again under a new key. cancel refuses
--    it with OR007 and says so ("pending after 2 attempts were sent: the
--    target's status URL reported that none executed (it may have answered
--    while the target was still working on a request)"); cancel_run leaves
--    it, as it did.
--
--    What happened is said everywhere: cancel and cancel_run append to the
--    reason (last_error) and to the history row what the attempts were,
--    when any reached the target ("cancelled: run abandoned (after 1 attempt
--    was sent: the target refused it with HTTP 429 and did not act)");
--    outbox.outcome's message is "cancelled before it was sent" only when no
--    request reached the target, else "cancelled after ..." with the same
--    words, read from the attempts (outbox.delivery_summary), so that the
--    intents cancelled before this migration are told right too. A
--    tombstone does not keep the attempts: a pruned cancelled intent reads
--    "cancelled (the target did not act)". compensate's hint for a pending
--    original says "cancel it instead" only when cancel would take it.
--
-- 2. Isolation by login. Every login granted outbox_app could read any key's
--    saved response (outcome, enqueue of an existing key), its trace context,
--    its compensations, and cancel any run. Now an admin may isolate a login:
--        INSERT INTO outbox.isolated_logins (login, note) VALUES ('billing_svc', 'PCI');
--    An isolated login (the session's login, session_user: SET ROLE does not
--    change it, and SECURITY DEFINER functions do not either) sees and acts
--    on the intents it enqueued, and only those, in every function that
--    outbox_app may call and that reads or changes an intent:
--      outcome, traceparent_of, compensations, links     another login's key
--          reads as a key that does not exist (no row, NULL), also once
--          pruned (the tombstone keeps the login); an ordering group's head
--          of another login is not named ("waiting for its turn in ordering
--          group g, behind an intent of another login")
--      enqueue, and compensate with a new key     another login's key, live
--          or remembered, is refused: OR001 "key 'k' is already used by
--          another login", before any other comparison, so the refusal says
--          nothing of its target, payload, state or response
--      compensate     another login's intent as the original: OR008, as for
--          a key that does not exist
--      cancel_run     cancels only the login's own intents of the run (run
--          ids, like keys and ordering keys, are names every login shares)
--    The pure functions outbox_app may call (canonical, fingerprint,
--    fingerprint_doc, differing_fields, needs_approval, visible_status) read
--    no intent.
--    What an attacker learns: a read of another login's key answers exactly
--    as for a key that was never used, so reads tell nothing. A key is a name
--    chosen by the caller and there is one key space (the relay sends the key
--    to the target as it was enqueued): an enqueue cannot pretend that a
--    taken key is free, so it refuses, and tells only that the key is taken.
--    That much any login could learn before (an enqueue in a transaction it
--    rolls back); isolation adds nothing to it and takes away everything
--    else. Services avoid collisions by starting their keys with their name.
--    Logins not isolated keep today's behaviour exactly, also towards the
--    intents of isolated logins: isolation confines the isolated caller, so
--    services shield each other when all of them are isolated.
--    A login that can read every intent anyway is never isolated, whatever
--    the table says: a member of outbox_operator (so outbox_admin, the CLI's
--    status, /ui) or of outbox_relay (the relay claims every payload, and its
--    admin port answers GET /v1/intents/{key} through outcome). Intents
--    enqueued before this migration have no login (NULL) and belong to no
--    isolated login: isolate a service once its older intents are settled,
--    or set their enqueued_by as the owner.
--
--    Cost: the login is stored by the column's DEFAULT session_user, one
--    assignment in enqueue's INSERT (the fast path is otherwise unchanged:
--    a new key never asks whether its caller is isolated). A read or an
--    enqueue of the caller's own key compares one text; only a key of
--    another login looks the caller up in outbox.isolated_logins (a primary
--    key probe) and, when listed, checks its two memberships. Each intent
--    and tombstone carries its login's name (a short text).
--
-- Locks: ALTER TABLE intents and tombstones ADD COLUMN without a default
-- take their ACCESS EXCLUSIVE lock for a moment (catalog only, no rewrite);
-- SET DEFAULT likewise. The functions take no other locks than before.

ALTER TABLE outbox.intents ADD COLUMN enqueued_by text;
-- The default only after the column exists: existing rows stay NULL (a default
-- given in ADD COLUMN would be evaluated once and stamp them with the owner).
ALTER TABLE outbox.intents ALTER COLUMN enqueued_by SET DEFAULT session_user;
COMMENT ON COLUMN outbox.intents.enqueued_by IS
    'The login (session_user) whose enqueue or compensate made the intent; NULL: enqueued before 0026. An isolated login (outbox.isolated_logins) sees only its own.';

ALTER TABLE outbox.tombstones ADD COLUMN enqueued_by text;
COMMENT ON COLUMN outbox.tombstones.enqueued_by IS
    'intents.enqueued_by of the pruned intent (NULL: pruned before 0026, or enqueued before it).';

CREATE TABLE outbox.isolated_logins (
    login       text PRIMARY KEY CHECK (login <> ''),
    isolated_at timestamptz NOT NULL DEFAULT now(),
    isolated_by text NOT NULL DEFAULT session_user,
    note        text
);
COMMENT ON TABLE outbox.isolated_logins IS
    'Logins that see and act on only the intents they enqueued (outcome, enqueue, compensate, compensations, links, traceparent_of, cancel_run); written by admins. Members of outbox_operator or outbox_relay are never isolated.';

-- ---------------------------------------------------------------------------
-- isolation: who is isolated, and what it may see

-- Whether the session's login is isolated: listed, and not one that reads every
-- intent anyway. Called only from the SECURITY DEFINER functions below (as the
-- owner), and only for a key of another login.
CREATE FUNCTION outbox.isolated() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.isolated_logins l WHERE l.login = session_user::text)
           AND NOT pg_catalog.pg_has_role(session_user, 'outbox_operator', 'MEMBER')
           AND NOT pg_catalog.pg_has_role(session_user, 'outbox_relay', 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.isolated() IS
    'Whether the session''s login is isolated (outbox.isolated_logins), unless it is a member of outbox_operator or outbox_relay (0026).';

-- Whether the caller may see an intent (or tombstone) enqueued by p_enqueued_by:
-- its own, or any when it is not isolated. Never NULL. The own case is decided
-- without a look at outbox.isolated_logins.
CREATE FUNCTION outbox.caller_may_see(p_enqueued_by text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT p_enqueued_by IS NOT DISTINCT FROM session_user::text OR NOT outbox.isolated()
$$;
COMMENT ON FUNCTION outbox.caller_may_see(text) IS
    'true for an intent the caller''s login enqueued, or for any when the login is not isolated (0026).';

-- The refusal of another login's key where a key must be free (enqueue,
-- compensate): it names the key the caller chose, nothing of the intent.
CREATE FUNCTION outbox.refuse_others_key(p_function text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'outbox.%: key % is already used by another login', p_function, outbox.quote_key(p_key)
        USING ERRCODE = 'OR001',
              DETAIL = 'This login is isolated (outbox.isolated_logins): it sees and acts on only the intents it enqueued, and is not told what another login''s key is for or how it ended.',
              HINT = 'An idempotency key names one action; use a new key, e.g. one that starts with your service''s name.';
END
$$;
COMMENT ON FUNCTION outbox.refuse_others_key(text, text) IS
    'Raises OR001 for a key another login enqueued, called by an isolated login that needs the key free (0026).';

-- ---------------------------------------------------------------------------
-- 1. what the attempts of an intent amount to

-- sent: requests that reached or may have reached the target (deliveries
-- whose request_sent is not false, lease take-overs included); may_have_executed:
-- attempts rows that leave open that the target acted
-- (outbox.attempt_may_have_executed, 0014); status_url_said_no: a status check
-- answered "not executed"; story: what happened in words, NULL when no request
-- reached the target. A person's "failed" is found by the history row that
-- outbox.resolve writes ('resolved failed: ...').
CREATE FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer,
                                        OUT status_url_said_no boolean, OUT story text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.sent, s.doubtful, s.url_no,
           CASE WHEN s.sent > 0 THEN
               CASE WHEN s.sent = 1 THEN '1 attempt was sent: ' ELSE s.sent || ' attempts were sent: ' END
               || CASE WHEN s.doubtful = 0 AND s.sent = 1
                       THEN format('the target refused it with HTTP %s and did not act', coalesce(s.last_http::text, '4xx'))
                       WHEN s.doubtful = 0
                       THEN format('the target refused each, the last with HTTP %s, and did not act',
                                   coalesce(s.last_http::text, '4xx'))
                       WHEN s.url_no AND s.sent = 1 THEN 'the target''s status URL reported that it did not execute'
                       WHEN s.url_no THEN 'the target''s status URL reported that none executed'
                       WHEN s.person_no THEN 'a person resolved that the target did not act'
                       WHEN s.sent = 1 THEN 'it may have executed'
                       ELSE 'one of them may have executed' END
           END
      FROM (SELECT count(*) FILTER (WHERE x.delivery)::integer AS sent,
                   count(*) FILTER (WHERE outbox.attempt_may_have_executed(x.class, x.request_sent, x.http_status))::integer
                       AS doubtful,
                   (array_agg(x.http_status ORDER BY x.id DESC) FILTER (WHERE x.delivery))[1] AS last_http,
                   coalesce(bool_or(x.class = 'reconciled_not_executed'), false) AS url_no,
                   coalesce(bool_or(x.class = 'resolved' AND x.error LIKE 'resolved failed:%'), false) AS person_no
              FROM (SELECT a.id, a.class, a.request_sent, a.http_status, a.error,
                           a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict',
                                       'permanent_failure')
                           AND a.request_sent IS DISTINCT FROM false AS delivery
                      FROM outbox.attempts a
                     WHERE a.intent_id = p_intent) x) s
$$;
COMMENT ON FUNCTION outbox.delivery_summary(bigint) IS
    'What the attempts of an intent amount to: requests that reached (or may have reached) the target, attempts that may have executed, a status URL''s "not executed", and the story in words (NULL: nothing reached the target) (0026).';

-- cancel (0013): what may be cancelled is what cancel_run cancels (see 1
-- above), and the reason says what the attempts were.
CREATE OR REPLACE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'cancel');   -- 0013: the group's settle lock too
    d   record;   -- 0026: outbox.delivery_summary
BEGIN
    IF (row.state NOT IN ('pending', 'awaiting_approval') OR row.ambiguous)
       AND NOT (row.state = 'failed' AND row.ordering_key IS NOT NULL) THEN   -- 0013
        RAISE EXCEPTION 'outbox.cancel: key % is %, cannot cancel', quote_literal(p_key),
                        CASE WHEN row.ambiguous AND row.state = 'pending' THEN 'pending after an ambiguous attempt (it may have executed)'
                             ELSE row.state::text END
            USING ERRCODE = 'OR007', HINT = 'Only intents that were never sent (or, in an ordering group, that failed) can be cancelled.';
    END IF;
    SELECT * INTO d FROM outbox.delivery_summary(row.id);
    IF row.state <> 'failed' AND d.may_have_executed > 0 THEN   -- 0026
        RAISE EXCEPTION 'outbox.cancel: key % is % after %, cannot cancel', quote_literal(p_key), row.state,
                        d.story || CASE WHEN d.status_url_said_no
                                        THEN ' (it may have answered while the target was still working on a request)'
                                        ELSE '' END
            USING ERRCODE = 'OR007',
                  HINT = 'An attempt may have executed: it is sent again (with its key, if the target takes one), and once its outcome is known it can be compensated (outbox.compensate). Only an intent the target never acted on can be cancelled: never sent, or refused with a 4xx (or, in an ordering group, failed).';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled',
           last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given')
                        || CASE WHEN row.state = 'failed' THEN ' (it had failed: ' || coalesce(row.last_error, 'no reason recorded') || ')'
                                ELSE coalesce(' (after ' || d.story || ')', '') END,   -- 0013, 0026
           decision_note = p_reason, decided_by = session_user, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                 'cancelled: ' || coalesce(p_reason, '') || coalesce(' (after ' || d.story || ')', ''));   -- 0026
    IF row.ordering_key IS NOT NULL THEN   -- 0013
        PERFORM outbox.ordering_release(ARRAY[row.ordering_key]);
    END IF;
    RETURN 'cancelled';
END
$$;
COMMENT ON FUNCTION outbox.cancel(text, text) IS
    'Cancel an intent the target never acted on (pending or awaiting approval, not ambiguous, no attempt that may have executed: never sent, or refused with a 4xx), or a failed intent of an ordering group (the group moves on). OR007 otherwise, saying why.';

-- cancel_run (0013): the same rule as cancel (an intent refused with a 4xx is
-- cancelled too); an isolated login cancels only its own intents of the run.
CREATE OR REPLACE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    candidate bigint;
    grp       text;      -- 0013
    groups    text[];    -- 0013
    locked    boolean := false;   -- 0013
    row       outbox.intents;
    cancelled integer := 0;
    everyone  boolean := NOT outbox.isolated();   -- 0026: else only the caller's own intents
    story     text;      -- 0026
BEGIN
    IF p_run_id IS NULL OR p_run_id = '' THEN
        RAISE EXCEPTION 'outbox.cancel_run: say which run (p_run_id)' USING ERRCODE = '22023';
    END IF;
    -- Lock the candidates (in id order: two cancel_runs cannot deadlock), waiting for a
    -- relay that is recording one of them. Once a row is locked, the UPDATE below looks
    -- again with a fresh snapshot, so it sees the attempts row a relay committed with the
    -- change we waited for; while we hold the lock, no relay can claim the row.
    -- 0013: unordered candidates first (waiting for their locks), then the ordered
    -- ones, after the settle locks of their groups (all at once, in one order), and
    -- only rows nobody else holds: a relay recording one waits for those locks.
    SELECT array_agg(DISTINCT i.ordering_key) INTO groups FROM outbox.intents i
     WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
       AND NOT i.ambiguous AND i.compensates IS NULL AND i.ordering_key IS NOT NULL
       AND (everyone OR i.enqueued_by = session_user::text);   -- 0026
    FOR candidate, grp IN
        SELECT i.id, i.ordering_key FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
           AND (everyone OR i.enqueued_by = session_user::text)   -- 0026
         ORDER BY i.ordering_key IS NOT NULL, i.id
    LOOP
        IF grp IS NULL THEN   -- 0013
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
        -- 0026: no attempt that may have executed (was: no attempt that reached or may
        -- have reached the target), as outbox.cancel; what they were goes into the reason.
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
                                         || coalesce(' (after ' || story || ')', ''));   -- 0026
            cancelled := cancelled + 1;
        END IF;
    END LOOP;
    IF locked THEN   -- 0013
        PERFORM outbox.ordering_release(groups);
    END IF;
    RETURN cancelled;
END
$$;
COMMENT ON FUNCTION outbox.cancel_run(text, text) IS
    'Cancel the intents of a run that the target never acted on (pending or awaiting approval, not ambiguous, no attempt that may have executed: never sent, or refused with a 4xx); compensations are kept; an isolated login cancels only its own. Returns how many.';

-- ---------------------------------------------------------------------------
-- 2. reads: another login's key reads as a key that does not exist

-- outcome (0023): a cancelled intent says whether anything was sent; an isolated
-- login reads only its own keys and tombstones.
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
               WHEN 'cancelled' THEN coalesce('cancelled after ' || (SELECT d.story FROM outbox.delivery_summary(i.id) d),
                                              'cancelled before it was sent')   -- 0026
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key
       AND outbox.caller_may_see(i.enqueued_by);   -- 0026
    IF FOUND THEN
        RETURN;
    END IF;
    stone := outbox.tombstone_of(p_key);
    IF stone.intent_id IS NULL OR NOT outbox.caller_may_see(stone.enqueued_by) THEN   -- 0026
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
COMMENT ON FUNCTION outbox.outcome(text) IS
    'The agent-visible outcome of a key, also of a pruned one while its tombstone lasts: no row for an unknown (or forgotten) key, or, for an isolated login, another login''s.';

-- ordering_waits_for (0013): an isolated login is not told another login's key.
CREATE OR REPLACE FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT CASE WHEN outbox.caller_may_see(h.enqueued_by)
                                 THEN format('waiting for %s (%s), the head of ordering group %s: it is sent once that one succeeded or was cancelled',
                                             h.key, outbox.visible_status(h.state, h.ambiguous), p_group)
                                 ELSE format('waiting for its turn in ordering group %s, behind an intent of another login',
                                             p_group) END
                       FROM outbox.ordering_head_before(p_group, p_id) h WHERE h.id IS NOT NULL),
                    'waiting for its turn in ordering group ' || p_group)
$$;

CREATE OR REPLACE FUNCTION outbox.traceparent_of(p_key text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT i.traceparent FROM outbox.intents i
     WHERE i.key = p_key AND outbox.caller_may_see(i.enqueued_by)   -- 0026
$$;

CREATE OR REPLACE FUNCTION outbox.compensations(p_key text)
RETURNS TABLE (key text, target text, status text, state outbox.intent_state, attempts integer,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.key, c.target, outbox.visible_status(c.state, c.ambiguous), c.state, c.attempts,
           c.created_at, c.updated_at
      FROM outbox.intents c
     WHERE c.compensates = p_key
       AND outbox.caller_may_see(c.enqueued_by)   -- 0026
     ORDER BY c.id
$$;

CREATE OR REPLACE FUNCTION outbox.links(p_key text)
RETURNS TABLE (key text, relation text, other_key text, other_status text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT l.key, l.relation, l.other_key, l.other_status
      FROM (SELECT i.key, 'compensates'::text AS relation, o.key AS other_key,
                   outbox.visible_status(o.state, o.ambiguous) AS other_status, 0 AS side, o.id
              FROM outbox.intents i
              JOIN outbox.intents o ON o.key = i.compensates
             WHERE i.key = p_key
               AND outbox.caller_may_see(i.enqueued_by) AND outbox.caller_may_see(o.enqueued_by)   -- 0026
            UNION ALL
            SELECT p_key, 'compensated_by', c.key, outbox.visible_status(c.state, c.ambiguous), 1, c.id
              FROM outbox.intents c
             WHERE c.compensates = p_key
               AND outbox.caller_may_see(c.enqueued_by)) AS l   -- 0026
     ORDER BY l.side, l.id
$$;

-- ---------------------------------------------------------------------------
-- 3. writes: another login's key is taken, and says no more

-- enqueue (0021): unchanged but for the refusal of another login's key, which an
-- isolated caller meets before anything is compared with the existing intent.
-- The login itself is stored by intents.enqueued_by's DEFAULT.
CREATE OR REPLACE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                               p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
                               p_ordering_key text DEFAULT NULL,   -- 0013
                               p_traceparent text DEFAULT NULL)    -- 0016
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
    IF existing.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated() THEN
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
$$;

-- enqueue_remembered (0012): a remembered key of another login, likewise.
CREATE OR REPLACE FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea,
                                                     s outbox.tombstones)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    result outbox.enqueue_result;
BEGIN
    IF s.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated() THEN   -- 0026
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

-- compensate (0012): an isolated login compensates only its own intents, and
-- another login's key is taken; the hint for a pending original says "cancel
-- it instead" only when cancel would take it.
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
-- 4. retention: a tombstone keeps its intent's login

-- prune_ids (0024): as before, with enqueued_by.
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
        RETURNING i.id, i.key, i.target, i.fingerprint, i.state, i.response_status, i.updated_at,
                  i.enqueued_by   -- 0026
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

-- ---------------------------------------------------------------------------
-- grants: the new functions are internals (SECURITY DEFINER callers only);
-- admins write the list, operators read it.

REVOKE ALL ON FUNCTION outbox.isolated(), outbox.caller_may_see(text), outbox.refuse_others_key(text, text),
                       outbox.delivery_summary(bigint)
       FROM PUBLIC;
REVOKE ALL ON outbox.isolated_logins FROM PUBLIC;
GRANT SELECT ON outbox.isolated_logins TO outbox_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.isolated_logins TO outbox_admin;
