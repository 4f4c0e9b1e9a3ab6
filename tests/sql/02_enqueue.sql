-- 02_enqueue: outbox.enqueue (docs/design.md, "Enqueue semantics").
--   same key + same payload      -> the existing intent (inserted = false), with its saved response once done
--   same key + other payload     -> OR001 naming the key and the differing fields (on_mismatch = reject)
--                                   or the original kept and the mismatch recorded (keep_original)
--   same key + other target      -> OR001
--   validation                   -> OR002 unknown target, OR003 disabled, OR004 key, OR005 payload, OR006 size
--   approval_rule                -> awaiting_approval instead of pending
BEGIN;
SELECT plan(81);

INSERT INTO outbox.targets (name, url) VALUES ('t1', 'https://t1.test/hook'), ('t2', 'https://t2.test/hook');
INSERT INTO outbox.targets (name, url, on_mismatch) VALUES ('keep', 'https://keep.test/hook', 'keep_original');
INSERT INTO outbox.targets (name, url, max_payload_bytes) VALUES ('small', 'https://small.test/hook', 100);
INSERT INTO outbox.targets (name, url, enabled) VALUES ('off', 'https://off.test/hook', false);
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('appr', 'https://appr.test/hook', '$.amount > 100000');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('apprf', 'https://apprf.test/hook', '$ ? (@.amount > 100000)');

-- ---------------------------------------------------------------------------
-- A first enqueue inserts.
CREATE TEMP TABLE r1 AS SELECT * FROM outbox.enqueue('k1', 't1', '{"a": 1, "b": 2, "c": 3}');
SELECT is(inserted, true, 'first enqueue of a key inserts') FROM r1;
SELECT is(status, 'pending', 'a new intent is pending') FROM r1;
SELECT is(key, 'k1', 'the result names the key') FROM r1;
SELECT is(target, 't1', 'the result names the target') FROM r1;
SELECT ok(response_status IS NULL AND response_body IS NULL AND mismatch_fields IS NULL,
          'a new intent has no response and no mismatch') FROM r1;
SELECT is(i.id, r1.intent_id, 'intent_id is the row id') FROM outbox.intents i, r1 WHERE i.key = 'k1';
SELECT results_eq($$SELECT target COLLATE "default", payload, state::text, attempts, mismatches FROM outbox.intents WHERE key = 'k1'$$,
                  $$VALUES ('t1'::text, '{"a": 1, "b": 2, "c": 3}'::jsonb, 'pending'::text, 0, 0)$$,
                  'the row holds target, payload, state pending, 0 attempts');
SELECT is(fingerprint, outbox.fingerprint(payload, '{}'), 'the row holds the payload fingerprint')
  FROM outbox.intents WHERE key = 'k1';
SELECT is(next_attempt_at, now(), 'a new intent is due now') FROM outbox.intents WHERE key = 'k1';

-- Same key, same payload (spelled differently): the existing intent.
CREATE TEMP TABLE r2 AS SELECT * FROM outbox.enqueue('k1', 't1', '{"c":3.0, "b" : 2,"a":1e0}');
SELECT is(r2.inserted, false, 'same key + same payload: not inserted') FROM r2;
SELECT is(r2.intent_id, r1.intent_id, 'same key + same payload: same intent_id') FROM r1, r2;
SELECT is(r2.status, 'pending', 'same key + same payload: its current status') FROM r2;
SELECT ok(r2.response_status IS NULL AND r2.response_body IS NULL AND r2.mismatch_fields IS NULL,
          'same key + same payload while pending: no response, no mismatch') FROM r2;
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key = 'k1'), 1, 'still one row for the key');
SELECT is((SELECT payload FROM outbox.intents WHERE key = 'k1'), '{"a": 1, "b": 2, "c": 3}'::jsonb,
          'the stored payload is untouched');

-- A response stored on a row that is not final is not handed out.
UPDATE outbox.intents SET response_status = 503, response_body = 'busy' WHERE key = 'k1';
SELECT ok(response_status IS NULL AND response_body IS NULL,
          'no response is returned while the intent is not final')
  FROM outbox.enqueue('k1', 't1', '{"a": 1, "b": 2, "c": 3}');

-- Once succeeded: the saved response comes back, nothing new happens.
UPDATE outbox.intents SET state = 'succeeded', response_status = 201, response_body = '{"refund": "r-77"}',
                          attempts = 1 WHERE key = 'k1';
CREATE TEMP TABLE r3 AS SELECT * FROM outbox.enqueue('k1', 't1', '{"a": 1, "b": 2, "c": 3}');
SELECT is(status, 'succeeded', 'retried call after success: status succeeded') FROM r3;
SELECT is(response_status, 201, 'retried call after success: the saved response_status') FROM r3;
SELECT is(response_body, '{"refund": "r-77"}', 'retried call after success: the saved response_body') FROM r3;
SELECT is(inserted, false, 'retried call after success: not inserted') FROM r3;
SELECT is(r3.intent_id, r1.intent_id, 'retried call after success: same intent_id') FROM r1, r3;
SELECT results_eq($$SELECT state::text, attempts FROM outbox.intents WHERE key = 'k1'$$,
                  $$VALUES ('succeeded'::text, 1)$$, 'retried call after success changes nothing');

-- Once failed: the saved response comes back too.
SELECT outbox.enqueue('kf', 't1', '{"x": 1}') \g /dev/null
UPDATE outbox.intents SET state = 'failed', response_status = 404, response_body = 'no such order',
                          last_error = 'HTTP 404' WHERE key = 'kf';
SELECT results_eq($$SELECT status, response_status, response_body, inserted FROM outbox.enqueue('kf', 't1', '{"x": 1}')$$,
                  $$VALUES ('failed'::text, 404, 'no such order'::text, false)$$,
                  'retried call after failure: status failed with the saved response');

-- An intent whose outcome is unknown is reported as reconciling.
SELECT outbox.enqueue('ku', 't1', '{"x": 1}') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true WHERE key = 'ku';
SELECT is(status, 'reconciling', 'retried call while unknown: reconciling')
  FROM outbox.enqueue('ku', 't1', '{"x": 1}');

-- ---------------------------------------------------------------------------
-- Same key, different payload: OR001, naming the key and the differing fields.
SELECT throws_ok($$SELECT outbox.enqueue('k1', 't1', '{"a": 2, "b": 2, "c": 4}')$$,
                 'OR001', 'outbox.enqueue: key ''k1'' was already used with a different payload (fields that differ: a, c)',
                 'same key + different payload: OR001 naming the key and the fields');
SELECT throws_ok($$SELECT outbox.enqueue('k1', 't1', '{"a": 1, "b": 2}')$$,
                 'OR001', 'outbox.enqueue: key ''k1'' was already used with a different payload (fields that differ: c)',
                 'a missing field is a difference');
SELECT throws_ok($$SELECT outbox.enqueue('k1', 't1', '{"a": 1, "b": 2, "c": 3, "d": null}')$$,
                 'OR001', 'outbox.enqueue: key ''k1'' was already used with a different payload (fields that differ: d)',
                 'an extra field (even null) is a difference');
SELECT throws_ok($$SELECT outbox.enqueue('k1', 't1', '{"a": 1, "b": "2", "c": 3}')$$,
                 'OR001', 'outbox.enqueue: key ''k1'' was already used with a different payload (fields that differ: b)',
                 'a string "2" is not the number 2');
SELECT results_eq($$SELECT payload, state::text FROM outbox.intents WHERE key = 'k1'$$,
                  $$VALUES ('{"a": 1, "b": 2, "c": 3}'::jsonb, 'succeeded'::text)$$,
                  'a rejected enqueue leaves the intent as it was');
SELECT is((SELECT count(*)::int FROM outbox.mismatches), 0, 'on_mismatch = reject records no mismatch row');

-- Same key, another target: OR001 (even with the same payload).
SELECT throws_ok($$SELECT outbox.enqueue('k1', 't2', '{"a": 1, "b": 2, "c": 3}')$$,
                 'OR001', 'outbox.enqueue: key ''k1'' is already used for target ''t1'', not ''t2''',
                 'same key + another target: OR001 naming both targets');
SELECT throws_ok($$SELECT outbox.enqueue('k1', 'keep', '{"a": 1, "b": 2, "c": 3}')$$,
                 'OR001', NULL, 'same key + another target: OR001 even when that target keeps originals');

-- ---------------------------------------------------------------------------
-- keep_original: no error, the original kept, the mismatch recorded.
CREATE TEMP TABLE k0 AS SELECT * FROM outbox.enqueue('kk', 'keep', '{"amount": 10, "to": "alice", "memo": "x"}');
CREATE TEMP TABLE k1 AS SELECT * FROM outbox.enqueue('kk', 'keep', '{"amount": 20, "to": "alice", "memo": "y"}');
SELECT is(k1.inserted, false, 'keep_original: not inserted') FROM k1;
SELECT is(k1.intent_id, k0.intent_id, 'keep_original: the existing intent') FROM k0, k1;
SELECT is(k1.mismatch_fields, ARRAY['amount', 'memo'], 'keep_original: mismatch_fields lists the differing fields') FROM k1;
SELECT is(k1.status, 'pending', 'keep_original: the existing status') FROM k1;
SELECT is((SELECT payload FROM outbox.intents WHERE key = 'kk'), '{"amount": 10, "to": "alice", "memo": "x"}'::jsonb,
          'keep_original: the original payload is kept');
SELECT is((SELECT mismatches FROM outbox.intents WHERE key = 'kk'), 1, 'keep_original: intents.mismatches incremented');
SELECT results_eq($$SELECT key, payload, fields, fingerprint = outbox.fingerprint(payload, '{}') FROM outbox.mismatches$$,
                  $$VALUES ('kk'::text, '{"amount": 20, "to": "alice", "memo": "y"}'::jsonb, ARRAY['amount', 'memo'], true)$$,
                  'keep_original: outbox.mismatches holds the rejected payload, its fingerprint and the fields');
SELECT lives_ok($$SELECT outbox.enqueue('kk', 'keep', '{"amount": 30, "to": "bob", "memo": "x"}')$$,
                'keep_original: a second mismatch raises nothing either');
SELECT is((SELECT mismatches FROM outbox.intents WHERE key = 'kk'), 2, 'keep_original: each mismatch counts');
SELECT is((SELECT count(*)::int FROM outbox.mismatches WHERE key = 'kk'), 2, 'keep_original: each mismatch is recorded');
SELECT ok(mismatch_fields IS NULL AND NOT inserted, 'keep_original, same payload: no mismatch reported')
  FROM outbox.enqueue('kk', 'keep', '{"memo": "x", "to": "alice", "amount": 10.0}');
SELECT is((SELECT mismatches FROM outbox.intents WHERE key = 'kk'), 2, 'keep_original, same payload: nothing counted');

-- ---------------------------------------------------------------------------
-- Validation errors, each with its SQLSTATE and message; none inserts a row.
SELECT throws_ok($$SELECT outbox.enqueue('v1', 'nope', '{}')$$,
                 'OR002', 'outbox.enqueue: unknown target ''nope''', 'unknown target: OR002');
SELECT throws_ok($$SELECT outbox.enqueue('v1', NULL, '{}')$$,
                 'OR002', 'outbox.enqueue: unknown target NULL', 'NULL target: OR002');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 'off', '{}')$$,
                 'OR003', 'outbox.enqueue: target ''off'' is disabled', 'disabled target: OR003');
SELECT throws_ok($$SELECT outbox.enqueue(NULL, 't1', '{}')$$,
                 'OR004', 'outbox.enqueue: the key must not be empty', 'NULL key: OR004');
SELECT throws_ok($$SELECT outbox.enqueue('', 't1', '{}')$$,
                 'OR004', 'outbox.enqueue: the key must not be empty', 'empty key: OR004');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, ''t1'', ''{}'')', repeat('k', 256)),
                 'OR004', 'outbox.enqueue: key is 256 bytes long; the limit is 255', 'key of 256 bytes: OR004');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, ''t1'', ''{}'')', repeat('é', 128)),
                 'OR004', 'outbox.enqueue: key is 256 bytes long; the limit is 255',
                 'the limit counts bytes, not characters (128 x é = 256 bytes)');
SELECT is((SELECT inserted FROM outbox.enqueue(repeat('k', 255), 't1', '{}')), true, 'key of 255 bytes is fine');
SELECT throws_ok($$SELECT outbox.enqueue(E'run-1:\nstep-2', 't1', '{}')$$,
                 'OR004', 'outbox.enqueue: key E''run-1:\nstep-2'' contains a control character (U+000A)',
                 'key with a newline: OR004');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, ''t1'', ''{}'')', k), 'OR004', NULL,
                 format('key with control character U+%s: OR004', to_hex(ascii(c))))
  FROM (VALUES (E'ctl\rb', E'\r'), (E'ctl\r\nX-Evil: 1', E'\r'), (E'ctl\tb', E'\t'), (E'ctl\x01b', E'\x01'),
               (E'ctl\x1bb', E'\x1b'), (E'ctl\x7fb', E'\x7f')) AS v(k, c);
SELECT is((SELECT inserted FROM outbox.enqueue('run-1:step-2/ünïcødé key', 't1', '{}')), true,
          'printable characters, spaces and non-ASCII letters are fine in a key');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 't1', NULL)$$,
                 'OR005', 'outbox.enqueue: payload for key ''v1'' must be a JSON object, got NULL', 'NULL payload: OR005');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 't1', '[1, 2]')$$,
                 'OR005', 'outbox.enqueue: payload for key ''v1'' must be a JSON object, got array', 'array payload: OR005');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 't1', '"refund"')$$,
                 'OR005', 'outbox.enqueue: payload for key ''v1'' must be a JSON object, got string', 'string payload: OR005');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 't1', '42')$$,
                 'OR005', 'outbox.enqueue: payload for key ''v1'' must be a JSON object, got number', 'number payload: OR005');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 't1', 'null')$$,
                 'OR005', 'outbox.enqueue: payload for key ''v1'' must be a JSON object, got null', 'JSON null payload: OR005');
SELECT throws_ok($$SELECT outbox.enqueue('v1', 't1', 'true')$$, 'OR005', NULL, 'boolean payload: OR005');

-- Payload size: the target's max_payload_bytes (here 100), counted on the payload's text.
SELECT is(octet_length(jsonb_build_object('a', repeat('x', 91))::text), 100, '(the 100-byte payload is 100 bytes)');
SELECT is((SELECT inserted FROM outbox.enqueue('s100', 'small', jsonb_build_object('a', repeat('x', 91)))), true,
          'a payload of exactly max_payload_bytes is accepted');
SELECT throws_ok($$SELECT outbox.enqueue('s101', 'small', jsonb_build_object('a', repeat('x', 92)))$$,
                 'OR006', 'outbox.enqueue: payload for key ''s101'' is 101 bytes; target ''small'' accepts at most 100',
                 'a payload one byte over max_payload_bytes: OR006');
SELECT is((SELECT inserted FROM outbox.enqueue('m1', 't1', jsonb_build_object('a', repeat('x', 1048567)))), true,
          'default limit: a payload of 1048576 bytes is accepted');
SELECT throws_ok($$SELECT outbox.enqueue('m2', 't1', jsonb_build_object('a', repeat('x', 1048568)))$$,
                 'OR006', 'outbox.enqueue: payload for key ''m2'' is 1048577 bytes; target ''t1'' accepts at most 1048576',
                 'default limit: 1048577 bytes is refused (OR006)');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key IN ('v1', 's101', 'm2') OR key LIKE 'run-1:%step-2' OR key LIKE 'ctl%'),
          0, 'refused enqueues insert nothing');
DELETE FROM outbox.intents WHERE key = 'm1';

-- ---------------------------------------------------------------------------
-- approval_rule: a matching payload waits for approval, others are pending.
SELECT is((SELECT status FROM outbox.enqueue('ap1', 'appr', '{"amount": 100001}')), 'awaiting_approval',
          'approval_rule matches: awaiting_approval');
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'ap1'), 'awaiting_approval', 'the row is awaiting_approval');
SELECT is((SELECT status FROM outbox.enqueue('ap2', 'appr', '{"amount": 100000}')), 'pending',
          'approval_rule does not match: pending');
SELECT is((SELECT status FROM outbox.enqueue('ap3', 'appr', '{"currency": "EUR"}')), 'awaiting_approval',
          'approval_rule on a missing field: awaiting_approval (unknown holds, since 0010)');
SELECT is((SELECT status FROM outbox.enqueue('ap4', 'apprf', '{"amount": 250000}')), 'awaiting_approval',
          'approval_rule as a filter path matches: awaiting_approval');
SELECT is((SELECT status FROM outbox.enqueue('ap5', 'apprf', '{"amount": 5}')), 'pending',
          'approval_rule as a filter path does not match: pending');
SELECT is((SELECT status FROM outbox.enqueue('ap1', 'appr', '{"amount": 100001}')), 'awaiting_approval',
          'enqueue again while awaiting approval: still awaiting_approval');

-- ---------------------------------------------------------------------------
-- Optional arguments: run id, not-before.
SELECT outbox.enqueue('nb1', 't1', '{}', 'run-9', now() + interval '1 hour') \g /dev/null
SELECT results_eq($$SELECT run_id COLLATE "default", next_attempt_at FROM outbox.intents WHERE key = 'nb1'$$,
                  $$VALUES ('run-9'::text, now() + interval '1 hour')$$,
                  'p_run_id is stored; p_not_before sets next_attempt_at');
SELECT outbox.enqueue('nb2', 't1', '{}', NULL, now() - interval '1 hour') \g /dev/null
SELECT is((SELECT next_attempt_at FROM outbox.intents WHERE key = 'nb2'), now(),
          'a not-before in the past means now');

SELECT * FROM finish();
ROLLBACK;
