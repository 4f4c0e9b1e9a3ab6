-- 0041: each database of a cluster can have roles of its own (issue 38, item 5).
--
-- Group roles are cluster-wide: a login granted outbox_app for one database's
-- outbox could enqueue into the outbox of any other database of the same
-- cluster. `outbox-relay migrate --role-prefix P`, on a database's first
-- install, makes its roles P_outbox_app, P_outbox_relay, P_outbox_operator,
-- P_outbox_admin and P_outbox_mcp instead: migrate creates them, and after
-- every migration file, in that file's transaction, moves each privilege the
-- file granted to an outbox_* role in this database to the prefixed role
-- (relay/cli/migrate.c, move_grants). The migrations keep naming the plain
-- roles, so the released files apply unchanged.
--
-- This file records the prefix, which migrate passes in the transaction's
-- setting outbox.role_prefix ('' or unset: no prefix, the names of before),
-- and checks it afterwards: a later migrate with another prefix is refused.
-- The two functions that asked for a role by name (isolated and
-- operator_session: "is the login an operator or a relay?") now ask
-- outbox.role_name, so they name this database's roles.
--
-- Upgrade: an installed database records '' (its roles keep their names);
-- a prefix is only taken on a first install. Locks: none on existing
-- tables (one new table of one row, two functions replaced with the same
-- signatures). The relays of 0.1.0 and of 0039 run unchanged.

CREATE TABLE outbox.installation (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    role_prefix  text NOT NULL CHECK (role_prefix ~ '^([a-z][a-z0-9_]{0,39})?$'),
    installed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.installation IS
    'One row: the role prefix this database was installed with (0041); '''' = the plain names outbox_app, outbox_relay, ...';

INSERT INTO outbox.installation (role_prefix)
VALUES (coalesce(current_setting('outbox.role_prefix', true), ''));

-- The name of this database's role ROLE ('app', 'relay', 'operator', 'admin', 'mcp').
CREATE FUNCTION outbox.role_name(p_role text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN coalesce(i.role_prefix, '') = '' THEN 'outbox_' || p_role
                ELSE i.role_prefix || '_outbox_' || p_role END
      FROM (SELECT) AS one_row LEFT JOIN outbox.installation i ON true
$$;
COMMENT ON FUNCTION outbox.role_name(text) IS
    'The name of this database''s role p_role (app, relay, operator, admin, mcp): outbox_<role>, or <prefix>_outbox_<role> when installed with a role prefix (0041).';

CREATE OR REPLACE FUNCTION outbox.isolated() RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.isolated_logins l WHERE l.login = session_user::text)
           AND NOT pg_catalog.pg_has_role(session_user, outbox.role_name('operator'), 'MEMBER')
           AND NOT pg_catalog.pg_has_role(session_user, outbox.role_name('relay'), 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.isolated() IS
    'Whether the session''s login is isolated (outbox.isolated_logins), unless it is a member of this database''s operator or relay role (0026, 0041).';

CREATE OR REPLACE FUNCTION outbox.operator_session() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.pg_has_role(session_user, outbox.role_name('operator'), 'MEMBER')
           OR pg_catalog.pg_has_role(session_user, outbox.role_name('relay'), 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.operator_session() IS
    'Whether the session''s login is a member of this database''s operator or relay role: it may read an MCP client''s outcome and cancel its run (0036, 0041).';

REVOKE ALL ON outbox.installation FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.role_name(text) FROM PUBLIC;
GRANT SELECT ON outbox.installation TO outbox_operator;
