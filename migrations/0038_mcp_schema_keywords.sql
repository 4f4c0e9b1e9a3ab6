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
-- front door then hid the tool). A "pattern" (and a key of
-- patternProperties) is judged by the front door's rules, ported from
-- relay/mcp/json_schema_regex.c (outbox.mcp_schema_pattern_problem), with
-- its words: 0022 asked PostgreSQL's regex engine, which refused valid
-- ECMA-262 (\u{...}, named groups, {300}) and let through what the front
-- door cannot run (\Z, [^é], [à-ÿ], \0).
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

-- The ECMA-262 patterns the front door refuses (relay/mcp/json_schema_regex.c),
-- read the same way: what has no POSIX ERE (lookaround, backreferences,
-- \p{...}, \0), what is malformed, and what would be too large for regcomp
-- once counted repetitions are written out (the same weights: more than
-- 10,000 atoms, so ^.{0,200}$ is accepted and ^.{0,300}$ is not). 0022 asked
-- PostgreSQL's own regex engine instead, which refused valid ECMA-262
-- (\u{...}, named groups, {300}) and accepted what the front door cannot run
-- (\Z, [^é], [à-ÿ]). NULL when the pattern is accepted, else why not (a
-- phrase that follows "pattern", as the front door words it).

-- One escape that is one character (after the backslash, at p_i): its code
-- point and where the pattern goes on, or why not.
CREATE FUNCTION outbox.mcp_schema_re_char(p text, p_i int, OUT cp int, OUT next int, OUT why text)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n      int := length(p);
    e      text := substr(p, p_i, 1);
    i      int := p_i + 1;
    digits int;
    low    int;
BEGIN
    CASE e
        WHEN 't' THEN cp := 9;
        WHEN 'n' THEN cp := 10;
        WHEN 'r' THEN cp := 13;
        WHEN 'f' THEN cp := 12;
        WHEN 'v' THEN cp := 11;
        WHEN 'c' THEN
            IF substr(p, i, 1) ~ '^[A-Za-z]$' THEN
                cp := ascii(substr(p, i, 1)) & 31;
                i := i + 1;
            ELSE
                why := 'has \c without a letter';
            END IF;
        WHEN 'x' THEN
            IF substr(p, i, 2) ~ '^[0-9A-Fa-f]{2}$' THEN
                cp := ('x' || lpad(substr(p, i, 2), 8, '0'))::bit(32)::int;
                i := i + 2;
            ELSE
                why := 'has a malformed \x escape';
            END IF;
        WHEN 'u' THEN
            IF substr(p, i, 1) = '{' THEN
                i := i + 1;
                cp := 0;
                digits := 0;
                WHILE i <= n AND substr(p, i, 1) ~ '^[0-9A-Fa-f]$' LOOP
                    cp := cp * 16 + ('x' || lpad(substr(p, i, 1), 8, '0'))::bit(32)::int;
                    i := i + 1;
                    digits := digits + 1;
                    IF digits > 6 OR cp > 1114111 THEN
                        why := 'has a \u{...} escape above U+10FFFF';
                        RETURN;
                    END IF;
                END LOOP;
                IF digits = 0 OR i > n OR substr(p, i, 1) <> '}' THEN
                    why := 'has a malformed \u{...} escape';
                    RETURN;
                END IF;
                i := i + 1;
            ELSIF substr(p, i, 4) ~ '^[0-9A-Fa-f]{4}$' THEN
                cp := ('x' || lpad(substr(p, i, 4), 8, '0'))::bit(32)::int;
                i := i + 4;
            ELSE
                why := 'has a malformed \u escape';
                RETURN;
            END IF;
            IF cp BETWEEN 55296 AND 56319 AND substr(p, i, 2) = '\u' AND substr(p, i + 2, 4) ~ '^[0-9A-Fa-f]{4}$' THEN
                low := ('x' || lpad(substr(p, i + 2, 4), 8, '0'))::bit(32)::int;
                IF low BETWEEN 56320 AND 57343 THEN
                    cp := 65536 + ((cp - 55296) << 10) + (low - 56320);
                    i := i + 6;
                END IF;
            END IF;
            IF cp BETWEEN 55296 AND 57343 THEN
                why := format('has a lone surrogate escape \u%s', upper(lpad(to_hex(cp), 4, '0')));
            END IF;
        WHEN '0' THEN
            why := CASE WHEN substr(p, i, 1) ~ '^[0-9]$' THEN 'has an octal escape (not ECMA-262 in unicode mode)'
                        ELSE 'has \0: U+0000 cannot be matched by POSIX regcomp' END;
        WHEN 'p', 'P' THEN
            why := format('has a Unicode property escape \%s{...}: not supported by POSIX ERE', e);
        WHEN 'k' THEN
            why := 'has a named backreference \k<...>: not supported by POSIX ERE';
        ELSE
            IF e ~ '^[1-9]$' THEN
                why := format('has a backreference \%s: not supported', e);
            ELSIF position(e IN '^$\.*+?()[]{}|/-') > 0 THEN
                cp := ascii(e);
            ELSIF ascii(e) >= 128 OR e ~ '^[A-Za-z]$' THEN
                why := format('has an unknown escape \%s', CASE WHEN ascii(e) >= 128 THEN '?' ELSE e END);
            ELSE
                cp := ascii(e);
            END IF;
    END CASE;
    next := i;
END
$$;

-- The ASCII set and the non-ASCII part (0 none, 1 all, 2 spaces, 3 all but
-- spaces) of \d \D \w \W \s \S; NULL bits for another letter.
CREATE FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit(128), OUT mb int)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ch int;
BEGIN
    IF e NOT IN ('d', 'D', 'w', 'W', 's', 'S') THEN
        RETURN;
    END IF;
    bits := repeat('0', 128)::bit(128);
    mb := 0;
    FOR ch IN 0 .. 127 LOOP
        IF (lower(e) = 'd' AND ch BETWEEN 48 AND 57)
           OR (lower(e) = 'w' AND (ch BETWEEN 48 AND 57 OR ch BETWEEN 65 AND 90 OR ch BETWEEN 97 AND 122 OR ch = 95))
           OR (lower(e) = 's' AND (ch BETWEEN 9 AND 13 OR ch = 32)) THEN
            bits := set_bit(bits, ch, 1);
        END IF;
    END LOOP;
    IF lower(e) = 's' THEN
        mb := 2;
    END IF;
    IF e IN ('D', 'W', 'S') THEN
        bits := ~bits;
        mb := CASE mb WHEN 0 THEN 1 WHEN 1 THEN 0 WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 0 END;
    END IF;
END
$$;

CREATE FUNCTION outbox.mcp_schema_pattern_problem(p text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n          int := length(p);
    i          int := 1;
    c          text;
    lvl       int := 0;
    weights    bigint[] := array_fill(0::bigint, ARRAY[33]);
    last_w       bigint := 0;
    can_repeat boolean := false;
    w          bigint;
    atom       boolean;
    r          record;
    k          record;
    -- a class being read
    bits       bit(128);
    mb         int;
    literals   int;
    negated    boolean;
    lo         int;
    hi         int;
    lo_class   boolean;
    hi_class   boolean;
    lo_bits    bit(128);
    lo_mb      int;
    is_class   boolean;
    ch         int;
    copies     bigint;
    qlo        bigint;
    qhi        bigint;
    comma      boolean;
    start      int;
    zero CONSTANT bit(128) := repeat('0', 128)::bit(128);
BEGIN
    IF octet_length(p) > 1024 THEN
        RETURN 'is longer than 1024 bytes';
    END IF;
    WHILE i <= n LOOP
        c := substr(p, i, 1);
        w := NULL;
        is_class := false;
        IF c = '\' THEN
            i := i + 1;
            IF i > n THEN
                RETURN 'ends with a backslash';
            END IF;
            SELECT * INTO k FROM outbox.mcp_schema_re_class(substr(p, i, 1));
            IF k.bits IS NOT NULL THEN
                bits := k.bits; mb := k.mb; literals := 0; is_class := true;
                i := i + 1;
            ELSIF substr(p, i, 1) IN ('b', 'B') THEN
                i := i + 1;
                can_repeat := false;
                w := 1; atom := false;
            ELSE
                SELECT * INTO r FROM outbox.mcp_schema_re_char(p, i);
                IF r.why IS NOT NULL THEN
                    RETURN r.why;
                END IF;
                i := r.next;
                ch := r.cp;
                IF ch = 0 THEN
                    RETURN 'matches U+0000, which POSIX regcomp cannot';
                END IF;
                can_repeat := true;
                w := CASE WHEN ch < 128 THEN 1 WHEN ch < 2048 THEN 3 WHEN ch < 65536 THEN 4 ELSE 5 END; atom := true;
            END IF;
        ELSIF c = '.' THEN
            bits := ~zero; bits := set_bit(set_bit(bits, 10, 0), 13, 0); mb := 4; literals := 0; is_class := true;
            i := i + 1;
        ELSIF c = '[' THEN
            i := i + 1;
            bits := zero; mb := 0; literals := 0;
            negated := substr(p, i, 1) = '^';
            IF negated THEN i := i + 1; END IF;
            LOOP
                IF i > n THEN
                    RETURN 'has an unterminated [';
                END IF;
                IF substr(p, i, 1) = ']' THEN
                    i := i + 1;
                    EXIT;
                END IF;
                -- the low end (or the one atom)
                FOR pass IN 1 .. 2 LOOP
                    IF pass = 2 THEN
                        IF NOT (i + 1 <= n AND substr(p, i, 1) = '-' AND substr(p, i + 1, 1) <> ']') THEN
                            EXIT;
                        END IF;
                        i := i + 1;
                    END IF;
                    hi_class := false;
                    IF substr(p, i, 1) <> '\' THEN
                        hi := ascii(substr(p, i, 1));
                        i := i + 1;
                    ELSE
                        i := i + 1;
                        IF i > n THEN
                            RETURN 'ends with a backslash';
                        END IF;
                        SELECT * INTO k FROM outbox.mcp_schema_re_class(substr(p, i, 1));
                        IF k.bits IS NOT NULL THEN
                            hi_class := true; i := i + 1;
                            IF pass = 1 THEN lo_bits := k.bits; lo_mb := k.mb; END IF;
                        ELSIF substr(p, i, 1) = 'b' THEN
                            hi := 8; i := i + 1;
                        ELSE
                            SELECT * INTO r FROM outbox.mcp_schema_re_char(p, i);
                            IF r.why IS NOT NULL THEN
                                RETURN r.why;
                            END IF;
                            hi := r.cp; i := r.next;
                        END IF;
                    END IF;
                    IF pass = 1 THEN
                        lo := hi; lo_class := hi_class; hi := NULL; hi_class := false;
                    END IF;
                END LOOP;
                IF hi IS NOT NULL OR hi_class THEN
                    -- a range (hi_class: its high end was a class escape)
                    IF lo_class OR hi_class THEN
                        RETURN 'has a range with a class escape as an end';
                    END IF;
                    IF lo > hi THEN
                        RETURN 'has a range out of order';
                    END IF;
                    IF hi >= 128 THEN
                        RETURN 'has a range with a non-ASCII end: not supported';
                    END IF;
                    IF lo = 0 THEN
                        RETURN 'matches U+0000, which POSIX regcomp cannot';
                    END IF;
                    FOR ch IN lo .. hi LOOP
                        bits := set_bit(bits, ch, 1);
                    END LOOP;
                ELSIF lo_class THEN
                    bits := bits | lo_bits;
                    mb := CASE WHEN mb = lo_mb OR lo_mb = 0 THEN mb WHEN mb = 0 THEN lo_mb ELSE 1 END;
                ELSIF lo = 0 THEN
                    RETURN 'matches U+0000, which POSIX regcomp cannot';
                ELSIF lo < 128 THEN
                    bits := set_bit(bits, lo, 1);
                ELSE
                    IF literals = 32 THEN
                        RETURN 'has a class with more than 32 non-ASCII characters';
                    END IF;
                    literals := literals + 1;
                END IF;
            END LOOP;
            IF negated THEN
                IF literals > 0 THEN
                    RETURN 'has a negated class with non-ASCII characters: not supported';
                END IF;
                bits := ~bits;
                mb := CASE mb WHEN 0 THEN 1 WHEN 1 THEN 0 WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 0 END;
            END IF;
            is_class := true;
        ELSIF c = '(' THEN
            i := i + 1;
            IF substr(p, i, 1) = '?' THEN
                i := i + 1;
                IF substr(p, i, 1) = ':' THEN
                    i := i + 1;
                ELSIF substr(p, i, 1) IN ('=', '!') THEN
                    RETURN format('has a lookahead (?%s: not supported by POSIX ERE', substr(p, i, 1));
                ELSIF substr(p, i, 1) = '<' AND substr(p, i + 1, 1) IN ('=', '!') THEN
                    RETURN format('has a lookbehind (?<%s: not supported by POSIX ERE', substr(p, i + 1, 1));
                ELSIF substr(p, i, 1) = '<' THEN
                    i := i + 1;
                    start := i;
                    WHILE i <= n AND (substr(p, i, 1) ~ '^[_$A-Za-z]$' OR (i > start AND substr(p, i, 1) ~ '^[0-9]$')) LOOP
                        i := i + 1;
                    END LOOP;
                    IF i = start OR i > n OR substr(p, i, 1) <> '>' THEN
                        RETURN 'has a malformed group name';
                    END IF;
                    i := i + 1;
                ELSE
                    RETURN 'has a (? group that is not (?: or (?<name>';
                END IF;
            END IF;
            IF lvl = 32 THEN
                RETURN 'has groups nested deeper than 32';
            END IF;
            lvl := lvl + 1;
            weights[lvl + 1] := 0;
            can_repeat := false;
        ELSIF c = ')' THEN
            i := i + 1;
            IF lvl = 0 THEN
                RETURN 'has an unmatched )';
            END IF;
            lvl := lvl - 1;
            can_repeat := true;
            w := weights[lvl + 2] + 1; atom := true;
        ELSIF c IN ('|', '^', '$') THEN
            i := i + 1;
            can_repeat := false;
            w := 1; atom := false;
        ELSIF c IN ('*', '+', '?', '{') THEN
            IF NOT can_repeat THEN
                RETURN 'has a quantifier with nothing to repeat';
            END IF;
            i := i + 1;
            copies := CASE WHEN c = '+' THEN 2 ELSE 1 END;
            IF c = '{' THEN
                qlo := NULL; qhi := -1;
                FOR pass IN 1 .. 2 LOOP
                    IF pass = 2 THEN
                        comma := substr(p, i, 1) = ',';
                        IF NOT comma THEN EXIT; END IF;
                        i := i + 1;
                        IF i > n OR substr(p, i, 1) = '}' THEN EXIT; END IF;
                    END IF;
                    start := i;
                    w := 0;
                    WHILE i <= n AND substr(p, i, 1) ~ '^[0-9]$' LOOP
                        w := w * 10 + ascii(substr(p, i, 1)) - 48;
                        i := i + 1;
                        IF w > 1000 THEN
                            RETURN 'has a repetition bound above 1000';
                        END IF;
                    END LOOP;
                    IF i = start THEN
                        RETURN 'has a { that is not a quantifier (write \{)';
                    END IF;
                    IF pass = 1 THEN qlo := w; ELSE qhi := w; END IF;
                END LOOP;
                IF i > n OR substr(p, i, 1) <> '}' THEN
                    RETURN 'has a { that is not a quantifier (write \{)';
                END IF;
                i := i + 1;
                IF comma AND qhi >= 0 AND qhi < qlo THEN
                    RETURN format('has a quantifier {%s,%s} out of order', qlo, qhi);
                END IF;
                copies := qlo + CASE WHEN NOT comma THEN 0 WHEN qhi < 0 THEN 1 ELSE 2 * (qhi - qlo) END;
                IF copies = 0 THEN copies := 1; END IF;
            END IF;
            IF substr(p, i, 1) = '?' THEN
                i := i + 1;
            END IF;
            can_repeat := false;
            w := last_w * (copies - 1); atom := false;
        ELSIF c IN ('}', ']') THEN
            RETURN format('has a lone %s (write \%s)', c, c);
        ELSE
            ch := ascii(c);
            i := i + 1;
            can_repeat := true;
            w := CASE WHEN ch < 128 THEN 1 WHEN ch < 2048 THEN 3 WHEN ch < 65536 THEN 4 ELSE 5 END; atom := true;
        END IF;
        IF is_class THEN
            lo := (CASE WHEN bits <> zero THEN 1 ELSE 0 END) + (CASE WHEN mb <> 0 THEN 1 ELSE 0 END) + literals;
            IF lo = 0 THEN
                RETURN 'has a class that matches nothing';
            END IF;
            can_repeat := true;
            w := lo + (CASE mb WHEN 1 THEN 9 WHEN 2 THEN 17 WHEN 3 THEN 45 WHEN 4 THEN 16 ELSE 0 END) + 4 * literals;
            atom := true;
        END IF;
        IF w IS NOT NULL THEN
            IF atom THEN
                last_w := w;
            END IF;
            weights[lvl + 1] := weights[lvl + 1] + w;
            IF weights[lvl + 1] > 10000 THEN
                RETURN 'is too large once its repetitions are written out for POSIX regcomp (bound lengths with '
                       'minLength and maxLength instead)';
            END IF;
        END IF;
    END LOOP;
    IF lvl > 0 THEN
        RETURN 'has an unmatched (';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.mcp_schema_pattern_problem(text) IS
    'NULL when a "pattern" (or a key of "patternProperties") is one the front door translates to POSIX ERE, else why not, as relay/mcp/json_schema_regex.c words it.';

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
    outbox.mcp_schema_too_deep(jsonb), outbox.mcp_schema_re_char(text, int), outbox.mcp_schema_re_class(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_schema_ref(jsonb, text), outbox.mcp_schema_ref_loops(jsonb, text[], text[]),
    outbox.mcp_schema_problem_at(jsonb, jsonb, text, text[], text), outbox.mcp_schema_pattern_problem(text),
    outbox.mcp_schema_too_deep(jsonb), outbox.mcp_schema_re_char(text, int), outbox.mcp_schema_re_class(text) TO outbox_admin;
