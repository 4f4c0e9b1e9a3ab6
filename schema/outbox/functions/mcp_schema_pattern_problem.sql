CREATE FUNCTION outbox.mcp_schema_pattern_problem(p_pattern text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION outbox.mcp_schema_pattern_problem(p_pattern text) IS 'NULL when a "pattern" (or a key of "patternProperties") is one the front door can translate, else why not.';

REVOKE ALL ON FUNCTION outbox.mcp_schema_pattern_problem(p_pattern text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_pattern_problem(p_pattern text) TO outbox_admin;
