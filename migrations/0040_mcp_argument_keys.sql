-- 0040: keys from the arguments, for hosts that cannot send one (issue 37,
-- item 1; docs/design.md, "Keys from the arguments").
--
-- Most agent hosts (desktop and IDE assistants, hosted chat products,
-- generic MCP clients) cannot set params._meta, so a tool had to take
-- server_keys = true: a key minted per call, and a retried call after a
-- lost answer was a second action. Now outbox.mcp_tools.key_source says
-- where a call's key comes from when the call carries none:
--
--   'meta'       (default) nowhere: the call must carry one (today's rule);
--   'arguments'  the call's arguments: calls of one client to one tool with
--                the same canonical arguments (the front door writes them:
--                key order and number spelling ignored, properties whose
--                schema says "x-outbox-volatile": true left out, hashed
--                with SHA-256) within argument_window of the first such
--                call are one action;
--   'minted'     a new key per call (today's server_keys = true).
--
-- A call that carries a key uses it, whatever key_source says.
--
-- The key of some arguments is looked up, not computed from time buckets
-- (a retry at a bucket's edge would be a second action): one row per
-- (client, tool, argument hash) in mcp_argument_keys holds the key and when
-- its window began, taken with INSERT ... ON CONFLICT (a unique index) in
-- mcp_call's own transaction, and replaced only once the window has passed.
-- Two identical calls at once: the second waits on the first's row and gets
-- its key, then finds its intent; if the first rolls back, the second
-- inserts. Time is the database's (now(), the transaction's start), so
-- replicas of the front door agree whatever their clocks say.
--
-- Compatibility (the rollback window): server_keys stays, kept in step with
-- key_source by a trigger (true is 'minted'; setting it true or false on a
-- row sets key_source 'minted' or 'meta'), so 0.1.0 front doors and admin
-- scripts that write it keep working; it is dropped in the release after.
-- Those front doors read it through mcp_tool and mcp_list_tools, unchanged;
-- this release's front door reads key_source and argument_window through
-- mcp_tool_keyed and mcp_list_tools_keyed, and calls the new mcp_call (its
-- tenth argument, p_argument_hash); the nine-argument mcp_call stays, a
-- wrapper of it. A 0.1.0 front door treats an 'arguments' tool as 'meta'
-- (server_keys false): a call without a key is refused, never doubled.
--
-- Also: "x-outbox-volatile" (a boolean annotation) is accepted in a tool's
-- schema (mcp_schema_problem_at, as relay/mcp/json_schema_check.c), and
-- prune_step deletes argument keys whose window has passed.
--
-- Locks: ALTER TABLE mcp_tools (ACCESS EXCLUSIVE, brief: the new columns
-- have constant defaults, no rewrite; one UPDATE of the rows with
-- server_keys); the new table is empty; functions replaced take none.

ALTER TABLE outbox.mcp_tools
    ADD COLUMN key_source text NOT NULL DEFAULT 'meta'
        CONSTRAINT mcp_tools_key_source_check CHECK (key_source IN ('meta', 'arguments', 'minted')),
    ADD COLUMN argument_window interval NOT NULL DEFAULT '10 minutes'
        CONSTRAINT mcp_tools_argument_window_check CHECK (argument_window > interval '0'
                                                          AND argument_window <= interval '7 days');
UPDATE outbox.mcp_tools SET key_source = 'minted' WHERE server_keys;
COMMENT ON COLUMN outbox.mcp_tools.key_source IS
    'Where the key of a call that carries none comes from: meta (nowhere: refused), arguments (the same canonical arguments within argument_window are one action), minted (a new key per call) (0040).';
COMMENT ON COLUMN outbox.mcp_tools.argument_window IS
    'key_source arguments: how long, from the first call, the same arguments are the same action (0040).';
COMMENT ON COLUMN outbox.mcp_tools.server_keys IS
    'Deprecated (0040): key_source = ''minted'', kept in step by a trigger for 0.1.0 front doors; dropped in the next release.';

-- server_keys and key_source in step: whichever the statement changed wins.
CREATE FUNCTION outbox.mcp_tools_key_source() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.server_keys AND NEW.key_source = 'meta' THEN
            NEW.key_source := 'minted';
        ELSIF NEW.server_keys AND NEW.key_source <> 'minted' THEN
            RAISE EXCEPTION 'outbox.mcp_tools: tool % has server_keys true and key_source %: server_keys is key_source ''minted''',
                            quote_literal(NEW.tool), quote_literal(NEW.key_source)
                USING ERRCODE = '22023';
        END IF;
    ELSIF NEW.key_source IS NOT DISTINCT FROM OLD.key_source
          AND NEW.server_keys IS DISTINCT FROM OLD.server_keys THEN
        NEW.key_source := CASE WHEN NEW.server_keys THEN 'minted' ELSE 'meta' END;
    END IF;
    NEW.server_keys := NEW.key_source = 'minted';
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION outbox.mcp_tools_key_source() FROM PUBLIC;
CREATE TRIGGER mcp_tools_key_source BEFORE INSERT OR UPDATE ON outbox.mcp_tools
    FOR EACH ROW EXECUTE FUNCTION outbox.mcp_tools_key_source();

CREATE TABLE outbox.mcp_argument_keys (
    client        text NOT NULL REFERENCES outbox.mcp_clients (name) ON DELETE CASCADE ON UPDATE CASCADE,
    tool          text NOT NULL REFERENCES outbox.mcp_tools (tool) ON DELETE CASCADE ON UPDATE CASCADE,
    argument_hash bytea NOT NULL CHECK (octet_length(argument_hash) = 32),
    key           text COLLATE "C" NOT NULL,
    first_at      timestamptz NOT NULL,
    PRIMARY KEY (client, tool, argument_hash)
);
GRANT SELECT ON outbox.mcp_argument_keys TO outbox_operator;
COMMENT ON TABLE outbox.mcp_argument_keys IS
    'key_source arguments: the key of one client''s calls of one tool with the same canonical arguments, and when its window began (0040).';

-- The key of these arguments: the one of their window, or a new window's.
-- The row is locked (inserted, or locked by ON CONFLICT DO UPDATE even when
-- its WHERE is false) until the caller's transaction ends.
CREATE FUNCTION outbox.mcp_argument_key(p_client text, p_tool text, p_window interval, p_hash bytea)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k text;
BEGIN
    INSERT INTO outbox.mcp_argument_keys AS a (client, tool, argument_hash, key, first_at)
    VALUES (p_client, p_tool, p_hash,
            'args-' || left(encode(sha256(convert_to(p_tool, 'UTF8') || '\x00'::bytea || p_hash), 'hex'), 32)
                    || '-' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS.US"Z"'),
            now())
    ON CONFLICT (client, tool, argument_hash) DO UPDATE
       SET key = excluded.key, first_at = excluded.first_at
     WHERE a.first_at + p_window <= now()
    RETURNING a.key INTO k;
    IF k IS NULL THEN   -- within the window: the row is ours (locked), its key stands
        SELECT a.key INTO k FROM outbox.mcp_argument_keys a
         WHERE a.client = p_client AND a.tool = p_tool AND a.argument_hash = p_hash;
    END IF;
    RETURN k;
END
$$;
REVOKE ALL ON FUNCTION outbox.mcp_argument_key(text, text, interval, bytea) FROM PUBLIC;

-- What the front door reads of a tool: mcp_tool's row with key_source and
-- argument_window (mcp_tool stays for 0.1.0 front doors).
CREATE FUNCTION outbox.mcp_tool_keyed(p_token_hash bytea, p_tool text)
RETURNS TABLE (client text, tool text, target text, input_schema jsonb, key_source text,
               argument_window_s double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.target, m.input_schema, m.key_source, extract(epoch FROM m.argument_window)::float8
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.tool = p_tool AND m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
     WHERE c.token_hash = p_token_hash;
END
$$;

CREATE FUNCTION outbox.mcp_list_tools_keyed(p_token_hash bytea)
RETURNS TABLE (client text, tool text, title text, description text, input_schema jsonb, destructive boolean,
               key_source text, argument_window_s double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.title, m.description, m.input_schema, m.destructive, m.key_source,
           extract(epoch FROM m.argument_window)::float8
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
       AND EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = m.target AND t.enabled)
     WHERE c.token_hash = p_token_hash
     ORDER BY m.tool COLLATE "C";
END
$$;
REVOKE ALL ON FUNCTION outbox.mcp_tool_keyed(bytea, text), outbox.mcp_list_tools_keyed(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_tool_keyed(bytea, text), outbox.mcp_list_tools_keyed(bytea) TO outbox_mcp;

-- mcp_call as in 0037, with p_argument_hash (above). No defaults: a call
-- with nine arguments or fewer is the nine-argument form's.
CREATE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text,
                                p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint,
                                p_argument_hash bytea)
RETURNS outbox.mcp_answer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c      outbox.mcp_clients;
    m      outbox.mcp_tools;
    r      outbox.enqueue_result;
    a      outbox.mcp_answer;
    ikey   text;
    args   jsonb := coalesce(p_arguments, '{}'::jsonb);
    existing_payload jsonb;
    existing_target  text;
    existing_group   text;
    stone  outbox.tombstones;
    fields text[] := '{}';
    why    text[] := '{}';
    others text;
    grp    text;
    run    text;
    derived boolean := p_argument_hash IS NOT NULL;
    call_key text := p_key;
BEGIN
    SELECT * INTO c FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO m FROM outbox.mcp_tools
     WHERE tool = p_tool AND enabled AND (c.tools IS NULL OR tool = ANY (c.tools));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: no tool % for client %', quote_literal(p_tool), quote_literal(c.name)
            USING ERRCODE = 'OR023';
    END IF;
    -- 0037: an mcp target is called with the upstream tool's name and the arguments.
    IF (SELECT t.protocol FROM outbox.targets t WHERE t.name = m.target) = 'mcp' THEN
        args := jsonb_build_object('tool', coalesce(m.upstream_tool, m.tool), 'arguments', args);
    END IF;
    -- 0040: a key from the arguments (p_argument_hash, the SHA-256 of their
    -- canonical form without volatile properties, written by the front
    -- door): the key of their window. With p_key too, p_key is the key the
    -- front door derived so earlier in this same call (a task made after the
    -- wait). Either way, an intent of that key is the call's, whatever its
    -- volatile properties said: the first call's arguments stand.
    IF derived THEN
        IF m.key_source <> 'arguments' THEN
            RAISE EXCEPTION 'outbox.mcp_call: no idempotency key (tool % takes keys from %, not from the arguments)',
                            quote_literal(p_tool), m.key_source
                USING ERRCODE = 'OR004';
        END IF;
        IF octet_length(p_argument_hash) <> 32 THEN
            RAISE EXCEPTION 'outbox.mcp_call: an argument hash is 32 bytes (SHA-256), not %',
                            octet_length(p_argument_hash)
                USING ERRCODE = '22023';
        END IF;
        IF call_key IS NULL OR call_key = '' THEN
            call_key := outbox.mcp_argument_key(c.name, m.tool, m.argument_window, p_argument_hash);
        END IF;
    END IF;
    IF call_key IS NULL OR call_key = '' THEN
        RAISE EXCEPTION 'outbox.mcp_call: no idempotency key' USING ERRCODE = 'OR004';
    END IF;
    ikey := 'mcp:' || c.name || ':' || call_key;
    -- A client's ordering groups and runs are its own, like its keys: another
    -- client naming the same group neither waits behind it nor holds it.
    grp := 'mcp:' || c.name || ':' || p_ordering_key;
    run := 'mcp:' || c.name || ':' || p_run_id;
    IF octet_length(ikey) > 255 THEN
        RAISE EXCEPTION 'the idempotency key is % bytes long; the limit for client % is % bytes',
                        octet_length(call_key), quote_literal(c.name), 255 - octet_length(ikey) + octet_length(call_key)
            USING ERRCODE = 'OR004';
    END IF;
    -- The same call again (the same key and arguments): its answer, with no
    -- enqueue. A new key: enqueue, with no subtransaction (a concurrent call
    -- of the same key with other arguments then raises OR001 to the caller,
    -- which answers key_conflict). Other arguments for a known key: enqueue
    -- decides (volatile fields, keep_original), and OR001 is caught here to
    -- name what differs.
    SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
      FROM outbox.intents i WHERE i.key = ikey;
    IF derived AND (FOUND OR (outbox.tombstone_of(ikey)).key_hash IS NOT NULL) THEN
        r.inserted := false;   -- the first call's intent (or what its tombstone remembers): no enqueue
    ELSIF FOUND AND existing_payload = args AND existing_target = m.target
       AND existing_group IS NOT DISTINCT FROM grp AND NOT p_task THEN
        RETURN outbox.mcp_answer_of(c.name, call_key, p_tool, false, false);
    ELSIF existing_payload IS NULL THEN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    ELSE BEGIN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    EXCEPTION WHEN SQLSTATE 'OR001' THEN
        a.client := c.name;
        a.key := call_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := 'key_conflict';
        a.final := true;
        a.inserted := false;
        SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
          FROM outbox.intents i WHERE i.key = ikey;
        IF NOT FOUND THEN   -- pruned since: what its tombstone remembers
            stone := outbox.tombstone_of(ikey);
            existing_target := stone.target;
            existing_group := grp;
        END IF;
        -- 0036: another tool (its target differs), another ordering group,
        -- then the arguments' fields.
        IF existing_target IS DISTINCT FROM m.target THEN
            fields := fields || 'tool'::text;
            others := (SELECT string_agg(quote_literal(t.tool), ' or ' ORDER BY t.tool) FROM outbox.mcp_tools t
                        WHERE t.target = existing_target AND (c.tools IS NULL OR t.tool = ANY (c.tools)));
            why := why || ('it was used with another tool' || coalesce(' (' || others || ')', '') || ', not '
                           || quote_literal(p_tool));
        END IF;
        IF existing_group IS DISTINCT FROM grp THEN
            fields := fields || 'ordering_key'::text;
            why := why || ('it was used ' || CASE WHEN existing_group IS NULL THEN 'without an ordering key'
                                                  ELSE 'with another ordering key' END);
        END IF;
        IF existing_payload IS NOT NULL AND existing_payload <> args THEN
            fields := fields || outbox.differing_fields(existing_payload, args);
            why := why || ('it was used with other arguments'
                           || coalesce(' (fields that differ: '
                                       || array_to_string(outbox.differing_fields(existing_payload, args), ', ') || ')', ''));
        END IF;
        a.conflict_fields := nullif(fields, '{}');
        a.message := 'key_conflict: this key was already used for another action: '
                     || coalesce(nullif(array_to_string(why, '; '), ''), 'it was used with other arguments')
                     || '; nothing was sent. Use the same tool and arguments, or a new key for a new action.';
        RETURN a;
    END;
    END IF;
    IF p_task THEN
        -- 0036: an expired task of this key is replaced (a new id); a live one stays.
        INSERT INTO outbox.mcp_tasks AS k (task_id, client, intent_key, tool, ttl_ms, expires_at)
        VALUES ('task-' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''),
                c.name, ikey, p_tool, p_task_ttl_ms, now() + p_task_ttl_ms * interval '1 millisecond')
        ON CONFLICT (client, intent_key) DO UPDATE
           SET task_id = excluded.task_id, tool = excluded.tool, ttl_ms = excluded.ttl_ms,
               expires_at = excluded.expires_at, created_at = now()
         WHERE k.expires_at <= now();
    END IF;
    IF r.inserted AND NOT p_task THEN
        -- A new intent: what enqueue said is all there is to say (no second look).
        a.client := c.name;
        a.key := call_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := r.status;
        a.state := r.status::outbox.intent_state;
        a.final := false;
        a.inserted := true;
        a.attempts := 0;
        a.message := outbox.mcp_message(r.status,
                                        CASE WHEN r.status = 'awaiting_approval' THEN outbox.mcp_held_by(m.target, args)
                                             WHEN r.status = 'pending' AND NOT outbox.relay_alive()
                                                 THEN 'no relay has claimed it yet: none is running'
                                             WHEN r.status = 'pending' THEN 'waiting for delivery' END, NULL);
        a.updated_at := now();
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(c.name, call_key, p_tool, r.inserted, p_task);
END
$$;
REVOKE ALL ON FUNCTION outbox.mcp_call(bytea, text, text, jsonb, text, text, text, boolean, bigint, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_call(bytea, text, text, jsonb, text, text, text, boolean, bigint, bytea)
    TO outbox_mcp;

-- The nine-argument form (0.1.0 front doors; dropped in the next release).
CREATE OR REPLACE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text DEFAULT NULL::text, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text, p_task boolean DEFAULT false, p_task_ttl_ms bigint DEFAULT NULL::bigint) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN   -- plpgsql, not sql: schema/outbox/load.sql may create it before the ten-argument form
    RETURN outbox.mcp_call(p_token_hash, p_tool, p_key, p_arguments, p_run_id, p_ordering_key, p_traceparent,
                           p_task, p_task_ttl_ms, NULL::bytea);
END
$$;

-- mcp_schema_problem_at as in 0038, and "x-outbox-volatile" (a boolean
-- annotation, allowed beside $ref like readOnly).
CREATE OR REPLACE FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k       text;
    v       jsonb;
    ent     record;
    r       record;
    i       int;
    problem text;
    here    text := coalesce(nullif(p_path, ''), '/');
    allowed CONSTANT text[] := ARRAY['type', 'properties', 'required', 'additionalProperties', 'enum', 'const',
                                     'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
                                     'minLength', 'maxLength', 'pattern', 'items', 'minItems', 'maxItems',
                                     'uniqueItems', '$schema', '$id', 'title', 'description', 'default',
                                     'examples', '$comment', 'deprecated', 'readOnly', 'writeOnly',
                                     'allOf', 'anyOf', 'oneOf', 'not', '$ref', '$defs', 'definitions', 'format',
                                     'prefixItems', 'patternProperties', 'propertyNames', 'minProperties',
                                     'maxProperties', 'dependentRequired', 'x-outbox-volatile'];
    beside_ref CONSTANT text[] := ARRAY['$ref', '$schema', '$id', 'title', 'description', '$comment', 'default',
                                        'examples', 'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions',
                                        'x-outbox-volatile'];
    types   CONSTANT text[] := ARRAY['null', 'boolean', 'object', 'array', 'number', 'integer', 'string'];
BEGIN
    IF jsonb_typeof(p_schema) = 'boolean' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_schema) IS DISTINCT FROM 'object' THEN
        RETURN format('%s: a schema must be an object or a boolean', here);
    END IF;
    IF length(p_path) > 2000 OR cardinality(p_keys) > 128 THEN
        RETURN format('%s: nested too deeply', p_path);
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(p_schema) LOOP
        IF NOT k = ANY (allowed) THEN
            RETURN format('unsupported keyword "%s" at %s', k, here);
        END IF;
        IF k IN ('$id', '$schema') AND p_path <> '' THEN
            RETURN format('unsupported keyword "%s" at %s (only at the root)', k, p_path);
        END IF;
        IF p_dialect = 'old' AND p_schema ? '$ref' AND NOT k = ANY (beside_ref) THEN
            RETURN format('"%s" beside "$ref" is ignored by the $schema named (draft-07 and older); use allOf, or 2020-12 at %s',
                          k, here);
        END IF;
        CASE k
            WHEN 'type' THEN
                IF NOT ((jsonb_typeof(v) = 'string' AND v #>> '{}' = ANY (types))
                        OR (jsonb_typeof(v) = 'array' AND jsonb_array_length(v) > 0
                            AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v) e
                                             WHERE jsonb_typeof(e) <> 'string' OR NOT e #>> '{}' = ANY (types))
                            AND (SELECT count(DISTINCT e) = count(*) FROM jsonb_array_elements(v) e))) THEN
                    RETURN format('%s/type: must be one of %s, or an array of them', p_path, array_to_string(types, ', '));
                END IF;
            WHEN 'properties', '$defs', 'definitions', 'patternProperties' THEN
                IF jsonb_typeof(v) <> 'object' THEN
                    RETURN format('%s/%s: must be an object of schemas', p_path, k);
                END IF;
                FOR ent IN SELECT * FROM jsonb_each(v) LOOP
                    IF k = 'patternProperties' THEN
                        problem := outbox.mcp_schema_pattern_problem(ent.key);
                        IF problem IS NOT NULL THEN
                            RETURN format('%s/patternProperties/%s: the pattern of "patternProperties" %s', p_path, ent.key, problem);
                        END IF;
                    END IF;
                    problem := outbox.mcp_schema_problem_at(p_root, ent.value, p_path || '/' || k || '/' || ent.key,
                                                            p_keys || k || ent.key, p_dialect);
                    IF problem IS NOT NULL THEN RETURN problem; END IF;
                END LOOP;
            WHEN 'allOf', 'anyOf', 'oneOf', 'prefixItems' THEN
                IF k = 'prefixItems' AND p_dialect <> '2020' THEN
                    RETURN format('"prefixItems" is a 2020-12 keyword; the $schema named ignores it (use 2020-12) at %s', here);
                END IF;
                IF jsonb_typeof(v) <> 'array' OR jsonb_array_length(v) = 0 THEN
                    RETURN format('%s/%s: must be a non-empty array of schemas', p_path, k);
                END IF;
                FOR i IN 0 .. jsonb_array_length(v) - 1 LOOP
                    problem := outbox.mcp_schema_problem_at(p_root, v -> i, p_path || '/' || k || '/' || i,
                                                            p_keys || k || i::text, p_dialect);
                    IF problem IS NOT NULL THEN RETURN problem; END IF;
                END LOOP;
            WHEN 'additionalProperties', 'items', 'not', 'propertyNames' THEN
                problem := outbox.mcp_schema_problem_at(p_root, v, p_path || '/' || k, p_keys || k, p_dialect);
                IF problem IS NOT NULL THEN RETURN problem; END IF;
            WHEN '$ref' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/$ref: must be a string', p_path);
                END IF;
                SELECT * INTO r FROM outbox.mcp_schema_ref(p_root, v #>> '{}');
                IF r.keys IS NULL THEN
                    RETURN format('"$ref" %s at %s', r.why, here);
                END IF;
                CASE outbox.mcp_schema_ref_loops(p_root, r.keys, p_keys)
                    WHEN 'loop' THEN
                        RETURN format('"$ref" loops back to this schema without descending into the value '
                                      '(through $ref, allOf, anyOf, oneOf or not) at %s', here);
                    WHEN 'overflow' THEN
                        RETURN format('"$ref" leads through more than 1024 schemas at %s', here);
                    ELSE
                        NULL;
                END CASE;
            WHEN 'required' THEN
                IF jsonb_typeof(v) <> 'array'
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(v) e WHERE jsonb_typeof(e) <> 'string')
                   OR (SELECT count(DISTINCT e) <> count(*) FROM jsonb_array_elements(v) e) THEN
                    RETURN format('%s/required: must be an array of distinct strings', p_path);
                END IF;
            WHEN 'dependentRequired' THEN
                IF p_dialect = 'old' THEN
                    RETURN format('"dependentRequired" is a 2019-09 keyword; the $schema named ignores it (use 2020-12) at %s', here);
                END IF;
                IF jsonb_typeof(v) <> 'object'
                   OR EXISTS (SELECT 1 FROM jsonb_each(v) d
                               WHERE jsonb_typeof(d.value) <> 'array'
                                  OR EXISTS (SELECT 1 FROM jsonb_array_elements(d.value) e WHERE jsonb_typeof(e) <> 'string')
                                  OR (SELECT count(DISTINCT e) <> count(*) FROM jsonb_array_elements(d.value) e)) THEN
                    RETURN format('%s/dependentRequired: must be an object of arrays of distinct strings', p_path);
                END IF;
            WHEN '$schema' THEN
                IF v NOT IN ('"https://json-schema.org/draft/2020-12/schema"', '"https://json-schema.org/draft/2019-09/schema"',
                             '"http://json-schema.org/draft-07/schema#"', '"http://json-schema.org/draft-07/schema"',
                             '"http://json-schema.org/draft-06/schema#"', '"http://json-schema.org/draft-06/schema"',
                             '"https://json-schema.org/draft/2020-12/schema#"', '"https://json-schema.org/draft/2019-09/schema#"',
                             '"http://json-schema.org/draft/2020-12/schema"', '"http://json-schema.org/draft/2020-12/schema#"',
                             '"http://json-schema.org/draft/2019-09/schema"', '"http://json-schema.org/draft/2019-09/schema#"',
                             '"https://json-schema.org/draft-07/schema#"', '"https://json-schema.org/draft-07/schema"',
                             '"https://json-schema.org/draft-06/schema#"', '"https://json-schema.org/draft-06/schema"') THEN
                    RETURN format('/$schema: must name the 2020-12, 2019-09, draft-07 or draft-06 meta-schema');
                END IF;
            WHEN 'title', 'description', '$comment', '$id', 'format' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/%s: must be a string', p_path, k);
                END IF;
            WHEN 'enum' THEN
                IF jsonb_typeof(v) <> 'array' THEN
                    RETURN format('%s/enum: must be an array', p_path);
                END IF;
            WHEN 'examples' THEN
                IF jsonb_typeof(v) <> 'array' THEN
                    RETURN format('%s/examples: must be an array', p_path);
                END IF;
            WHEN 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum' THEN
                IF jsonb_typeof(v) <> 'number' THEN
                    RETURN format('%s/%s: must be a number', p_path, k);
                END IF;
            WHEN 'multipleOf' THEN
                IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric <= 0 THEN
                    RETURN format('%s/multipleOf: must be a number above 0', p_path);
                END IF;
            WHEN 'minLength', 'maxLength', 'minItems', 'maxItems', 'minProperties', 'maxProperties' THEN
                IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric < 0
                   OR (v #>> '{}')::numeric <> trunc((v #>> '{}')::numeric) THEN
                    RETURN format('%s/%s: must be a non-negative integer', p_path, k);
                END IF;
            WHEN 'pattern' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/pattern: must be a string', p_path);
                END IF;
                problem := outbox.mcp_schema_pattern_problem(v #>> '{}');
                IF problem IS NOT NULL THEN
                    RETURN format('%s/pattern: %s', p_path, problem);
                END IF;
            WHEN 'uniqueItems', 'deprecated', 'readOnly', 'writeOnly', 'x-outbox-volatile' THEN
                IF jsonb_typeof(v) <> 'boolean' THEN
                    RETURN format('%s/%s: must be true or false', p_path, k);
                END IF;
            ELSE
                NULL;   -- annotations: anything goes
        END CASE;
    END LOOP;
    RETURN NULL;
END
$$;
-- prune_step as in 0036, and the argument keys whose window has passed
-- (not counted, like the tasks).
CREATE OR REPLACE FUNCTION outbox.prune_step(p_limit integer DEFAULT 5000)
RETURNS TABLE(pruned integer, forgotten integer, locked boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t      record;
    budget integer := p_limit;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'outbox.prune: limit must be from 1 to 100000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    pruned := 0;
    forgotten := 0;
    locked := pg_try_advisory_xact_lock(1330774018, 0);
    IF NOT locked THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- Oldest retention first across targets would need a sort over all of
    -- them; targets are few, so each gets the budget that is left in turn.
    FOR t IN SELECT name, retain_for, dedupe_window FROM outbox.targets ORDER BY name LOOP
        EXIT WHEN budget <= 0;
        budget := budget - outbox.prune_target(t.name, t.retain_for, t.dedupe_window, budget);
    END LOOP;
    IF budget > 0 THEN
        budget := budget - outbox.prune_linked(budget);
    END IF;
    pruned := p_limit - budget;

    DELETE FROM outbox.tombstones s
     WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.tombstones x
                                WHERE x.forget_at < now() LIMIT p_limit));
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    -- 0036: MCP tasks past their TTL (not counted: forgotten counts tombstones).
    DELETE FROM outbox.mcp_tasks k
     WHERE k.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.mcp_tasks x
                                WHERE x.expires_at <= now() LIMIT p_limit));
    -- 0040: argument keys past their tool's window.
    DELETE FROM outbox.mcp_argument_keys k
     WHERE k.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.mcp_argument_keys x
                                 JOIN outbox.mcp_tools m ON m.tool = x.tool
                                WHERE x.first_at + m.argument_window <= now() LIMIT p_limit));
    RETURN NEXT;
END
$$;
