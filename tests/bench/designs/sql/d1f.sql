/* tests/bench/designs/sql/d1f.sql — design D1f: D1 (d1.sql) with q.queue at fillfactor 50. At 100,
   most non-HOT queue updates move the new version to another page and log an extra row lock.
   q.intents keeps pkey, key_key, compensates, run (q_common.sql) and awaiting, ordering,
   target_settled, unknown (here), but not intents_due or intents_in_flight.
   q.queue(intent_id PRIMARY KEY, target, due_at, lease_owner, lease_expires_at) with
   queue_due (target, due_at) WHERE lease_owner IS NULL and
   queue_leased (lease_expires_at) WHERE lease_owner IS NOT NULL.
   Load: the INSERT into q.intents (as d0.sql) plus an INSERT into q.queue.
   Claim: UPDATE of the queue rows found through queue_due, setting the lease; q.intents is only
   read (key, payload, attempt number).
   Record: DELETE of the queue row (fenced by lease_owner) + UPDATE of q.intents (state succeeded,
   attempts + 1, first_attempt_at, key_sent, response, updated_at) + the attempts INSERT.
   bench.load(n): n intents with the bench payload, keys 'run-42:step-' || g, target 'bench', a
   COMMIT every 256. bench.drain(batch, marks, cpus): claim up to `batch` rows, COMMIT, record them
   as succeeded with one attempts row each, COMMIT, until nothing is due; returns the WAL LSN and
   bench.cpu_ns() at every phase boundary (before the claim, after its commit, after the record's
   commit), which measure.sql turns into claim and record figures. */
CREATE INDEX intents_awaiting ON q.intents (created_at) WHERE state = 'awaiting_approval';
CREATE INDEX intents_ordering ON q.intents (ordering_key, id) WHERE ordering_key IS NOT NULL AND state <> ALL (ARRAY['succeeded','cancelled']::outbox.intent_state[]);
CREATE INDEX intents_target_settled ON q.intents (target, updated_at) WHERE state = ANY (ARRAY['succeeded','failed','cancelled']::outbox.intent_state[]);
CREATE INDEX intents_unknown ON q.intents (next_attempt_at) WHERE state = 'unknown';
CREATE TABLE q.queue (intent_id bigint PRIMARY KEY, target text NOT NULL, due_at timestamptz NOT NULL,
                      lease_owner text, lease_expires_at timestamptz) WITH (fillfactor = 50);
CREATE INDEX queue_due ON q.queue (target, due_at) WHERE lease_owner IS NULL;
CREATE INDEX queue_leased ON q.queue (lease_expires_at) WHERE lease_owner IS NOT NULL;
CREATE PROCEDURE bench.load(n int) LANGUAGE plpgsql AS $$
DECLARE p jsonb; t text; new_id bigint;
BEGIN
  FOR g IN 1..n LOOP
    PERFORM set_config('outbox.in_enqueue', 'on', true);
    p := jsonb_build_object('account', g % 1000, 'amount_cents', 2500, 'currency', 'EUR', 'reason', 'duplicate charge', 'step', g);
    t := p::text;
    INSERT INTO q.intents (key, target, payload, fingerprint, state, next_attempt_at)
    VALUES ('run-42:step-' || g, 'bench', p, sha256(convert_to(t, 'UTF8')), 'pending', now()) RETURNING id INTO new_id;
    INSERT INTO q.queue (intent_id, target, due_at) VALUES (new_id, 'bench', now());
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
    -- claim: the queue row only (lease); intents is read (key, payload, attempt number), not written
    WITH due AS (
      SELECT qq.intent_id FROM q.queue qq
       WHERE qq.target = 'bench' AND qq.lease_owner IS NULL AND qq.due_at <= now()
       ORDER BY qq.due_at LIMIT batch FOR UPDATE SKIP LOCKED
    ), cl AS (
      UPDATE q.queue qq SET lease_owner = 'bench-relay', lease_expires_at = now() + interval '60 s'
       WHERE qq.intent_id = ANY (ARRAY(SELECT intent_id FROM due))
      RETURNING qq.intent_id
    ) SELECT array_agg(i.id), array_agg(i.attempts + 1), array_agg(i.key), array_agg(i.payload::text)
        INTO ids, atts, ky, pl
        FROM q.intents i WHERE i.id = ANY (ARRAY(SELECT intent_id FROM cl));
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    EXIT WHEN ids IS NULL;
    -- record: fenced by the queue row's lease; the queue row deleted, intents settled (attempts + 1 here), history
    WITH del AS (
      DELETE FROM q.queue qq WHERE qq.intent_id = ANY (ids) AND qq.lease_owner = 'bench-relay'
      RETURNING qq.intent_id),
    upd AS (
      UPDATE q.intents i
         SET state = 'succeeded', attempts = i.attempts + 1, first_attempt_at = coalesce(i.first_attempt_at, now()),
             key_sent = true, ambiguous = i.ambiguous OR false, response_status = 200, response_body = '{"ok":true}',
             last_error = NULL, updated_at = now()
       WHERE i.id = ANY (ARRAY(SELECT intent_id FROM del))
      RETURNING i.id)
    INSERT INTO q.attempts (intent_id, attempt, relay, class, request_sent, http_status, error, latency_ms,
                            response_body, key_sent, recorded)
    SELECT x.id, x.attempt, 'bench-relay', 'succeeded', true, 200, NULL, 3, '{"ok":true}', true,
           x.id IN (SELECT upd.id FROM upd)
      FROM unnest(ids, atts) WITH ORDINALITY AS x(id, attempt, ord) ORDER BY x.ord;
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
  END LOOP;
END $$;
