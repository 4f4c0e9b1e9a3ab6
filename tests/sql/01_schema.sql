-- 01_schema: the objects of the public contract (docs/design.md, "Data model", "Public
-- contract"): tables and their contract columns with types and defaults, the
-- enum values, the indexes the claim path and the views rely on, the
-- statement-level NOTIFY trigger, and the functions' signatures.
BEGIN;
SELECT plan(117);

SELECT has_schema('outbox');
SELECT has_table('outbox', 'targets', 'outbox.targets exists');
SELECT has_table('outbox', 'intents', 'outbox.intents exists');
SELECT has_table('outbox', 'attempts', 'outbox.attempts exists');
SELECT has_table('outbox', 'relays', 'outbox.relays exists');
SELECT has_table('outbox', 'mismatches', 'outbox.mismatches exists');
SELECT has_view('outbox', 'stuck', 'outbox.stuck exists');

-- targets: the contract columns and their types
SELECT col_is_pk('outbox', 'targets', 'name', 'targets.name is the primary key');
SELECT col_type_is('outbox', 'targets', c, t, format('targets.%s is %s', c, t))
  FROM (VALUES ('name', 'text'), ('url', 'text'), ('method', 'text'), ('key_header', 'text'),
               ('key_ttl', 'interval'), ('status_url', 'text'), ('timeout_ms', 'integer'),
               ('max_attempts', 'integer'), ('approval_rule', 'jsonpath'), ('volatile_paths', 'text[]'),
               ('on_mismatch', 'text'), ('secret_env', 'text'), ('enabled', 'boolean'),
               ('max_payload_bytes', 'integer')) AS v(c, t);
SELECT col_is_null('outbox', 'targets', 'key_header', 'targets.key_header may be NULL (target cannot deduplicate)');
SELECT col_is_null('outbox', 'targets', 'status_url', 'targets.status_url may be NULL (no status URL)');
SELECT col_not_null('outbox', 'targets', 'url', 'targets.url is required');

-- targets: defaults, checked on a real row
INSERT INTO outbox.targets (name, url) VALUES ('dflt', 'https://example.test/hook');
SELECT is(t.method, 'POST', 'default method is POST') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.key_header, 'Idempotency-Key', 'default key_header is Idempotency-Key') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.key_ttl, interval '24 hours', 'default key_ttl is 24 hours') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.status_url, NULL, 'default status_url is NULL') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.max_payload_bytes, 1048576, 'default max_payload_bytes is 1048576') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.volatile_paths, '{}'::text[], 'default volatile_paths is empty') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.on_mismatch, 'reject', 'default on_mismatch is reject') FROM outbox.targets t WHERE name = 'dflt';
SELECT ok(t.approval_rule IS NULL, 'default approval_rule is NULL') FROM outbox.targets t WHERE name = 'dflt';
SELECT is(t.enabled, true, 'targets are enabled by default') FROM outbox.targets t WHERE name = 'dflt';

-- targets: checks
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, on_mismatch) VALUES ('x1', 'https://e.test', 'overwrite')$$,
                 '23514', NULL, 'on_mismatch is reject or keep_original only');
SELECT lives_ok($$INSERT INTO outbox.targets (name, url, on_mismatch) VALUES ('x2', 'https://e.test', 'keep_original')$$,
                'on_mismatch = keep_original is accepted');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url) VALUES ('x3', 'ftp://e.test/')$$,
                 '23514', NULL, 'url must be http(s)');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, status_url) VALUES ('x4', 'https://e.test', 'https://e.test/status')$$,
                 '23514', NULL, 'status_url must contain {key}');
SELECT lives_ok($$INSERT INTO outbox.targets (name, url, status_url) VALUES ('x5', 'https://e.test', 'https://e.test/status/{key}')$$,
                'status_url with {key} is accepted');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, secret_env) VALUES ('x6', 'https://e.test', 'not a var')$$,
                 '23514', NULL, 'secret_env is an environment variable name, not a secret');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, key_header) VALUES ('x7', 'https://e.test', E'X-Key\r\nEvil: 1')$$,
                 '23514', NULL, 'key_header cannot smuggle a header');

-- intents: the contract columns
SELECT col_type_is('outbox', 'intents', c, t, format('intents.%s is %s', c, t))
  FROM (VALUES ('key', 'text'), ('target', 'text'), ('payload', 'jsonb'), ('state', 'outbox.intent_state'),
               ('attempts', 'integer'), ('created_at', 'timestamp with time zone'),
               ('next_attempt_at', 'timestamp with time zone'), ('lease_owner', 'text'),
               ('lease_expires_at', 'timestamp with time zone'), ('ambiguous', 'boolean'),
               ('response_status', 'integer'), ('response_body', 'text'), ('last_error', 'text'),
               ('fingerprint', 'bytea'), ('mismatches', 'integer')) AS v(c, t);
-- The identifiers compare as bytes (0032): in the database's collation every
-- B-tree entry on them was placed by strcoll, 15 % of a draining backend in
-- en_US.UTF-8. Their indexes follow the columns.
SELECT is(c.collname, 'C', format('intents.%s is in the "C" collation', a.attname))
  FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
 WHERE a.attrelid = 'outbox.intents'::regclass
   AND a.attname IN ('key', 'target', 'ordering_key', 'run_id', 'compensates')
 ORDER BY a.attname;
SELECT is((SELECT count(*)::int FROM pg_index i, unnest(i.indcollation) AS u(coll)
            WHERE i.indrelid = 'outbox.intents'::regclass AND u.coll <> 0
              AND u.coll <> (SELECT oid FROM pg_collation WHERE collname = 'C' AND collnamespace = 'pg_catalog'::regnamespace)),
          0, 'every index of intents on text sorts by bytes');
SELECT col_not_null('outbox', 'intents', 'key', 'intents.key is required');
SELECT col_is_unique('outbox', 'intents', 'key', 'intents.key is unique: one row per key');
SELECT col_default_is('outbox', 'intents', 'state', 'pending', 'intents.state defaults to pending');
SELECT col_default_is('outbox', 'intents', 'attempts', 0, 'intents.attempts defaults to 0');
SELECT throws_ok($$INSERT INTO outbox.intents (key, target, payload, fingerprint, state)
                   VALUES ('noleases', 'dflt', '{}', '\x00', 'in_flight')$$,
                 '23514', NULL, 'an in_flight row must have a lease owner and expiry');
-- intents.target: outbox.enqueue refuses unknown targets (02_enqueue); since
-- 0008 a guard on targets (not a foreign key: no share lock on the target row
-- per enqueue) keeps a named target from being deleted or renamed.
INSERT INTO outbox.targets (name, url) VALUES ('named-t', 'https://named.test/hook'), ('free-t', 'https://free.test/hook');
SELECT outbox.enqueue('named-1', 'named-t', '{}') \g /dev/null
SELECT throws_ok($$DELETE FROM outbox.targets WHERE name = 'named-t'$$, '23503',
                 'outbox.targets: target ''named-t'' is named by intents; disable it instead (enabled = false)',
                 'a target that intents name cannot be deleted');
SELECT throws_ok($$UPDATE outbox.targets SET name = 'renamed-t' WHERE name = 'named-t'$$, '23503',
                 'outbox.targets: target ''named-t'' is named by intents; disable it instead (enabled = false)',
                 'nor renamed');
SELECT lives_ok($$UPDATE outbox.targets SET enabled = false, url = 'https://named2.test/hook' WHERE name = 'named-t'$$,
                'its other columns can change');
SELECT lives_ok($$DELETE FROM outbox.targets WHERE name = 'free-t'$$, 'a target no intent names can be deleted');

-- enums: every state and attempt class
SELECT enum_has_labels('outbox', 'intent_state',
       ARRAY['awaiting_approval', 'pending', 'in_flight', 'succeeded', 'failed', 'unknown', 'cancelled'],
       'intent_state has exactly the states of docs/design.md');
SELECT enum_has_labels('outbox', 'attempt_class',
       ARRAY['not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict', 'permanent_failure',
             'reconciled_executed', 'reconciled_not_executed', 'reconcile_inconclusive', 'resolved', 'released'],
       'attempt_class has every class');

-- indexes the claim path, the lease take-over and the views rely on
SELECT has_index('outbox', 'intents', 'intents_due', ARRAY['target', 'next_attempt_at'], 'claim index (target, next_attempt_at)');
SELECT matches(pg_get_indexdef('outbox.intents_due'::regclass), $re$WHERE \(state = 'pending'::outbox\.intent_state\)$$re$,
               'intents_due is partial: pending rows only');
SELECT has_index('outbox', 'intents', 'intents_in_flight', ARRAY['lease_expires_at'], 'lease index');
SELECT matches(pg_get_indexdef('outbox.intents_in_flight'::regclass), $re$WHERE \(state = 'in_flight'::outbox\.intent_state\)$$re$,
               'intents_in_flight is partial: in_flight rows only');
SELECT has_index('outbox', 'intents', 'intents_unknown', ARRAY['next_attempt_at'], 'reconciliation index');
SELECT has_index('outbox', 'intents', 'intents_awaiting', ARRAY['created_at'], 'approval index');
SELECT col_is_pk('outbox', 'attempts', ARRAY['intent_id', 'id'],
                 'attempts by intent: the primary key is (intent_id, id) (0020)');
SELECT hasnt_index('outbox', 'attempts', 'attempts_intent', 'no second B-tree on (intent_id, id) (0020)');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'outbox.intents'::regclass), ARRAY['fillfactor=50'],
          'intents leaves half of each page for the claim''s and the record''s new row versions (0020)');
SELECT matches(pg_get_indexdef('outbox.attempts_at_range'::regclass), 'USING brin \(at\)$',
               'attempts by time: a BRIN index (0018: no B-tree entry per attempt)');
SELECT matches(pg_get_indexdef('outbox.attempts_failures'::regclass), 'USING btree \(at\) WHERE .*permanent_failure',
               'recent failures: a B-tree over failed attempts only');

-- the NOTIFY triggers (names not pinned; behaviour is tested in 07_concurrency):
-- on INSERT, AFTER, FOR EACH STATEMENT, running outbox.notify_relays(); on
-- UPDATE, AFTER, FOR EACH ROW with a WHEN clause (0017: no transition table
-- for claims and records), running outbox.notify_relays_row()
CREATE TEMP VIEW notify_triggers AS
SELECT t.tgname, t.tgtype, t.tgqual IS NOT NULL AS has_when, t.tgfoid::regprocedure::text AS fn FROM pg_trigger t
 WHERE t.tgrelid = 'outbox.intents'::regclass AND NOT t.tgisinternal
   AND t.tgfoid IN ('outbox.notify_relays()'::regprocedure, 'outbox.notify_relays_row()'::regprocedure);
SELECT ok(EXISTS (SELECT 1 FROM notify_triggers WHERE (tgtype & 4) <> 0 AND (tgtype & 1) = 0 AND (tgtype & 2) = 0
                     AND fn = 'outbox.notify_relays()'),
          'a statement-level AFTER INSERT trigger on intents runs notify_relays()');
SELECT ok(EXISTS (SELECT 1 FROM notify_triggers WHERE (tgtype & 16) <> 0 AND (tgtype & 1) = 1 AND (tgtype & 2) = 0
                     AND has_when AND fn = 'outbox.notify_relays_row()'),
          'a row-level AFTER UPDATE trigger on intents, with a WHEN clause, runs notify_relays_row()');
SELECT is((SELECT count(*)::int FROM pg_trigger WHERE tgrelid = 'outbox.intents'::regclass AND NOT tgisinternal
             AND (tgtype & 1) = 1 AND (tgtype & 16) = 0),
          0, 'no row-level trigger on intents but on UPDATE');
SELECT is((SELECT count(*)::int FROM pg_trigger WHERE tgrelid = 'outbox.intents'::regclass AND NOT tgisinternal
             AND (tgtype & 1) = 1 AND tgqual IS NULL),
          0, 'no row-level trigger on intents without a WHEN clause (the hot paths: enqueue, claim, record)');
SELECT is((SELECT count(*)::int FROM pg_trigger WHERE tgrelid = 'outbox.intents'::regclass AND NOT tgisinternal
             AND tgfoid = 'outbox.notify_relays()'::regprocedure AND (tgtype & 16) <> 0),
          0, 'no UPDATE trigger collects a transition table for notify_relays() any more');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'outbox.intents'::regclass AND NOT tgisinternal
                       AND (tgtype & 2) <> 0),
          'no BEFORE trigger on intents');

-- functions of the contract, with their signatures
SELECT has_function('outbox', f, a, format('outbox.%s(%s) exists', f, array_to_string(a, ', ')))
  FROM (VALUES ('enqueue', ARRAY['text', 'text', 'jsonb', 'text', 'timestamp with time zone', 'text', 'text']),
               ('outcome', ARRAY['text']),
               ('resolve', ARRAY['text', 'text', 'text']),
               ('approve', ARRAY['text', 'text']),
               ('reject', ARRAY['text', 'text', 'text']),
               ('cancel', ARRAY['text', 'text']),
               ('claim_due', ARRAY['text', 'text[]', 'integer[]', 'integer', 'integer']),
               ('claim_due', ARRAY['text', 'text[]', 'integer[]', 'integer', 'integer', 'text']),
               ('take_over', ARRAY['text', 'integer', 'integer', 'bigint[]']),
               ('renew_leases', ARRAY['text', 'bigint[]', 'integer']),
               ('release', ARRAY['text', 'bigint[]', 'integer[]']),
               ('relay_heartbeat', ARRAY['text', 'boolean']),
               ('relay_gone', ARRAY['text']),
               ('next_due_ms', ARRAY['text[]']),
               ('fingerprint', ARRAY['jsonb', 'text[]'])) AS v(f, a);
SELECT has_function('outbox', 'record',
       ARRAY['text', 'bigint[]', 'integer[]', 'outbox.intent_state[]', 'integer[]', 'boolean[]',
             'outbox.attempt_class[]', 'boolean[]', 'integer[]', 'text[]', 'integer[]', 'text[]', 'boolean[]'],
       'outbox.record(...) exists');
SELECT lives_ok($$SELECT key, intent_id, target, status, inserted, response_status, response_body, mismatch_fields
                    FROM outbox.enqueue('schema-k', 'dflt', '{}')$$,
                'enqueue(key, target, payload) with defaults returns the documented fields');
SELECT lives_ok($$SELECT status, response_status, response_body, attempts, last_error FROM outbox.outcome('schema-k')$$,
                'outcome(key) returns status, response_status, response_body, attempts, last_error');
SELECT lives_ok($$SELECT key, target, state, reason FROM outbox.stuck$$, 'outbox.stuck has key, target, state, reason');
SELECT is((SELECT count(*)::int FROM outbox.enqueue('schema-k2', 'dflt', '{}', p_run_id => 'run-1', p_not_before => now())),
          1, 'enqueue takes p_run_id and p_not_before by name');

-- Every SECURITY DEFINER function pins its search_path (no search_path hijack).
SELECT is_empty($$SELECT p.oid::regprocedure::text FROM pg_proc p
                   WHERE p.pronamespace = 'outbox'::regnamespace AND p.prosecdef
                     AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')$$,
                'every SECURITY DEFINER function in outbox sets search_path');
SELECT ok((SELECT bool_and(p.prosecdef) FROM pg_proc p
            WHERE p.oid IN ('outbox.enqueue(text,text,jsonb,text,timestamptz,text,text)'::regprocedure,
                            'outbox.outcome(text)'::regprocedure,
                            'outbox.claim(text,text[],integer[],integer,integer)'::regprocedure,
                            'outbox.approve(text,text)'::regprocedure,
                            'outbox.resolve(text,text,text)'::regprocedure)),
          'the entry points are SECURITY DEFINER (roles get no table rights)');

-- attempts → intents: kept by statement-level triggers since 0008 (no per-row
-- foreign key lock on the hot path), with the foreign key's SQLSTATE.
INSERT INTO outbox.targets (name, url) VALUES ('ref-t', 'https://ref.test/hook');
INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('ref-1', 'ref-t', '{}', '\x00'), ('ref-2', 'ref-t', '{}', '\x00');
INSERT INTO outbox.attempts (intent_id, attempt, relay, class)
SELECT id, 1, 'r', 'succeeded' FROM outbox.intents WHERE key IN ('ref-1', 'ref-2');
SELECT throws_ok($$INSERT INTO outbox.attempts (intent_id, attempt, relay, class) VALUES (-42, 1, 'r', 'succeeded')$$,
                 '23503', 'outbox.attempts: intent -42 does not exist', 'an attempts row must name an existing intent');
SELECT throws_ok($$UPDATE outbox.attempts SET intent_id = -43 WHERE relay = 'r'$$,
                 '23503', 'outbox.attempts: intent -43 does not exist', 'an attempts row cannot be moved to a missing intent');
DELETE FROM outbox.intents WHERE key = 'ref-1';
SELECT is((SELECT count(*)::int FROM outbox.attempts a WHERE NOT EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = a.intent_id)),
          0, 'deleting an intent deletes its attempts (cascade)');
SELECT is((SELECT count(*)::int FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'ref-2'),
          1, 'the attempts of other intents stay');
TRUNCATE outbox.intents CASCADE;
SELECT is((SELECT count(*)::int FROM outbox.attempts), 0, 'truncating intents empties attempts');

SELECT * FROM finish();
ROLLBACK;
