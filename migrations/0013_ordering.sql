-- 0013: ordered delivery per ordering key (issue 14; docs/design.md, "Ordered delivery").
--
-- outbox.enqueue(..., p_ordering_key => 'run-7f3a') puts an intent in a group.
-- The intents of a group, whatever their targets, are sent one at a time, in
-- the order in which their enqueuing transactions committed: an intent is
-- sent only once every earlier intent of its group is succeeded or
-- cancelled. NULL (the default) is unordered, as before, and costs nothing
-- new on the paths it takes.
--
-- New SQLSTATE (class "OR", as in 0002 and 0010):
--   OR011 ordering key outside its alphabet (empty, over 255 bytes, or a control character)
--
-- 1. Columns. intents.ordering_key (the group; NULL: unordered) and
--    intents.not_before (the caller's p_not_before of an intent that had to
--    wait its turn; NULL otherwise). An intent's place in its group is its
--    id: the INSERT that draws the id runs after the enqueue took the group's
--    lock (2), so ids follow commit order within a group.
--    The group's live intents (neither succeeded nor cancelled) are in the
--    partial index intents_ordering (ordering_key, id); its first entry is
--    the group's head. Unordered rows have no entry.
--
-- 2. Enqueue order is commit order. outbox.ordering_groups has one row per
--    group with live intents. An ordered enqueue upserts that row before it
--    inserts the intent, and holds its row lock until it commits: a second
--    enqueue into the same group waits for the first to end, so it draws a
--    larger id and its row comes later in the group. At REPEATABLE READ and
--    SERIALIZABLE, the upsert of a row changed after the snapshot fails with
--    40001 (the snapshot could not see the earlier intent). A group's row is
--    deleted once its last live intent settles (and made again by the next
--    enqueue), so the table follows the live groups, not the history.
--    A transaction that enqueues into several groups locks them in the order
--    of its enqueues: two that lock the same two groups in opposite orders
--    deadlock (40P01, retry), as with any two rows; enqueue into groups in
--    one order (sorted) to avoid it.
--
-- 3. Only the head is claimable, and outbox.claim is unchanged. An intent
--    enqueued behind a live one is held: pending with next_attempt_at =
--    'infinity'. Claims read intents_due (target, next_attempt_at) only up to
--    now(), and next_due_ms only below 'infinity', so held rows are never
--    read by the relay, and unordered rows pay nothing for them. A group
--    whose head is in flight has no other row a relay could claim: a group
--    is delivered by one relay at a time, and a slow group holds back only
--    its own later intents, never another group (no head-of-line blocking).
--
-- 4. The turn passes when the head settles. Whoever makes an intent
--    succeeded or cancelled (outbox.record, resolve, cancel, reject,
--    cancel_run) then calls outbox.ordering_release, which makes the group's
--    new head due if it was held: "release". The head blocks while it is
--    pending (a retry), in flight, unknown, awaiting approval or failed;
--    a cancelled intent is skipped.
--    Two races, both closed:
--    a. Settling the head and settling the next intent at once (a record and
--       an operator's cancel) could each see the other's intent still live
--       and release nothing. Everyone who settles intents of a group takes
--       the group's settle lock, a transaction-level advisory lock (class
--       1330774019, 0x4F520003, key hashtext(group)), and only then reads
--       the group. The lock order cannot deadlock: a held row is locked only
--       by a holder of its group's settle lock, and while holding it one
--       waits only for held rows (the release UPDATE). A record holds the
--       in-flight rows it settles before it asks for the lock; an operator
--       takes it before locking a held row and after locking any other.
--       Several groups are locked in the order of their hash.
--    b. An enqueue decides "held" when it inserts, but the head may settle
--       before the enqueue commits: the settling transaction does not see the
--       new row, and the new row would stay held. So the group is looked at
--       again at commit (the deferred constraint trigger ordering_groups_turn,
--       on ordering_groups, which only ordered enqueues write): its earliest
--       live intent is share-locked, so that a transaction settling it waits
--       for this commit and then sees the new rows; if that intent is held
--       (everything before it settled meanwhile), it is released there.
--       The share lock lasts from the commit-time check to the commit, not
--       the caller's transaction: a record never waits for an application's
--       open transaction. (A transaction that enqueues into several groups
--       takes these share locks one group after the other; against a record
--       settling the heads of two of those groups at that moment this can,
--       rarely, end in a deadlock error: the relay retries its record, the
--       application its transaction. Enqueueing into groups in a fixed order
--       does not avoid it; few groups per transaction keeps it rare.)
--
-- 5. A blocked group is visible, never silently skipped.
--    - outbox.stuck lists a group's head that is failed, unknown or awaiting
--      approval with the reason "blocks N later intents of group G" (plus
--      the usual reason, if it has one), and a held intent whose turn came
--      but that was not released (only after manual changes to the table;
--      outbox.retry_now releases it).
--    - outbox.outcome of a held intent: status pending, message "waiting for
--      KEY (STATUS), the head of group G".
--    - The ways out are the existing decisions: resolve (succeeded) or cancel
--      the head, or cancel_run. cancel now also takes a failed intent of a
--      group: the target did not act on it, and cancelling it lets the group
--      move on (for an unordered failed intent it refuses, as before).
--      resolve to failed keeps the group blocked: intent n+1 goes only after
--      intent n succeeded or was cancelled.
--    - approve of an intent that is not its group's head makes it pending
--      and held; retry_now refuses a held intent (it names the head).
--
-- 6. Retention (0012): outbox.prune keeps a failed intent that blocks later
--    intents of its group; it goes once the group moved on past it.
--
-- Cost on the unordered paths: claim is unchanged; enqueue evaluates one
-- more IS NOT NULL and inserts two NULL columns; intents has no new trigger
-- (the commit-time check is on ordering_groups); record returns one more
-- column per row; intents_ordering has no entry for them; next_due_ms
-- stops its index range below 'infinity'. Measured: docs/design.md,
-- "Ordered delivery".
--
-- A relay of the previous release records successes without releasing the
-- next intent: after a rollback, ordered groups stop after their head
-- (listed in outbox.stuck), and outbox.retry_now releases them.

-- ---------------------------------------------------------------------------
-- 1. columns, index, groups

ALTER TABLE outbox.intents
    ADD COLUMN ordering_key text,
    ADD COLUMN not_before timestamptz;
COMMENT ON COLUMN outbox.intents.ordering_key IS
    'Group of intents delivered one at a time in enqueue (commit) order; NULL = unordered. The place in the group is the id.';
COMMENT ON COLUMN outbox.intents.not_before IS
    'p_not_before of an ordered intent enqueued behind a live one: applied when its turn comes (NULL otherwise).';

-- The live intents of each group, in order: the first is the head. Building
-- it reads the table once under the migration's SHARE lock (no row has an
-- ordering key yet, so it is empty).
CREATE INDEX intents_ordering ON outbox.intents (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state NOT IN ('succeeded', 'cancelled');

CREATE TABLE outbox.ordering_groups (
    ordering_key    text PRIMARY KEY,
    enqueued        bigint NOT NULL DEFAULT 1,
    last_enqueue_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.ordering_groups IS
    'One row per ordering group with live intents: an enqueue holds its row lock until it commits, so enqueues of one group commit in the order of their ids. Deleted when the group has no live intent.';

-- ---------------------------------------------------------------------------
-- 2. enqueue's side: the place in the group (outbox.enqueue itself is below)

-- Called by outbox.enqueue for an ordered intent, before its INSERT. Checks
-- the ordering key, takes the group's lock (the row of ordering_groups,
-- until the caller's transaction ends) and says whether the new intent must
-- wait: true when the group has a live intent (all of them come before it).
-- A key that exists already takes no place: the INSERT finds it.
CREATE FUNCTION outbox.ordering_place(p_key text, p_group text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_group = '' OR octet_length(p_group) > 255 OR p_group ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'outbox.enqueue: ordering key % for key % is %', quote_literal(p_group), quote_literal(p_key),
                        CASE WHEN p_group = '' THEN 'empty'
                             WHEN octet_length(p_group) > 255 THEN octet_length(p_group) || ' bytes long; the limit is 255'
                             ELSE 'not printable (it contains a control character)' END
            USING ERRCODE = 'OR011',
                  HINT = 'An ordering key names a group of intents sent one at a time, e.g. the run id; NULL for unordered.';
    END IF;
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE key = p_key) THEN
        RETURN false;
    END IF;
    INSERT INTO outbox.ordering_groups AS g (ordering_key) VALUES (p_group)
    ON CONFLICT (ordering_key) DO UPDATE SET enqueued = g.enqueued + 1, last_enqueue_at = now();
    -- A new statement: at READ COMMITTED it sees every intent of the group
    -- committed before the lock above was granted.
    RETURN EXISTS (SELECT 1 FROM outbox.intents l
                    WHERE l.ordering_key = p_group AND l.state NOT IN ('succeeded', 'cancelled'));
END
$$;

-- At the commit of a transaction that enqueued into a group (item 4b): the
-- group's earliest live intent is share-locked if it is being worked on (so
-- that whoever settles it waits for this commit, and then sees and releases
-- the intents enqueued here), or released here if it is held (its
-- predecessors settled while this transaction was open). A deferred
-- constraint trigger on ordering_groups, which only ordered enqueues write:
-- intents keeps no row-level trigger, and unordered enqueues fire nothing.
CREATE FUNCTION outbox.ordering_turn_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    head_id bigint;
    held    boolean;
BEGIN
    SELECT h.id, h.state = 'pending' AND h.next_attempt_at = 'infinity' INTO head_id, held
      FROM outbox.intents h
     WHERE h.ordering_key = NEW.ordering_key AND h.state NOT IN ('succeeded', 'cancelled')
     ORDER BY h.id
     LIMIT 1
       FOR SHARE;
    IF held THEN
        UPDATE outbox.intents i
           SET next_attempt_at = greatest(now(), coalesce(i.not_before, now())), updated_at = now()
         WHERE i.id = head_id AND i.state = 'pending' AND i.next_attempt_at = 'infinity';
    ELSIF head_id IS NULL THEN
        -- Nothing live in the group (the intent was answered from a tombstone and taken
        -- back, say): its row goes. This transaction holds the row's lock.
        DELETE FROM outbox.ordering_groups g WHERE g.ordering_key = NEW.ordering_key;
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER ordering_groups_turn AFTER INSERT OR UPDATE ON outbox.ordering_groups
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    EXECUTE FUNCTION outbox.ordering_turn_at_commit();

-- ---------------------------------------------------------------------------
-- 4. the turn passes

-- The settle locks of these groups (item 4a), in the order of their hash.
-- Re-entrant: taking one twice in a transaction is harmless.
CREATE FUNCTION outbox.ordering_lock_groups(p_groups text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h integer;
BEGIN
    FOR h IN SELECT DISTINCT hashtext(g) FROM unnest(p_groups) AS g WHERE g IS NOT NULL ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1330774019, h);
    END LOOP;
END
$$;

-- After intents of these groups settled: the settle locks, then each group's
-- head made due if it is held. A group left with no live intent loses its
-- row in ordering_groups, unless an enqueue holds it (it is adding one).
-- Returns how many intents were released.
CREATE FUNCTION outbox.ordering_release(p_groups text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    released integer;
    emptied  text[];
BEGIN
    PERFORM outbox.ordering_lock_groups(p_groups);
    -- New statements from here on: they see what settled before the locks were granted.
    UPDATE outbox.intents i
       SET next_attempt_at = greatest(now(), coalesce(i.not_before, now())), updated_at = now()
      FROM (SELECT DISTINCT g FROM unnest(p_groups) AS g WHERE g IS NOT NULL) AS u
     CROSS JOIN LATERAL (SELECT h.id FROM outbox.intents h
                          WHERE h.ordering_key = u.g AND h.state NOT IN ('succeeded', 'cancelled')
                          ORDER BY h.id LIMIT 1) AS head
     WHERE i.id = head.id AND i.state = 'pending' AND i.next_attempt_at = 'infinity';
    GET DIAGNOSTICS released = ROW_COUNT;

    SELECT array_agg(e.ordering_key) INTO emptied
      FROM (SELECT o.ordering_key FROM outbox.ordering_groups o
             WHERE o.ordering_key = ANY (p_groups)
               AND NOT EXISTS (SELECT 1 FROM outbox.intents l
                                WHERE l.ordering_key = o.ordering_key AND l.state NOT IN ('succeeded', 'cancelled'))
               FOR UPDATE SKIP LOCKED) AS e;
    IF emptied IS NOT NULL THEN
        -- Locked: no enqueue can add to these groups now; look again with a new snapshot.
        DELETE FROM outbox.ordering_groups o
         WHERE o.ordering_key = ANY (emptied)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents l
                            WHERE l.ordering_key = o.ordering_key AND l.state NOT IN ('succeeded', 'cancelled'));
    END IF;
    RETURN released;
END
$$;

-- An operator's decision on one row (item 4a's lock order): for a held row
-- the group's settle lock first, then the row; for any other row the row
-- first (a relay recording it holds it and then asks for the settle lock),
-- then the settle lock. Unordered rows: outbox.locked_intent, as before.
CREATE FUNCTION outbox.ordering_locked_intent(p_key text, p_operation text) RETURNS outbox.intents
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    grp  text;
    held boolean;
    row  outbox.intents;
BEGIN
    SELECT i.ordering_key, i.state = 'pending' AND i.next_attempt_at = 'infinity' INTO grp, held
      FROM outbox.intents i WHERE i.key = p_key;
    IF grp IS NOT NULL AND held THEN
        PERFORM outbox.ordering_lock_groups(ARRAY[grp]);
    END IF;
    row := outbox.locked_intent(p_key, p_operation);
    IF row.ordering_key IS NOT NULL THEN
        PERFORM outbox.ordering_lock_groups(ARRAY[row.ordering_key]);
    END IF;
    RETURN row;
END
$$;

-- The live intent of the same group with the smallest id below p_id: what
-- intent p_id waits for (NULL: none, it is the head or unordered).
CREATE FUNCTION outbox.ordering_head_before(p_group text, p_id bigint) RETURNS outbox.intents
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT h.* FROM outbox.intents h
     WHERE p_group IS NOT NULL AND h.ordering_key = p_group AND h.id < p_id
       AND h.state NOT IN ('succeeded', 'cancelled')
     ORDER BY h.id LIMIT 1
$$;

-- ---------------------------------------------------------------------------
-- 3. next_due_ms: as in 0010, the range of due rows stops below 'infinity'
--    (held rows; their min would be 'infinity', an interval out of range)

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
                                       WHERE i.state = 'pending' AND i.target = u.name
                                         AND i.next_attempt_at < 'infinity') d   -- 0013: held rows are not due
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
-- 4. record (as in 0011): a success passes its group's turn

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
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o, grp IN
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
        RETURNING u.ord, CASE WHEN u.state = 'succeeded' THEN i.ordering_key END   -- 0013
    LOOP
        applied[o] := true;
        updated := updated + 1;
        IF grp IS NOT NULL THEN          -- 0013
            settled := settled || grp;
        END IF;
    END LOOP;

    -- Every outcome into the history, in the order the relay saw them; not
    -- for an intent deleted meanwhile (its history would break the reference).
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                 error, latency_ms, response_body, key_sent, recorded)
    SELECT x.id, x.attempt, p_relay, x.class, x.sent, x.http, x.error, x.latency_ms,
           left(x.body, 4096), x.key_sent, applied[x.ord]
      FROM unnest(p_ids, p_attempts, p_classes, p_sent, p_http, p_errors, p_latency_ms, p_bodies,
                  p_key_sent) WITH ORDINALITY
           AS x(id, attempt, class, sent, http, error, latency_ms, body, key_sent, ord)
     WHERE EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = x.id)
     ORDER BY x.ord;

    -- 0013: the next intent of each group whose intent succeeded is due now.
    IF settled IS NOT NULL THEN
        PERFORM outbox.ordering_release(settled);
    END IF;
    RETURN updated;
END
$$;

-- ---------------------------------------------------------------------------
-- 5. decisions: the group moves on when its head is resolved succeeded or
--    cancelled; a failed intent of a group may be cancelled

-- cancel (0004): also a failed intent of an ordering group (the target did
-- not act on it; cancelling it lets the group move on).
CREATE OR REPLACE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'cancel');   -- 0013: the group's settle lock too
BEGIN
    IF (row.state NOT IN ('pending', 'awaiting_approval') OR row.ambiguous)
       AND NOT (row.state = 'failed' AND row.ordering_key IS NOT NULL) THEN   -- 0013
        RAISE EXCEPTION 'outbox.cancel: key % is %, cannot cancel', quote_literal(p_key),
                        CASE WHEN row.ambiguous AND row.state = 'pending' THEN 'pending after an ambiguous attempt (it may have executed)'
                             ELSE row.state::text END
            USING ERRCODE = 'OR007', HINT = 'Only intents that were never sent (or, in an ordering group, that failed) can be cancelled.';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled',
           last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given')
                        || CASE WHEN row.state = 'failed' THEN ' (it had failed: ' || coalesce(row.last_error, 'no reason recorded') || ')'
                                ELSE '' END,   -- 0013
           decision_note = p_reason, decided_by = session_user, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'cancelled: ' || coalesce(p_reason, ''));
    IF row.ordering_key IS NOT NULL THEN   -- 0013
        PERFORM outbox.ordering_release(ARRAY[row.ordering_key]);
    END IF;
    RETURN 'cancelled';
END
$$;
COMMENT ON FUNCTION outbox.cancel(text, text) IS
    'Cancel an intent that was never sent, or a failed intent of an ordering group (the group moves on). OR007 otherwise.';

-- resolve (0004): succeeded passes the group's turn; failed keeps it blocked.
CREATE OR REPLACE FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'resolve');   -- 0013
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'outbox.resolve: outcome must be succeeded or failed, got %',
                        coalesce(quote_literal(p_outcome), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_note IS NULL OR p_note = '' THEN
        RAISE EXCEPTION 'outbox.resolve: a note with the evidence is required' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'unknown' THEN
        RAISE EXCEPTION 'outbox.resolve: key % is %, not unknown', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = p_outcome::outbox.intent_state,
           last_error = CASE WHEN p_outcome = 'failed' THEN 'resolved by an operator: ' || p_note END,
           decided_by = session_user, decision_note = p_note,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'resolved ' || p_outcome || ': ' || p_note);
    IF row.ordering_key IS NOT NULL AND p_outcome = 'succeeded' THEN   -- 0013
        PERFORM outbox.ordering_release(ARRAY[row.ordering_key]);
    END IF;
    RETURN p_outcome::outbox.intent_state;
END
$$;

-- approve (0010): an intent that is not its group's head becomes pending
-- and held; its turn comes when the intents before it settle.
CREATE OR REPLACE FUNCTION outbox.approve(p_key text, p_by text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'approve');   -- 0013
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.approve: say who approves (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.approve: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'pending',
           next_attempt_at = CASE WHEN (outbox.ordering_head_before(row.ordering_key, row.id)).id IS NOT NULL
                                  THEN 'infinity' ELSE now() END,   -- 0013: held behind its group's head
           decided_by = p_by, decision_note = 'approved', updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('approved by %s (session user %s)', p_by, session_user));
    RETURN 'pending';
END
$$;

-- reject (0010): the group moves on.
CREATE OR REPLACE FUNCTION outbox.reject(p_key text, p_by text, p_reason text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'reject');   -- 0013
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
    IF row.ordering_key IS NOT NULL THEN   -- 0013
        PERFORM outbox.ordering_release(ARRAY[row.ordering_key]);
    END IF;
    RETURN 'cancelled';
END
$$;

-- retry_now (0011): a held intent is not sent before its turn (OR007 names
-- the intent it waits for); a held intent with no live intent before it (a
-- release lost to a manual change of the table) is released.
CREATE OR REPLACE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'retry_now');   -- 0013
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
    first_age interval;
    note text;
    head outbox.intents;   -- 0013
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
        IF EXISTS (SELECT 1 FROM outbox.attempts a
                    WHERE a.intent_id = row.id AND a.key_sent = false
                      AND a.class = 'ambiguous' AND a.request_sent IS DISTINCT FROM false
                      AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                                       WHERE r.intent_id = row.id AND r.id > a.id
                                         AND r.class = 'reconciled_not_executed')) THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and an attempt that may have executed was sent without a key (target % had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
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

-- cancel_run (0007): the run's ordered intents are taken under their groups'
-- settle locks, and only if nobody holds them (a relay recording one asks
-- for those locks); their groups move on. Unordered ones as before.
CREATE OR REPLACE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    candidate bigint;
    grp       text;      -- 0013
    groups    text[];    -- 0013
    locked    boolean := false;   -- 0013
    row       outbox.intents;
    cancelled integer := 0;
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
       AND NOT i.ambiguous AND i.compensates IS NULL AND i.ordering_key IS NOT NULL;
    FOR candidate, grp IN
        SELECT i.id, i.ordering_key FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
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
        UPDATE outbox.intents i
           SET state = 'cancelled', last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given'),
               decision_note = p_reason, decided_by = session_user, updated_at = now()
         WHERE i.id = candidate AND i.state IN ('pending', 'awaiting_approval') AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id AND a.request_sent IS DISTINCT FROM false)
        RETURNING i.* INTO row;
        IF FOUND THEN
            PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                         format('cancelled with run %s: %s', p_run_id, coalesce(p_reason, '')));
            cancelled := cancelled + 1;
        END IF;
    END LOOP;
    IF locked THEN   -- 0013
        PERFORM outbox.ordering_release(groups);
    END IF;
    RETURN cancelled;
END
$$;

-- ---------------------------------------------------------------------------
-- 5. stuck (as in 0009): a group's blocked head, with what it blocks

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
        WHEN i.state = 'unknown' THEN 'outcome unknown'
        WHEN i.state = 'pending' AND i.next_attempt_at = 'infinity'
            THEN 'its turn in group ' || i.ordering_key || ' came but it was not released: outbox.retry_now releases it'   -- 0013
        WHEN i.state = 'pending' AND ts.target IS NOT NULL
            THEN 'target unavailable since ' || to_char(ts.circuit_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                 || ' UTC (circuit ' || ts.circuit || coalesce(': ' || ts.circuit_reason, '') || ')'
        WHEN i.state = 'pending' THEN 'pending for over 5 minutes'
        WHEN i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours' THEN 'awaiting approval for over 24 hours'
    END AS reason) AS s
 WHERE NOT c.head OR g.later > 0 OR i.state = 'pending';   -- 0013: a failed or approval-awaiting head only when it blocks something
COMMENT ON VIEW outbox.stuck IS
    'Keys that need a look: in flight past the lease, unknown, pending while the target''s circuit is open or over 5 minutes past due, awaiting approval over 24 hours; '
    'the head of an ordering group that blocks later intents ("blocks N later intents of group G"), and a held intent whose turn came but was not released.';

-- ---------------------------------------------------------------------------
-- enqueue, outcome and prune_target: from 0012, the changes marked "0013"

-- enqueue as in 0012, with an ordering key (0013: the changes are marked). The
-- 5-argument form is dropped: beside this one, calls with defaults would be ambiguous.
DROP FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz);

CREATE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                               p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
                               p_ordering_key text DEFAULT NULL)   -- 0013
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
    wait      boolean := false;   -- 0013: held behind a live intent of its group
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
    -- 0013: an ordered intent takes its place in its group (the group's lock, until
    -- this transaction ends: the id drawn below follows every earlier enqueue of the
    -- group); wait: an earlier intent of the group is live, the new one is held.
    IF p_ordering_key IS NOT NULL THEN
        wait := outbox.ordering_place(p_key, p_ordering_key);
    END IF;

    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before)   -- 0013
    SELECT p_key, t.name, p_payload,
           CASE WHEN cardinality(t.volatile_paths) = 0
                     AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0')
                THEN sha256(convert_to(payload_text, 'UTF8'))
                ELSE outbox.fingerprint(p_payload, t.volatile_paths) END,
           CASE WHEN t.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, t.approval_rule)
                THEN 'awaiting_approval'::outbox.intent_state
                ELSE 'pending'::outbox.intent_state END,
           p_run_id, CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
           p_ordering_key, CASE WHEN wait THEN p_not_before END   -- 0013
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
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before)   -- 0013
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id,
            CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
            p_ordering_key, CASE WHEN wait THEN p_not_before END)   -- 0013
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

COMMENT ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, text) IS
    'Insert or find the intent for a key, inside the caller''s transaction. Same key and payload: the existing intent and its outcome. p_ordering_key: intents of one group are sent one at a time, in commit order.';

-- What a held intent waits for: the head of its group (0013).
CREATE FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT format('waiting for %s (%s), the head of ordering group %s: it is sent once that one succeeded or was cancelled',
                                   h.key, outbox.visible_status(h.state, h.ambiguous), p_group)
                       FROM outbox.ordering_head_before(p_group, p_id) h WHERE h.id IS NOT NULL),
                    'waiting for its turn in ordering group ' || p_group)
$$;

-- outcome as in 0012; a held intent names the intent it waits for (0013).
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

-- prune_target as in 0012 (0013: the change is marked): a failed intent that blocks later
-- intents of its ordering group is not pruned, or the group would go on past it. It
-- goes once the group moves on (cancel) or the intents behind it are cancelled.
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
               -- 0013: a failed intent that blocks later intents of its ordering group stays
               AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL
                        AND EXISTS (SELECT 1 FROM outbox.intents l
                                     WHERE l.ordering_key = i.ordering_key AND l.id > i.id
                                       AND l.state NOT IN ('succeeded', 'cancelled')))
             ORDER BY i.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    RETURN outbox.prune_ids(doomed, p_dedupe_window);
END
$$;

-- prunable as in 0012, with the same exception (the dry run lists what prune removes).
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
       -- 0013: as in prune_target, a failed intent that blocks its ordering group stays
       AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL
                AND EXISTS (SELECT 1 FROM outbox.intents l
                             WHERE l.ordering_key = i.ordering_key AND l.id > i.id
                               AND l.state NOT IN ('succeeded', 'cancelled')))
     GROUP BY i.target, i.state, t.retain_for
     ORDER BY i.target, i.state
$$;


-- ---------------------------------------------------------------------------
-- grants (0005's roles)

-- Internals (called by the functions above, which run as the owner): nobody calls them.
REVOKE ALL ON FUNCTION outbox.ordering_place(text, text), outbox.ordering_turn_at_commit(),
                       outbox.ordering_lock_groups(text[]), outbox.ordering_release(text[]),
                       outbox.ordering_locked_intent(text, text), outbox.ordering_head_before(text, bigint),
                       outbox.ordering_waits_for(text, bigint)
       FROM PUBLIC;
-- enqueue, dropped and made again: the grants of 0005.
REVOKE ALL ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, text) TO outbox_app, outbox_admin;
REVOKE ALL ON outbox.ordering_groups FROM PUBLIC;
