/* tests/bench/designs/sql/d0e.sql — design D0e: D0 (d0.sql) with the load through the real
   outbox.enqueue(), one call per intent, to show what the function adds over a plain INSERT.
   Drain: d0.sql's, the real outbox.claim_due and outbox.record. */
\ir d0.sql
CREATE OR REPLACE PROCEDURE bench.load(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR g IN 1..n LOOP
    PERFORM outbox.enqueue('run-42:step-' || g, 'bench',
        jsonb_build_object('account', g % 1000, 'amount_cents', 2500, 'currency', 'EUR', 'reason', 'duplicate charge', 'step', g));
    IF g % 256 = 0 THEN COMMIT; END IF;
  END LOOP;
  COMMIT;
END $$;
