-- 22_operator_views: what an operator and an agent are told (issue 22; migrations/0023).
--   needs a person  an unknown outcome that nothing will settle says so, and why, in
--                   outbox.outcome's message and outbox.stuck's reason; one that a
--                   status URL settles still reads "outcome unknown, reconciling"
--   approvals       outbox.approvals: what waits, the rule, and why it holds each
--                   intent (true, a missing, null or mistyped field, a lax step);
--                   never a value of the payload; operators read it, the app does not
--   back-off        a circuit that closes (or a target enabled again) makes its
--                   retries due now; first attempts scheduled later and held ordered
--                   intents keep their time
--   stuck           a pending row behind an open circuit shows its last error once
--   keys            a key with a control character is escaped in the refusal
BEGIN;
SELECT plan(34);

-- ---- needs a person ------------------------------------------------------------
INSERT INTO outbox.targets (name, url, key_header, status_url) VALUES
    ('np-keyless', 'https://np.test/keyless', NULL, NULL),
    ('np-status',  'https://np.test/status',  NULL, 'https://np.test/status/{key}'),
    ('np-keyed',   'https://np.test/keyed',   'Idempotency-Key', NULL),
    ('np-off',     'https://np.test/off',     NULL, 'https://np.test/off/{key}');
SELECT count(*) FROM (SELECT outbox.enqueue(k, t, '{"amount": 1}')
                        FROM (VALUES ('np:keyless', 'np-keyless'), ('np:status', 'np-status'),
                                     ('np:fresh', 'np-keyed'), ('np:old', 'np-keyed'), ('np:bare', 'np-keyed'),
                                     ('np:off', 'np-off'), ('np:retrying', 'np-keyless')) AS v(k, t)) x \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 2,
                          first_attempt_at = now() - interval '1 hour', last_error = 'HTTP 500'
 WHERE key IN ('np:keyless', 'np:status', 'np:fresh', 'np:bare', 'np:off');
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 2,
                          first_attempt_at = now() - interval '25 hours' WHERE key = 'np:old';
-- np:bare: an attempt that may have executed went without the key (the header was added later)
INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status, error, key_sent)
SELECT id, 1, 'r1', 'ambiguous', true, 500, 'HTTP 500', false FROM outbox.intents WHERE key = 'np:bare';
-- np:retrying: pending again after an ambiguous attempt (a same-key retry): reconciling
UPDATE outbox.intents SET ambiguous = true, attempts = 1, first_attempt_at = now() WHERE key = 'np:retrying';
UPDATE outbox.targets SET enabled = false WHERE name = 'np-off';

SELECT is((SELECT message FROM outbox.outcome('np:keyless')),
          'outcome unknown: needs a person — no status URL, no key',
          'outcome: a keyless target without a status URL: "needs a person — no status URL, no key"');
SELECT is((SELECT status FROM outbox.outcome('np:keyless')), 'reconciling', 'outcome: its status stays reconciling');
SELECT is((SELECT message FROM outbox.outcome('np:status')), 'outcome unknown, reconciling',
          'outcome: a target with a status URL: still "outcome unknown, reconciling"');
SELECT is((SELECT message FROM outbox.outcome('np:old')),
          'outcome unknown: needs a person — no status URL, and the key is past the target''s key_ttl (24:00:00): the target may have forgotten it',
          'outcome: a keyed target past its key_ttl: needs a person, saying why');
SELECT matches((SELECT message FROM outbox.outcome('np:fresh')),
               '^outcome unknown: needs a person — no status URL; the target remembers the key until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z, so a retry with it is safe until then \(outbox-relay retry KEY\)$',
               'outcome: a keyed target within its key_ttl: needs a person, who may retry until the key expires');
SELECT is((SELECT message FROM outbox.outcome('np:bare')),
          'outcome unknown: needs a person — no status URL, and an attempt that may have executed went without the key',
          'outcome: an ambiguous attempt sent without the key: needs a person');
SELECT is((SELECT message FROM outbox.outcome('np:off')),
          'outcome unknown: needs a person — the target is disabled, so its status URL is not asked: enable it, or resolve the key',
          'outcome: a disabled target with a status URL: needs a person (or enabling it)');
SELECT is((SELECT message FROM outbox.outcome('np:retrying')), 'outcome unknown, reconciling',
          'outcome: a same-key retry after an ambiguous attempt stays "outcome unknown, reconciling"');
SELECT is((SELECT last_error FROM outbox.outcome('np:keyless')), NULL,
          'outcome: the caller still sees no raw transport error');

SELECT set_eq($$SELECT key COLLATE "default", reason FROM outbox.stuck WHERE key IN ('np:keyless', 'np:status', 'np:old', 'np:bare')$$,
              $$VALUES ('np:keyless'::text, 'outcome unknown: needs a person — no status URL, no key'::text),
                       ('np:status', 'outcome unknown'),
                       ('np:old', 'outcome unknown: needs a person — no status URL, and the key is past the target''s key_ttl (24:00:00): the target may have forgotten it'),
                       ('np:bare', 'outcome unknown: needs a person — no status URL, and an attempt that may have executed went without the key')$$,
              'stuck: the same reasons; one a status URL settles stays "outcome unknown"');

SET LOCAL ROLE outbox_operator;
SELECT is((SELECT reason FROM outbox.stuck WHERE key = 'np:keyless'),
          'outcome unknown: needs a person — no status URL, no key', 'stuck as outbox_operator: the reason too');
RESET ROLE;
SET LOCAL ROLE outbox_app;
SELECT is((SELECT message FROM outbox.outcome('np:keyless')),
          'outcome unknown: needs a person — no status URL, no key', 'outcome as outbox_app: the same message');
RESET ROLE;

-- ---- approvals -------------------------------------------------------------------
INSERT INTO outbox.targets (name, url, approval_rule) VALUES
    ('ap', 'https://ap.test/refund', '$.amount_cents > 100000'),
    ('ap-filter', 'https://ap.test/filter', '$ ? (@.amount_cents > 100000)'),
    ('ap-lax', 'https://ap.test/lax', '$.items.price > 10'),
    ('ap-items', 'https://ap.test/items', '$.items[*].price > 10');
SELECT count(*) FROM (SELECT outbox.enqueue(k, t, p::jsonb)
                        FROM (VALUES ('ap:big', 'ap', '{"amount_cents": 250000}'),
                                     ('ap:missing', 'ap', '{"amount": 250000}'),
                                     ('ap:null', 'ap', '{"amount_cents": null}'),
                                     ('ap:string', 'ap', '{"amount_cents": "777777"}'),
                                     ('ap:small', 'ap', '{"amount_cents": 5}'),
                                     ('ap:filter-string', 'ap-filter', '{"amount_cents": "5"}'),
                                     ('ap:lax', 'ap-lax', '{"items": [{"price": 5}]}'),
                                     ('ap:items', 'ap-items', '{"items": [{"price": 5}, {"cost": 3}]}')) AS v(k, t, p)) x \g /dev/null
UPDATE outbox.intents SET created_at = now() - interval '3 hours' WHERE key = 'ap:big';

SELECT results_eq($$SELECT key COLLATE "default", target COLLATE "default", rule, reason FROM outbox.approvals WHERE key LIKE 'ap:%' ORDER BY key$$,
                  $$VALUES ('ap:big'::text, 'ap'::text, '$.amount_cents > 100000'::text, 'the rule is true for this payload'::text),
                           ('ap:filter-string', 'ap-filter', '$?(@.amount_cents > 100000)', '$.amount_cents is a string, compared with a number'),
                           ('ap:items', 'ap-items', '$.items[*].price > 10', '$.items[*].price is missing in some items'),
                           ('ap:lax', 'ap-lax', '$.items.price > 10', '$.items.price does not exist as written (strict): an array on the way without [*], or an item without it'),
                           ('ap:missing', 'ap', '$.amount_cents > 100000', '$.amount_cents is missing'),
                           ('ap:null', 'ap', '$.amount_cents > 100000', '$.amount_cents is null'),
                           ('ap:string', 'ap', '$.amount_cents > 100000', '$.amount_cents is a string, compared with a number')$$,
                  'approvals: each intent awaiting approval, the rule, and why it holds it (a pending one is not listed)');
SELECT is((SELECT age FROM outbox.approvals WHERE key = 'ap:big'), interval '3 hours', 'approvals: the age');
SELECT is((SELECT count(*)::int FROM outbox.approvals WHERE reason ~ '250000|777777|"5"'), 0,
          'approvals: the reason never shows a value of the payload');
SELECT is(outbox.approval_reason('{"a": 1}', '$.a.b.c == true'), '$.a.b.c is missing', 'reason: a path below a scalar is missing');
SELECT is(outbox.approval_reason('{"ok": "yes"}', '$.ok == true'), '$.ok is a string, compared with a boolean',
          'reason: a string where a boolean is compared');
SELECT is(outbox.approval_reason('{"n": "7"}', '100 < $.n'), '$.n is a string, compared with a number',
          'reason: the literal on the left');
SELECT is(outbox.approval_reason('{"x": 1, "y": 0}', '$.x / $.y > 1'),
          'the rule is neither true nor false for this payload (an unknown comparison or an error inside it), so it holds',
          'reason: what it cannot name, it says in general terms');
SELECT is(outbox.approval_reason('{"a": 1}', NULL), 'the target has no approval rule now (it had one when the intent was enqueued)',
          'reason: a rule removed since');

SET LOCAL ROLE outbox_operator;
SELECT is((SELECT count(*)::int FROM outbox.approvals WHERE key LIKE 'ap:%'), 7, 'approvals: outbox_operator reads the view');
RESET ROLE;
SET LOCAL ROLE outbox_app;
SELECT throws_ok($$SELECT * FROM outbox.approvals$$, '42501', 'permission denied for view approvals',
                 'approvals: the app does not');
RESET ROLE;

-- ---- back-off after an outage ------------------------------------------------------
INSERT INTO outbox.targets (name, url) VALUES ('bo', 'https://bo.test/hook'), ('bo-other', 'https://bo.test/other'),
                                              ('bo-gone', 'https://bo.test/gone');
SELECT count(*) FROM (SELECT outbox.enqueue(k, t, '{}')
                        FROM (VALUES ('bo:retry', 'bo'), ('bo:later', 'bo'), ('bo:held', 'bo'), ('bo:other', 'bo-other'),
                                     ('bo:gone', 'bo-gone')) AS v(k, t)) x \g /dev/null
-- bo:retry failed three times while the target went down: its back-off runs 3.5 more minutes
UPDATE outbox.intents SET attempts = 3, first_attempt_at = now() - interval '1 minute',
                          next_attempt_at = now() + interval '210 seconds'
 WHERE key IN ('bo:retry', 'bo:other', 'bo:gone');
UPDATE outbox.intents SET next_attempt_at = now() + interval '1 hour' WHERE key = 'bo:later';   -- p_not_before
UPDATE outbox.intents SET attempts = 1, next_attempt_at = 'infinity', ordering_key = 'g-bo' WHERE key = 'bo:held';
UPDATE outbox.target_state SET circuit = 'half_open', circuit_since = now(), probe_owner = 'r1',
                               probe_expires_at = now() + interval '30 seconds'
 WHERE target = 'bo';
SELECT results_eq($$SELECT circuit FROM outbox.target_event('r1', 'bo', 'probe_succeeded', NULL, 0)$$,
                  $$VALUES ('closed'::text)$$, 'back-off: the probe succeeded, the circuit closes');
SELECT is((SELECT next_attempt_at <= now() FROM outbox.intents WHERE key = 'bo:retry'), true,
          'back-off: a retry waiting on its own back-off is due now');
SELECT is((SELECT next_attempt_at FROM outbox.intents WHERE key = 'bo:later'), now() + interval '1 hour',
          'back-off: a first attempt scheduled for later keeps its time');
SELECT is((SELECT next_attempt_at FROM outbox.intents WHERE key = 'bo:held'), 'infinity'::timestamptz,
          'back-off: an ordered intent held behind its group stays held');
SELECT is((SELECT next_attempt_at FROM outbox.intents WHERE key = 'bo:other'), now() + interval '210 seconds',
          'back-off: another target''s retries are not touched');
SELECT is((SELECT count(*)::int FROM outbox.target_event('r2', 'bo-other', 'probe_succeeded', NULL, 0)), 1,
          'back-off: a probe_succeeded for a closed circuit (not this relay''s probe) ...');
SELECT is((SELECT next_attempt_at FROM outbox.intents WHERE key = 'bo:other'), now() + interval '210 seconds',
          '... changes nothing');
UPDATE outbox.targets SET enabled = false WHERE name = 'bo-gone';
UPDATE outbox.targets SET enabled = true WHERE name = 'bo-gone';
SELECT is((SELECT next_attempt_at <= now() FROM outbox.intents WHERE key = 'bo:gone'), true,
          'back-off: a target enabled again: its retries are due now too');

-- ---- stuck: the last error once ------------------------------------------------------------
INSERT INTO outbox.targets (name, url) VALUES ('cr', 'https://cr.test/hook');
SELECT count(*) FROM (SELECT outbox.enqueue(k, 'cr', '{}') FROM (VALUES ('cr:same'), ('cr:other')) AS v(k)) x \g /dev/null
SELECT count(*) FROM outbox.target_event('r1', 'cr', 'open',
    '10 failures in a row; last: Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn''t connect to server', 0) \g /dev/null
UPDATE outbox.intents SET attempts = 1, last_error = 'Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn''t connect to server'
 WHERE key = 'cr:same';
UPDATE outbox.intents SET attempts = 1, last_error = 'HTTP 503' WHERE key = 'cr:other';
SELECT matches((SELECT reason FROM outbox.stuck WHERE key = 'cr:same'),
               '^target unavailable since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(circuit open: 10 failures in a row\)$',
               'stuck: the circuit''s reason without the row''s own last error (shown once, in last_error)');
SELECT matches((SELECT reason FROM outbox.stuck WHERE key = 'cr:other'),
               '\(circuit open: 10 failures in a row; last: Failed to connect to 127\.0\.0\.1 port 1 after 0 ms: Couldn''t connect to server\)$',
               'stuck: another last error: the circuit''s reason in full');

-- ---- keys ----------------------------------------------------------------------------------
SELECT throws_ok($$SELECT outbox.enqueue(E'run-1:\nstep-2', 'np-keyed', '{}')$$,
                 'OR004', 'outbox.enqueue: key E''run-1:\nstep-2'' contains a control character (U+000A)',
                 'keys: a newline is escaped in the refusal, and named');
SELECT throws_ok($$SELECT outbox.enqueue(E'a\\b\x01''c', 'np-keyed', '{}')$$,
                 'OR004', 'outbox.enqueue: key E''a\\b\u0001\''c'' contains a control character (U+0001)',
                 'keys: backslashes and quotes stay readable beside the escapes');

SELECT * FROM finish();
ROLLBACK;
