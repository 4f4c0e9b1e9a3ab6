-- 0038: the schemas real MCP servers emit register (issue 36, deliverable 5;
-- docs/design.md, "The MCP front door").
--
-- FastMCP (pydantic) writes Optional[str] as anyOf [{type: string}, {type:
-- null}] and nested models as $defs + $ref; zod writes format, $schema and
-- unions as anyOf. Each was refused with OR020. outbox.mcp_schema_problem,
-- the check of a tool's input_schema at registration, now accepts what the
-- front door's validator (relay/mcp/json_schema.h) accepts, and refuses
-- what it refuses, naming the keyword:
--   allOf, anyOf, oneOf, prefixItems   a non-empty array of schemas
--   not, propertyNames                 a schema
--   $defs, definitions                 an object of schemas
--   patternProperties                  an object of schemas whose keys are
--                                      patterns (checked as "pattern" is)
--   $ref                               "#" or a JSON Pointer "#/..." into the
--                                      same schema, through places that hold
--                                      schemas; never remote, never an anchor;
--                                      refused when it loops back to its own
--                                      schema without descending into the
--                                      value ($ref, allOf, anyOf, oneOf, not)
--   format                             a string (date-time, date, email and
--                                      uuid are asserted by the front door)
--   minProperties, maxProperties       non-negative integers
--   dependentRequired                  an object of arrays of distinct strings
-- Under a draft-07 or draft-06 $schema, a keyword beside $ref (other than
-- annotations and $defs) is refused (those drafts ignore it), and so are
-- prefixItems and dependentRequired (not keywords there); under 2019-09,
-- prefixItems.
--
-- A schema nested deeper than 64 levels (anywhere, also in enum or const)
-- is refused, as the front door refuses it (0022 let it register, and the
-- front door then hid the tool).
--
-- outbox.mcp_schema_problem(jsonb, text) keeps its signature and grants;
-- the walk is in outbox.mcp_schema_problem_at, which carries the root (for
-- $ref) and the dialect. tests/mcp/schema_agreement.sh hands every schema
-- of the JSON Schema test suite to both checks and requires the same
-- verdict.

-- The schema a local $ref names: its keys from the root, or why not.
CREATE FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    seg     text;
    raw     text;
    node    jsonb := p_root;
    nxt     text := 'keyword';
    child   jsonb;
    bytes   bytea;
    i       int;
BEGIN
    keys := ARRAY[]::text[];
    IF left(p_ref, 1) <> '#' THEN
        why := 'is not local: only "#" and "#/..." pointers into this schema are supported';
        keys := NULL;
        RETURN;
    END IF;
    IF p_ref = '#' THEN
        RETURN;
    END IF;
    IF substr(p_ref, 2, 1) <> '/' THEN
        why := 'names an anchor: only "#" and "#/..." pointers are supported';
        keys := NULL;
        RETURN;
    END IF;
    FOREACH raw IN ARRAY (string_to_array(substr(p_ref, 3), '/')) LOOP
        -- a URI fragment: percent-decoded, then JSON Pointer-unescaped
        seg := raw;
        IF seg ~ '%' THEN
            bytes := ''::bytea;
            i := 1;
            WHILE i <= length(seg) LOOP
                IF substr(seg, i, 1) = '%' THEN
                    IF substr(seg, i + 1, 2) !~ '^[0-9A-Fa-f]{2}$' OR substr(seg, i + 1, 2) = '00' THEN
                        why := 'has a malformed segment';
                        keys := NULL;
                        RETURN;
                    END IF;
                    bytes := bytes || decode(substr(seg, i + 1, 2), 'hex');
                    i := i + 3;
                ELSE
                    bytes := bytes || convert_to(substr(seg, i, 1), 'UTF8');
                    i := i + 1;
                END IF;
            END LOOP;
            BEGIN
                seg := convert_from(bytes, 'UTF8');
            EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
                why := 'has a malformed segment';
                keys := NULL;
                RETURN;
            END;
        END IF;
        IF seg ~ '~([^01]|$)' THEN
            why := 'has a malformed segment';
            keys := NULL;
            RETURN;
        END IF;
        seg := replace(replace(seg, '~1', '/'), '~0', '~');
        IF nxt = 'index' THEN
            child := CASE WHEN jsonb_typeof(node) = 'array' AND seg ~ '^(0|[1-9][0-9]{0,8})$'
                          THEN node -> seg::int END;
            nxt := 'keyword';
        ELSIF nxt = 'name' THEN
            child := CASE WHEN jsonb_typeof(node) = 'object' THEN node -> seg END;
            nxt := 'keyword';
        ELSE
            child := CASE WHEN jsonb_typeof(node) = 'object' THEN node -> seg END;
            IF seg IN ('$defs', 'definitions', 'properties', 'patternProperties') THEN
                nxt := 'name';
            ELSIF seg IN ('allOf', 'anyOf', 'oneOf', 'prefixItems') THEN
                nxt := 'index';
            ELSIF seg NOT IN ('items', 'additionalProperties', 'not', 'propertyNames') AND child IS NOT NULL THEN
                why := format('points into "%s", which holds no schema', left(seg, 64));
                keys := NULL;
                RETURN;
            END IF;
        END IF;
        IF child IS NULL THEN
            why := 'points to nothing in this schema';
            keys := NULL;
            RETURN;
        END IF;
        node := child;
        keys := keys || seg;
    END LOOP;
    IF nxt <> 'keyword' OR jsonb_typeof(node) NOT IN ('object', 'boolean') THEN
        why := 'does not point to a schema';
        keys := NULL;
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.mcp_schema_ref(jsonb, text) IS
    'The keys from the root of the schema a local $ref names (NULL and why when it names none), as relay/mcp/json_schema.c resolves it.';

-- NULL when, from p_from, the schemas applied to the same value ($ref, allOf,
-- anyOf, oneOf, not) never reach p_target; 'loop' when they do; 'overflow'
-- past 1024 schemas (the front door's bound).
CREATE FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[])
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    queue   jsonb := jsonb_build_array(to_jsonb(p_from));
    seen    jsonb := '[]';
    at      text[];
    node    jsonb;
    r       record;
    kw      text;
    i       int;
BEGIN
    WHILE jsonb_array_length(queue) > 0 LOOP
        at := ARRAY(SELECT jsonb_array_elements_text(queue -> 0));
        queue := queue - 0;
        IF at = p_target THEN
            RETURN 'loop';
        END IF;
        node := p_root #> at;
        IF jsonb_typeof(node) IS DISTINCT FROM 'object' OR seen @> jsonb_build_array(to_jsonb(at)) THEN
            CONTINUE;
        END IF;
        IF jsonb_array_length(seen) >= 1024 THEN
            RETURN 'overflow';
        END IF;
        seen := seen || jsonb_build_array(to_jsonb(at));
        IF jsonb_typeof(node -> '$ref') = 'string' THEN
            SELECT * INTO r FROM outbox.mcp_schema_ref(p_root, node ->> '$ref');
            IF r.keys IS NOT NULL THEN
                queue := queue || jsonb_build_array(to_jsonb(r.keys));
            END IF;
        END IF;
        FOREACH kw IN ARRAY ARRAY['allOf', 'anyOf', 'oneOf'] LOOP
            IF jsonb_typeof(node -> kw) = 'array' THEN
                FOR i IN 0 .. jsonb_array_length(node -> kw) - 1 LOOP
                    queue := queue || jsonb_build_array(to_jsonb(at || kw || i::text));
                END LOOP;
            END IF;
        END LOOP;
        IF node ? 'not' THEN
            queue := queue || jsonb_build_array(to_jsonb(at || 'not'::text));
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.mcp_schema_ref_loops(jsonb, text[], text[]) IS
    'Whether a $ref goes round to its own schema without descending into the value (relay/mcp/json_schema.c refuses the same).';

CREATE FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text)
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
                                     'maxProperties', 'dependentRequired'];
    beside_ref CONSTANT text[] := ARRAY['$ref', '$schema', '$id', 'title', 'description', '$comment', 'default',
                                        'examples', 'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions'];
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
COMMENT ON FUNCTION outbox.mcp_schema_problem_at(jsonb, jsonb, text, text[], text) IS
    'The walk of outbox.mcp_schema_problem: p_schema at p_path (p_keys from p_root), in the dialect of the root''s $schema.';

-- What the front door's POSIX translation of an ECMA-262 pattern refuses too
-- (as 0022 checked "pattern"): NULL when the pattern is accepted.
CREATE FUNCTION outbox.mcp_schema_pattern_problem(p_pattern text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_pattern ~ '\(\?<?[=!]|\\[1-9]|\\[pPk]\{|\\k<' THEN
        RETURN 'lookaround, backreferences and \p{…} are not supported';
    END IF;
    BEGIN
        PERFORM '' ~ p_pattern;
    EXCEPTION WHEN invalid_regular_expression THEN
        RETURN 'not a valid regular expression';
    END;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.mcp_schema_pattern_problem(text) IS
    'NULL when a "pattern" (or a key of "patternProperties") is one the front door can translate, else why not.';

-- True when the document nests deeper than 64 levels (the front door's
-- JSON_SCHEMA_MAX_DEPTH, counted as it counts: every object and array, also
-- inside enum, const, default and examples). The walk stops one level past.
CREATE FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE walk (v, depth) AS (
        SELECT p_schema, 0
        UNION ALL
        SELECT c.value, w.depth + 1
          FROM walk w,
               LATERAL (SELECT e.value FROM jsonb_each(CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) e
                        UNION ALL
                        SELECT a.value FROM jsonb_array_elements(CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) a) c
         WHERE w.depth <= 64)
    SELECT EXISTS (SELECT 1 FROM walk WHERE depth > 64)
$$;
COMMENT ON FUNCTION outbox.mcp_schema_too_deep(jsonb) IS
    'Whether a schema nests deeper than the 64 levels relay/mcp/json_schema.c accepts.';

CREATE OR REPLACE FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text DEFAULT '')
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN outbox.mcp_schema_too_deep(p_schema)
                THEN 'the schema is nested deeper than 64 levels'
                ELSE outbox.mcp_schema_problem_at(
                         p_schema, p_schema, p_path, ARRAY[]::text[],
                         CASE WHEN p_schema ->> '$schema' ~ '/draft-0[67]/' THEN 'old'
                              WHEN p_schema ->> '$schema' ~ '/2019-09/' THEN '2019'
                              ELSE '2020' END) END
$$;

CREATE OR REPLACE FUNCTION outbox.mcp_tools_check() RETURNS trigger
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
                         'prefixItems, minItems, maxItems, uniqueItems, patternProperties, propertyNames, '
                         'minProperties, maxProperties, dependentRequired, allOf, anyOf, oneOf, not, local $ref with '
                         '$defs, format, and annotations (README, "For agents: MCP").';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_schema_ref(jsonb, text), outbox.mcp_schema_ref_loops(jsonb, text[], text[]),
    outbox.mcp_schema_problem_at(jsonb, jsonb, text, text[], text), outbox.mcp_schema_pattern_problem(text),
    outbox.mcp_schema_too_deep(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_schema_ref(jsonb, text), outbox.mcp_schema_ref_loops(jsonb, text[], text[]),
    outbox.mcp_schema_problem_at(jsonb, jsonb, text, text[], text), outbox.mcp_schema_pattern_problem(text),
    outbox.mcp_schema_too_deep(jsonb) TO outbox_admin;
