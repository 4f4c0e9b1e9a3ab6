CREATE FUNCTION outbox.rule_text(p_rule jsonpath) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    t     text := regexp_replace(p_rule::text, '\."([A-Za-z_][A-Za-z0-9_]*)"', '.\1', 'g');
    body  text;
    tok   text;
    depth integer := 0;
    n     integer := 0;
BEGIN
    body := regexp_replace(t, '^(strict |lax )', '');
    IF body !~ '^\(.*\)$' THEN
        RETURN t;
    END IF;
    -- Only when the first parenthesis closes at the very end.
    FOR tok IN SELECT m[1] FROM regexp_matches(body, '("(?:[^"\\]|\\.)*"|[()]|[^"()]+)', 'g') AS m LOOP
        n := n + length(tok);
        depth := depth + CASE tok WHEN '(' THEN 1 WHEN ')' THEN -1 ELSE 0 END;
        IF depth = 0 AND n < length(body) THEN
            RETURN t;
        END IF;
    END LOOP;
    RETURN substring(t FROM 1 FOR length(t) - length(body)) || substr(body, 2, length(body) - 2);
END
$_$;

REVOKE ALL ON FUNCTION outbox.rule_text(p_rule jsonpath) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.rule_text(p_rule jsonpath) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.rule_text(p_rule jsonpath) TO outbox_admin;
