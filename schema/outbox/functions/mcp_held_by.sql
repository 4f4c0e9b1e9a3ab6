CREATE FUNCTION outbox.mcp_held_by(p_target text, p_payload jsonb) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    rule jsonpath := (SELECT t.approval_rule FROM outbox.targets t WHERE t.name = p_target);
BEGIN
    RETURN coalesce('rule ' || outbox.rule_text(rule) || ': ', '') || outbox.approval_reason(p_payload, rule);
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_held_by(p_target text, p_payload jsonb) FROM PUBLIC;
