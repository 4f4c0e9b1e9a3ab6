-- 05_roles: least privilege (docs/design.md, "Around it": roles; migrations/0005_roles.sql).
--   outbox_app       enqueue and read outcomes, nothing else (no table rights, no secret references)
--   outbox_relay     claim, renew, record, release; reads targets; cannot enqueue or decide
--   outbox_operator  read-only: the stuck view and the tables; no writes, no decisions
--   outbox_admin     operator + approve/reject/cancel/resolve + target registration
-- Each role is exercised with SET ROLE, then the full grant matrix is pinned,
-- so a new grant (or PUBLIC's default EXECUTE on a new function) shows up here.
BEGIN;
SELECT plan(65);

INSERT INTO outbox.targets (name, url, secret_env) VALUES ('t1', 'https://t1.test/hook', 'OUTBOX_SECRET_T1_SIGNING');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('appr', 'https://appr.test/hook', '$.amount > 100000');

SELECT has_role(r, format('role %s exists', r))
  FROM unnest(ARRAY['outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin']) AS r;
SELECT is((SELECT count(*)::int FROM pg_roles
            WHERE rolname IN ('outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin')
              AND NOT rolcanlogin AND NOT rolsuper AND NOT rolbypassrls AND NOT rolcreaterole AND NOT rolcreatedb),
          4, 'the four are plain group roles: NOLOGIN, no superuser, no BYPASSRLS');

-- ---------------------------------------------------------------------------
-- outbox_app
SET ROLE outbox_app;
SELECT lives_ok($$SELECT outbox.enqueue('app-1', 't1', '{"amount": 5}')$$, 'app can enqueue');
SELECT is((SELECT status FROM outbox.outcome('app-1')), 'pending', 'app can read the outcome');
SELECT throws_ok($$UPDATE outbox.intents SET state = 'succeeded'$$, '42501', 'permission denied for table intents',
                 'app cannot UPDATE intents');
SELECT throws_ok($$DELETE FROM outbox.intents$$, '42501', 'permission denied for table intents', 'app cannot DELETE intents');
SELECT throws_ok($$INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('x', 't1', '{}', '\x00')$$,
                 '42501', 'permission denied for table intents', 'app cannot INSERT intents (only through enqueue)');
SELECT throws_ok($$SELECT payload FROM outbox.intents$$, '42501', 'permission denied for table intents',
                 'app cannot read other keys'' payloads');
SELECT throws_ok($$SELECT * FROM outbox.claim('evil', ARRAY['t1'], ARRAY[10], 10, 30000)$$,
                 '42501', 'permission denied for function claim', 'app cannot claim');
SELECT throws_ok($$SELECT outbox.record('evil', ARRAY[1::bigint], ARRAY[1], ARRAY['succeeded']::outbox.intent_state[],
                                         ARRAY[NULL::int], ARRAY[false], ARRAY['succeeded']::outbox.attempt_class[],
                                         ARRAY[true], ARRAY[200], ARRAY[NULL::text], ARRAY[1], ARRAY['forged'], NULL::boolean[])$$,
                 '42501', 'permission denied for function record', 'app cannot record outcomes');
SELECT throws_ok($$SELECT secret_env FROM outbox.targets$$, '42501', 'permission denied for table targets',
                 'app cannot read targets'' secret references');
SELECT throws_ok($$UPDATE outbox.targets SET url = 'https://evil.test/'$$, '42501', 'permission denied for table targets',
                 'app cannot point a target elsewhere');
SELECT throws_ok($$SELECT outbox.approve('app-1', 'me')$$, '42501', 'permission denied for function approve',
                 'app cannot approve');
SELECT throws_ok($$SELECT outbox.cancel('app-1', 'x')$$, '42501', 'permission denied for function cancel', 'app cannot cancel');
SELECT throws_ok($$SELECT outbox.relay_heartbeat('evil', true)$$, '42501', 'permission denied for function relay_heartbeat',
                 'app cannot pose as a relay');
SELECT throws_ok($$SELECT outbox.note_decision(1, 1, 'me', 'forged')$$, '42501', 'permission denied for function note_decision',
                 'app cannot write the audit trail');
SELECT throws_ok($$SELECT outbox.locked_intent('app-1', 'x')$$, '42501', 'permission denied for function locked_intent',
                 'app cannot lock intents');
SELECT throws_ok($$SELECT * FROM outbox.stuck$$, '42501', 'permission denied for view stuck', 'app cannot read the stuck view');
SELECT throws_ok($$SELECT * FROM outbox.attempts$$, '42501', 'permission denied for table attempts', 'app cannot read attempts');
RESET ROLE;
SELECT ok(NOT has_any_column_privilege('outbox_app', 'outbox.targets', 'SELECT'),
          'app has no column of targets either');

-- ---------------------------------------------------------------------------
-- outbox_operator
SELECT outbox.enqueue('op-1', 'appr', '{"amount": 500000}') \g /dev/null
UPDATE outbox.intents SET state = 'unknown' WHERE key = 'app-1';
SET ROLE outbox_operator;
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 'app-1'), 1, 'operator can read the stuck view');
SELECT lives_ok($$SELECT key, state, payload FROM outbox.intents$$, 'operator can read intents');
SELECT lives_ok($$SELECT * FROM outbox.attempts$$, 'operator can read attempts');
SELECT lives_ok($$SELECT name, url, secret_env FROM outbox.targets$$, 'operator can read targets');
SELECT is((SELECT status FROM outbox.outcome('app-1')), 'reconciling', 'operator can read outcomes');
SELECT throws_ok($$UPDATE outbox.intents SET state = 'failed' WHERE key = 'app-1'$$,
                 '42501', 'permission denied for table intents', 'operator cannot update intents');
SELECT throws_ok($$DELETE FROM outbox.intents$$, '42501', 'permission denied for table intents', 'operator cannot delete intents');
SELECT throws_ok($$SELECT outbox.approve('op-1', 'op')$$, '42501', 'permission denied for function approve',
                 'operator cannot approve');
SELECT throws_ok($$SELECT outbox.resolve('app-1', 'failed', 'x')$$, '42501', 'permission denied for function resolve',
                 'operator cannot resolve');
SELECT throws_ok($$SELECT outbox.enqueue('op-2', 't1', '{}')$$, '42501', 'permission denied for function enqueue',
                 'operator cannot enqueue');
SELECT throws_ok($$SELECT * FROM outbox.claim('op', ARRAY['t1'], ARRAY[10], 10, 30000)$$,
                 '42501', 'permission denied for function claim', 'operator cannot claim');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url) VALUES ('op-t', 'https://op.test/')$$,
                 '42501', 'permission denied for table targets', 'operator cannot register targets');
RESET ROLE;

-- ---------------------------------------------------------------------------
-- outbox_relay
SELECT outbox.enqueue('rl-1', 't1', '{"amount": 1}') \g /dev/null
SET ROLE outbox_relay;
SELECT lives_ok($$SELECT outbox.relay_heartbeat('r1', false)$$, 'relay can heartbeat');
SELECT results_eq($$SELECT key, attempt FROM outbox.claim('r1', ARRAY['t1'], ARRAY[10], 10, 30000)$$,
                  $$VALUES ('rl-1'::text, 1)$$, 'relay can claim');
SELECT is(outbox.record('r1', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', NULL::boolean[]), 0,
          'relay can call record (empty batch)');
SELECT lives_ok($$SELECT * FROM outbox.renew_leases('r1', '{}', 30000)$$, 'relay can renew leases');
SELECT lives_ok($$SELECT * FROM outbox.take_over('r1', 10, 30000, '{}')$$, 'relay can take over expired leases');
SELECT lives_ok($$SELECT outbox.next_due_ms('{}')$$, 'relay can ask when the next row is due');
SELECT lives_ok($$SELECT name, url, key_header, secret_env FROM outbox.targets$$,
                'relay can read targets (it needs the secret reference)');
SELECT throws_ok($$SELECT outbox.enqueue('rl-2', 't1', '{}')$$, '42501', 'permission denied for function enqueue',
                 'relay cannot enqueue');
SELECT throws_ok($$SELECT outbox.approve('op-1', 'relay')$$, '42501', 'permission denied for function approve',
                 'relay cannot approve');
SELECT throws_ok($$SELECT outbox.resolve('app-1', 'succeeded', 'x')$$, '42501', 'permission denied for function resolve',
                 'relay cannot resolve');
SELECT throws_ok($$UPDATE outbox.intents SET state = 'succeeded'$$, '42501', 'permission denied for table intents',
                 'relay cannot update intents except through its functions');
SELECT throws_ok($$UPDATE outbox.targets SET url = 'https://evil.test/'$$, '42501', 'permission denied for table targets',
                 'relay cannot change targets');
RESET ROLE;
-- record for real, as the relay
CREATE TEMP TABLE rl AS SELECT id FROM outbox.intents WHERE key = 'rl-1';
GRANT SELECT ON rl TO outbox_relay;
SET ROLE outbox_relay;
SELECT is(outbox.record('r1', ARRAY[rl.id], ARRAY[1], ARRAY['succeeded']::outbox.intent_state[], ARRAY[NULL::int],
                        ARRAY[false], ARRAY['succeeded']::outbox.attempt_class[], ARRAY[true], ARRAY[200],
                        ARRAY[NULL::text], ARRAY[12], ARRAY['{"ok": true}'], NULL::boolean[]),
          1, 'relay can record an outcome') FROM rl;
RESET ROLE;
SELECT is((SELECT status FROM outbox.outcome('rl-1')), 'succeeded', '(the recorded outcome is visible)');

-- ---------------------------------------------------------------------------
-- outbox_admin
SELECT outbox.enqueue('ad-2', 'appr', '{"amount": 600000}') \g /dev/null
SET ROLE outbox_admin;
SELECT is(outbox.approve('op-1', 'admin')::text, 'pending', 'admin can approve');
SELECT is(outbox.reject('ad-2', 'admin', 'no')::text, 'cancelled', 'admin can reject');
SELECT is(outbox.resolve('app-1', 'succeeded', 'confirmed by phone')::text, 'succeeded', 'admin can resolve');
SELECT lives_ok($$SELECT * FROM outbox.stuck$$, 'admin can read the stuck view (operator rights)');
SELECT lives_ok($$INSERT INTO outbox.targets (name, url) VALUES ('new-t', 'https://new.test/hook')$$, 'admin can register targets');
SELECT throws_ok($$UPDATE outbox.intents SET state = 'failed'$$, '42501', 'permission denied for table intents',
                 'admin cannot update intents directly');
SELECT throws_ok($$SELECT * FROM outbox.claim('adm', ARRAY['t1'], ARRAY[10], 10, 30000)$$,
                 '42501', 'permission denied for function claim', 'admin cannot claim');
RESET ROLE;
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'op-1'), 'pending', '(the approval took effect)');

-- ---------------------------------------------------------------------------
-- A role with no outbox grant (PUBLIC's view) reaches nothing.
CREATE ROLE outbox_test_nobody_05 NOLOGIN;
SET ROLE outbox_test_nobody_05;
SELECT throws_ok($$SELECT outbox.enqueue('nb', 't1', '{}')$$, '42501', 'permission denied for schema outbox',
                 'PUBLIC has no USAGE on schema outbox');
RESET ROLE;

-- ---------------------------------------------------------------------------
-- The whole grant matrix.
SELECT is_empty($$SELECT p.oid::regprocedure::text FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                   WHERE p.pronamespace = 'outbox'::regnamespace AND a.grantee = 0$$,
                'no outbox function is executable by PUBLIC');
SELECT is_empty($$SELECT c.oid::regclass::text FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
                   WHERE c.relnamespace = 'outbox'::regnamespace AND a.grantee = 0$$,
                'no outbox table, view or sequence grants anything to PUBLIC');
SELECT set_eq(
    $$SELECT r.rolname::text, p.proname::text
        FROM pg_proc p CROSS JOIN pg_roles r
       WHERE p.pronamespace = 'outbox'::regnamespace
         AND r.rolname IN ('outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin')
         AND p.proname NOT IN ('canonical', 'fingerprint_doc', 'fingerprint', 'differing_fields', 'visible_status', 'needs_approval')
         AND has_function_privilege(r.oid, p.oid, 'EXECUTE')$$,
    $$VALUES ('outbox_app', 'enqueue'), ('outbox_app', 'outcome'),
             ('outbox_relay', 'outcome'), ('outbox_relay', 'relay_heartbeat'), ('outbox_relay', 'relay_gone'),
             ('outbox_relay', 'claim'), ('outbox_relay', 'take_over_expired'), ('outbox_relay', 'renew_leases'),
             ('outbox_relay', 'record'), ('outbox_relay', 'release'), ('outbox_relay', 'next_due_ms'),
             ('outbox_relay', 'claim_unknown'), ('outbox_relay', 'live_counts'),
             ('outbox_relay', 'target_event'),
             ('outbox_operator', 'outcome'), ('outbox_operator', 'live_counts'),
             ('outbox_admin', 'enqueue'), ('outbox_admin', 'outcome'), ('outbox_admin', 'approve'),
             ('outbox_admin', 'reject'), ('outbox_admin', 'cancel'), ('outbox_admin', 'resolve'),
             ('outbox_admin', 'live_counts'), ('outbox_admin', 'retry_now'),
             ('outbox_app', 'compensate'), ('outbox_app', 'cancel_run'), ('outbox_app', 'compensations'), ('outbox_app', 'links'),
             ('outbox_operator', 'compensations'), ('outbox_operator', 'links'),
             ('outbox_admin', 'compensate'), ('outbox_admin', 'cancel_run'), ('outbox_admin', 'compensations'), ('outbox_admin', 'links'),
             ('outbox_relay', 'prune'), ('outbox_relay', 'prune_step'), ('outbox_admin', 'prune'),
             ('outbox_admin', 'prune_step'), ('outbox_operator', 'prunable'), ('outbox_admin', 'prunable'),
             ('outbox_admin', 'redrive'),
             ('outbox_app', 'traceparent_of'), ('outbox_operator', 'traceparent_of'), ('outbox_admin', 'traceparent_of'),
             ('outbox_admin', 'mcp_client'), ('outbox_admin', 'mcp_schema_problem'),
             ('outbox_admin', 'mcp_schema_problem_at'), ('outbox_admin', 'mcp_schema_ref'),
             ('outbox_admin', 'mcp_schema_ref_loops'), ('outbox_admin', 'mcp_schema_pattern_problem'),
             ('outbox_admin', 'mcp_schema_too_deep'), ('outbox_admin', 'mcp_schema_re_char'),
             ('outbox_admin', 'mcp_schema_re_class'),
             ('outbox_operator', 'needs_person'), ('outbox_admin', 'needs_person'),
             ('outbox_operator', 'approval_reason'), ('outbox_admin', 'approval_reason'),
             ('outbox_operator', 'rule_text'), ('outbox_admin', 'rule_text'),
             ('outbox_relay', 'claim_due'), ('outbox_relay', 'take_over'),
             ('outbox_operator', 'unkeyed_attempt'), ('outbox_admin', 'unkeyed_attempt'),
             ('outbox_relay', 'schema_version'), ('outbox_operator', 'schema_version'),
             ('outbox_admin', 'schema_version')$$,
    'EXECUTE matrix: each role reaches exactly its functions (SECURITY DEFINER internals reach nobody)');
SELECT set_eq(
    $$SELECT r.rolname::text, c.relname::text, priv
        FROM pg_class c CROSS JOIN pg_roles r
       CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS priv
       WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v', 'p')
         AND r.rolname IN ('outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin')
         AND has_table_privilege(r.oid, c.oid, priv)$$,
    $$VALUES ('outbox_relay', 'targets', 'SELECT'),
             ('outbox_operator', 'stuck', 'SELECT'), ('outbox_operator', 'intents', 'SELECT'),
             ('outbox_operator', 'attempts', 'SELECT'), ('outbox_operator', 'targets', 'SELECT'),
             ('outbox_operator', 'relays', 'SELECT'), ('outbox_operator', 'mismatches', 'SELECT'),
             ('outbox_admin', 'stuck', 'SELECT'), ('outbox_admin', 'intents', 'SELECT'),
             ('outbox_admin', 'attempts', 'SELECT'), ('outbox_admin', 'targets', 'SELECT'),
             ('outbox_admin', 'relays', 'SELECT'), ('outbox_admin', 'mismatches', 'SELECT'),
             ('outbox_admin', 'targets', 'INSERT'), ('outbox_admin', 'targets', 'UPDATE'),
             ('outbox_admin', 'targets', 'DELETE'),
             ('outbox_operator', 'target_health', 'SELECT'), ('outbox_admin', 'target_health', 'SELECT'),
             ('outbox_relay', 'target_state', 'SELECT'), ('outbox_operator', 'target_state', 'SELECT'),
             ('outbox_admin', 'target_state', 'SELECT'),
             ('outbox_operator', 'tombstones', 'SELECT'), ('outbox_admin', 'tombstones', 'SELECT'),
             ('outbox_operator', 'mcp_tools', 'SELECT'), ('outbox_operator', 'mcp_tasks', 'SELECT'),
             ('outbox_admin', 'mcp_tools', 'SELECT'), ('outbox_admin', 'mcp_tasks', 'SELECT'),
             ('outbox_admin', 'mcp_tools', 'INSERT'), ('outbox_admin', 'mcp_tools', 'UPDATE'),
             ('outbox_admin', 'mcp_tools', 'DELETE'), ('outbox_admin', 'mcp_clients', 'DELETE'),
             ('outbox_operator', 'mcp_argument_keys', 'SELECT'), ('outbox_admin', 'mcp_argument_keys', 'SELECT'),
             ('outbox_operator', 'approvals', 'SELECT'), ('outbox_admin', 'approvals', 'SELECT'),
             ('outbox_operator', 'isolated_logins', 'SELECT'), ('outbox_admin', 'isolated_logins', 'SELECT'),
             ('outbox_admin', 'isolated_logins', 'INSERT'), ('outbox_admin', 'isolated_logins', 'UPDATE'),
             ('outbox_admin', 'isolated_logins', 'DELETE'),
             ('outbox_operator', 'installation', 'SELECT'), ('outbox_admin', 'installation', 'SELECT')$$,
    'table matrix: the app has no table rights; relay reads targets and target_state; operator reads; admin also edits targets');
-- Installed without a role prefix (0041): the plain names, recorded as ''.
SELECT is((SELECT role_prefix FROM outbox.installation), '', 'installed without a role prefix: recorded as empty');
SELECT is(ARRAY[outbox.role_name('app'), outbox.role_name('operator'), outbox.role_name('relay')],
          ARRAY['outbox_app', 'outbox_operator', 'outbox_relay'], 'outbox.role_name gives the plain names');
SELECT set_eq(
    $$SELECT r.rolname::text FROM pg_roles r
       WHERE r.rolname IN ('outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin')
         AND has_schema_privilege(r.oid, 'outbox', 'CREATE')$$,
    $$SELECT NULL::text WHERE false$$,
    'no outbox role can create objects in schema outbox');

SELECT * FROM finish();
ROLLBACK;
