CREATE FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

COMMENT ON FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) IS 'Whether a $ref goes round to its own schema without descending into the value (relay/mcp/json_schema.c refuses the same).';

REVOKE ALL ON FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) TO outbox_admin;
