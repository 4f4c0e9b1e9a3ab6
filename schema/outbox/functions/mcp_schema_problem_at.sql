CREATE FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

COMMENT ON FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) IS 'The walk of outbox.mcp_schema_problem: p_schema at p_path (p_keys from p_root), in the dialect of the root''s $schema.';

REVOKE ALL ON FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) TO outbox_admin;
