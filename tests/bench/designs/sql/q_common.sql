/* tests/bench/designs/sql/q_common.sql — shared by the queue designs D1, D1f, D2, D2f, D2b, D2bf
   (run after common.sql, before the design's own file). Copies in schema q of this database; the
   outbox schema is migrated here too but stays empty.
   - q.intents: every column, default, CHECK and identity of outbox.intents; fillfactor 50 (as
     outbox.intents); pkey, key_key, compensates and run indexes here, the rest per design. It keeps
     the two row-level AFTER UPDATE triggers with their WHEN clauses and the statement-level INSERT
     trigger (skipped by outbox.in_enqueue, as in enqueue), so per-row trigger checks cost as in D0.
   - q.attempts: a copy of outbox.attempts with its three indexes (pkey, BRIN on at, the partial
     failures index) but WITHOUT the FK-like reference trigger; outbox.record skips it anyway
     (outbox.in_record), and d0s sets that flag too. */
CREATE SCHEMA q;
CREATE TABLE q.intents (LIKE outbox.intents INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE)
  WITH (fillfactor = 50);
ALTER TABLE q.intents ADD CONSTRAINT intents_key_key UNIQUE (key);
ALTER TABLE q.intents ADD CONSTRAINT intents_pkey PRIMARY KEY (id);
CREATE INDEX intents_compensates ON q.intents (compensates) WHERE compensates IS NOT NULL;
CREATE INDEX intents_run ON q.intents (run_id) WHERE run_id IS NOT NULL;
CREATE TRIGGER intents_notify_update AFTER UPDATE ON q.intents FOR EACH ROW
  WHEN (new.state = 'pending'::outbox.intent_state AND new.next_attempt_at <= now()) EXECUTE FUNCTION outbox.notify_relays_row();
CREATE TRIGGER intents_notify_insert AFTER INSERT ON q.intents FOR EACH STATEMENT
  WHEN (current_setting('outbox.in_enqueue', true) IS DISTINCT FROM 'on') EXECUTE FUNCTION outbox.notify_relays();
CREATE TRIGGER intents_mcp_settled AFTER UPDATE OF state ON q.intents FOR EACH ROW
  WHEN (new.state = ANY (ARRAY['succeeded','failed','cancelled','unknown']::outbox.intent_state[])
        AND new.state IS DISTINCT FROM old.state AND starts_with(new.key, 'mcp:')) EXECUTE FUNCTION outbox.mcp_notify_settled();
CREATE TABLE q.attempts (LIKE outbox.attempts INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE);
ALTER TABLE q.attempts ADD CONSTRAINT attempts_pkey PRIMARY KEY (intent_id, id);
CREATE INDEX attempts_at_range ON q.attempts USING brin (at);
CREATE INDEX attempts_failures ON q.attempts (at) WHERE class = ANY (ARRAY['not_sent','ambiguous','retry_later','key_conflict','permanent_failure','reconcile_inconclusive']::outbox.attempt_class[]);
CREATE VIEW bench.left AS SELECT count(*) AS n FROM q.intents WHERE state <> 'succeeded';
CREATE VIEW bench.sizes AS SELECT c.relname, pg_relation_size(c.oid) / 8192 AS pages FROM pg_class c
  WHERE c.relnamespace = 'q'::regnamespace AND c.relkind IN ('r', 'i');
