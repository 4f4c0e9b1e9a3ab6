/* tests/bench/designs/sql/d2bf.sql — design D2bf: D2b (d2b.sql) with q.queue at fillfactor 50.
   Claim HOT on intents: no index of q.intents mentions a column the claim changes.
   q.intents gets a settled_at column; it keeps pkey, key_key, compensates, run (q_common.sql) and
   intents_target_settled (target, settled_at) WHERE settled_at IS NOT NULL; due, in_flight,
   unknown, awaiting and ordering are dropped (they would move to the queue).
   Load: the INSERT into q.intents (as d0.sql) plus an INSERT into q.queue.
   q.queue(intent_id PRIMARY KEY, target, due_at) and queue_due (target, due_at).
   Claim: UPDATE queue SET due_at = now() + lease for the rows found through queue_due, plus
   UPDATE q.intents SET state 'in_flight', attempts + 1, lease, first_attempt_at, key_sent,
   updated_at (HOT). The queue rows are located by their primary key.
   Record: DELETE of the queue row found by its primary key (and due_at = ANY(the lease expiries))
   + UPDATE q.intents (state succeeded, settled_at, response...; not HOT) + the attempts INSERT.
   bench.load(n): n intents with the bench payload, keys 'run-42:step-' || g, target 'bench', a
   COMMIT every 256. bench.drain(batch, marks, cpus): claim up to `batch` rows, COMMIT, record them
   as succeeded with one attempts row each, COMMIT, until nothing is due; returns the WAL LSN and
   bench.cpu_ns() at every phase boundary (before the claim, after its commit, after the record's
   commit), which measure.sql turns into claim and record figures. */
ALTER TABLE q.intents ADD COLUMN settled_at timestamptz;
CREATE INDEX intents_target_settled ON q.intents (target, settled_at) WHERE settled_at IS NOT NULL;
CREATE TABLE q.queue (intent_id bigint PRIMARY KEY, target text NOT NULL, due_at timestamptz NOT NULL) WITH (fillfactor = 50);
CREATE INDEX queue_due ON q.queue (target, due_at);
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
DECLARE ids bigint[]; atts int[]; pl text[]; ky text[]; dues timestamptz[];
BEGIN
  marks := '{}'; cpus := '{}';
  FOR k IN 1..2000 LOOP                        -- bounded: 2,000 x 256 = 512,000 intents at most (run.sh caps DESIGNS_N); 30,000 take 118
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    -- claim: the queue row's due_at := lease expiry (found by queue_due, located by its primary key); intents HOT
    WITH due AS (
      SELECT qq.intent_id AS tid FROM q.queue qq
       WHERE qq.target = 'bench' AND qq.due_at <= now()
       ORDER BY qq.due_at LIMIT batch FOR UPDATE SKIP LOCKED
    ), cq AS (
      UPDATE q.queue qq SET due_at = now() + interval '60 s' WHERE qq.intent_id = ANY (ARRAY(SELECT tid FROM due))
      RETURNING qq.intent_id, qq.due_at
    ), ci AS (
      UPDATE q.intents i
         SET state = 'in_flight', attempts = i.attempts + 1, lease_owner = 'bench-relay',
             lease_expires_at = now() + interval '60 s', first_attempt_at = coalesce(i.first_attempt_at, now()),
             key_sent = true, updated_at = now()
       WHERE i.id = ANY (ARRAY(SELECT intent_id FROM cq))
      RETURNING i.id, i.attempts, i.key, i.payload::text AS payload, i.lease_expires_at
    ) SELECT array_agg(id), array_agg(attempts), array_agg(key), array_agg(payload), array_agg(lease_expires_at)
        INTO ids, atts, ky, pl, dues FROM ci;
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    EXIT WHEN ids IS NULL;
    -- record: the queue row deleted (found by its primary key), intents settled (settled_at: not HOT), history
    WITH del AS (
      DELETE FROM q.queue qq
       WHERE qq.intent_id = ANY (ids) AND qq.due_at = ANY (ARRAY(SELECT DISTINCT unnest(dues)))
      RETURNING qq.intent_id),
    upd AS (
      UPDATE q.intents i
         SET state = 'succeeded', settled_at = now(), lease_owner = NULL, lease_expires_at = NULL,
             ambiguous = i.ambiguous OR false, response_status = 200, response_body = '{"ok":true}',
             last_error = NULL, updated_at = now()
       WHERE i.id = ANY (ids)   -- fenced by the lease owner only (a join with the attempt numbers was planned as a 256 x 256 nested loop)
         AND i.state = 'in_flight' AND i.lease_owner = 'bench-relay'
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
