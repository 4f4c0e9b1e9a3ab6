-- 18_trace_context: the caller's W3C traceparent (migrations/0016_trace_context.sql).
--   enqueue   stores p_traceparent, or the setting outbox.traceparent (SET LOCAL); the
--             argument wins; none: NULL; an invalid value is refused with OR012 and names
--             where it came from
--   claim     returns it with the row
BEGIN;
SELECT plan(12);

INSERT INTO outbox.targets (name, url) VALUES ('tr', 'https://tr.test/hook');

SELECT outbox.enqueue('tr-arg', 'tr', '{}', p_traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') \g /dev/null
SET LOCAL outbox.traceparent = '00-11111111111111111111111111111111-2222222222222222-00';
SELECT outbox.enqueue('tr-setting', 'tr', '{}') \g /dev/null
SELECT outbox.enqueue('tr-both', 'tr', '{}', p_traceparent => '00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01') \g /dev/null
SET LOCAL outbox.traceparent = '';
SELECT outbox.enqueue('tr-none', 'tr', '{}') \g /dev/null

SELECT is((SELECT traceparent FROM outbox.intents WHERE key = 'tr-arg'),
          '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'p_traceparent is stored');
SELECT is((SELECT traceparent FROM outbox.intents WHERE key = 'tr-setting'),
          '00-11111111111111111111111111111111-2222222222222222-00', 'the setting outbox.traceparent is stored');
SELECT is((SELECT traceparent FROM outbox.intents WHERE key = 'tr-both'),
          '00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01', 'the argument wins over the setting');
SELECT is((SELECT traceparent FROM outbox.intents WHERE key = 'tr-none'), NULL, 'none: NULL');

SELECT throws_ok($$SELECT outbox.enqueue('tr-bad1', 'tr', '{}', p_traceparent => '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')$$,
                 'OR012', 'outbox.enqueue: invalid traceparent ''01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'' (from p_traceparent)',
                 'another version is refused (OR012), naming the argument');
SELECT throws_ok($$SELECT outbox.enqueue('tr-bad2', 'tr', '{}', p_traceparent => '00-00000000000000000000000000000000-00f067aa0ba902b7-01')$$,
                 'OR012', NULL, 'a trace id of zeros is refused');
SELECT throws_ok($$SELECT outbox.enqueue('tr-bad3', 'tr', '{}', p_traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01')$$,
                 'OR012', NULL, 'a parent id of zeros is refused');
SELECT throws_ok($$SELECT outbox.enqueue('tr-bad4', 'tr', '{}', p_traceparent => '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01')$$,
                 'OR012', NULL, 'upper case is refused');
SET LOCAL outbox.traceparent = 'garbage';
SELECT throws_ok($$SELECT outbox.enqueue('tr-bad5', 'tr', '{}')$$,
                 'OR012', 'outbox.enqueue: invalid traceparent ''garbage'' (from the setting outbox.traceparent)',
                 'an invalid setting is refused, naming the setting');
SET LOCAL outbox.traceparent = '';
SELECT is((SELECT count(*) FROM outbox.intents WHERE key LIKE 'tr-bad%'), 0::bigint, 'refused enqueues leave no row');

SELECT results_eq($$SELECT key, traceparent FROM outbox.claim('r1', ARRAY['tr'], ARRAY[10], 10, 30000) ORDER BY key$$,
                  $$VALUES ('tr-arg', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'),
                           ('tr-both', '00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01'),
                           ('tr-none', NULL),
                           ('tr-setting', '00-11111111111111111111111111111111-2222222222222222-00')$$,
                  'claim returns the trace context with each row');
SELECT ok(has_function_privilege('outbox_app', 'outbox.enqueue(text,text,jsonb,text,timestamptz,text,text)', 'EXECUTE'),
          'the application may call the new enqueue');

SELECT * FROM finish();
ROLLBACK;
