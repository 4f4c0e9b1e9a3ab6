/* tests/bench/designs/sql/d0e.sql — design D0e: D0 (d0.sql) with the load through the real
   outbox.enqueue(), one call per intent, to show what the function adds over a plain INSERT.
   Drain: the real outbox.claim_due and outbox.record, as in d0.sql.
   bench.load(n): n intents with the bench payload, keys 'run-42:step-' || g, target 'bench', a
   COMMIT every 256. bench.drain(batch, marks, cpus): claim up to `batch` rows, COMMIT, record them
   as succeeded with one attempts row each, COMMIT, until nothing is due; returns the WAL LSN and
   bench.cpu_ns() at every phase boundary (before the claim, after its commit, after the record's
   commit), which measure.sql turns into claim and record figures. */
CREATE PROCEDURE bench.load(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR g IN 1..n LOOP
    PERFORM outbox.enqueue('run-42:step-' || g, 'bench',
        jsonb_build_object('account', g % 1000, 'amount_cents', 2500, 'currency', 'EUR', 'reason', 'duplicate charge', 'step', g));
    IF g % 256 = 0 THEN COMMIT; END IF;
  END LOOP;
  COMMIT;
END $$;
CREATE PROCEDURE bench.drain(batch int, INOUT marks pg_lsn[], INOUT cpus bigint[]) LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; atts int[]; ks boolean[]; pl text[]; n int;
BEGIN
  marks := '{}'; cpus := '{}';
  FOR k IN 1..2000 LOOP                        -- bounded: 2,000 x 256 = 512,000 intents at most (run.sh caps DESIGNS_N); 30,000 take 118
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    SELECT array_agg(c.id), array_agg(c.attempt), array_agg(c.key_sent), array_agg(c.payload)
      INTO ids, atts, ks, pl
      FROM outbox.claim_due('bench-relay', ARRAY['bench'], ARRAY[batch], batch, 60000) c;
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
    EXIT WHEN ids IS NULL;
    n := cardinality(ids);
    PERFORM outbox.record('bench-relay', ids, atts,
        array_fill('succeeded'::outbox.intent_state, ARRAY[n]), array_fill(0, ARRAY[n]),
        array_fill(false, ARRAY[n]), array_fill('succeeded'::outbox.attempt_class, ARRAY[n]),
        array_fill(true, ARRAY[n]), array_fill(200, ARRAY[n]), array_fill(NULL::text, ARRAY[n]),
        array_fill(3, ARRAY[n]), array_fill('{"ok":true}'::text, ARRAY[n]), ks);
    COMMIT;
    marks := marks || pg_current_wal_lsn(); cpus := cpus || bench.cpu_ns();
  END LOOP;
END $$;
CREATE VIEW bench.left AS SELECT count(*) AS n FROM outbox.intents WHERE state <> 'succeeded';
CREATE VIEW bench.sizes AS SELECT c.relname, pg_relation_size(c.oid) / 8192 AS pages FROM pg_class c
  WHERE c.relnamespace = 'outbox'::regnamespace AND (c.relname LIKE 'intents%' OR c.relname LIKE 'attempts%');
