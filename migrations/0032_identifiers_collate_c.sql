-- 0032: the identifiers of an intent compare as bytes (issue 26: PostgreSQL's
-- share of a delivery).
--
-- An intent is found by its key, its target, its ordering group, its run and
-- the key it compensates, through B-tree indexes on those text columns, and
-- every claim and every record adds entries to two of them (intents_key_key,
-- and intents_in_flight's neighbours intents_due and intents_target_settled
-- lead with the target). Each entry is placed by comparing text in the
-- column's collation. With the database's default collation that is
-- strcoll(3) of the database's locale: in en_US.UTF-8 (the default of most
-- managed PostgreSQL services and of the official container image) strcoll
-- was 15 % of the CPU of a backend draining intents, against 0.3 % in
-- C.UTF-8, and the drain cost that backend 16 % more CPU per intent (8
-- alternating pairs of 30,000 intents: medians 46.5 against 39.9 us), its
-- INSERTs 25 % more. These columns are identifiers that the deterministic
-- layer builds ({run_id}:{step_id}) and admins name: no one sorts them as
-- words, and equality is byte equality in every deterministic collation
-- anyway. In the "C" collation PostgreSQL compares them with memcmp.
--
-- What changes for users: nothing that compares keys for equality (lookups,
-- ON CONFLICT, joins with targets.name, whose collation wins over the
-- default one in a comparison). A whole row compared with a row of
-- literals as anonymous records (what pgTAP's results_eq does) now fails
-- with "could not determine which collation to use for string comparison":
-- say COLLATE "default" (or "C") on one side. ORDER BY key, target, ordering_key, run_id or
-- compensates of intents now sorts by bytes (upper case before lower case,
-- 'Z' before 'a') in databases whose locale sorts otherwise; in a database
-- created with the C or C.UTF-8 locale the order is the same as before.
--
-- Locks: ACCESS EXCLUSIVE on outbox.intents while its six indexes on these
-- columns are rebuilt (the table itself is not rewritten: a collation is not
-- a new type): 0.65 s for 300,000 intents on a 2-core machine (an
-- en_US.UTF-8 database; the new indexes sort by bytes), during which relays
-- and enqueues wait. The three views and the trigger that name these columns are made
-- again as they were (definition, comments, grants), because PostgreSQL
-- refuses to change a column that a view or a trigger's WHEN reads.

-- The dependents, as they are now (in temporary tables of this session,
-- dropped at the end).
CREATE TEMP TABLE outbox_0032_views AS
SELECT c.oid, c.relname, pg_get_viewdef(c.oid) AS definition,
       obj_description(c.oid, 'pg_class') AS comment,
       (SELECT array_agg(format('GRANT %s ON TABLE outbox.%I TO %I', a.privilege_type, c.relname,
                                pg_get_userbyid(a.grantee)))
          FROM aclexplode(c.relacl) a
         WHERE a.grantee <> c.relowner AND a.grantee <> 0) AS grants,
       (SELECT array_agg(format('COMMENT ON COLUMN outbox.%I.%I IS %L', c.relname, att.attname,
                                col_description(c.oid, att.attnum)))
          FROM pg_attribute att
         WHERE att.attrelid = c.oid AND att.attnum > 0 AND NOT att.attisdropped
           AND col_description(c.oid, att.attnum) IS NOT NULL) AS column_comments
  FROM pg_class c
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'v'
   AND c.relname IN ('approvals', 'stuck', 'target_health');

CREATE TEMP TABLE outbox_0032_trigger AS
SELECT pg_get_triggerdef(t.oid) AS definition, obj_description(t.oid, 'pg_trigger') AS comment
  FROM pg_trigger t
 WHERE t.tgrelid = 'outbox.intents'::regclass AND t.tgname = 'intents_mcp_settled';

DO $$
BEGIN
    IF (SELECT count(*) FROM outbox_0032_views) <> 3 OR (SELECT count(*) FROM outbox_0032_trigger) <> 1 THEN
        RAISE EXCEPTION '0032: expected the views approvals, stuck, target_health and the trigger intents_mcp_settled';
    END IF;
END
$$;

DROP VIEW outbox.approvals, outbox.stuck, outbox.target_health;
DROP TRIGGER intents_mcp_settled ON outbox.intents;

ALTER TABLE outbox.intents
    ALTER COLUMN key TYPE text COLLATE "C",
    ALTER COLUMN target TYPE text COLLATE "C",
    ALTER COLUMN ordering_key TYPE text COLLATE "C",
    ALTER COLUMN run_id TYPE text COLLATE "C",
    ALTER COLUMN compensates TYPE text COLLATE "C";

-- Made again in the order they were made first (stuck and target_health do
-- not read approvals, nor each other).
DO $$
DECLARE
    v record;
    s text;
BEGIN
    FOR v IN SELECT * FROM outbox_0032_views ORDER BY oid LOOP
        EXECUTE format('CREATE VIEW outbox.%I AS %s', v.relname, v.definition);
        IF v.comment IS NOT NULL THEN
            EXECUTE format('COMMENT ON VIEW outbox.%I IS %L', v.relname, v.comment);
        END IF;
        FOREACH s IN ARRAY coalesce(v.column_comments, '{}') || coalesce(v.grants, '{}') LOOP
            EXECUTE s;
        END LOOP;
    END LOOP;
    EXECUTE (SELECT definition FROM outbox_0032_trigger);
    IF (SELECT comment FROM outbox_0032_trigger) IS NOT NULL THEN
        EXECUTE format('COMMENT ON TRIGGER intents_mcp_settled ON outbox.intents IS %L',
                       (SELECT comment FROM outbox_0032_trigger));
    END IF;
END
$$;

DROP TABLE outbox_0032_views, outbox_0032_trigger;
