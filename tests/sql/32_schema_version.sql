-- 32_schema_version: outbox.schema_version() (migrations/0042_schema_version.sql),
-- which a relay serving several databases (--databases) asks at each connect.
--   NULL without outbox_meta.migrations (a schema not loaded by migrate), or
--   when outbox_meta is a role's the schema's owner may not read;
--   the newest migration's number with it, whatever else the table holds;
--   the relay's role may call it, and still not read outbox_meta itself;
--   the relay's statement (relay/sql.h, STMT_SCHEMA_VERSION) answers the same,
--   and an application's role may not call it.
BEGIN;
SELECT plan(8);

SELECT is(outbox.schema_version(), NULL, 'NULL when outbox_meta.migrations is not there');

CREATE SCHEMA outbox_meta;
CREATE TABLE outbox_meta.migrations (name text PRIMARY KEY, checksum text NOT NULL,
                                     applied_at timestamptz NOT NULL DEFAULT now());
SELECT is(outbox.schema_version(), NULL, 'NULL when outbox_meta is another role''s');
-- As migrate leaves it: outbox_meta belongs to the schema's owner.
ALTER SCHEMA outbox_meta OWNER TO outbox_owner;
ALTER TABLE outbox_meta.migrations OWNER TO outbox_owner;
INSERT INTO outbox_meta.migrations (name, checksum)
VALUES ('0001_init.sql', 'x'), ('0042_schema_version.sql', 'x'), ('0009_x.sql', 'x'), ('notes', 'x');

SELECT is(outbox.schema_version(), 42, 'the number of the newest migration applied');

SET LOCAL ROLE outbox_relay;
SELECT is(outbox.schema_version(), 42, 'the relay''s role may ask');
SELECT throws_ok($$SELECT count(*) FROM outbox_meta.migrations$$, '42501', NULL,
                 '...but not read outbox_meta itself');
SELECT is((SELECT CASE WHEN to_regprocedure('outbox.schema_version()') IS NULL THEN 0 ELSE
                (xpath('/row/v/text()', query_to_xml('SELECT outbox.schema_version() AS v', false, true,
                 '')))[1]::text::integer END), 42,
          'the relay''s statement reads it through query_to_xml');
RESET ROLE;

SET LOCAL ROLE outbox_app;
SELECT throws_ok($$SELECT outbox.schema_version()$$, '42501', NULL, 'an application may not call it');
RESET ROLE;

DELETE FROM outbox_meta.migrations;
SELECT is(outbox.schema_version(), NULL, 'NULL when no migration is recorded');

SELECT * FROM finish();
ROLLBACK;
