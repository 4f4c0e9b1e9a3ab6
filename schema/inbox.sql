-- schema/inbox.sql — the receiver-side inbox: a RECEIVING service records an idempotency
-- key and its answer in the same transaction as its effect, so a duplicate delivery gets
-- the stored answer and causes no second effect (docs/design.md, principle 4: exactly-once
-- effect = at-least-once delivery + keys + dedupe at the receiver).
--
-- Install it in the receiving service's OWN database (not the outbox database); it
-- needs nothing from outbox-relay and may be applied again (idempotent):
--     psql -d receiver_db -v ON_ERROR_STOP=1 -f schema/inbox.sql
--     GRANT USAGE ON SCHEMA inbox TO my_service;
--     GRANT SELECT, INSERT, UPDATE ON inbox.processed TO my_service;
--     GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA inbox TO my_service;   -- functions run as the caller
--
-- Use, for each request carrying a key (header Idempotency-Key), in ONE transaction:
--     BEGIN;
--     SELECT duplicate, status, response FROM inbox.begin($key, $request_json);
--       duplicate = true:  answer status/response as stored; do nothing else (COMMIT or ROLLBACK)
--       duplicate = false: the key is claimed by this transaction; go on:
--     UPDATE accounts SET balance = balance - 5 WHERE id = 42;       -- the effect
--     SELECT inbox.finish($key, 200, '{"balance": 95}');             -- the answer, stored
--     COMMIT;                                                        -- effect + answer, or neither
--   A business refusal (insufficient funds, 404) is an answer too: finish() it, so that a
--   duplicate gets the same refusal. Errors that must not stick (database down, a bug)
--   roll back: nothing is stored, and the sender's retry processes the key afresh.
--
-- Concurrent duplicates WAIT (the chosen semantics of inbox.begin): the claim is an
-- INSERT ... ON CONFLICT DO NOTHING, so a second transaction with the same key blocks on
-- the first one's uncommitted row until it ends; then it sees the stored answer (first
-- committed), or claims the key itself (first rolled back). One key, one effect, and each
-- duplicate gets the real answer without a retry. The price: a duplicate holds a
-- connection while the first transaction runs. A receiver that prefers not to wait calls
-- inbox.try_begin instead, which gives up after 100 ms with SQLSTATE IB002: answer
-- 409 Conflict (outbox-relay reads 409 from a key-honouring target as "key in use, retry
-- later").
--
-- Errors (SQLSTATE class "IB"):
--   IB001  the key was already used with a different request: answer 422 (the sender
--          reused a key for another action; outbox-relay records a key conflict)
--   IB002  try_begin only: the key is being processed by another transaction: answer 409
--   IB003  misuse: finish without a claim in this transaction, finish twice, begin twice
--          for one key in one transaction
--   IB004  an empty key, or one over 1024 bytes: answer 400
-- and at COMMIT, IB003 if a key was claimed but never finished: the transaction (and so
-- its effect) is rolled back rather than leave a key without an answer.
--
-- The request fingerprint is SHA-256 of the request as jsonb text: key order and
-- whitespace do not matter; anything else does. Rows grow with traffic: run
-- inbox.prune(interval) now and then with an age well past the senders' key lifetime
-- (outbox-relay: the target's key_ttl, default 24 hours).

CREATE SCHEMA IF NOT EXISTS inbox;
COMMENT ON SCHEMA inbox IS 'Receiver-side inbox: idempotency keys and their stored answers, written with the effect.';

CREATE TABLE IF NOT EXISTS inbox.processed (
    key                 text PRIMARY KEY CHECK (key <> '' AND octet_length(key) <= 1024),
    request_fingerprint bytea NOT NULL,
    status              integer CHECK (status BETWEEN 100 AND 599),
    response            jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    CHECK ((status IS NULL) = (finished_at IS NULL))
);
COMMENT ON TABLE inbox.processed IS
    'One row per idempotency key acted on: the request fingerprint and the stored answer, committed with the effect.';
CREATE INDEX IF NOT EXISTS processed_finished_at ON inbox.processed (finished_at);

CREATE OR REPLACE FUNCTION inbox.fingerprint(p_request jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'))
$$;

CREATE OR REPLACE FUNCTION inbox.check_key(p_key text, p_operation text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'inbox.%: the idempotency key must not be empty', p_operation
            USING ERRCODE = 'IB004', HINT = 'Answer 400: the request has no Idempotency-Key.';
    END IF;
    IF octet_length(p_key) > 1024 THEN
        RAISE EXCEPTION 'inbox.%: the idempotency key is % bytes long; the limit is 1024', p_operation, octet_length(p_key)
            USING ERRCODE = 'IB004';
    END IF;
END
$$;

-- The answer to a key already processed, or the claim. See the header for the semantics.
CREATE OR REPLACE FUNCTION inbox.begin(p_key text, p_request jsonb)
RETURNS TABLE (duplicate boolean, status integer, response jsonb)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    fp      bytea := inbox.fingerprint(p_request);
    claimed integer;
    row     inbox.processed;
BEGIN
    PERFORM inbox.check_key(p_key, 'begin');
    -- Waits for an uncommitted claim of the same key by another transaction.
    INSERT INTO inbox.processed (key, request_fingerprint) VALUES (p_key, fp)
    ON CONFLICT (key) DO NOTHING;
    GET DIAGNOSTICS claimed = ROW_COUNT;
    IF claimed = 1 THEN
        RETURN QUERY SELECT false, NULL::integer, NULL::jsonb;
        RETURN;
    END IF;

    SELECT * INTO row FROM inbox.processed p WHERE p.key = p_key;
    IF NOT FOUND THEN
        -- Committed after this transaction's snapshot (REPEATABLE READ or SERIALIZABLE).
        RAISE EXCEPTION 'inbox.begin: key % was processed by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;
    IF row.request_fingerprint <> fp THEN
        RAISE EXCEPTION 'inbox.begin: key % was already used with a different request', quote_literal(p_key)
            USING ERRCODE = 'IB001',
                  HINT = 'Answer 422: an idempotency key names one request; a new request needs a new key.';
    END IF;
    IF row.status IS NULL THEN
        RAISE EXCEPTION 'inbox.begin: key % was claimed earlier in this transaction and has no answer yet', quote_literal(p_key)
            USING ERRCODE = 'IB003', HINT = 'Call inbox.begin once per key and transaction, then inbox.finish.';
    END IF;
    RETURN QUERY SELECT true, row.status, row.response;
END
$$;
COMMENT ON FUNCTION inbox.begin(text, jsonb) IS
    'Claim an idempotency key in this transaction (duplicate = false), or return its stored answer (duplicate = true). '
    'Waits for a concurrent claim of the same key to end. IB001: the key came with a different request.';

-- As inbox.begin, but gives up after 100 ms when another transaction holds the key: IB002 (answer 409).
CREATE OR REPLACE FUNCTION inbox.try_begin(p_key text, p_request jsonb)
RETURNS TABLE (duplicate boolean, status integer, response jsonb)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS $$
BEGIN
    RETURN QUERY SELECT * FROM inbox.begin(p_key, p_request);
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION 'inbox.try_begin: key % is being processed by another transaction', quote_literal(p_key)
        USING ERRCODE = 'IB002', HINT = 'Answer 409 Conflict; the sender retries later with the same key.';
END
$$;
COMMENT ON FUNCTION inbox.try_begin(text, jsonb) IS
    'inbox.begin without a long wait: IB002 (answer 409) when another transaction is processing the key.';

-- Store the answer of a key claimed by inbox.begin in this transaction.
CREATE OR REPLACE FUNCTION inbox.finish(p_key text, p_status integer, p_response jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row inbox.processed;
BEGIN
    PERFORM inbox.check_key(p_key, 'finish');
    IF p_status IS NULL OR p_status NOT BETWEEN 100 AND 599 THEN
        RAISE EXCEPTION 'inbox.finish: the status must be an HTTP status (100..599), got %', coalesce(p_status::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    UPDATE inbox.processed p
       SET status = p_status, response = p_response, finished_at = now()
     WHERE p.key = p_key AND p.status IS NULL
    RETURNING * INTO row;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'inbox.finish: key % %', quote_literal(p_key),
                        CASE WHEN EXISTS (SELECT 1 FROM inbox.processed p WHERE p.key = p_key)
                             THEN 'already has an answer' ELSE 'was not claimed: call inbox.begin first, in this transaction' END
            USING ERRCODE = 'IB003';
    END IF;
END
$$;
COMMENT ON FUNCTION inbox.finish(text, integer, jsonb) IS
    'Store the answer (HTTP status and JSON body) of a key claimed by inbox.begin in this transaction.';

-- The stored answer of a key, for a status endpoint (GET .../by-key/{key}): no row if not processed.
CREATE OR REPLACE FUNCTION inbox.lookup(p_key text)
RETURNS TABLE (status integer, response jsonb, finished_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.status, p.response, p.finished_at FROM inbox.processed p WHERE p.key = p_key AND p.status IS NOT NULL
$$;

-- Forget answers older than p_age (well past the senders' key lifetime). Returns how many.
CREATE OR REPLACE FUNCTION inbox.prune(p_age interval) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF p_age IS NULL OR p_age < interval '1 hour' THEN
        RAISE EXCEPTION 'inbox.prune: keep answers for at least an hour (got %)', coalesce(p_age::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'Keep them longer than any sender may retry a key (outbox-relay: key_ttl).';
    END IF;
    DELETE FROM inbox.processed WHERE finished_at < now() - p_age;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- A claim must not commit without its answer: checked at COMMIT, for every claimed key.
CREATE OR REPLACE FUNCTION inbox.claim_finished() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inbox.processed p WHERE p.key = NEW.key AND p.status IS NULL) THEN
        RAISE EXCEPTION 'inbox: key % was claimed (inbox.begin) but has no answer (inbox.finish) at commit', quote_literal(NEW.key)
            USING ERRCODE = 'IB003', HINT = 'Call inbox.finish before COMMIT, or roll back.';
    END IF;
    RETURN NULL;
END
$$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'inbox.processed'::regclass AND tgname = 'processed_finished_at_commit') THEN
        CREATE CONSTRAINT TRIGGER processed_finished_at_commit AFTER INSERT ON inbox.processed
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION inbox.claim_finished();
    END IF;
END
$$;
