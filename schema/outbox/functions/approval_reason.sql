CREATE FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    step_re  constant text := '(?:\.[A-Za-z_][A-Za-z0-9_]*|\."(?:[^"\\]|\\.)*"|\[[^]]*\]|\.\*\*(?:\{[^}]*\})?|\.\*)';
    lit_re   constant text := '(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*"|true|false|null)';
    op_re    constant text := '(==|!=|<>|<=|>=|<|>)';
    written  text;
    body     text;
    base     text;
    m        text[];
    seen     text[] := '{}';
    reasons  text[] := '{}';
    p        text;        -- the path as written
    abs_path text;        -- the same from the root
    quoted   text;        -- p as a regular expression
    lit      text;
    want     text;        -- the JSON type p is compared with, if the rule says
    strict_v jsonb;
    lax_v    jsonb;
    v        jsonb;
    is_pred  boolean;
    answer   boolean;
    failure  text;
BEGIN
    IF p_rule IS NULL THEN
        RETURN 'the target has no approval rule now (it had one when the intent was enqueued)';
    END IF;
    IF p_payload IS NULL THEN
        RETURN 'no payload';
    END IF;
    written := p_rule::text;
    body := regexp_replace(written, '^(strict|lax) ', '');

    BEGIN
        -- as needs_approval tells a predicate ($.a > 1) from a path ($ ? (@.a > 1))
        v := jsonb_path_query_array('{}', p_rule, '{}', true);
        is_pred := jsonb_array_length(v) = 1 AND jsonb_typeof(v -> 0) IN ('boolean', 'null');
        answer := CASE WHEN is_pred THEN jsonb_path_match(p_payload, p_rule, '{}', true)
                       ELSE jsonb_path_exists(p_payload, p_rule, '{}', true) END;
        IF answer THEN
            RETURN 'the rule is true for this payload';
        END IF;
        -- Not silent: an error that only hid the answer says what it is.
        PERFORM CASE WHEN is_pred THEN jsonb_path_match(p_payload, p_rule)
                     ELSE jsonb_path_exists(p_payload, p_rule) END;
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;

    base := (regexp_match(body, '^\s*(\$' || step_re || '*)\s*\?\s*\('))[1];
    FOR m IN SELECT regexp_matches(body, '([$@]' || step_re || '*)(\s*\()?', 'g') LOOP
        p := m[1];
        IF m[2] IS NOT NULL THEN   -- $.a.size(): the last step is a method
            p := regexp_replace(p, '\.[A-Za-z_][A-Za-z0-9_]*$', '');
        END IF;
        CONTINUE WHEN length(p) < 2 OR p = ANY (seen);
        seen := seen || p;
        IF left(p, 1) = '@' THEN
            CONTINUE WHEN base IS NULL;
            abs_path := base || substr(p, 2);
        ELSE
            abs_path := p;
        END IF;
        BEGIN
            strict_v := jsonb_path_query_array(p_payload, ('strict ' || abs_path)::jsonpath, '{}', true);
            lax_v := jsonb_path_query_array(p_payload, ('lax ' || abs_path)::jsonpath, '{}', true);
        EXCEPTION WHEN OTHERS THEN
            CONTINUE;   -- not a path on its own
        END;
        -- as people write it: $.amount_cents, not the canonical $."amount_cents"
        abs_path := regexp_replace(abs_path, '\."([A-Za-z_][A-Za-z0-9_]*)"', '.\1', 'g');
        IF jsonb_array_length(lax_v) = 0 THEN
            reasons := reasons || (abs_path || ' is missing');
            CONTINUE;
        END IF;
        IF jsonb_array_length(strict_v) = 0 THEN
            reasons := reasons || (abs_path || ' does not exist as written (strict): an array on the way without [*], or an item without it');
            CONTINUE;
        END IF;
        -- $.items[*].price: fewer values than items
        IF p ~ ('\[\*\]' || step_re || '$') AND jsonb_array_length(lax_v) <
               jsonb_array_length(jsonb_path_query_array(p_payload, ('lax ' || regexp_replace(abs_path, step_re || '$', ''))::jsonpath,
                                                         '{}', true)) THEN
            reasons := reasons || (abs_path || ' is missing in some items');
            CONTINUE;
        END IF;
        -- What the rule compares it with: p OP literal, or literal OP p.
        quoted := regexp_replace(p, '([.^$*+?(){}|\\\[\]])', '\\\1', 'g');
        lit := coalesce((regexp_match(body, quoted || '\s*' || op_re || '\s*' || lit_re))[2],
                        (regexp_match(body, lit_re || '\s*' || op_re || '\s*' || quoted))[1]);
        want := CASE WHEN lit IS NULL THEN
                         CASE WHEN body ~ (quoted || '\s+(like_regex|starts\s+with)') THEN 'string' END
                     WHEN lit ~ '^-?[0-9]' THEN 'number'
                     WHEN lit ~ '^"' THEN 'string'
                     WHEN lit IN ('true', 'false') THEN 'boolean' END;
        FOR v IN SELECT jsonb_array_elements(strict_v) LOOP
            IF jsonb_typeof(v) = 'null' THEN
                reasons := reasons || (abs_path || ' is null');
                EXIT;
            ELSIF want IS NOT NULL AND jsonb_typeof(v) <> want THEN
                reasons := reasons || format('%s is %s %s, compared with a %s', abs_path,
                                             CASE WHEN jsonb_typeof(v) IN ('object', 'array') THEN 'an' ELSE 'a' END,
                                             jsonb_typeof(v), want);
                EXIT;
            END IF;
        END LOOP;
    END LOOP;

    IF cardinality(reasons) > 0 THEN
        RETURN array_to_string(reasons, '; ');
    END IF;
    IF failure IS NOT NULL THEN
        RETURN 'the rule cannot be evaluated on this payload: ' || failure;
    END IF;
    IF NOT outbox.needs_approval(p_payload, p_rule) THEN
        RETURN 'the rule does not hold it now (it changed since the intent was enqueued)';
    END IF;
    RETURN 'the rule is neither true nor false for this payload (an unknown comparison or an error inside it), so it holds';
EXCEPTION WHEN OTHERS THEN
    RETURN 'the rule is neither true nor false for this payload, so it holds';
END
$_$;

COMMENT ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) IS 'Why an approval rule holds a payload (true, a missing, null or mistyped field, a lax step, an error): paths and types only, never a value (0023).';

REVOKE ALL ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) TO outbox_admin;
