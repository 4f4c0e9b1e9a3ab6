-- deploy/compose/initdb.sql — the logins and databases of the local development stack
-- (deploy/docker-compose.yml), run once by the postgres image as its superuser when the
-- data volume is new (/docker-entrypoint-initdb.d), in the database "app".
--
-- What a DBA or a managed PostgreSQL would set up before the first migrate:
--   outbox_migrate      the schema owner: LOGIN CREATEROLE, not a superuser (all that a
--                       managed PostgreSQL gives); `outbox-relay migrate` runs as it and
--                       creates the schema "outbox" and the group roles outbox_app,
--                       outbox_relay, outbox_operator, outbox_admin
--   outbox_relay_local  the relay's login (granted outbox_relay and outbox_operator by
--                       deploy/compose/setup.sql, once migrate has made those roles)
--   outbox_mcp_local    the MCP front door's login (granted outbox_mcp, and nothing
--                       else, the same way)
--   refund_app          the application's login (granted outbox_app the same way), and
--                       its own table, accounts, with account 42
--   payments_receiver   the receiving service's login and its OWN database, payments,
--                       where it installs schema/inbox.sql (the inbox) itself
-- Passwords come from the environment the compose file gives the db service (psql's
-- \getenv; the defaults there are local-only values).

\set ON_ERROR_STOP on
\getenv MIGRATE_PASSWORD OUTBOX_MIGRATE_PASSWORD
\getenv RELAY_PASSWORD OUTBOX_RELAY_PASSWORD
\getenv MCP_PASSWORD OUTBOX_MCP_PASSWORD
\getenv APP_PASSWORD REFUND_APP_PASSWORD
\getenv RECEIVER_PASSWORD PAYMENTS_RECEIVER_PASSWORD
\if :{?MIGRATE_PASSWORD}
\else
DO $$ BEGIN RAISE EXCEPTION 'initdb.sql: OUTBOX_MIGRATE_PASSWORD is not set'; END $$;
\endif
\if :{?RELAY_PASSWORD}
\else
DO $$ BEGIN RAISE EXCEPTION 'initdb.sql: OUTBOX_RELAY_PASSWORD is not set'; END $$;
\endif
\if :{?MCP_PASSWORD}
\else
DO $$ BEGIN RAISE EXCEPTION 'initdb.sql: OUTBOX_MCP_PASSWORD is not set'; END $$;
\endif
\if :{?APP_PASSWORD}
\else
DO $$ BEGIN RAISE EXCEPTION 'initdb.sql: REFUND_APP_PASSWORD is not set'; END $$;
\endif
\if :{?RECEIVER_PASSWORD}
\else
DO $$ BEGIN RAISE EXCEPTION 'initdb.sql: PAYMENTS_RECEIVER_PASSWORD is not set'; END $$;
\endif

CREATE ROLE outbox_migrate LOGIN CREATEROLE NOSUPERUSER PASSWORD :'MIGRATE_PASSWORD';
GRANT CREATE ON DATABASE app TO outbox_migrate;
CREATE ROLE outbox_relay_local LOGIN PASSWORD :'RELAY_PASSWORD';
CREATE ROLE outbox_mcp_local LOGIN PASSWORD :'MCP_PASSWORD';
CREATE ROLE refund_app LOGIN PASSWORD :'APP_PASSWORD';
CREATE ROLE payments_receiver LOGIN PASSWORD :'RECEIVER_PASSWORD';

-- The application's own table (README, "An agent's business transaction").
CREATE TABLE public.accounts (id integer PRIMARY KEY, balance_cents bigint NOT NULL);
INSERT INTO public.accounts VALUES (42, 100000);
GRANT SELECT, UPDATE ON public.accounts TO refund_app;

CREATE DATABASE payments OWNER payments_receiver;
