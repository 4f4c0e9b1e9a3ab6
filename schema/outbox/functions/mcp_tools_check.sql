CREATE FUNCTION outbox.mcp_tools_check() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

REVOKE ALL ON FUNCTION outbox.mcp_tools_check() FROM PUBLIC;
