-- 0022: the MCP front door (issue 23; docs/design.md, "The MCP front door").
--
-- `outbox-relay mcp` turns an agent's tools/call into a keyed intent and
-- answers with the outcome. Everything it knows is here, so that any number
-- of replicas can run with no state of their own:
--
--   mcp_tools     the targets exposed as tools, on purpose: a tool names one
--                 target, describes itself to the model and carries the
--                 JSON Schema its arguments must satisfy (a documented
--                 subset, checked here when it is registered and again by
--                 the front door, relay/mcp/json_schema.c).
--   mcp_clients   who may call: a name, the SHA-256 of its bearer token (the
--                 token itself is never stored, nor sent to the database by
--                 the front door) and the tools it may see (NULL = all).
--   mcp_tasks     durable task ids for long calls, bound to their client and
--                 intent: the same key gives the same task.
--
-- Keys are namespaced per client: the intent of client C's key K is
-- 'mcp:C:K' (a client name has no ':'), so client B using A's key neither
-- reads A's outcome nor conflicts with it, and the key that the target
-- receives is namespaced too. The model never sees or chooses the key: the
-- host's code puts it in _meta (or the Idempotency-Key header).
--
-- The front door logs in as a member of outbox_mcp: it may call the mcp_*
-- functions below (each authenticates the token hash first, and enqueues
-- and reads outcomes as the owner) and nothing else: not enqueue or outcome
-- directly, so that it can reach no target but through a tool. Each call is
-- its own short transaction.
--
-- A settled MCP intent NOTIFYs outbox_mcp with its key (a row trigger whose
-- WHEN is false for every other intent), so that a waiting call is answered
-- within milliseconds of the record, not at its next poll.

CREATE TABLE outbox.mcp_tools (
    tool         text PRIMARY KEY CHECK (tool ~ '^[A-Za-z0-9_.-]{1,128}$'),
    target       text NOT NULL REFERENCES outbox.targets (name) ON UPDATE CASCADE,
    title        text,
    description  text NOT NULL DEFAULT '',
    input_schema jsonb NOT NULL DEFAULT '{"type": "object"}',
    destructive  boolean NOT NULL DEFAULT true,   -- annotations.destructiveHint
    server_keys  boolean NOT NULL DEFAULT false,  -- a call without a key gets one minted (no dedupe of the host's retries)
    enabled      boolean NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.mcp_tools IS
    'Targets exposed as MCP tools (outbox-relay mcp): name, description, the JSON Schema of the arguments (a documented subset).';

CREATE TABLE outbox.mcp_clients (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    token_hash bytea NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    tools      text[],                 -- NULL: every enabled tool
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.mcp_clients IS
    'MCP clients: the SHA-256 of each bearer token (never the token) and the tools each may see and call.';

CREATE TABLE outbox.mcp_tasks (
    task_id    text PRIMARY KEY,
    client     text NOT NULL REFERENCES outbox.mcp_clients (name) ON DELETE CASCADE,
    intent_key text NOT NULL,
    tool       text NOT NULL,
    ttl_ms     bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (client, intent_key)
);
COMMENT ON TABLE outbox.mcp_tasks IS
    'MCP tasks: an unguessable id per (client, intent), durable before it is returned.';

-- ---------------------------------------------------------------------------
-- The JSON Schema subset (the same as relay/mcp/json_schema.h): a schema
-- that uses anything else is refused when it is registered.

CREATE FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text DEFAULT '')
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k       text;
    v       jsonb;
    problem text;
    allowed CONSTANT text[] := ARRAY['type', 'properties', 'required', 'additionalProperties', 'enum', 'const',
                                     'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
                                     'minLength', 'maxLength', 'pattern', 'items', 'minItems', 'maxItems',
                                     'uniqueItems', '$schema', '$id', 'title', 'description', 'default',
                                     'examples', '$comment', 'deprecated', 'readOnly', 'writeOnly'];
    types   CONSTANT text[] := ARRAY['null', 'boolean', 'object', 'array', 'number', 'integer', 'string'];
BEGIN
    IF jsonb_typeof(p_schema) = 'boolean' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_schema) IS DISTINCT FROM 'object' THEN
        RETURN format('%s: a schema must be an object or a boolean', coalesce(nullif(p_path, ''), '/'));
    END IF;
    IF length(p_path) > 2000 THEN
        RETURN format('%s: nested too deeply', p_path);
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(p_schema) LOOP
        IF NOT k = ANY (allowed) THEN
            RETURN format('unsupported keyword "%s" at %s', k, coalesce(nullif(p_path, ''), '/'));
        END IF;
        IF k IN ('$id', '$schema') AND p_path <> '' THEN
            RETURN format('unsupported keyword "%s" at %s (only at the root)', k, p_path);
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
            WHEN 'properties' THEN
                IF jsonb_typeof(v) <> 'object' THEN
                    RETURN format('%s/properties: must be an object', p_path);
                END IF;
                FOR problem IN SELECT outbox.mcp_schema_problem(e.value, p_path || '/properties/' || e.key)
                                 FROM jsonb_each(v) e LOOP
                    IF problem IS NOT NULL THEN RETURN problem; END IF;
                END LOOP;
            WHEN 'additionalProperties', 'items' THEN
                problem := outbox.mcp_schema_problem(v, p_path || '/' || k);
                IF problem IS NOT NULL THEN RETURN problem; END IF;
            WHEN 'required' THEN
                IF jsonb_typeof(v) <> 'array'
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(v) e WHERE jsonb_typeof(e) <> 'string')
                   OR (SELECT count(DISTINCT e) <> count(*) FROM jsonb_array_elements(v) e) THEN
                    RETURN format('%s/required: must be an array of distinct strings', p_path);
                END IF;
            WHEN '$schema' THEN
                IF v NOT IN ('"https://json-schema.org/draft/2020-12/schema"', '"https://json-schema.org/draft/2019-09/schema"',
                             '"http://json-schema.org/draft-07/schema#"', '"http://json-schema.org/draft-07/schema"',
                             '"http://json-schema.org/draft-06/schema#"', '"http://json-schema.org/draft-06/schema"') THEN
                    RETURN format('/$schema: must name the 2020-12, 2019-09, draft-07 or draft-06 meta-schema');
                END IF;
            WHEN 'title', 'description', '$comment', '$id' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/%s: must be a string', p_path, k);
                END IF;
            WHEN 'enum' THEN
                IF jsonb_typeof(v) <> 'array' THEN
                    RETURN format('%s/enum: must be an array', p_path);
                END IF;
            WHEN 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum' THEN
                IF jsonb_typeof(v) <> 'number' THEN
                    RETURN format('%s/%s: must be a number', p_path, k);
                END IF;
            WHEN 'multipleOf' THEN
                IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric <= 0 THEN
                    RETURN format('%s/multipleOf: must be a number above 0', p_path);
                END IF;
            WHEN 'minLength', 'maxLength', 'minItems', 'maxItems' THEN
                IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric < 0
                   OR (v #>> '{}')::numeric <> trunc((v #>> '{}')::numeric) THEN
                    RETURN format('%s/%s: must be a non-negative integer', p_path, k);
                END IF;
            WHEN 'pattern' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/pattern: must be a string', p_path);
                END IF;
                -- ECMA-262 syntax that the front door's POSIX translation refuses too
                IF v #>> '{}' ~ '\(\?<?[=!]|\\[1-9]|\\[pPk]\{|\\k<' THEN
                    RETURN format('%s/pattern: lookaround, backreferences and \p{…} are not supported', p_path);
                END IF;
                BEGIN
                    PERFORM '' ~ (v #>> '{}');
                EXCEPTION WHEN invalid_regular_expression THEN
                    RETURN format('%s/pattern: not a valid regular expression', p_path);
                END;
            WHEN 'uniqueItems', 'deprecated', 'readOnly', 'writeOnly' THEN
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
COMMENT ON FUNCTION outbox.mcp_schema_problem(jsonb, text) IS
    'NULL when the JSON Schema uses only the supported subset, else what is wrong and where.';

CREATE FUNCTION outbox.mcp_tools_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    problem text;
BEGIN
    IF jsonb_typeof(NEW.input_schema) <> 'object' OR NEW.input_schema->>'type' IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'outbox.mcp_tools: the input_schema of tool % must be an object schema with "type": "object"',
                        quote_literal(NEW.tool)
            USING ERRCODE = 'OR020';
    END IF;
    problem := outbox.mcp_schema_problem(NEW.input_schema);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.mcp_tools: the input_schema of tool % is refused: %', quote_literal(NEW.tool), problem
            USING ERRCODE = 'OR020',
                  HINT = 'Supported: type, properties, required, additionalProperties, enum, const, minimum, maximum, '
                         'exclusiveMinimum, exclusiveMaximum, multipleOf, minLength, maxLength, pattern, items, '
                         'minItems, maxItems, uniqueItems, and annotations (README, "For agents: MCP").';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
CREATE TRIGGER mcp_tools_check BEFORE INSERT OR UPDATE ON outbox.mcp_tools
    FOR EACH ROW EXECUTE FUNCTION outbox.mcp_tools_check();

-- ---------------------------------------------------------------------------
-- Clients: created or rotated by an admin; only the hash is kept.

CREATE FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    unknown_tools text[];
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
        RAISE EXCEPTION 'outbox.mcp_client: a client name is 1 to 64 of A-Z a-z 0-9 _ . -, got %',
                        coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'OR021';
    END IF;
    IF p_token IS NULL OR octet_length(p_token) < 32 THEN
        RAISE EXCEPTION 'outbox.mcp_client: the token of client % must be at least 32 bytes', quote_literal(p_name)
            USING ERRCODE = 'OR021', HINT = 'For example: openssl rand -hex 32';
    END IF;
    SELECT array_agg(t) INTO unknown_tools
      FROM unnest(p_tools) t WHERE NOT EXISTS (SELECT 1 FROM outbox.mcp_tools m WHERE m.tool = t);
    IF unknown_tools IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.mcp_client: no such tool: %', array_to_string(unknown_tools, ', ')
            USING ERRCODE = 'OR021';
    END IF;
    INSERT INTO outbox.mcp_clients AS c (name, token_hash, tools)
    VALUES (p_name, sha256(convert_to(p_token, 'UTF8')), p_tools)
    ON CONFLICT (name) DO UPDATE SET token_hash = EXCLUDED.token_hash, tools = EXCLUDED.tools, rotated_at = now();
    RETURN p_name;
END
$$;
COMMENT ON FUNCTION outbox.mcp_client(text, text, text[]) IS
    'Create an MCP client or rotate its token (only its SHA-256 is stored); p_tools: the tools it may use (NULL = all).';

-- ---------------------------------------------------------------------------
-- What the front door calls. Each takes the SHA-256 of the bearer token and
-- answers nothing to a token it does not know.

-- The tools a client may see, in name order. (plpgsql, not sql: a SECURITY
-- DEFINER sql function is planned again on every call, plpgsql keeps its plans.)
CREATE FUNCTION outbox.mcp_list_tools(p_token_hash bytea)
RETURNS TABLE (client text, tool text, title text, description text, input_schema jsonb, destructive boolean,
               server_keys boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.title, m.description, m.input_schema, m.destructive, m.server_keys
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
       AND EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = m.target AND t.enabled)
     WHERE c.token_hash = p_token_hash
     ORDER BY m.tool COLLATE "C";
END
$$;

-- One tool for a call: the client's name and the tool's schema, or a row
-- with tool NULL when the client may not use it (or it does not exist:
-- the caller cannot tell the two apart). No row: unknown token.
CREATE FUNCTION outbox.mcp_tool(p_token_hash bytea, p_tool text)
RETURNS TABLE (client text, tool text, target text, input_schema jsonb, server_keys boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.target, m.input_schema, m.server_keys
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.tool = p_tool AND m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
     WHERE c.token_hash = p_token_hash;
END
$$;

-- The answer of a call, a task or a wait: the outcome of the client's key.
CREATE TYPE outbox.mcp_answer AS (
    client          text,
    key             text,      -- the client's key, as it gave it
    intent_key      text,      -- 'mcp:<client>:<key>': what the target receives
    tool            text,
    target          text,
    status          text,      -- outbox.visible_status, or key_conflict / not_found
    state           outbox.intent_state,
    final           boolean,
    inserted        boolean,
    response_status integer,
    response_body   text,
    attempts        integer,
    message         text,
    conflict_fields text[],
    task_id         text,
    task_created_at timestamptz,
    task_ttl_ms     bigint,
    updated_at      timestamptz
);

-- The message that goes with a status, for the model: what it means and
-- what it may do.
-- (No SET clause: a sql function with one cannot be inlined and is planned
-- on every call; this one names nothing outside pg_catalog.)
CREATE FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_status
        WHEN 'succeeded' THEN 'succeeded: the target acted; this is its saved response'
        WHEN 'failed' THEN 'failed: the target did not act and will not: ' || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'cancelled' THEN 'cancelled: it was not sent and will not be: ' || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'reconciling' THEN
            CASE WHEN p_person_reason IS NOT NULL
                 THEN 'outcome unknown: ' || p_person_reason || ': do not retry with a new key; calling again with the same key is safe'
                 ELSE 'outcome unknown, reconciling: do not retry with a new key; calling again with the same key is safe' END
        WHEN 'delivering' THEN 'not yet confirmed: being delivered; calling again with the same key is safe'
        WHEN 'pending' THEN 'not yet confirmed: ' || coalesce(p_outcome_message, 'waiting for delivery')
                            || '; calling again with the same key is safe'
        WHEN 'awaiting_approval' THEN 'not yet confirmed: waiting for a person to approve it; calling again with the same key is safe'
        ELSE p_status END
$$;

-- The answer for a client's key. The intent is read directly (one index
-- probe); outbox.outcome answers only for a key whose intent was pruned (its
-- tombstone) and for an ordered intent held behind its group's head (what it
-- waits for). p_task: look its task up too.
CREATE FUNCTION outbox.mcp_answer_of(p_client text, p_key text, p_tool text, p_inserted boolean,
                                     p_task boolean DEFAULT true)
RETURNS outbox.mcp_answer
-- Called only by the SECURITY DEFINER functions below, within their
-- search_path and rights: no SET clause of its own (each costs a GUC save
-- and restore per call).
LANGUAGE plpgsql STABLE AS $$
DECLARE
    a    outbox.mcp_answer;
    i    outbox.intents;
    o    record;
    tk   outbox.mcp_tasks;
    note text;
    person text;   -- why only a person can settle it (outbox.needs_person, 0023), or NULL
BEGIN
    a.client := p_client;
    a.key := p_key;
    a.intent_key := 'mcp:' || p_client || ':' || p_key;
    a.tool := p_tool;
    a.inserted := p_inserted;
    SELECT * INTO i FROM outbox.intents WHERE key = a.intent_key;
    IF FOUND AND NOT (i.state = 'pending' AND i.next_attempt_at = 'infinity' AND i.ordering_key IS NOT NULL) THEN
        a.status := outbox.visible_status(i.state, i.ambiguous);
        a.state := i.state;
        a.target := i.target;
        a.attempts := i.attempts;
        a.updated_at := i.updated_at;
        IF i.state IN ('succeeded', 'failed') THEN
            a.response_status := i.response_status;
            a.response_body := i.response_body;
        END IF;
        IF i.state IN ('failed', 'cancelled') THEN
            note := i.last_error;
        END IF;
    ELSE
        SELECT * INTO o FROM outbox.outcome(a.intent_key);
        IF NOT FOUND THEN
            a.status := 'not_found';
            a.final := false;
            a.message := 'no call with this key';
            RETURN a;
        END IF;
        a.status := o.status;
        a.state := o.state;
        a.target := o.target;
        a.response_status := o.response_status;
        a.response_body := o.response_body;
        a.attempts := o.attempts;
        a.updated_at := o.updated_at;
        note := coalesce(o.last_error, o.message);
    END IF;
    a.final := a.status IN ('succeeded', 'failed', 'cancelled');
    IF a.state = 'unknown' THEN   -- the same reason as outcome and stuck give
        person := outbox.needs_person((SELECT x.id FROM outbox.intents x WHERE x.key = a.intent_key), a.target,
                                      (SELECT x.first_attempt_at FROM outbox.intents x WHERE x.key = a.intent_key));
    END IF;
    a.message := outbox.mcp_message(a.status, note, person);
    IF p_task THEN
        SELECT * INTO tk FROM outbox.mcp_tasks WHERE client = p_client AND intent_key = a.intent_key;
        IF FOUND THEN
            a.task_id := tk.task_id;
            a.task_created_at := tk.created_at;
            a.updated_at := greatest(a.updated_at, tk.created_at);   -- a task made after its intent's last change
            a.task_ttl_ms := tk.ttl_ms;
            a.tool := coalesce(a.tool, tk.tool);
        END IF;
    END IF;
    RETURN a;
END
$$;

-- A tools/call: enqueue the client's key with the arguments as the payload,
-- in a transaction of its own, and answer with what is known at once. The
-- front door validated the arguments against the tool's schema first.
-- p_task: also make (or find) the task of this key. Errors a caller must
-- fix (a bad key, a bad traceparent, a payload too large or too deep) are
-- raised with enqueue's SQLSTATE and message; a key reused with other
-- arguments is an answer (status key_conflict with the fields that differ).
CREATE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb,
                                p_run_id text DEFAULT NULL, p_ordering_key text DEFAULT NULL,
                                p_traceparent text DEFAULT NULL, p_task boolean DEFAULT false,
                                p_task_ttl_ms bigint DEFAULT NULL)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c      outbox.mcp_clients;
    m      outbox.mcp_tools;
    r      outbox.enqueue_result;
    a      outbox.mcp_answer;
    ikey   text;
    existing_payload jsonb;
    existing_target  text;
    existing_group   text;
    grp    text;
    run    text;
    msg    text;
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
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.mcp_call: no idempotency key' USING ERRCODE = 'OR004';
    END IF;
    ikey := 'mcp:' || c.name || ':' || p_key;
    -- A client's ordering groups and runs are its own, like its keys: another
    -- client naming the same group neither waits behind it nor holds it.
    grp := 'mcp:' || c.name || ':' || p_ordering_key;
    run := 'mcp:' || c.name || ':' || p_run_id;
    IF octet_length(ikey) > 255 THEN
        RAISE EXCEPTION 'the idempotency key is % bytes long; the limit for client % is % bytes',
                        octet_length(p_key), quote_literal(c.name), 255 - octet_length(ikey) + octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    -- The same call again (the same key and arguments): its answer, with no
    -- enqueue. A new key: enqueue, with no subtransaction (a concurrent call
    -- of the same key with other arguments then raises OR001 to the caller,
    -- which answers key_conflict). Other arguments for a known key: enqueue
    -- decides (volatile fields, keep_original), and OR001 is caught here to
    -- name the fields that differ.
    SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
      FROM outbox.intents i WHERE i.key = ikey;
    IF FOUND AND existing_payload = coalesce(p_arguments, '{}'::jsonb) AND existing_target = m.target
       AND existing_group IS NOT DISTINCT FROM grp AND NOT p_task THEN
        RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, false, false);
    END IF;
    IF existing_payload IS NULL THEN
        r := outbox.enqueue(ikey, m.target, coalesce(p_arguments, '{}'::jsonb), run, NULL, grp, p_traceparent);
    ELSE BEGIN
        r := outbox.enqueue(ikey, m.target, coalesce(p_arguments, '{}'::jsonb), run, NULL, grp, p_traceparent);
    EXCEPTION WHEN SQLSTATE 'OR001' THEN
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
        a.client := c.name;
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := 'key_conflict';
        a.final := true;
        a.inserted := false;
        SELECT i.payload INTO existing_payload FROM outbox.intents i WHERE i.key = ikey;
        IF existing_payload IS NOT NULL THEN
            a.conflict_fields := outbox.differing_fields(existing_payload, coalesce(p_arguments, '{}'::jsonb));
        END IF;
        a.message := 'key_conflict: this key was already used with other arguments'
                     || coalesce(' (fields that differ: ' || array_to_string(a.conflict_fields, ', ') || ')', '')
                     || '; nothing was sent. Use the same arguments, or a new key for a new action.';
        RETURN a;
    END;
    END IF;
    IF p_task THEN
        INSERT INTO outbox.mcp_tasks (task_id, client, intent_key, tool, ttl_ms)
        VALUES ('task-' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''),
                c.name, ikey, p_tool, p_task_ttl_ms)
        ON CONFLICT (client, intent_key) DO NOTHING;
    END IF;
    IF r.inserted AND NOT p_task THEN
        -- A new intent: what enqueue said is all there is to say (no second look).
        a.client := c.name;
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := r.status;
        a.state := r.status::outbox.intent_state;
        a.final := false;
        a.inserted := true;
        a.attempts := 0;
        a.message := outbox.mcp_message(r.status, CASE WHEN r.status = 'pending' THEN 'waiting for delivery' END, NULL);
        a.updated_at := now();
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, r.inserted, p_task);
END
$$;

-- The answer for a client's key now (a wait that was woken, a poll).
CREATE FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_outcome: unknown client' USING ERRCODE = 'OR022';
    END IF;
    RETURN outbox.mcp_answer_of(client_name, p_key, NULL, false, false);
END
$$;

-- The answers for many waiting calls at once, by the keys of their intents
-- ('mcp:<client>:<key>'): the front door's batched look-up after NOTIFYs.
-- No token here: the front door authorized each of these keys when its
-- call enqueued it, and it is the only caller (outbox_mcp).
CREATE FUNCTION outbox.mcp_outcomes(p_intent_keys text[])
RETURNS SETOF outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k      text;
    client text;
BEGIN
    FOREACH k IN ARRAY coalesce(p_intent_keys, '{}') LOOP
        CONTINUE WHEN NOT starts_with(k, 'mcp:');
        client := split_part(k, ':', 2);
        RETURN NEXT outbox.mcp_answer_of(client, substr(k, length('mcp:' || client || ':') + 1), NULL, false,
                                         false);
    END LOOP;
END
$$;

-- A task of the client's: its answer, or a row with status 'not_found'.
CREATE FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
    a  outbox.mcp_answer;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_task: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO tk FROM outbox.mcp_tasks WHERE task_id = p_task_id AND client = client_name;
    IF NOT FOUND THEN
        a.client := client_name;
        a.status := 'not_found';
        a.final := false;
        a.message := 'no such task';
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                tk.tool, false);
END
$$;

-- The client's tasks, newest first, after a cursor (the created_at and
-- task id of the last one seen).
CREATE FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamptz DEFAULT NULL,
                                      p_after_id text DEFAULT NULL, p_limit integer DEFAULT 50)
RETURNS SETOF outbox.mcp_answer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_tasks_list: unknown client' USING ERRCODE = 'OR022';
    END IF;
    FOR tk IN SELECT * FROM outbox.mcp_tasks
               WHERE client = client_name
                 AND (p_after_created IS NULL OR (created_at, task_id) < (p_after_created, p_after_id))
               ORDER BY created_at DESC, task_id DESC
               LIMIT greatest(1, least(coalesce(p_limit, 50), 200)) LOOP
        RETURN NEXT outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                         tk.tool, false);
    END LOOP;
END
$$;

-- tasks/cancel: only an intent that was never sent; otherwise OR007 saying
-- that it may already have been sent, or OR025 when the task is already final.
CREATE FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text)
RETURNS outbox.mcp_answer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
    i  outbox.intents;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_task_cancel: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO tk FROM outbox.mcp_tasks WHERE task_id = p_task_id AND client = client_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such task' USING ERRCODE = 'OR024';
    END IF;
    -- No row lock here: outbox.cancel takes the group's lock before the row's
    -- (ordering_locked_intent), as every settle does; taking the row's first
    -- would deadlock with a relay settling the group's head.
    SELECT * INTO i FROM outbox.intents WHERE key = tk.intent_key;
    IF FOUND AND i.state IN ('pending', 'awaiting_approval') AND i.attempts = 0 AND NOT i.ambiguous THEN
        PERFORM outbox.cancel(tk.intent_key, 'cancelled by MCP client ' || client_name);
    ELSIF FOUND AND i.state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'the call cannot be cancelled: it may already have been sent (%)',
                        outbox.visible_status(i.state, i.ambiguous)
            USING ERRCODE = 'OR007';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'Cannot cancel task: already in terminal status ''%''', i.state USING ERRCODE = 'OR025';
    END IF;
    RETURN outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                tk.tool, false);
END
$$;

-- ---------------------------------------------------------------------------
-- The wake-up of a waiting call: an MCP intent that became final.

CREATE FUNCTION outbox.mcp_notify_settled() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('outbox_mcp', NEW.key);
    RETURN NULL;
END
$$;
CREATE TRIGGER intents_mcp_settled AFTER UPDATE OF state ON outbox.intents
    FOR EACH ROW
    WHEN (NEW.state IN ('succeeded', 'failed', 'cancelled', 'unknown') AND NEW.state IS DISTINCT FROM OLD.state
          AND starts_with(NEW.key, 'mcp:'))
    EXECUTE FUNCTION outbox.mcp_notify_settled();

-- ---------------------------------------------------------------------------
-- The front door's role.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_mcp') THEN
        CREATE ROLE outbox_mcp NOLOGIN;
    END IF;
END
$$;

REVOKE ALL ON outbox.mcp_tools, outbox.mcp_clients, outbox.mcp_tasks FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox.mcp_schema_problem(jsonb, text), outbox.mcp_tools_check(), outbox.mcp_client(text, text, text[]),
                       outbox.mcp_list_tools(bytea), outbox.mcp_tool(bytea, text), outbox.mcp_message(text, text, text),
                       outbox.mcp_answer_of(text, text, text, boolean, boolean),
                       outbox.mcp_call(bytea, text, text, jsonb, text, text, text, boolean, bigint),
                       outbox.mcp_outcome(bytea, text), outbox.mcp_outcomes(text[]), outbox.mcp_task(bytea, text),
                       outbox.mcp_tasks_list(bytea, timestamptz, text, integer), outbox.mcp_task_cancel(bytea, text),
                       outbox.mcp_notify_settled()
    FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO outbox_mcp;
GRANT EXECUTE ON FUNCTION outbox.mcp_list_tools(bytea), outbox.mcp_tool(bytea, text),
                          outbox.mcp_call(bytea, text, text, jsonb, text, text, text, boolean, bigint),
                          outbox.mcp_outcome(bytea, text), outbox.mcp_outcomes(text[]), outbox.mcp_task(bytea, text),
                          outbox.mcp_tasks_list(bytea, timestamptz, text, integer), outbox.mcp_task_cancel(bytea, text)
    TO outbox_mcp;
GRANT SELECT ON outbox.mcp_tools, outbox.mcp_tasks TO outbox_operator;
GRANT SELECT (name, tools, created_at, rotated_at) ON outbox.mcp_clients TO outbox_operator;   -- not the hashes
GRANT INSERT, UPDATE, DELETE ON outbox.mcp_tools TO outbox_admin;
GRANT DELETE ON outbox.mcp_clients TO outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.mcp_client(text, text, text[]), outbox.mcp_schema_problem(jsonb, text) TO outbox_admin;
