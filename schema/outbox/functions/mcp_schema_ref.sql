CREATE FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

COMMENT ON FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) IS 'The keys from the root of the schema a local $ref names (NULL and why when it names none), as relay/mcp/json_schema.c resolves it.';

REVOKE ALL ON FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) TO outbox_admin;
