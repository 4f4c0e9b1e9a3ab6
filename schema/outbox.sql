-- schema/outbox.sql — the whole outbox schema, as the migrations build it.
--
-- Read this file to learn the data model; apply migrations/ (outbox-relay
-- migrate, or psql -f of each file in order) to build it. A test
-- (tests/sql/schema_equivalence.sh) proves that a database built from this
-- file and one built from migrations/ have the same schema. Regenerate it
-- with `make schema` whenever a migration is added.
--
-- The design is in docs/design.md. Comments of the older migrations cite it
-- as DESIGN.md; applied migrations are never edited (migrate checks them).
--
-- Sections: 1 tables and states · 2 enqueue, fingerprint, outcome, NOTIFY ·
-- 3 relay functions · 4 operator functions and the stuck view · 5 roles.

-- ==================================================================== 1. from 0001_tables.sql

-- 0001: the outbox data model (DESIGN.md, "Data model").
--
-- targets   where intents go; registered by admins, never by an intent
-- intents   one row per logical action, keyed by the caller's idempotency key
-- attempts  one row per delivery, take-over or reconciliation attempt
-- relays    presence of running relays (the idle flag that gates NOTIFY)
-- mismatches  audit of same-key/different-payload enqueues kept under keep_original

CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'Transactional outbox: intents enqueued in business transactions, delivered by outbox-relay.';

-- The life of an intent. See DESIGN.md "States".
CREATE TYPE outbox.intent_state AS ENUM (
    'awaiting_approval', -- matched the target's approval_rule; waits for approve/reject
    'pending',           -- due for delivery at next_attempt_at
    'in_flight',         -- claimed by lease_owner until lease_expires_at
    'succeeded',         -- terminal: the target acted (2xx, reconciliation or operator)
    'failed',            -- terminal: the target did not act and will not (every attempt known unsent, or permanent 4xx)
    'unknown',           -- outcome unknown: waits for reconciliation or a person; never re-sent blindly
    'cancelled'          -- terminal: rejected or cancelled before it was sent
);

-- What one attempt amounted to. See DESIGN.md "Classifying one attempt".
CREATE TYPE outbox.attempt_class AS ENUM (
    'not_sent',          -- nothing reached the target (connect refused, DNS, TLS): safe to retry
    'ambiguous',         -- the target may have acted (timeout or error after sending, reset, empty reply, 5xx, lease expired)
    'succeeded',         -- 2xx
    'retry_later',       -- 408, 425, 429, 409 from a key-honouring target: not acted yet
    'key_conflict',      -- 422: the target rejected the key/payload pairing
    'permanent_failure', -- other 4xx: not acted, will not act
    'reconciled_executed',     -- status URL said the key was executed
    'reconciled_not_executed', -- status URL said the key was not executed
    'reconcile_inconclusive',  -- status URL gave no usable answer
    'resolved',          -- an operator set the outcome
    'released'           -- claimed but never sent (relay shut down); not an attempt on the target
);

CREATE TABLE outbox.targets (
    name               text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    url                text NOT NULL CHECK (url ~ '^https?://[^[:space:]]+$'),
    method             text NOT NULL DEFAULT 'POST' CHECK (method IN ('POST', 'PUT', 'PATCH', 'DELETE')),
    key_header         text DEFAULT 'Idempotency-Key' CHECK (key_header ~ '^[A-Za-z0-9-]{1,64}$'),
    key_ttl            interval NOT NULL DEFAULT '24 hours' CHECK (key_ttl > '0'),
    status_url         text CHECK (status_url ~ '^https?://[^[:space:]]*\{key\}[^[:space:]]*$'),
    timeout_ms         integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 1 AND 600000),
    max_attempts       integer NOT NULL DEFAULT 8 CHECK (max_attempts BETWEEN 1 AND 1000),
    backoff_base_ms    integer NOT NULL DEFAULT 500 CHECK (backoff_base_ms BETWEEN 1 AND 3600000),
    backoff_cap_ms     integer NOT NULL DEFAULT 300000 CHECK (backoff_cap_ms BETWEEN 1 AND 86400000),
    retry_budget_ratio real NOT NULL DEFAULT 0.2 CHECK (retry_budget_ratio BETWEEN 0 AND 10),
    retry_budget_floor integer NOT NULL DEFAULT 10 CHECK (retry_budget_floor >= 0),
    reconcile_delay_ms integer CHECK (reconcile_delay_ms >= 0), -- NULL: 3 x timeout_ms
    max_in_flight      integer NOT NULL DEFAULT 256 CHECK (max_in_flight BETWEEN 1 AND 100000),
    max_payload_bytes  integer NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes BETWEEN 2 AND 67108864),
    approval_rule      jsonpath,
    volatile_paths     text[] NOT NULL DEFAULT '{}',
    on_mismatch        text NOT NULL DEFAULT 'reject' CHECK (on_mismatch IN ('reject', 'keep_original')),
    headers            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    secret_env         text CHECK (secret_env ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    enabled            boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CHECK (backoff_cap_ms >= backoff_base_ms)
);
COMMENT ON TABLE outbox.targets IS 'Delivery targets, registered by admins. Intents name a target, never a URL.';
COMMENT ON COLUMN outbox.targets.key_header IS 'Header carrying the idempotency key; NULL = the target cannot deduplicate.';
COMMENT ON COLUMN outbox.targets.status_url IS 'Reconciliation URL template; {key} is replaced by the percent-encoded key. NULL = none.';
COMMENT ON COLUMN outbox.targets.volatile_paths IS 'Paths (#- syntax, e.g. {meta,ts}) left out of the payload fingerprint.';
COMMENT ON COLUMN outbox.targets.secret_env IS 'Name of the relay environment variable holding the signing secret (never the secret itself).';

CREATE TABLE outbox.intents (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key               text NOT NULL UNIQUE,
    target            text NOT NULL REFERENCES outbox.targets (name),
    payload           jsonb NOT NULL,
    fingerprint       bytea NOT NULL,
    state             outbox.intent_state NOT NULL DEFAULT 'pending',
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    ambiguous         boolean NOT NULL DEFAULT false,
    first_attempt_at  timestamptz,
    response_status   integer,
    response_body     text,
    last_error        text,
    run_id            text,
    compensates       text REFERENCES outbox.intents (key),
    mismatches        integer NOT NULL DEFAULT 0,
    decided_by        text,
    decision_note     text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (state <> 'in_flight' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
COMMENT ON TABLE outbox.intents IS 'One row per logical action. Written by outbox.enqueue inside the caller''s transaction.';
COMMENT ON COLUMN outbox.intents.ambiguous IS 'Some attempt may have executed: never reported failed, never re-sent blindly.';

-- Claim path: due pending rows per target, oldest first. Partial, so history does not grow it.
CREATE INDEX intents_due ON outbox.intents (target, next_attempt_at) WHERE state = 'pending';
-- Lease take-over and the stuck view.
CREATE INDEX intents_in_flight ON outbox.intents (lease_expires_at) WHERE state = 'in_flight';
-- Reconciliation and the stuck view.
CREATE INDEX intents_unknown ON outbox.intents (next_attempt_at) WHERE state = 'unknown';
CREATE INDEX intents_awaiting ON outbox.intents (created_at) WHERE state = 'awaiting_approval';
CREATE INDEX intents_run ON outbox.intents (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX intents_compensates ON outbox.intents (compensates) WHERE compensates IS NOT NULL;

CREATE TABLE outbox.attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id     bigint NOT NULL REFERENCES outbox.intents (id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    relay         text NOT NULL,
    class         outbox.attempt_class NOT NULL,
    request_sent  boolean,          -- NULL: not known (lease take-over)
    http_status   integer,
    error         text,
    latency_ms    integer,
    response_body text,
    recorded      boolean NOT NULL DEFAULT true, -- false: a late writer fenced out by a newer state
    at            timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.attempts IS 'One row per delivery, lease take-over, reconciliation or resolution: the traceable life of a key.';
CREATE INDEX attempts_intent ON outbox.attempts (intent_id, id);
CREATE INDEX attempts_at ON outbox.attempts (at);

CREATE TABLE outbox.relays (
    relay_id     text PRIMARY KEY,
    idle         boolean NOT NULL DEFAULT false,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.relays IS 'Running relays. The enqueue trigger notifies only while some live relay says it is idle.';

CREATE TABLE outbox.mismatches (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text NOT NULL REFERENCES outbox.intents (key) ON DELETE CASCADE,
    payload     jsonb NOT NULL,
    fingerprint bytea NOT NULL,
    fields      text[] NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.mismatches IS 'Enqueues that reused a key with another payload under on_mismatch = keep_original.';

-- ==================================================================== 2. from 0002_enqueue.sql

-- 0002: the application's side of the contract: enqueue, outcome, and the NOTIFY trigger.
--
-- Errors carry the project's own SQLSTATEs (class "OR", implementation-defined):
--   OR001 key reused with a different payload or target
--   OR002 unknown target          OR003 target disabled
--   OR004 invalid key             OR005 invalid payload
--   OR006 payload too large       OR007 wrong state for this operation
--   OR008 no intent with this key

-- Numbers spelled 1, 1.0 and 1e0 are one value: rewrite every number to its
-- shortest scale. jsonb already drops whitespace and orders keys.
CREATE FUNCTION outbox.canonical(doc jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    result jsonb;
BEGIN
    CASE jsonb_typeof(doc)
    WHEN 'number' THEN
        RETURN to_jsonb(trim_scale(doc::numeric));
    WHEN 'object' THEN
        SELECT coalesce(jsonb_object_agg(e.key, outbox.canonical(e.value)), '{}'::jsonb)
          INTO result FROM jsonb_each(doc) AS e;
        RETURN result;
    WHEN 'array' THEN
        SELECT coalesce(jsonb_agg(outbox.canonical(e.value) ORDER BY e.ord), '[]'::jsonb)
          INTO result FROM jsonb_array_elements(doc) WITH ORDINALITY AS e(value, ord);
        RETURN result;
    ELSE
        RETURN doc;
    END CASE;
END
$$;
COMMENT ON FUNCTION outbox.canonical(jsonb) IS 'Canonical form of a JSON document: numbers at their shortest scale (jsonb orders keys and drops whitespace).';

-- The payload as it counts for the fingerprint: volatile paths removed, canonical.
CREATE FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc  jsonb := payload;
    path text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    -- jsonb prints 1e0 as 1; only a trailing zero after a decimal point
    -- can spell a number differently. Skip the walk when there is none.
    IF doc::text ~ '[0-9]\.[0-9]*0' THEN
        doc := outbox.canonical(doc);
    END IF;
    RETURN doc;
END
$$;

-- plpgsql rather than sql here and below: these run inside every enqueue, and
-- a LANGUAGE sql function that cannot be inlined is parsed and planned on
-- every call (the bench's profile showed a quarter of enqueue's CPU there).
CREATE FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN sha256(convert_to(outbox.fingerprint_doc(payload, volatile_paths)::text, 'UTF8'));
END
$$;
COMMENT ON FUNCTION outbox.fingerprint(jsonb, text[]) IS 'SHA-256 of the canonical payload without the target''s volatile paths.';

-- Top-level fields whose values differ between two payloads (for the mismatch message).
CREATE FUNCTION outbox.differing_fields(a jsonb, b jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(k ORDER BY k), '{}')
      FROM (SELECT jsonb_object_keys(a) AS k UNION SELECT jsonb_object_keys(b)) AS keys
     WHERE a -> k IS DISTINCT FROM b -> k
$$;

-- What an agent sees of a row (DESIGN.md, "Agent-visible status").
CREATE FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN CASE
        WHEN state = 'unknown' THEN 'reconciling'
        WHEN state IN ('pending', 'in_flight') AND ambiguous THEN 'reconciling'
        WHEN state = 'in_flight' THEN 'delivering'
        ELSE state::text
    END;
END
$$;

CREATE TYPE outbox.enqueue_result AS (
    key             text,
    intent_id       bigint,
    target          text,
    status          text,    -- agent-visible status (outbox.visible_status)
    inserted        boolean, -- true: this call created the intent
    response_status integer, -- saved response, once there is one
    response_body   text,
    mismatch_fields text[]   -- under keep_original: the fields that differed, else NULL
);

CREATE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                               p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tgt       outbox.targets;
    existing  outbox.intents;
    fp        bytea;
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
    payload_text := p_payload::text;
    IF octet_length(payload_text) > tgt.max_payload_bytes THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is % bytes; target % accepts at most %',
                        quote_literal(p_key), octet_length(payload_text), quote_literal(p_target),
                        tgt.max_payload_bytes
            USING ERRCODE = 'OR006';
    END IF;

    -- The common case in one step: no volatile paths and no number that could
    -- be spelled otherwise, so the canonical text is the jsonb text itself
    -- (exactly what outbox.fingerprint computes then).
    IF cardinality(tgt.volatile_paths) = 0 AND payload_text !~ '[0-9]\.[0-9]*0' THEN
        fp := sha256(convert_to(payload_text, 'UTF8'));
    ELSE
        fp := outbox.fingerprint(p_payload, tgt.volatile_paths);
    END IF;
    IF tgt.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, tgt.approval_rule) THEN
        new_state := 'awaiting_approval';
    END IF;

    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at)
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id, greatest(now(), coalesce(p_not_before, now())))
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    IF FOUND THEN
        -- A new row is pending or awaiting_approval, never ambiguous: its
        -- visible status is its state.
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The key exists (ON CONFLICT waited for its writer to commit).
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
COMMENT ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz) IS
    'Insert or find the intent for a key, inside the caller''s transaction. Same key and payload: the existing intent and its outcome.';

-- An approval rule is a jsonpath predicate ($.amount > 100000) or a filter
-- path ($ ? (@.amount > 100000)); both forms are accepted. Fail closed: a
-- rule that cannot be evaluated on this payload (unknown, e.g. a string
-- compared with a number, or an error) holds the intent for a person.
CREATE FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    matched boolean;
BEGIN
    BEGIN
        matched := jsonb_path_match(payload, rule);
    EXCEPTION WHEN OTHERS THEN
        BEGIN
            matched := jsonb_path_exists(payload, rule);
        EXCEPTION WHEN OTHERS THEN
            matched := NULL;
        END;
    END;
    RETURN coalesce(matched, true);
END
$$;

CREATE FUNCTION outbox.outcome(p_key text)
RETURNS TABLE (status text, response_status integer, response_body text, attempts integer,
               last_error text, message text, state outbox.intent_state, target text, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
               WHEN 'pending' THEN 'waiting for delivery'
               WHEN 'delivering' THEN 'being delivered'
               WHEN 'succeeded' THEN 'the target acted'
               WHEN 'failed' THEN 'the target did not act and will not'
               WHEN 'cancelled' THEN 'cancelled before it was sent'
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key;
END
$$;
COMMENT ON FUNCTION outbox.outcome(text) IS 'The agent-visible outcome of a key: no row for an unknown key.';

-- NOTIFY only while a live relay has said it is idle: a NOTIFY in every
-- enqueuing transaction serializes commits (DESIGN.md, "Enqueue semantics").
-- Only rows that became due count: statement-level triggers fire even for
-- statements that changed nothing (a claim that found no row), and a relay
-- woken by its own empty claim would spin.
CREATE FUNCTION outbox.notify_relays() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes')
       AND EXISTS (SELECT 1 FROM changed_rows WHERE state = 'pending' AND next_attempt_at <= now()) THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER intents_notify_insert AFTER INSERT ON outbox.intents
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.notify_relays();
CREATE TRIGGER intents_notify_update AFTER UPDATE ON outbox.intents
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.notify_relays();

-- ==================================================================== 3. from 0003_relay.sql

-- 0003: the relay's side of the contract: presence, claim, lease upkeep, record, release.
--
-- The relay decides what an attempt means (relay/outcome.c, pure and unit
-- tested); these functions apply its decisions atomically and in batches.
-- Every write to a claimed row is fenced by (lease_owner, attempts): a relay
-- that lost its lease, or a late writer, changes nothing.

-- A relay says it is alive, and whether it is idle (wants a NOTIFY on enqueue).
-- (plpgsql, like every function the relay calls often: its plans are cached.)
CREATE FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO outbox.relays AS r (relay_id, idle) VALUES (p_relay, p_idle)
    ON CONFLICT (relay_id) DO UPDATE SET idle = excluded.idle, heartbeat_at = now();
    DELETE FROM outbox.relays WHERE heartbeat_at < now() - interval '1 day';
END
$$;

CREATE FUNCTION outbox.relay_gone(p_relay text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM outbox.relays WHERE relay_id = p_relay;
$$;

-- Claim due pending intents, at most p_rooms[i] for target p_targets[i] and
-- p_limit in all. SKIP LOCKED: relays never wait for each other and never
-- claim the same row. The per-target subquery walks intents_due in order.
-- Plans: PostgreSQL keeps custom plans for this statement (its generic plan,
-- a hash join over a full scan of intents, costs far more); pinning that with
-- a function-level plan_cache_mode cost latency on every claim, so it is not.
CREATE FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                             p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT c.id
          FROM unnest(p_targets, p_rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    )
    UPDATE outbox.intents i
       SET state = 'in_flight',
           attempts = i.attempts + 1,
           lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           first_attempt_at = coalesce(i.first_attempt_at, now()),
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.payload::text, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

-- Take over rows whose relay died mid-flight (lease expired while in_flight).
-- The new owner must treat each as an ambiguous attempt: it may have executed.
CREATE FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, previous_owner text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
         ORDER BY i.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM expired
     WHERE i.id = expired.id
    RETURNING i.id, i.key, i.target, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner;
END
$$;

-- Extend the leases this relay holds. Returns the ids it still holds.
CREATE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    UPDATE outbox.intents
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
     WHERE id = ANY (p_ids) AND state = 'in_flight' AND lease_owner = p_relay
    RETURNING id;
END
$$;

-- Record a batch of attempt outcomes (deliveries, take-overs and
-- reconciliations). Arrays are parallel, one element per attempt. The intent
-- row changes only if this relay still holds the lease for that attempt
-- number (in_flight, or unknown while it reconciles); the attempts row is written either way, with
-- recorded = false when fenced out, so the history stays complete.
-- p_delay_ms: for a next state of pending or unknown, when it is next due.
-- Returns how many intents were updated.
CREATE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
                              p_states outbox.intent_state[], p_delay_ms integer[],
                              p_ambiguous boolean[], p_classes outbox.attempt_class[],
                              p_sent boolean[], p_http integer[], p_errors text[],
                              p_latency_ms integer[], p_bodies text[])
RETURNS integer
-- Generic plan always: a custom plan made with statistics that saw no
-- in_flight row estimates one match and joins by a sequential scan, which
-- turned quadratic on large batches (2,000 outcomes: 6.8 s; generic: 35 ms).
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    updated integer;
BEGIN
    WITH u AS (
        SELECT *
          FROM unnest(p_ids, p_attempts, p_states, p_delay_ms, p_ambiguous, p_classes, p_sent,
                      p_http, p_errors, p_latency_ms, p_bodies)
               AS u(id, attempt, state, delay_ms, ambiguous, class, sent, http, error, latency_ms, body)
    ), changed AS (
        UPDATE outbox.intents i
           SET state = u.state,
               next_attempt_at = CASE WHEN u.state IN ('pending', 'unknown')
                                      THEN now() + coalesce(u.delay_ms, 0) * interval '1 millisecond'
                                      ELSE i.next_attempt_at END,
               lease_owner = NULL,
               lease_expires_at = NULL,
               -- Sticky: once an attempt may have executed, only the target's own
               -- status URL saying "not executed" clears the doubt.
               ambiguous = CASE WHEN u.class = 'reconciled_not_executed' THEN false
                                ELSE i.ambiguous OR u.ambiguous END,
               response_status = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.http
                                      ELSE i.response_status END,
               response_body = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.body
                                    ELSE i.response_body END,
               last_error = u.error,
               updated_at = now()
          FROM u
         WHERE i.id = u.id AND i.state IN ('in_flight', 'unknown') AND i.lease_owner = p_relay
           AND i.attempts = u.attempt
        RETURNING i.id
    ), history AS (
        INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                     error, latency_ms, response_body, recorded)
        SELECT u.id, u.attempt, p_relay, u.class, u.sent, u.http, u.error, u.latency_ms,
               left(u.body, 4096), changed.id IS NOT NULL
          FROM u LEFT JOIN changed ON changed.id = u.id
        RETURNING recorded
    )
    SELECT count(*) FILTER (WHERE recorded) INTO updated FROM history;
    RETURN updated;
END
$$;

-- Give back claimed rows that were never sent (shutdown before sending):
-- they return to pending with their attempt number restored.
CREATE FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    released integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           first_attempt_at = CASE WHEN i.attempts = 1 THEN NULL ELSE i.first_attempt_at END,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state = 'in_flight' AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;

-- Claim unknown rows due for reconciliation whose target has a status URL.
-- The row stays `unknown` (the agent keeps seeing "reconciling"); the lease
-- only keeps two relays from asking at once, and expires if this one dies.
CREATE FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, attempt integer, first_attempt_ms bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN outbox.targets t ON t.name = i.target
         WHERE i.state = 'unknown' AND i.next_attempt_at <= now()
           AND t.status_url IS NOT NULL AND t.enabled
           AND (i.lease_expires_at IS NULL OR i.lease_expires_at < now())
         ORDER BY i.next_attempt_at
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.attempts,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

-- Put claimed rows back unsent, due again after p_delay_ms: a target's retry
-- budget is spent. Retries wait; they are never dropped and never multiply.
CREATE FUNCTION outbox.defer(p_relay text, p_ids bigint[], p_attempts integer[], p_delay_ms integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deferred integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now() + p_delay_ms * interval '1 millisecond',
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state = 'in_flight' AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS deferred = ROW_COUNT;
    RETURN deferred;
END
$$;

-- When the next row becomes due (a pending retry, an in_flight lease that
-- will expire and need taking over, or an unknown row to reconcile through a
-- status URL), in ms from now; NULL when there is none.
CREATE FUNCTION outbox.next_due_ms() RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT CASE WHEN due IS NOT NULL
                THEN greatest(0, (extract(epoch FROM (due - now())) * 1000)::bigint) END
      FROM (SELECT least((SELECT min(next_attempt_at) FROM outbox.intents WHERE state = 'pending'),
                         (SELECT min(lease_expires_at) FROM outbox.intents WHERE state = 'in_flight'),
                         (SELECT min(greatest(i.next_attempt_at, coalesce(i.lease_expires_at, i.next_attempt_at)))
                            FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                           WHERE i.state = 'unknown' AND t.status_url IS NOT NULL AND t.enabled))
                   AS due) AS next);
END
$$;

-- ==================================================================== 4. from 0004_operator.sql

-- 0004: people's side of the contract: approve, reject, cancel, resolve, and the stuck view.
-- Each decision is checked against the row's state (OR007) and leaves an attempts row.

CREATE FUNCTION outbox.locked_intent(p_key text, p_operation text) RETURNS outbox.intents
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents;
BEGIN
    SELECT * INTO row FROM outbox.intents WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.%: no intent with key %', p_operation, coalesce(quote_literal(p_key), 'NULL')
            USING ERRCODE = 'OR008';
    END IF;
    RETURN row;
END
$$;

CREATE FUNCTION outbox.note_decision(p_intent bigint, p_attempt integer, p_who text, p_note text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, error)
    VALUES (p_intent, p_attempt, coalesce(p_who, session_user), 'resolved', false, p_note);
$$;

CREATE FUNCTION outbox.approve(p_key text, p_by text) RETURNS outbox.intent_state
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
    PERFORM outbox.note_decision(row.id, row.attempts, p_by, 'approved');
    RETURN 'pending';
END
$$;

CREATE FUNCTION outbox.reject(p_key text, p_by text, p_reason text) RETURNS outbox.intent_state
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
    PERFORM outbox.note_decision(row.id, row.attempts, p_by, 'rejected: ' || coalesce(p_reason, ''));
    RETURN 'cancelled';
END
$$;

-- Cancel an intent that was never sent. A row that may have executed
-- (ambiguous) or is being delivered cannot be cancelled: resolve it instead.
CREATE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'cancel');
BEGIN
    IF row.state NOT IN ('pending', 'awaiting_approval') OR row.ambiguous THEN
        RAISE EXCEPTION 'outbox.cancel: key % is %, cannot cancel', quote_literal(p_key),
                        CASE WHEN row.ambiguous AND row.state = 'pending' THEN 'pending after an ambiguous attempt (it may have executed)'
                             ELSE row.state::text END
            USING ERRCODE = 'OR007', HINT = 'Only intents that were never sent can be cancelled.';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled', last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given'),
           decision_note = p_reason, decided_by = session_user, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'cancelled: ' || coalesce(p_reason, ''));
    RETURN 'cancelled';
END
$$;

-- A person settles an intent whose outcome is unknown, with evidence from the target.
CREATE FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'resolve');
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
    RETURN p_outcome::outbox.intent_state;
END
$$;

-- One row per key that needs a look, with the reason.
CREATE VIEW outbox.stuck AS
SELECT i.key, i.target, i.state, s.reason, now() - i.created_at AS age, i.attempts, i.last_error,
       i.updated_at
  FROM outbox.intents i
 CROSS JOIN LATERAL (SELECT CASE
        WHEN i.state = 'in_flight' AND i.lease_expires_at < now() THEN 'in flight past its lease'
        WHEN i.state = 'unknown' THEN 'outcome unknown'
        WHEN i.state = 'pending' THEN 'pending for over 5 minutes'
        WHEN i.state = 'awaiting_approval' THEN 'awaiting approval for over 24 hours'
    END AS reason) AS s
 WHERE (i.state = 'in_flight' AND i.lease_expires_at < now())
    OR i.state = 'unknown'
    OR (i.state = 'pending' AND i.next_attempt_at < now() - interval '5 minutes')
    OR (i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours');
COMMENT ON VIEW outbox.stuck IS 'Keys that need a look: in flight past the lease, unknown, pending over 5 minutes past due, awaiting approval over 24 hours.';

-- Rows in each live state and the age of the oldest due pending row, for
-- metrics. Each count walks one partial index, so the cost follows the live
-- rows, not the history of terminal ones.
CREATE FUNCTION outbox.live_counts()
RETURNS TABLE (state outbox.intent_state, intents bigint, oldest_due_age_s double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT 'pending'::outbox.intent_state, count(*),
           coalesce(extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now()))::float8, 0)
      FROM outbox.intents WHERE state = 'pending'
    UNION ALL
    SELECT 'in_flight', count(*), NULL FROM outbox.intents WHERE state = 'in_flight'
    UNION ALL
    SELECT 'unknown', count(*), NULL FROM outbox.intents WHERE state = 'unknown'
    UNION ALL
    SELECT 'awaiting_approval', count(*), NULL FROM outbox.intents WHERE state = 'awaiting_approval';
END
$$;

-- ==================================================================== 5. from 0005_roles.sql

-- 0005: least-privilege roles (group roles: grant them to login roles).
--
--   outbox_app       the application: enqueue and read outcomes, nothing else
--                    (cannot update or delete intents, claim, or read targets' secret references)
--   outbox_relay     the relay: claim, renew, record, release; reads targets
--   outbox_operator  read-only: the stuck view, intents, attempts, targets
--   outbox_admin     operator plus decisions (approve, reject, cancel, resolve) and target registration
--
-- Roles are cluster-wide, so they are created only when missing.

DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO outbox_app, outbox_relay, outbox_operator, outbox_admin;

-- Helper functions used inside the SECURITY DEFINER ones, harmless to call.
GRANT EXECUTE ON FUNCTION outbox.canonical(jsonb), outbox.fingerprint_doc(jsonb, text[]),
                          outbox.fingerprint(jsonb, text[]), outbox.differing_fields(jsonb, jsonb),
                          outbox.visible_status(outbox.intent_state, boolean),
                          outbox.needs_approval(jsonb, jsonpath)
      TO outbox_app, outbox_relay, outbox_operator, outbox_admin;

GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz),
                          outbox.outcome(text)
      TO outbox_app, outbox_admin;

GRANT EXECUTE ON FUNCTION outbox.outcome(text),
                          outbox.relay_heartbeat(text, boolean), outbox.relay_gone(text),
                          outbox.claim(text, text[], integer[], integer, integer),
                          outbox.take_over_expired(text, integer, integer),
                          outbox.renew_leases(text, bigint[], integer),
                          outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[],
                                        boolean[], outbox.attempt_class[], boolean[], integer[],
                                        text[], integer[], text[]),
                          outbox.release(text, bigint[], integer[]),
                          outbox.claim_unknown(text, integer, integer),
                          outbox.defer(text, bigint[], integer[], integer),
                          outbox.next_due_ms(),
                          outbox.live_counts()
      TO outbox_relay;
GRANT SELECT ON outbox.targets TO outbox_relay;

GRANT SELECT ON outbox.stuck, outbox.intents, outbox.attempts, outbox.targets, outbox.relays,
                outbox.mismatches
      TO outbox_operator;
GRANT EXECUTE ON FUNCTION outbox.outcome(text), outbox.live_counts() TO outbox_operator;

GRANT outbox_operator TO outbox_admin;
GRANT INSERT, UPDATE, DELETE ON outbox.targets TO outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.approve(text, text), outbox.reject(text, text, text),
                          outbox.cancel(text, text), outbox.resolve(text, text, text)
      TO outbox_admin;

-- ==================================================================== 6. from 0006_cli.sql

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

-- ==================================================================== 7. from 0007_compensation_health.sql

-- 0007: compensations, abandoning a run, and per-target health.
--
-- Compensation is a new action, never an edit of the old one (DESIGN.md, "Data model":
-- "optional link to the intent it compensates"):
--   outbox.compensate(original, key, target, payload)
--       enqueues a compensating intent through outbox.enqueue (same key rules, same
--       validation, approval rule, fingerprint) and links it: intents.compensates = original.
--       Allowed only while the original is succeeded or unknown (it acted, or may have):
--       anything else is OR007, naming the state and what to do instead; no original, OR008.
--       The same key again for the same original, target and payload returns the existing
--       compensation (a retried call compensates once). The key already used for another
--       action (another original, or an intent that is no compensation): OR001.
--       The compensation inherits the original's run_id, so a run's history stays in one
--       place; outbox.cancel_run never cancels compensations (see below).
--       A compensation of an *unknown* original may be delivered while the original is
--       still being reconciled: the compensating target must treat "nothing to undo" as
--       an answer, not an error.
--   outbox.compensations(key)   the compensations of a key, with their agent-visible status
--   outbox.links(key)           both directions: 'compensates' (this key undoes other_key)
--                               and 'compensated_by' (other_key undoes this key)
--   outbox.cancel_run(run_id, reason)
--       cancels every intent of the run that was never sent: pending or awaiting_approval,
--       not ambiguous, and no attempts row with request_sent true or NULL (a request
--       that reached, or may have reached, the target). Leaves a 'resolved' attempts row
--       per cancelled intent, as outbox.cancel does, and returns how many it cancelled.
--       Rows in flight, unknown, sent before, or final are left alone (compensate the ones
--       that acted); so are compensations: abandoning a run is what they are for, and a
--       repeated cancel_run must not cancel them.
--
-- Operator SQL:
--   outbox.target_health   one row per target: live rows by state (partial indexes),
--       rows that reached a final state in the last 5 minutes, delivery attempts, success
--       ratio and p95 latency over the last 5 minutes, the age of the oldest due pending
--       row, and an approximation of the retry budget left. Its cost follows the live rows
--       and the last 5 minutes of activity, never the history (tests/sql/scale_views.sh).

-- ---------------------------------------------------------------------------
-- compensation

CREATE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
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
COMMENT ON FUNCTION outbox.compensate(text, text, text, jsonb) IS
    'Enqueue a compensating intent for a succeeded or unknown one (intents.compensates = original key), by the rules of outbox.enqueue.';

CREATE FUNCTION outbox.compensations(p_key text)
RETURNS TABLE (key text, target text, status text, state outbox.intent_state, attempts integer,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.key, c.target, outbox.visible_status(c.state, c.ambiguous), c.state, c.attempts,
           c.created_at, c.updated_at
      FROM outbox.intents c
     WHERE c.compensates = p_key
     ORDER BY c.id
$$;
COMMENT ON FUNCTION outbox.compensations(text) IS
    'The compensating intents of a key, oldest first, with their agent-visible status. No row: none (or no such key).';

CREATE FUNCTION outbox.links(p_key text)
RETURNS TABLE (key text, relation text, other_key text, other_status text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT l.key, l.relation, l.other_key, l.other_status
      FROM (SELECT i.key, 'compensates'::text AS relation, o.key AS other_key,
                   outbox.visible_status(o.state, o.ambiguous) AS other_status, 0 AS side, o.id
              FROM outbox.intents i
              JOIN outbox.intents o ON o.key = i.compensates
             WHERE i.key = p_key
            UNION ALL
            SELECT p_key, 'compensated_by', c.key, outbox.visible_status(c.state, c.ambiguous), 1, c.id
              FROM outbox.intents c
             WHERE c.compensates = p_key) AS l
     ORDER BY l.side, l.id
$$;
COMMENT ON FUNCTION outbox.links(text) IS
    'Compensation links of a key, both ways: (key, ''compensates'', original, its status) and (key, ''compensated_by'', compensation, its status).';

CREATE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    candidate bigint;
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
    FOR candidate IN
        SELECT i.id FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
         ORDER BY i.id
           FOR UPDATE
    LOOP
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
    RETURN cancelled;
END
$$;
COMMENT ON FUNCTION outbox.cancel_run(text, text) IS
    'Cancel the intents of a run that were never sent (pending or awaiting approval, not ambiguous, no attempt that reached or may have reached the target); compensations are kept. Returns how many.';

-- ---------------------------------------------------------------------------
-- per-target health

-- Rows that reached a final state, by when: the view counts the last 5 minutes of
-- them without reading the history. A final row is not updated again, so an entry
-- is written once, when the row settles.
CREATE INDEX intents_settled ON outbox.intents (updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

CREATE VIEW outbox.target_health AS
WITH live_rows AS (        -- every row not final, each state through its partial index (0001)
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'awaiting_approval'
), settled_rows AS (       -- intents_settled: rows that reached a final state in the last 5 minutes
    SELECT i.id, i.target, i.state
      FROM outbox.intents i
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at > now() - interval '5 minutes'
), live AS (
    SELECT l.target,
           count(*) FILTER (WHERE l.state = 'pending') AS pending,
           count(*) FILTER (WHERE l.state = 'in_flight') AS in_flight,
           count(*) FILTER (WHERE l.state = 'unknown') AS unknown,
           count(*) FILTER (WHERE l.state = 'awaiting_approval') AS awaiting_approval,
           min(l.next_attempt_at) FILTER (WHERE l.state = 'pending' AND l.next_attempt_at <= now()) AS oldest_due
      FROM live_rows l GROUP BY l.target
), settled AS (
    SELECT s.target,
           count(*) FILTER (WHERE s.state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE s.state = 'failed') AS failed,
           count(*) FILTER (WHERE s.state = 'cancelled') AS cancelled
      FROM settled_rows s GROUP BY s.target
), recent_intents AS (
    -- The intents that can have an attempt in the last 5 minutes: recording an attempt sets
    -- the intent's updated_at (outbox.record), so they are the rows changed in the last 5
    -- minutes. Found through the indexes above, so the attempts of the window are joined to
    -- their target without a lookup per attempt and without reading the history. (Not
    -- counted: a late attempt from a relay fenced out of a row unchanged for 5 minutes.)
    SELECT s.id, s.target FROM settled_rows s
    UNION ALL
    SELECT l.id, l.target FROM live_rows l WHERE l.updated_at > now() - interval '5 minutes'
), deliveries AS (         -- attempts_at: delivery attempts of the last 5 minutes
    SELECT r.target,
           count(*) AS n,
           count(*) FILTER (WHERE a.class = 'succeeded') AS succeeded,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) FILTER (WHERE a.class = 'succeeded') AS p95_ok_ms,
           count(*) FILTER (WHERE a.attempt = 1 AND a.at > now() - interval '10 seconds') AS firsts_10s,
           count(*) FILTER (WHERE a.attempt > 1 AND a.at > now() - interval '10 seconds') AS retries_10s
      FROM outbox.attempts a
      JOIN recent_intents r ON r.id = a.intent_id
     WHERE a.at > now() - interval '5 minutes'
       AND a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict', 'permanent_failure')
     GROUP BY r.target
)
SELECT t.name AS target,
       t.enabled,
       coalesce(l.pending, 0) AS pending,
       coalesce(l.in_flight, 0) AS in_flight,
       coalesce(l.unknown, 0) AS unknown,
       coalesce(l.awaiting_approval, 0) AS awaiting_approval,
       coalesce(s.succeeded, 0) AS succeeded_5m,
       coalesce(s.failed, 0) AS failed_5m,
       coalesce(s.cancelled, 0) AS cancelled_5m,
       coalesce(d.n, 0) AS attempts_5m,
       coalesce(d.succeeded, 0) AS attempts_succeeded_5m,
       round(d.succeeded::numeric / nullif(d.n, 0), 4) AS success_ratio_5m,
       round(d.p95_ms::numeric, 1) AS p95_latency_ms_5m,
       round(d.p95_ok_ms::numeric, 1) AS p95_succeeded_latency_ms_5m,
       coalesce(now() - l.oldest_due, interval '0') AS oldest_pending_age,
       greatest(0, floor(t.retry_budget_floor + t.retry_budget_ratio * coalesce(d.firsts_10s, 0)
                         - coalesce(d.retries_10s, 0)))::integer AS retry_budget_left
  FROM outbox.targets t
  LEFT JOIN live l ON l.target = t.name
  LEFT JOIN settled s ON s.target = t.name
  LEFT JOIN deliveries d ON d.target = t.name;
COMMENT ON VIEW outbox.target_health IS
    'Per target: live rows by state; rows settled, delivery attempts, success ratio and p95 latency over the last 5 minutes; '
    'the age of the oldest due pending row; the retry budget left (approximation: retry_budget_floor + retry_budget_ratio x '
    'first attempts - retries, over the last 10 s of recorded attempts of all relays; each relay keeps its own).';
COMMENT ON COLUMN outbox.target_health.oldest_pending_age IS
    'How long the oldest due pending row has waited past its due time (0 when none is due): the target''s lag.';
COMMENT ON COLUMN outbox.target_health.success_ratio_5m IS
    'Delivery attempts of class succeeded / all delivery attempts (not reconciliations or decisions), last 5 minutes; NULL without any.';
COMMENT ON COLUMN outbox.target_health.p95_latency_ms_5m IS
    'p95 (percentile_cont, to 0.1 ms) of latency_ms over the delivery attempts of the last 5 minutes; NULL without any.';

-- ---------------------------------------------------------------------------
-- grants (0005's roles)

REVOKE ALL ON FUNCTION outbox.compensate(text, text, text, jsonb), outbox.compensations(text), outbox.links(text),
                       outbox.cancel_run(text, text)
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.compensate(text, text, text, jsonb), outbox.cancel_run(text, text)
      TO outbox_app, outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.compensations(text), outbox.links(text)
      TO outbox_app, outbox_operator, outbox_admin;
REVOKE ALL ON outbox.target_health FROM PUBLIC;
GRANT SELECT ON outbox.target_health TO outbox_operator;

-- ==================================================================== 8. from 0008_hot_paths.sql

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
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET outbox.in_enqueue = 'on' AS $$
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

-- ==================================================================== 9. from 0009_flow_control.sql

-- 0009: flow control per target (docs/design.md, "Flow control").
--
-- A relay decides what to claim from each target's state, and never polls
-- for rows it will not take. What must be the same for every relay lives
-- here; what each relay observes for itself (its adaptive concurrency
-- window, its count of consecutive failures) lives in relay/flow.c.
--
-- 1. outbox.target_state, one row per target: the circuit breaker (closed,
--    open, half_open with one probe out), a pause that a 429 or 503 with
--    Retry-After asked for, and the token bucket of a rate limit. The
--    state rows are locked only by claims of targets that are gated (a
--    circuit not closed, a pause, or a rate limit): the common target, closed
--    and unlimited, is claimed without touching this table's rows.
-- 2. outbox.claim applies the gates, in one transaction with the claim: a
--    probe is claimed by one relay only, and tokens are taken for exactly the
--    rows claimed, so a rate limit holds across relays.
-- 3. outbox.next_due_ms(targets) answers for the targets the relay can take
--    now, gate included. The old form counted rows of disabled and saturated
--    targets, so a relay woke every millisecond to claim nothing.
-- 4. outbox.target_event: a relay reports what it saw (failures enough to
--    open the circuit, a probe's result, 410 Gone, a Retry-After).
-- 5. The retry budget is retired. It counted retries against first
--    attempts; after an outage there are no first attempts, so a recovered
--    target got one retry per second, and every refused retry was written
--    back to the table to be claimed again. A failing target now gets fewer
--    requests through the circuit and the relay's adaptive window, and
--    nothing is claimed that will not be sent. The relay of this release
--    reads neither retry_budget_ratio/floor nor outbox.defer and the old
--    outbox.next_due_ms(); they stay, unused, so that the previous release's
--    relay still runs against this schema during a rollback (deploy/README.md,
--    "Roll back"), and a later migration drops them.
-- 6. The retry horizon is time: targets.retry_for (default 3 days), with
--    max_attempts an optional cap (NULL by default). Existing targets keep
--    the max_attempts they have; set it to NULL to retry for retry_for.
--    Concurrency defaults are aligned with the relay's: 1024 per target.

-- ---------------------------------------------------------------------------
-- targets: new settings, the budget dropped

DROP VIEW outbox.target_health;   -- recreated below without the budget, with the circuit

ALTER TABLE outbox.targets
    ADD COLUMN rate_limit_per_s real CHECK (rate_limit_per_s > 0 AND rate_limit_per_s <= 1000000),
    ADD COLUMN retry_for interval NOT NULL DEFAULT '3 days' CHECK (retry_for > '0'),
    ADD COLUMN circuit_failure_threshold integer NOT NULL DEFAULT 10
        CHECK (circuit_failure_threshold BETWEEN 1 AND 100000),
    ADD COLUMN circuit_probe_max_ms integer NOT NULL DEFAULT 30000
        CHECK (circuit_probe_max_ms BETWEEN 100 AND 3600000);
ALTER TABLE outbox.targets
    ALTER COLUMN max_attempts DROP NOT NULL,
    ALTER COLUMN max_attempts SET DEFAULT NULL,
    ALTER COLUMN max_in_flight SET DEFAULT 1024;
COMMENT ON COLUMN outbox.targets.rate_limit_per_s IS
    'Requests per second to this target, all relays together (NULL = unlimited). No 1-second window carries more than 1.025 x this, plus one.';
COMMENT ON COLUMN outbox.targets.retry_for IS
    'Retry horizon: an intent not sent, or told to retry later, is retried until this long after its first attempt.';
COMMENT ON COLUMN outbox.targets.max_attempts IS
    'Optional cap on attempts (NULL = none: retry_for bounds the retries).';
COMMENT ON COLUMN outbox.targets.circuit_failure_threshold IS
    'Consecutive failures not of the intent''s making (refused, timeout, reset, 5xx) that open the circuit.';
COMMENT ON COLUMN outbox.targets.retry_budget_ratio IS
    'Retired in 0009 (read only by relays of earlier releases; to be dropped).';
COMMENT ON COLUMN outbox.targets.retry_budget_floor IS
    'Retired in 0009 (read only by relays of earlier releases; to be dropped).';
COMMENT ON COLUMN outbox.targets.circuit_probe_max_ms IS
    'While the circuit is open, one probe goes after 1 s, then at doubling intervals up to this.';

-- ---------------------------------------------------------------------------
-- 1. target_state

CREATE TABLE outbox.target_state (
    target           text PRIMARY KEY REFERENCES outbox.targets (name) ON DELETE CASCADE ON UPDATE CASCADE,
    circuit          text NOT NULL DEFAULT 'closed' CHECK (circuit IN ('closed', 'open', 'half_open')),
    circuit_since    timestamptz NOT NULL DEFAULT now(),
    circuit_reason   text,
    probe_interval_ms integer NOT NULL DEFAULT 0,
    probe_at         timestamptz,   -- open: the next probe may go then
    probe_owner      text,          -- half_open: the relay whose probe is out
    probe_expires_at timestamptz,   -- half_open: after this, another relay may probe
    paused_until     timestamptz,   -- a 429/503 with Retry-After paused the whole target
    tokens           double precision, -- rate limit: tokens at tokens_at (NULL = a full bucket)
    tokens_at        timestamptz,
    CHECK (circuit <> 'open' OR probe_at IS NOT NULL),
    CHECK (circuit <> 'half_open' OR (probe_owner IS NOT NULL AND probe_expires_at IS NOT NULL))
);
COMMENT ON TABLE outbox.target_state IS
    'Flow control state shared by all relays: circuit breaker, Retry-After pause, rate-limit tokens. Written by outbox.claim and outbox.target_event.';

INSERT INTO outbox.target_state (target) SELECT name FROM outbox.targets;

CREATE FUNCTION outbox.targets_state_row() RETURNS trigger
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
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER targets_state_insert AFTER INSERT ON outbox.targets
    FOR EACH ROW EXECUTE FUNCTION outbox.targets_state_row();
CREATE TRIGGER targets_state_enable AFTER UPDATE OF enabled ON outbox.targets
    FOR EACH ROW WHEN (NEW.enabled AND NOT OLD.enabled) EXECUTE FUNCTION outbox.targets_state_row();

-- The rate limit's bucket: a burst of 2.5 % of a second's worth (at least one
-- token), and a claim waits for half of it, so that a rate-limited target is
-- claimed in handfuls rather than one row per statement.
CREATE FUNCTION outbox.rate_burst(p_rate real) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$ SELECT greatest(1.0, p_rate * 0.025) $$;
CREATE FUNCTION outbox.rate_claim_at_least(p_rate real) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$ SELECT greatest(1.0, floor(outbox.rate_burst(p_rate) / 2)) $$;

-- ---------------------------------------------------------------------------
-- 2. claim, gated

DROP FUNCTION outbox.claim(text, text[], integer[], integer, integer);
CREATE FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                             p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    g        record;
    a        double precision;
BEGIN
    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows.
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        IF g.paused_until > now() THEN
            rooms[g.ord] := 0;
        ELSIF (g.circuit = 'open' AND g.probe_at <= now())
           OR (g.circuit = 'half_open' AND g.probe_expires_at <= now()) THEN
            rooms[g.ord] := least(rooms[g.ord], 1);   -- one probe, by this relay
            probing := probing || g.target;
        ELSIF g.circuit <> 'closed' THEN
            rooms[g.ord] := 0;
        END IF;
        IF g.rate IS NOT NULL AND rooms[g.ord] > 0 THEN
            a := least(outbox.rate_burst(g.rate),
                       coalesce(g.tokens + g.rate * extract(epoch FROM now() - g.tokens_at),
                                outbox.rate_burst(g.rate)));
            IF a < outbox.rate_claim_at_least(g.rate) THEN
                rooms[g.ord] := 0;   -- next_due_ms says when there will be enough
            ELSE
                rooms[g.ord] := least(rooms[g.ord], floor(a)::integer);
            END IF;
            metered := metered || g.target;
            avail := avail || a;
        END IF;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT c.id
          FROM unnest(p_targets, rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    ), claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               updated_at = now()
          FROM due
         WHERE i.id = due.id
        RETURNING i.id, i.key, i.target, i.payload::text AS payload, i.attempts, i.ambiguous,
                  (extract(epoch FROM i.first_attempt_at) * 1000)::bigint AS first_attempt_ms
    ), probed AS (
        -- A probe is out only if a row was claimed for it.
        UPDATE outbox.target_state s
           SET circuit = 'half_open', probe_owner = p_relay,
               probe_expires_at = now() + p_lease_ms * interval '1 millisecond'
         WHERE s.target = ANY (probing) AND EXISTS (SELECT 1 FROM claimed c WHERE c.target = s.target)
        RETURNING s.target
    ), spent AS (
        UPDATE outbox.target_state s
           SET tokens = m.avail - (SELECT count(*) FROM claimed c WHERE c.target = s.target),
               tokens_at = now()
          FROM unnest(metered, avail) AS m(target, avail)
         WHERE s.target = m.target
        RETURNING s.target
    )
    SELECT c.id, c.key, c.target, c.payload, c.attempts, c.ambiguous, c.first_attempt_ms,
           c.target = ANY (probing)
      FROM claimed c;
END
$$;

-- ---------------------------------------------------------------------------
-- 3. next_due_ms for the targets a relay can take

-- When a target's gate opens: the probe time of an open circuit, the expiry
-- of another relay's probe, the end of a pause, the time the bucket holds
-- enough tokens for a claim. NULL: no gate. Never later than an hour from now
-- (a 410 opens the circuit until an admin acts; the poll covers that).
CREATE FUNCTION outbox.target_gate(s outbox.target_state, p_rate real) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN g.at IS NOT NULL THEN least(now() + interval '1 hour', g.at) END
      FROM (SELECT greatest(
                CASE s.circuit WHEN 'open' THEN s.probe_at WHEN 'half_open' THEN s.probe_expires_at END,
                s.paused_until,
                CASE WHEN p_rate IS NOT NULL AND s.tokens IS NOT NULL
                          AND s.tokens < outbox.rate_claim_at_least(p_rate)
                     THEN s.tokens_at + (outbox.rate_claim_at_least(p_rate) - s.tokens) / p_rate * interval '1 second'
                END) AS at) AS g
$$;

-- In ms from now, the earliest of: a pending row of one of p_targets (the
-- targets this relay has room for) that is due and whose gate is open; an
-- in_flight lease that will expire (take-over); an unknown row to reconcile
-- through a status URL. NULL when there is none.
CREATE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT CASE WHEN due IS NOT NULL
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
END
$$;

-- ---------------------------------------------------------------------------
-- 4. target_event: what a relay saw

-- p_event:
--   open            consecutive failures reached the threshold: closed → open
--                   (an open or half-open circuit is left as it is)
--   probe_failed    this relay's probe failed: half_open → open, the interval doubled
--   probe_succeeded this relay's probe succeeded: half_open → closed
--   gone            410 Gone: open until an admin enables the target again, which
--                   is set to enabled = false here (the Standard Webhooks convention)
--   pause           Retry-After on a 429 or 503: no claim for p_ms
-- Returns the circuit after the event, and ms until its gate opens.
CREATE FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer)
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

COMMENT ON FUNCTION outbox.next_due_ms() IS
    'Retired in 0009: counts rows the relay will not claim. Kept for relays of earlier releases.';
COMMENT ON FUNCTION outbox.defer(text, bigint[], integer[], integer) IS
    'Retired in 0009 with the retry budget. Kept for relays of earlier releases.';

-- ---------------------------------------------------------------------------
-- Views: the circuit in target_health and in stuck

CREATE VIEW outbox.target_health AS
WITH live_rows AS (        -- every row not final, each state through its partial index (0001)
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'awaiting_approval'
), settled_rows AS (       -- intents_settled: rows that reached a final state in the last 5 minutes
    SELECT i.id, i.target, i.state
      FROM outbox.intents i
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at > now() - interval '5 minutes'
), live AS (
    SELECT l.target,
           count(*) FILTER (WHERE l.state = 'pending') AS pending,
           count(*) FILTER (WHERE l.state = 'in_flight') AS in_flight,
           count(*) FILTER (WHERE l.state = 'unknown') AS unknown,
           count(*) FILTER (WHERE l.state = 'awaiting_approval') AS awaiting_approval,
           min(l.next_attempt_at) FILTER (WHERE l.state = 'pending' AND l.next_attempt_at <= now()) AS oldest_due
      FROM live_rows l GROUP BY l.target
), settled AS (
    SELECT s.target,
           count(*) FILTER (WHERE s.state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE s.state = 'failed') AS failed,
           count(*) FILTER (WHERE s.state = 'cancelled') AS cancelled
      FROM settled_rows s GROUP BY s.target
), recent_intents AS (
    -- As in 0007: the intents that can have an attempt in the last 5 minutes.
    SELECT s.id, s.target FROM settled_rows s
    UNION ALL
    SELECT l.id, l.target FROM live_rows l WHERE l.updated_at > now() - interval '5 minutes'
), deliveries AS (         -- attempts_at: delivery attempts of the last 5 minutes
    SELECT r.target,
           count(*) AS n,
           count(*) FILTER (WHERE a.class = 'succeeded') AS succeeded,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) FILTER (WHERE a.class = 'succeeded') AS p95_ok_ms
      FROM outbox.attempts a
      JOIN recent_intents r ON r.id = a.intent_id
     WHERE a.at > now() - interval '5 minutes'
       AND a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict', 'permanent_failure')
     GROUP BY r.target
)
SELECT t.name AS target,
       t.enabled,
       coalesce(l.pending, 0) AS pending,
       coalesce(l.in_flight, 0) AS in_flight,
       coalesce(l.unknown, 0) AS unknown,
       coalesce(l.awaiting_approval, 0) AS awaiting_approval,
       coalesce(s.succeeded, 0) AS succeeded_5m,
       coalesce(s.failed, 0) AS failed_5m,
       coalesce(s.cancelled, 0) AS cancelled_5m,
       coalesce(d.n, 0) AS attempts_5m,
       coalesce(d.succeeded, 0) AS attempts_succeeded_5m,
       round(d.succeeded::numeric / nullif(d.n, 0), 4) AS success_ratio_5m,
       round(d.p95_ms::numeric, 1) AS p95_latency_ms_5m,
       round(d.p95_ok_ms::numeric, 1) AS p95_succeeded_latency_ms_5m,
       coalesce(now() - l.oldest_due, interval '0') AS oldest_pending_age,
       coalesce(ts.circuit, 'closed') AS circuit,
       ts.circuit_since,
       ts.circuit_reason,
       CASE WHEN ts.circuit = 'open' AND ts.probe_at < 'infinity' THEN ts.probe_at END AS next_probe_at,
       CASE WHEN ts.paused_until > now() THEN ts.paused_until END AS paused_until,
       t.rate_limit_per_s
  FROM outbox.targets t
  LEFT JOIN outbox.target_state ts ON ts.target = t.name
  LEFT JOIN live l ON l.target = t.name
  LEFT JOIN settled s ON s.target = t.name
  LEFT JOIN deliveries d ON d.target = t.name;
COMMENT ON VIEW outbox.target_health IS
    'Per target: live rows by state; rows settled, delivery attempts, success ratio and p95 latency over the last 5 minutes; '
    'the age of the oldest due pending row; the circuit breaker (closed, open, half_open) and since when, a Retry-After pause, the rate limit.';
COMMENT ON COLUMN outbox.target_health.oldest_pending_age IS
    'How long the oldest due pending row has waited past its due time (0 when none is due): the target''s lag.';
COMMENT ON COLUMN outbox.target_health.success_ratio_5m IS
    'Delivery attempts of class succeeded / all delivery attempts (not reconciliations or decisions), last 5 minutes; NULL without any.';
COMMENT ON COLUMN outbox.target_health.p95_latency_ms_5m IS
    'p95 (percentile_cont, to 0.1 ms) of latency_ms over the delivery attempts of the last 5 minutes; NULL without any.';
COMMENT ON COLUMN outbox.target_health.circuit IS
    'closed: delivering; open: the target failed repeatedly (or answered 410), nothing is claimed but one probe at a time; '
    'half_open: a probe is out. Shared by all relays (outbox.target_state).';

CREATE OR REPLACE VIEW outbox.stuck AS
SELECT i.key, i.target, i.state, s.reason, now() - i.created_at AS age, i.attempts, i.last_error,
       i.updated_at
  FROM outbox.intents i
  LEFT JOIN outbox.target_state ts ON ts.target = i.target AND ts.circuit <> 'closed'
 CROSS JOIN LATERAL (SELECT CASE
        WHEN i.state = 'in_flight' AND i.lease_expires_at < now() THEN 'in flight past its lease'
        WHEN i.state = 'unknown' THEN 'outcome unknown'
        WHEN i.state = 'pending' AND ts.target IS NOT NULL
            THEN 'target unavailable since ' || to_char(ts.circuit_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                 || ' UTC (circuit ' || ts.circuit || coalesce(': ' || ts.circuit_reason, '') || ')'
        WHEN i.state = 'pending' THEN 'pending for over 5 minutes'
        WHEN i.state = 'awaiting_approval' THEN 'awaiting approval for over 24 hours'
    END AS reason) AS s
 WHERE (i.state = 'in_flight' AND i.lease_expires_at < now())
    OR i.state = 'unknown'
    OR (i.state = 'pending' AND (ts.target IS NOT NULL OR i.next_attempt_at < now() - interval '5 minutes'))
    OR (i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours');
COMMENT ON VIEW outbox.stuck IS
    'Keys that need a look: in flight past the lease, unknown, pending while the target''s circuit is open or over 5 minutes past due, awaiting approval over 24 hours.';

-- ---------------------------------------------------------------------------
-- grants (0005's roles)

-- Internals of claim, next_due_ms and target_event (which run as the owner): nobody calls them.
REVOKE ALL ON FUNCTION outbox.rate_burst(real), outbox.rate_claim_at_least(real),
                       outbox.target_gate(outbox.target_state, real)
       FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.claim(text, text[], integer[], integer, integer),
                       outbox.next_due_ms(text[]),
                       outbox.target_event(text, text, text, text, integer),
                       outbox.targets_state_row()
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.claim(text, text[], integer[], integer, integer),
                          outbox.next_due_ms(text[]),
                          outbox.target_event(text, text, text, text, integer)
      TO outbox_relay;
GRANT SELECT ON outbox.target_state TO outbox_relay, outbox_operator;
REVOKE ALL ON outbox.target_health FROM PUBLIC;
GRANT SELECT ON outbox.target_health TO outbox_operator;

-- ==================================================================== 10. from 0010_hardening.sql

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
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET outbox.in_enqueue = 'on' AS $$
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

-- ==================================================================== 11. from 0011_relay_hardening.sql

-- 0011: the relay's writes, hardened (issue "Hardening", items 5, 6 and 14).
--
-- 1. outbox.record keeps at most one outcome per row and batch. A batch that
--    held two outcomes of one row (a finished delivery and a take-over of
--    the same lease, when the record connection was held down) applied one
--    of them and wrote every history row with recorded = true. Now the row
--    takes one outcome (a delivery's before a take-over's, then the first
--    buffered) and the other history rows say recorded = false.
-- 2. outbox.record skips outcomes of intents that no longer exist (deleted by
--    hand): their history rows would break the attempts → intents reference
--    (0008) and with it the whole batch, so that one missing row made every
--    other outcome of the batch wait, then end as a take-over. The relay
--    also isolates any other failing outcome by halving its batch.
-- 3. outbox.take_over_expired(relay, limit, lease, held): never the rows the
--    caller still holds (delivering, or finished and waiting to be recorded),
--    whatever their lease says: a relay whose record connection was down
--    took its own finished rows over as "lease expired".
-- 4. attempts.key_sent: whether the request carried the idempotency key. A
--    decision that a re-send is safe reads the key header at the time of the
--    attempt, not the target's current one: a target switched to keyed after
--    a keyless attempt that may have executed cannot recognise that attempt.
--    outbox.retry_now refuses such a row. NULL: not known (rows before 0011,
--    and lease take-overs, where the dead relay's request is not known; those
--    keep following the target's header, as before).
--
-- 5. targets.secret_env names a variable of the prefix OUTBOX_SECRET_ (the
--    relay reads no other): a row naming DATABASE_URL would have made the
--    database password a signing key. NOT VALID: existing rows are kept (the
--    relay refuses to read them and logs target_secret_refused); new and
--    changed rows must comply. Static header values may be {"env": "NAME"}
--    with the same prefix, so that credentials stay out of the table.
--
-- The previous signatures (record with 12 arrays, take_over_expired with 3
-- arguments) stay for relays of the previous release during a rollback.

ALTER TABLE outbox.attempts ADD COLUMN key_sent boolean;

ALTER TABLE outbox.targets ADD CONSTRAINT targets_secret_env_prefix
    CHECK (secret_env ~ '^OUTBOX_SECRET_[A-Za-z0-9_]+$') NOT VALID;
COMMENT ON COLUMN outbox.targets.secret_env IS
    'Name of the relay environment variable holding the signing secret (never the secret itself); it must start with OUTBOX_SECRET_.';
COMMENT ON COLUMN outbox.attempts.key_sent IS
    'The request carried the idempotency key header (NULL: not known: before migration 0011, lease take-overs, decisions).';

-- ---------------------------------------------------------------------------
-- 1, 2, 4. record

CREATE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
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
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o IN
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
        RETURNING u.ord
    LOOP
        applied[o] := true;
        updated := updated + 1;
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
    RETURN updated;
END
$$;
COMMENT ON FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                                  outbox.attempt_class[], boolean[], integer[], text[], integer[], text[], boolean[]) IS
    'Apply a batch of attempt outcomes, fenced by (lease owner, attempt); at most one per row; every attempt in the history. Returns rows updated.';

-- ---------------------------------------------------------------------------
-- 3. take_over_expired, never the caller's own live rows

CREATE FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[])
RETURNS TABLE (id bigint, key text, target text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, previous_owner text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
           AND i.id <> ALL (coalesce(p_held, '{}'))
         ORDER BY i.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM expired
     WHERE i.id = expired.id
    RETURNING i.id, i.key, i.target, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner;
END
$$;

-- ---------------------------------------------------------------------------
-- 3b. renew_leases joins the ids it is given, and skips rows locked by
--     another transaction. The relay now renews the rows it holds finished
--     too (thousands in a drain): `id = ANY (ids)` as a filter was quadratic,
--     and a renewal that waited for the record connection's transaction on
--     the same rows (locked in another order) deadlocked with it, one of the
--     two cancelled after deadlock_timeout: 1.9 s a call, a drain at a tenth
--     of its speed. A row locked right now is being recorded; it is renewed
--     next time if that record fails.

CREATE OR REPLACE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH held AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN (SELECT DISTINCT h.id FROM unnest(p_ids) AS h(id)) AS h ON h.id = i.id
         WHERE i.state = 'in_flight' AND i.lease_owner = p_relay
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
      FROM held
     WHERE i.id = held.id
    RETURNING i.id;
END
$$;

-- ---------------------------------------------------------------------------
-- 4. retry_now: a keyless attempt that may have executed is never re-sent

CREATE OR REPLACE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL) RETURNS outbox.intent_state
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

-- ---------------------------------------------------------------------------
-- grants (0005's roles)

REVOKE ALL ON FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                                     outbox.attempt_class[], boolean[], integer[], text[], integer[], text[], boolean[]),
                       outbox.take_over_expired(text, integer, integer, bigint[])
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                                        outbox.attempt_class[], boolean[], integer[], text[], integer[], text[], boolean[]),
                          outbox.take_over_expired(text, integer, integer, bigint[])
      TO outbox_relay;

-- ==================================================================== 12. from 0012_retention.sql

-- 0012: retention without re-execution (docs/design.md, "Retention").
--
-- 1. targets.retain_for (default 7 days): how long a final intent (succeeded,
--    failed, cancelled) keeps its row, payload, saved response and history.
--    targets.dedupe_window (default 30 days, never shorter than retain_for):
--    how long its key is remembered after it settled.
-- 2. outbox.tombstones: what a pruned intent leaves behind, one narrow row per
--    key: a hash of the key, the target, a hash prefix of the fingerprint,
--    the final state and HTTP status, when it settled and when it was pruned.
--    enqueue answers a remembered key from it and never delivers it again
--    (the same arguments) or refuses it (OR001, other arguments); outcome
--    answers from it. After dedupe_window the tombstone goes and the key is
--    forgotten.
--    Why a hash of the key: the tombstone is only ever looked up by equality,
--    and 16 bytes of SHA-256 are narrower than most keys (a run id and a step
--    id are 40 to 80 bytes) in the row and in the index. Two keys share a
--    hash with a probability of about n^2 / 2^129: 10^-18 for the 31 billion
--    keys of a year at 1,000/s. The price: a tombstone does not say its key
--    in clear; outbox.outcome(key) still finds it.
-- 3. outbox.prune(limit) deletes at most limit final intents whose retention
--    ended (with their attempts, through the trigger of 0008) and writes
--    their tombstones in the same statement, then forgets at most limit
--    expired tombstones. One short transaction per call, rows taken with
--    SKIP LOCKED, never a live row: claim, record and enqueue of other keys
--    never wait for it. One caller at a time (a transaction-level advisory
--    lock; a second caller returns at once). The relay calls it every minute
--    (--prune-interval-ms) until a call prunes less than its limit;
--    `outbox-relay prune` does the same once, and --dry-run reads
--    outbox.prunable() instead.
--    Intents linked by a compensation are pruned together, when every intent
--    of the link is prunable.
-- 4. intents_target_settled (target, updated_at) over final rows replaces
--    intents_target (0010): prune finds a target's oldest final rows through
--    it, and the target guard of 0010 still finds any final row of a target.
--    Same entries, one more column: a record that settles a row writes as
--    many index entries as before. Built here under the SHARE lock of the
--    migration's transaction (enqueue and record wait for it: about a second
--    per million final rows).
--
-- The tables are not partitioned; docs/design.md, "Retention", gives the
-- measurements behind that choice.

ALTER TABLE outbox.targets
    ADD COLUMN retain_for interval NOT NULL DEFAULT '7 days' CHECK (retain_for >= '1 second'),
    ADD COLUMN dedupe_window interval NOT NULL DEFAULT '30 days',
    ADD CONSTRAINT targets_dedupe_window_covers_retention CHECK (dedupe_window >= retain_for);
COMMENT ON COLUMN outbox.targets.retain_for IS
    'How long a final intent (succeeded, failed, cancelled) keeps its row, payload, response and history before outbox.prune removes them.';
COMMENT ON COLUMN outbox.targets.dedupe_window IS
    'How long a key is remembered after its intent settled (a tombstone once pruned): an enqueue of it within the window never delivers again. At least retain_for.';

CREATE TABLE outbox.tombstones (
    key_hash        bytea NOT NULL,                -- first 16 bytes of sha256(key)
    intent_id       bigint NOT NULL,
    target          text NOT NULL,
    fingerprint     bytea NOT NULL,                -- first 16 bytes of the intent's fingerprint
    state           outbox.intent_state NOT NULL CHECK (state IN ('succeeded', 'failed', 'cancelled')),
    response_status integer,
    settled_at      timestamptz NOT NULL,
    pruned_at       timestamptz NOT NULL DEFAULT now(),
    forget_at       timestamptz NOT NULL
);
COMMENT ON TABLE outbox.tombstones IS
    'Keys of pruned intents, remembered until forget_at (settled_at + dedupe_window): enqueue and outcome answer from them.';
CREATE INDEX tombstones_key ON outbox.tombstones (key_hash);
-- BRIN: tombstones are written roughly in forget_at order, and a BRIN entry
-- costs nothing per row (a B-tree entry per tombstone was a fifth of a
-- prune step).
CREATE INDEX tombstones_forget ON outbox.tombstones USING brin (forget_at);

CREATE INDEX intents_target_settled ON outbox.intents (target, updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
DROP INDEX outbox.intents_target;

-- ---------------------------------------------------------------------------
-- 5. The references to intents.key, checked without per-row triggers on delete
--
-- A prune deletes thousands of rows per statement. The two foreign keys on
-- intents.key (intents.compensates, mismatches.key) ran one query per deleted
-- row, and the history trigger of 0008 joined its transition table by hash
-- over the whole attempts table: three quarters of a prune's time (5,000 rows:
-- 284 ms, of which 200 in those). Now one statement-level trigger deletes the
-- attempts and mismatches of deleted intents by index and refuses a delete
-- that leaves a compensation pointing at nothing (23503, as the foreign key
-- did). outbox.compensate, the writer of compensates, takes the lock the
-- foreign key took (FOR KEY SHARE on the original) before it links, so a
-- concurrent prune waits or is waited for. No row-level trigger: the insert
-- path of intents has none (tests/sql/01_schema.sql). Not checked any more:
-- a superuser who sets compensates by hand, and a mismatch that enqueue
-- (keep_original) records while the same key is pruned (an audit row left
-- without its intent).

ALTER TABLE outbox.intents DROP CONSTRAINT intents_compensates_fkey;
ALTER TABLE outbox.mismatches DROP CONSTRAINT mismatches_key_fkey;
CREATE INDEX mismatches_key ON outbox.mismatches (key);

CREATE OR REPLACE FUNCTION outbox.intents_delete_history() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ids      bigint[];
    keys     text[];
    dangling text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE outbox.attempts, outbox.mismatches;
        RETURN NULL;
    END IF;
    SELECT array_agg(o.id), array_agg(o.key) INTO ids, keys FROM old_intents o;
    DELETE FROM outbox.attempts a WHERE a.intent_id = ANY (ids);
    DELETE FROM outbox.mismatches m WHERE m.key = ANY (keys);
    SELECT c.key INTO dangling FROM outbox.intents c WHERE c.compensates = ANY (keys) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.intents: intent % compensates a deleted intent', quote_literal(dangling)
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'intents.compensates names the key of an existing intent; delete both together.';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.intents_delete_history() IS
    'Deleting intents deletes their attempts and mismatches, and refuses to leave a compensation without its original (0012; replaces ON DELETE CASCADE and the foreign keys on intents.key).';

-- compensate as in 0010, the original locked.
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

-- The hash a tombstone is found by.
CREATE FUNCTION outbox.key_hash(p_key text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16)
$$;

-- ---------------------------------------------------------------------------
-- 3. prune

-- Deletes the intents of p_ids (locked by the caller), their attempts and
-- mismatches (outbox.intents_delete_history), and writes their tombstones;
-- p_dedupe_window NULL: each intent's target's. Returns how many.
-- By primary key from an array: a join would let the planner hash the
-- whole table.
CREATE FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval)
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
        RETURNING i.id, i.key, i.target, i.fingerprint, i.state, i.response_status, i.updated_at
    )
    INSERT INTO outbox.tombstones (key_hash, intent_id, target, fingerprint, state, response_status,
                                   settled_at, forget_at)
    SELECT outbox.key_hash(g.key), g.id, g.target, substring(g.fingerprint FROM 1 FOR 16), g.state,
           g.response_status, g.updated_at,
           g.updated_at + coalesce(p_dedupe_window,
                                   (SELECT t.dedupe_window FROM outbox.targets t WHERE t.name = g.target))
      FROM gone g;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The final rows of one target whose retention ended, oldest first, that no
-- compensation links (those go through outbox.prune_linked).
CREATE FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval,
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
             ORDER BY i.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    RETURN outbox.prune_ids(doomed, p_dedupe_window);
END
$$;

-- Intents linked by a compensation (compensates, either end): a link is
-- pruned as a whole, once every intent in it is final and past its
-- target's retain_for; the foreign key compensates → key holds throughout.
CREATE FUNCTION outbox.prune_linked(p_limit integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    members bigint[];
    kept    bigint[];
BEGIN
    -- Candidates: prunable compensations and the prunable intents they undo.
    SELECT array_agg(DISTINCT x.id) INTO members
      FROM (SELECT c.id, o.id AS oid
              FROM outbox.intents c
              JOIN outbox.targets tc ON tc.name = c.target
              JOIN outbox.intents o ON o.key = c.compensates
              JOIN outbox.targets t_o ON t_o.name = o.target
             WHERE c.compensates IS NOT NULL
               AND c.state IN ('succeeded', 'failed', 'cancelled') AND c.updated_at < now() - tc.retain_for
               AND o.state IN ('succeeded', 'failed', 'cancelled') AND o.updated_at < now() - t_o.retain_for
             LIMIT p_limit) pairs
      CROSS JOIN LATERAL (VALUES (pairs.id), (pairs.oid)) AS x(id);
    IF members IS NULL THEN
        RETURN 0;
    END IF;
    -- Drop every member linked to an intent outside the set, until none is
    -- (a chain: a compensation of a compensation).
    LOOP
        SELECT array_agg(m.id) INTO kept
          FROM outbox.intents m
         WHERE m.id = ANY (members)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents o
                            WHERE o.key = m.compensates AND NOT (o.id = ANY (members)))
           AND NOT EXISTS (SELECT 1 FROM outbox.intents c
                            WHERE c.compensates = m.key AND NOT (c.id = ANY (members)));
        EXIT WHEN coalesce(cardinality(kept), 0) = cardinality(members);
        members := kept;
        IF members IS NULL THEN
            RETURN 0;
        END IF;
    END LOOP;

    -- All of them or none: a member locked by someone else waits for the next run.
    SELECT array_agg(l.id) INTO kept
      FROM (SELECT i.id FROM outbox.intents i WHERE i.id = ANY (members) FOR UPDATE SKIP LOCKED) l;
    IF coalesce(cardinality(kept), 0) <> cardinality(members) THEN
        RETURN 0;
    END IF;
    RETURN outbox.prune_ids(members, NULL);
END
$$;

-- One bounded step of retention: at most p_limit intents pruned and at most
-- p_limit tombstones forgotten, in the caller's (short) transaction.
-- locked = false: another session is pruning; nothing was done.
CREATE FUNCTION outbox.prune_step(p_limit integer DEFAULT 5000)
RETURNS TABLE (pruned integer, forgotten integer, locked boolean)
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
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION outbox.prune_step(integer) IS
    'One bounded step of retention (pruned intents, forgotten tombstones); call again while pruned = the limit.';

CREATE FUNCTION outbox.prune(p_limit integer DEFAULT 5000) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pruned::bigint FROM outbox.prune_step(p_limit)
$$;
COMMENT ON FUNCTION outbox.prune(integer) IS
    'Prunes at most p_limit final intents past their target''s retain_for (tombstones keep their keys); returns how many. One short transaction: call again while it returns p_limit.';

-- What a prune would remove now, per target and final state (the dry run).
-- Linked intents (compensations) are counted where every intent linked to
-- them directly is prunable too.
CREATE FUNCTION outbox.prunable()
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
     GROUP BY i.target, i.state, t.retain_for
     ORDER BY i.target, i.state
$$;
COMMENT ON FUNCTION outbox.prunable() IS 'What outbox.prune would remove now, per target and final state.';

-- ---------------------------------------------------------------------------
-- 2. enqueue and outcome answer remembered keys

-- The answer of enqueue for a key that only a tombstone remembers: the
-- remembered result for the same target and arguments, OR001 otherwise.
-- A time in the messages of retention: UTC, to the second.
CREATE FUNCTION outbox.utc_text(p_at timestamptz) RETURNS text
LANGUAGE sql STABLE STRICT AS $$
    SELECT to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;

CREATE FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea,
                                          s outbox.tombstones)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    result outbox.enqueue_result;
BEGIN
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

-- The newest tombstone of a key, if any.
CREATE FUNCTION outbox.tombstone_of(p_key text) RETURNS outbox.tombstones
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.* FROM outbox.tombstones s
     WHERE s.key_hash = outbox.key_hash(p_key) AND s.forget_at > now()
     ORDER BY s.pruned_at DESC LIMIT 1
$$;

-- enqueue as in 0010, with the tombstone checks marked "0012". A new key is
-- inserted first and then looked up among the tombstones: an intent being
-- pruned while this key is enqueued makes the INSERT wait for the prune to
-- commit, and the look that follows (a new snapshot at READ COMMITTED) then
-- sees its tombstone. At REPEATABLE READ and SERIALIZABLE the row is first
-- share-locked: a prune committed since the snapshot fails that with 40001.
CREATE OR REPLACE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                                          p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET outbox.in_enqueue = 'on' AS $$
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
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at)
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id, greatest(now(), coalesce(p_not_before, now())))
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

-- outcome as in 0002, and for a pruned key the remembered final state.
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
               WHEN 'pending' THEN 'waiting for delivery'
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
COMMENT ON FUNCTION outbox.outcome(text) IS
    'The agent-visible outcome of a key, also of a pruned one while its tombstone lasts: no row for an unknown (or forgotten) key.';

-- ---------------------------------------------------------------------------
-- Privileges

REVOKE ALL ON FUNCTION outbox.prune_ids(bigint[], interval),
                       outbox.key_hash(text), outbox.utc_text(timestamptz), outbox.prune_target(text, interval, interval, integer),
                       outbox.prune_linked(integer), outbox.prune_step(integer), outbox.prune(integer),
                       outbox.prunable(), outbox.enqueue_remembered(text, text, bytea, outbox.tombstones),
                       outbox.tombstone_of(text)
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.prune_step(integer), outbox.prune(integer) TO outbox_relay, outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.prunable() TO outbox_operator;
GRANT SELECT ON outbox.tombstones TO outbox_operator;

