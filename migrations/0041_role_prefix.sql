-- 0041: each database of a cluster can have roles of its own (issue 38, item 5),
-- and every waiter is woken by the commit (issue 40, item 5; part 2 below).
--
-- 1. Role prefixes.
-- Group roles are cluster-wide: a login granted outbox_app for one database's
-- outbox could enqueue into the outbox of any other database of the same
-- cluster. `outbox-relay migrate --role-prefix P`, on a database's first
-- install, makes its roles P_outbox_app, P_outbox_relay, P_outbox_operator,
-- P_outbox_admin and P_outbox_mcp instead: migrate creates them, and after
-- every migration file, in that file's transaction, moves each privilege the
-- file granted to an outbox_* role in this database to the prefixed role
-- (relay/cli/migrate.c, MOVE_GRANTS_SQL). The migrations keep naming the plain
-- roles, so the released files apply unchanged.
--
-- This file records the prefix, which migrate passes in the transaction's
-- setting outbox.role_prefix ('' or unset: no prefix, the names of before),
-- and checks it afterwards: a later migrate with another prefix is refused.
-- The two functions that asked for a role by name (isolated and
-- operator_session: "is the login an operator or a relay?") now ask
-- outbox.role_name, so they name this database's roles.
--
-- Upgrade: an installed database records '' (its roles keep their names);
-- a prefix is only taken on a first install. Locks: none on existing
-- tables (one new table of one row, two functions replaced with the same
-- signatures). The relays of 0.1.0 and of 0039 run unchanged.

CREATE TABLE outbox.installation (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    role_prefix  text NOT NULL CHECK (role_prefix ~ '^([a-z][a-z0-9_]{0,39})?$'),
    installed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.installation IS
    'One row: the role prefix this database was installed with (0041); '''' = the plain names outbox_app, outbox_relay, ...';

INSERT INTO outbox.installation (role_prefix)
VALUES (coalesce(current_setting('outbox.role_prefix', true), ''));

-- The name of this database's role ROLE ('app', 'relay', 'operator', 'admin', 'mcp').
CREATE FUNCTION outbox.role_name(p_role text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN coalesce(i.role_prefix, '') = '' THEN 'outbox_' || p_role
                ELSE i.role_prefix || '_outbox_' || p_role END
      FROM (SELECT) AS one_row LEFT JOIN outbox.installation i ON true
$$;
COMMENT ON FUNCTION outbox.role_name(text) IS
    'The name of this database''s role p_role (app, relay, operator, admin, mcp): outbox_<role>, or <prefix>_outbox_<role> when installed with a role prefix (0041).';

CREATE OR REPLACE FUNCTION outbox.isolated() RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.isolated_logins l WHERE l.login = session_user::text)
           AND NOT pg_catalog.pg_has_role(session_user, outbox.role_name('operator'), 'MEMBER')
           AND NOT pg_catalog.pg_has_role(session_user, outbox.role_name('relay'), 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.isolated() IS
    'Whether the session''s login is isolated (outbox.isolated_logins), unless it is a member of this database''s operator or relay role (0026, 0041).';

CREATE OR REPLACE FUNCTION outbox.operator_session() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.pg_has_role(session_user, outbox.role_name('operator'), 'MEMBER')
           OR pg_catalog.pg_has_role(session_user, outbox.role_name('relay'), 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.operator_session() IS
    'Whether the session''s login is a member of this database''s operator or relay role: it may read an MCP client''s outcome and cancel its run (0036, 0041).';

REVOKE ALL ON outbox.installation FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.role_name(text) FROM PUBLIC;
GRANT SELECT ON outbox.installation TO outbox_operator;

-- ---------------------------------------------------------------------------
-- 2. Every waiter woken by the commit (issue 40, item 5). The admin port's
--    GET /v1/intents/{key}?wait= saw outcomes recorded by other relays and
--    by operators only at its once-a-second re-check. Now outbox.settle
--    (every path that makes intents final: record, cancel, cancel_run,
--    reject, resolve) NOTIFYs outbox_outcomes with the keys it settled, and
--    an approval (awaiting_approval → pending, not final but a new status)
--    with its key; relays LISTEN on their main connection and look the
--    waited keys up again at once. Cost: one NOTIFY per settle call (a
--    record batch is one), its keys read by primary key, about 1 us per
--    settled intent (settle of 256 ids, 2,000 times, on a loaded machine:
--    1.9-2.6 us per id against 1.2-1.6 without); nothing per claim.
--    Locks: settle is replaced with the same signature; CREATE TRIGGER
--    holds intents' SHARE ROW EXCLUSIVE lock for an instant (records and
--    enqueues wait for it). Relays of 0.1.0 do not LISTEN and keep their
--    re-check.

CREATE OR REPLACE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moving text[];
    ev     jsonb;
    keys   text;
    k      text;
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_states)
       OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_groups) THEN
        RAISE EXCEPTION 'outbox.settle: % ids, % states and % groups: one of each per intent',
                        cardinality(p_ids), cardinality(p_states), cardinality(p_groups)
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_states) AS s WHERE s IS NULL OR s NOT IN ('succeeded', 'failed', 'cancelled')) THEN
        RAISE EXCEPTION 'outbox.settle: only succeeded, failed or cancelled is final, got %', p_states
            USING ERRCODE = '22023';
    END IF;

    -- Events for people (outbox_events): a failed intent, from the outcome
    -- that made it failed (the newest recorded row of its history); not when
    -- that row is a person's resolution. Built before the groups move on, so
    -- 'blocks' counts the group as it stood.
    FOR ev IN
        SELECT outbox.intent_event(i, a.class, a.http_status, a.error)
          FROM unnest(p_ids, p_states) WITH ORDINALITY AS s(id, state, ord)
          JOIN outbox.intents i ON i.id = s.id
          CROSS JOIN LATERAL (SELECT h.class, h.http_status, h.error
                                FROM outbox.attempts h
                               WHERE h.intent_id = s.id AND h.recorded
                               ORDER BY h.id DESC
                               LIMIT 1) AS a
         WHERE s.state = 'failed' AND a.class <> 'resolved'
         ORDER BY s.ord
    LOOP
        PERFORM pg_notify('outbox_events', ev::text);
        IF ev ? 'blocks' THEN
            PERFORM pg_notify('outbox_events',
                              jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                 'head', ev->>'key', 'blocks', ev->'blocks',
                                                 'at', ev->>'at')::text);
        END IF;
    END LOOP;

    -- Ordered delivery: the next intent of a group is due once this one
    -- succeeded or was cancelled; a failed one keeps the group waiting.
    SELECT array_agg(DISTINCT s.grp) INTO moving
      FROM unnest(p_states, p_groups) AS s(state, grp)
     WHERE s.grp IS NOT NULL AND s.state IN ('succeeded', 'cancelled');
    IF moving IS NOT NULL THEN
        PERFORM outbox.ordering_release(moving);
    END IF;

    -- Waiters (0041): the relays' admin ports hold ?wait= requests and
    -- LISTEN outbox_outcomes; one NOTIFY per call names the keys, a JSON
    -- array, or several when they do not fit in one payload.
    SELECT string_agg(to_json(i.key)::text, ',') INTO keys
      FROM outbox.intents i WHERE i.id = ANY (p_ids);
    IF octet_length(keys) <= 7000 THEN
        PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
    ELSIF keys IS NOT NULL THEN
        keys := NULL;
        FOR k IN SELECT to_json(i.key)::text FROM outbox.intents i WHERE i.id = ANY (p_ids) LOOP
            IF octet_length(keys) + octet_length(k) > 7000 THEN
                PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
                keys := NULL;
            END IF;
            keys := CASE WHEN keys IS NULL THEN k ELSE keys || ',' || k END;
        END LOOP;
        PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[]) IS
    'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states and ordering groups: the events for people (intent_failed, group_blocked), the release of the groups that may move on, and the NOTIFY outbox_outcomes that wakes waiters (0041).';

CREATE FUNCTION outbox.notify_approved() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('outbox_outcomes', '[' || to_json(NEW.key)::text || ']');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.notify_approved() IS
    'Wakes the relays'' waiters on a key that left awaiting_approval (NOTIFY outbox_outcomes, 0041); final states are settle''s.';
REVOKE ALL ON FUNCTION outbox.notify_approved() FROM PUBLIC;

CREATE TRIGGER intents_notify_approved AFTER UPDATE OF state ON outbox.intents
    FOR EACH ROW WHEN (OLD.state = 'awaiting_approval' AND NEW.state = 'pending')
    EXECUTE FUNCTION outbox.notify_approved();
