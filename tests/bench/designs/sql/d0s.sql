/* tests/bench/designs/sql/d0s.sql — design D0s: today's tables (as D0), but claim and record are
   hand-written statements that change the same columns as outbox.claim_due / outbox.record, in the
   same shape as D1's and D2's. It is the like-for-like CPU baseline for the queue designs, which
   are hand-written too; its WAL is the same as d0's.
   Load: a plain INSERT of the columns outbox.enqueue's fast path inserts (key, target, payload,
   fingerprint = sha256 of the payload text, state, next_attempt_at), with outbox.in_enqueue on as
   enqueue sets it (its statement trigger is skipped).
   bench.load(n): n intents with the bench payload, keys 'run-42:step-' || g, target 'bench', a
   COMMIT every 256. bench.drain(batch, marks, cpus): claim up to `batch` rows, COMMIT, record them
   as succeeded with one attempts row each, COMMIT, until nothing is due; returns the WAL LSN and
   bench.cpu_ns() at every phase boundary (before the claim, after its commit, after the record's
   commit), which measure.sql turns into claim and record figures. */
CREATE PROCEDURE bench.load(n int) LANGUAGE plpgsql AS $$
DECLARE p jsonb; t text;
BEGIN
  FOR g IN 1..n LOOP
    PERFORM set_config('outbox.in_enqueue', 'on', true);
    p := jsonb_build_object('account', g % 1000, 'amount_cents', 2500, 'currency', 'EUR', 'reason', 'duplicate charge', 'step', g);
    t := p::text;
    INSERT INTO outbox.intents (key, target, payload, fingerprint, state, next_attempt_at)
    VALUES ('run-42:step-' || g, 'bench', p, sha256(convert_to(t, 'UTF8')), 'pending', now());
    IF g % 256 = 0 THEN COMMIT; END IF;
  END LOOP;
  COMMIT;
END $$;
CREATE PROCEDURE bench.drain(batch int, INOUT marks pg_lsn[], INOUT cpus bigint[]) LANGUAGE plpgsql AS $$
-- statements written so that every row is found through an index (= ANY of an array), run with
-- plan_cache_mode = force_custom_plan (measure.sql), so that no plan joins by scanning the table.
DECLARE ids bigint[]; atts int[]; pl text[]; ky text[];
BEGIN
  marks := '{}'; cpus := '{}';
  FOR k IN 1..2000 LOOP                        -- bounded: 2,000 x 256 = 512,000 intents at most (run.sh caps DESIGNS_N); 30,000 take 118
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    WITH due AS (
      SELECT i.id FROM outbox.intents i
       WHERE i.state = 'pending' AND i.target = 'bench' AND i.next_attempt_at <= now()
       ORDER BY i.next_attempt_at LIMIT batch FOR UPDATE SKIP LOCKED
    ), cl AS (
      UPDATE outbox.intents i
         SET state = 'in_flight', attempts = i.attempts + 1, lease_owner = 'bench-relay',
             lease_expires_at = now() + interval '60 s', first_attempt_at = coalesce(i.first_attempt_at, now()),
             key_sent = true, updated_at = now()
       WHERE i.id = ANY (ARRAY(SELECT id FROM due))
      RETURNING i.id, i.attempts, i.key, i.payload::text AS payload
    ) SELECT array_agg(id), array_agg(attempts), array_agg(key), array_agg(payload) INTO ids, atts, ky, pl FROM cl;
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    EXIT WHEN ids IS NULL;
    PERFORM set_config('outbox.in_record', 'on', true);   -- as outbox.record: no reference-check query
    WITH upd AS (
      UPDATE outbox.intents i
         SET state = 'succeeded', next_attempt_at = i.next_attempt_at, lease_owner = NULL, lease_expires_at = NULL,
             ambiguous = i.ambiguous OR false, response_status = 200, response_body = '{"ok":true}',
             last_error = NULL, updated_at = now()
       WHERE i.id = ANY (ids)   -- fenced by the lease owner only (a join with the attempt numbers was planned as a 256 x 256 nested loop)
         AND i.state IN ('in_flight', 'unknown') AND i.lease_owner = 'bench-relay'
      RETURNING i.id)
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status, error, latency_ms,
                            response_body, key_sent, recorded)
    SELECT x.id, x.attempt, 'bench-relay', 'succeeded', true, 200, NULL, 3, '{"ok":true}', true,
           x.id IN (SELECT upd.id FROM upd)
      FROM unnest(ids, atts) WITH ORDINALITY AS x(id, attempt, ord) ORDER BY x.ord;
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
  END LOOP;
END $$;
CREATE VIEW bench.left AS SELECT count(*) AS n FROM outbox.intents WHERE state <> 'succeeded';
CREATE VIEW bench.sizes AS SELECT c.relname, pg_relation_size(c.oid) / 8192 AS pages FROM pg_class c
  WHERE c.relnamespace = 'outbox'::regnamespace AND (c.relname LIKE 'intents%' OR c.relname LIKE 'attempts%');
