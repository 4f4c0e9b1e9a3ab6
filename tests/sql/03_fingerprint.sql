-- 03_fingerprint: the payload fingerprint (docs/design.md, "Enqueue semantics").
-- Key order, whitespace and number spelling (1, 1.0, 1e0; 2.50, 2.5), at any
-- depth, and the target's volatile_paths do not change it; real differences do
-- (1 vs 2, "1" vs 1, array order, an extra field). Checked on
-- outbox.fingerprint itself and end to end through enqueue.
BEGIN;
SELECT plan(64);

CREATE FUNCTION pg_temp.fp(doc text, paths text[] DEFAULT '{}') RETURNS bytea
LANGUAGE sql AS $$ SELECT outbox.fingerprint(doc::jsonb, paths) $$;

SELECT is(length(pg_temp.fp('{"a": 1}')), 32, 'the fingerprint is a SHA-256 (32 bytes)');
SELECT is(pg_temp.fp('{"a": 1}', NULL), pg_temp.fp('{"a": 1}'), 'NULL volatile_paths means none');

-- Same fingerprint.
SELECT is(pg_temp.fp(a), pg_temp.fp(b), format('same: %s ~ %s (%s)', a, regexp_replace(b, '\s+', ' ', 'g'), why))
  FROM (VALUES
    ('{"a": 1, "b": 2}',                  '{"b": 2, "a": 1}',                   'key order'),
    ('{"a":{"y":1,"x":[1,2]},"b":true}',  '{"b":true,"a":{"x":[1,2],"y":1}}',   'nested key order'),
    ('{"a": [1, 2], "b": "x y"}',         E'{ "a" :[1 ,\n 2] ,\t"b":"x y" }',   'whitespace (not inside strings)'),
    ('{"n": 1}',                          '{"n": 1.0}',                         '1 vs 1.0'),
    ('{"n": 1}',                          '{"n": 1e0}',                         '1 vs 1e0'),
    ('{"n": 1.0}',                        '{"n": 1E+0}',                        '1.0 vs 1E+0'),
    ('{"n": 1}',                          '{"n": 1.000}',                       '1 vs 1.000'),
    ('{"n": 1}',                          '{"n": 10e-1}',                       '1 vs 10e-1'),
    ('{"n": 1}',                          '{"n": 0.1e1}',                       '1 vs 0.1e1'),
    ('{"n": 2.50}',                       '{"n": 2.5}',                         '2.50 vs 2.5'),
    ('{"n": 2.5}',                        '{"n": 25e-1}',                       '2.5 vs 25e-1'),
    ('{"n": 0.10}',                       '{"n": 0.1}',                         '0.10 vs 0.1'),
    ('{"n": 100}',                        '{"n": 1e2}',                         '100 vs 1e2'),
    ('{"n": 100}',                        '{"n": 1.00e2}',                      '100 vs 1.00e2'),
    ('{"n": -1}',                         '{"n": -1.0}',                        '-1 vs -1.0'),
    ('{"n": 0}',                          '{"n": 0.00}',                        '0 vs 0.00'),
    ('{"n": 0}',                          '{"n": -0}',                          '0 vs -0'),
    ('{"n": 12345678901234567890}',       '{"n": 12345678901234567890.000}',    'big integer vs its .000 spelling'),
    ('{"o": {"p": {"n": 2.5}}}',          '{"o": {"p": {"n": 2.50}}}',          'nested object 2.5 vs 2.50'),
    ('{"l": [1, 2.5, [3]]}',              '{"l": [1.0, 2.50, [3e0]]}',          'numbers in (nested) arrays'),
    ('{"l": [{"n": 1}, {"m": [2.5]}]}',   '{"l": [{"n": 1.0}, {"m": [2.50]}]}', 'objects in arrays'),
    ('{"a": 1, "s": "1.0"}',              '{"a": 1.0, "s": "1.0"}',             'a number respelled next to a numeric-looking string'),
    ('{"n": 1.5, "s": "x"}',              '{"s": "x", "n": 1.50}',              'key order and number spelling together')
  ) AS v(a, b, why);

-- Different fingerprint.
SELECT isnt(pg_temp.fp(a), pg_temp.fp(b), format('differs: %s vs %s (%s)', a, b, why))
  FROM (VALUES
    ('{"n": 1}',                     '{"n": 2}',                          '1 vs 2'),
    ('{"n": 1}',                     '{"n": "1"}',                        'number vs string'),
    ('{"n": 1.5}',                   '{"n": "1.5"}',                      'decimal vs string'),
    ('{"s": "1.0"}',                 '{"s": "1"}',                        'strings are not numbers: "1.0" vs "1"'),
    ('{"s": "2.50"}',                '{"s": "2.5"}',                      'strings are not numbers: "2.50" vs "2.5"'),
    ('{"n": 10}',                    '{"n": 1}',                          'trailing zeros of an integer matter: 10 vs 1'),
    ('{"n": 0.1}',                   '{"n": 0.01}',                       '0.1 vs 0.01'),
    ('{"n": 1.5}',                   '{"n": 1.05}',                       '1.5 vs 1.05'),
    ('{"n": 1}',                     '{"n": 1.000000000000000000001}',    'no float rounding: 1 vs 1.000000000000000000001'),
    ('{"n": 12345678901234567890}',  '{"n": 12345678901234567891}',       'no float rounding of big integers'),
    ('{"n": 1}',                     '{"n": -1}',                         'sign'),
    ('{"l": [1, 2]}',                '{"l": [2, 1]}',                     'array order'),
    ('{"l": [1, 2]}',                '{"l": [1, 2, 2]}',                  'array length'),
    ('{"l": [[1], [2]]}',            '{"l": [[2], [1]]}',                 'nested array order'),
    ('{"a": 1}',                     '{"a": 1, "b": null}',               'an extra null field'),
    ('{"b": true}',                  '{"b": "true"}',                     'true vs "true"'),
    ('{"b": null}',                  '{"b": "null"}',                     'null vs "null"'),
    ('{"b": false}',                 '{"b": 0}',                          'false vs 0'),
    ('{"1": 1}',                     '{"1.0": 1}',                        'keys are strings: "1" vs "1.0"'),
    ('{"o": {"n": 1}}',              '{"o": {"n": 1, "m": 1}}',           'nested extra field'),
    ('{"s": "a b"}',                 '{"s": "a  b"}',                     'whitespace inside strings'),
    ('{"o": {}}',                    '{"o": []}',                         'empty object vs empty array'),
    ('{"a": 1}',                     '{"A": 1}',                          'key case')
  ) AS v(a, b, why);

-- Volatile paths ({meta,ts}) are left out; everything else still counts.
SELECT is(pg_temp.fp('{"a": 1, "meta": {"ts": "2024-01-01T00:00:00Z"}}', '{"{meta,ts}"}'),
          pg_temp.fp('{"a": 1, "meta": {"ts": "2025-06-30T12:00:00Z"}}', '{"{meta,ts}"}'),
          'a volatile path may differ');
SELECT is(pg_temp.fp('{"a": 1, "meta": {"ts": 1, "src": "x"}}', '{"{meta,ts}"}'),
          pg_temp.fp('{"a": 1, "meta": {"src": "x"}}', '{"{meta,ts}"}'),
          'a volatile path may be missing');
SELECT is(pg_temp.fp('{"a": 1.0, "meta": {"ts": 1}}', '{"{meta,ts}"}'),
          pg_temp.fp('{"a": 1, "meta": {"ts": 2}}', '{"{meta,ts}"}'),
          'volatile path and number spelling together');
SELECT is(pg_temp.fp('{"a": 1, "meta": {"ts": 1}, "trace": "t1"}', '{"{meta,ts}","{trace}"}'),
          pg_temp.fp('{"a": 1, "meta": {"ts": 2}, "trace": "t2"}', '{"{meta,ts}","{trace}"}'),
          'several volatile paths');
SELECT isnt(pg_temp.fp('{"a": 1, "meta": {"ts": 1}}'),
            pg_temp.fp('{"a": 1, "meta": {"ts": 2}}'),
            'without volatile_paths the same change counts');
SELECT isnt(pg_temp.fp('{"a": 1, "meta": {"ts": 1, "src": "x"}}', '{"{meta,ts}"}'),
            pg_temp.fp('{"a": 1, "meta": {"ts": 1, "src": "y"}}', '{"{meta,ts}"}'),
            'a sibling of a volatile path still counts');
SELECT isnt(pg_temp.fp('{"a": 1, "meta": {"ts": 1}}', '{"{meta,ts}"}'),
            pg_temp.fp('{"a": 2, "meta": {"ts": 1}}', '{"{meta,ts}"}'),
            'other fields still count with volatile_paths');
SELECT isnt(pg_temp.fp('{"a": 1, "ts": 1}', '{"{meta,ts}"}'),
            pg_temp.fp('{"a": 1, "ts": 2}', '{"{meta,ts}"}'),
            'a volatile path is a path: a top-level "ts" is not {meta,ts}');

-- The canonical form itself.
SELECT is(outbox.canonical('{"b": [1.0, {"c": 2.500}], "a": 1.50, "s": "1.0"}')::text,
          '{"a": 1.5, "b": [1, {"c": 2.5}], "s": "1.0"}',
          'canonical: numbers at their shortest scale, strings untouched');

-- ---------------------------------------------------------------------------
-- End to end: enqueue under a target with volatile_paths.
INSERT INTO outbox.targets (name, url, volatile_paths) VALUES ('vol', 'https://vol.test/hook', '{"{meta,ts}"}');
INSERT INTO outbox.targets (name, url) VALUES ('plain', 'https://plain.test/hook');

CREATE TEMP TABLE e0 AS SELECT * FROM outbox.enqueue('f1', 'vol', '{"amount": 2.50, "to": "alice", "meta": {"ts": 1, "src": "agent"}}');
SELECT is(fingerprint, pg_temp.fp('{"amount": 2.5, "to": "alice", "meta": {"src": "agent"}}'),
          'the stored fingerprint leaves the volatile path out') FROM outbox.intents WHERE key = 'f1';
SELECT results_eq($$SELECT inserted, intent_id FROM outbox.enqueue('f1', 'vol', '{"meta": {"src": "agent", "ts": 99}, "to": "alice", "amount": 2.5}')$$,
                  $$SELECT false, intent_id FROM e0$$,
                  'enqueue: respelled number, other key order, other volatile value -> the same intent');
SELECT throws_ok($$SELECT outbox.enqueue('f1', 'vol', '{"amount": 3, "to": "alice", "meta": {"ts": 2, "src": "agent"}}')$$,
                 'OR001', 'outbox.enqueue: key ''f1'' was already used with a different payload (fields that differ: amount)',
                 'enqueue: a real difference next to a volatile one names only the real field');
SELECT throws_ok($$SELECT outbox.enqueue('f1', 'vol', '{"amount": 2.5, "to": "alice", "meta": {"ts": 1, "src": "human"}}')$$,
                 'OR001', 'outbox.enqueue: key ''f1'' was already used with a different payload (fields that differ: meta)',
                 'enqueue: a non-volatile field inside meta still differs');
SELECT outbox.enqueue('f2', 'plain', '{"l": [1, 2], "n": 1}') \g /dev/null
SELECT is((SELECT inserted FROM outbox.enqueue('f2', 'plain', '{"n": 1e0, "l": [1.0, 2.00]}')), false,
          'enqueue: 1e0 and 1.0 match 1');
SELECT throws_ok($$SELECT outbox.enqueue('f2', 'plain', '{"l": [2, 1], "n": 1}')$$,
                 'OR001', 'outbox.enqueue: key ''f2'' was already used with a different payload (fields that differ: l)',
                 'enqueue: array order is a difference');
SELECT throws_ok($$SELECT outbox.enqueue('f2', 'plain', '{"l": [1, 2], "n": "1"}')$$,
                 'OR001', 'outbox.enqueue: key ''f2'' was already used with a different payload (fields that differ: n)',
                 'enqueue: "1" is not 1');

SELECT * FROM finish();
ROLLBACK;
