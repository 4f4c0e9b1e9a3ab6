CREATE FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $_$
DECLARE
    written   text := rule::text;      -- canonical text: 'strict ' or nothing, then the path
    body      text;
    widened   text;
    probe     jsonb;
    predicate boolean;
    bufs      text[];
    filters   boolean[];
    tok       text;
    n         integer;
    answer    boolean;
    doc       jsonb;
    path      text;
BEGIN
    IF payload IS NULL OR rule IS NULL THEN
        RETURN true;
    END IF;
    body := regexp_replace(written, '^(strict|lax) ', '');

    -- Every filter ?(C) widened to ?((C) || ((C) is unknown)): an item goes
    -- through unless C is definitely false. Tokens: strings, parentheses, the rest.
    IF strpos(body, '?(') > 0 THEN
        bufs := ARRAY[''];
        filters := ARRAY[false];
        FOR tok IN SELECT m[1] FROM regexp_matches(body, '("(?:[^"\\]|\\.)*"|[()]|[^"()]+)', 'g') AS m LOOP
            n := cardinality(bufs);
            IF tok = '(' THEN
                filters := filters || (rtrim(bufs[n]) LIKE '%?');
                bufs := bufs || ''::text;
            ELSIF tok = ')' AND n > 1 THEN
                tok := bufs[n];
                bufs[n - 1] := bufs[n - 1] || CASE WHEN filters[n]
                    THEN '((' || tok || ') || ((' || tok || ') is unknown))'
                    ELSE '(' || tok || ')' END;
                bufs := bufs[1:n - 1];
                filters := filters[1:n - 1];
            ELSE
                bufs[n] := bufs[n] || tok;
            END IF;
        END LOOP;
        IF cardinality(bufs) <> 1 THEN
            RETURN true;   -- not understood: hold
        END IF;
        widened := bufs[1];
    END IF;

    -- A predicate ($.a > 1) answers one boolean or null, even on an empty
    -- object; a path ($ ? (...)) answers items: it holds if there is one.
    probe := jsonb_path_query_array('{}', rule, '{}', true);
    predicate := jsonb_array_length(probe) = 1 AND jsonb_typeof(probe -> 0) IN ('boolean', 'null');

    FOR doc, path IN
        SELECT d, p FROM (VALUES (1, payload, written),
                                 (2, payload, CASE WHEN written LIKE 'strict %' THEN 'strict ' ELSE '' END || widened),
                                 (3, jsonb_strip_nulls(payload), 'strict ' || body),
                                 (4, jsonb_strip_nulls(payload), 'strict ' || widened)) AS v(o, d, p)
         WHERE p IS NOT NULL ORDER BY o
    LOOP
        IF predicate THEN
            answer := jsonb_path_match(doc, path::jsonpath, '{}', true);
        ELSE
            answer := jsonb_path_exists(doc, path::jsonpath, '{}', true);
        END IF;
        IF answer IS DISTINCT FROM false THEN
            RETURN true;   -- true, or unknown
        END IF;
    END LOOP;
    RETURN false;
EXCEPTION WHEN OTHERS THEN
    RETURN true;           -- cannot be evaluated on this payload: a person decides
END
$_$;

COMMENT ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) IS 'Whether a payload is held for approval: unless the rule is definitely false (as written, and in strict mode with null members as missing; filters widened to let unknown through), it holds.';

REVOKE ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_app;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_admin;
