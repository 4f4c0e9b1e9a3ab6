CREATE FUNCTION outbox.refuse_key(p_function text, p_key text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    alphabet constant text :=
        'A key is printable UTF-8 of 1 to 255 bytes: no control characters, no Unicode space other than U+0020 '
        'and no invisible format character (such as U+00A0, U+200B, U+202E, U+2060, U+FEFF), '
        'no space at either end, and not "." or "..". Make it in the deterministic layer, e.g. {run_id}:{step_id}.';
    bad text;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.%: the key must not be empty', p_function
            USING ERRCODE = 'OR004', HINT = 'Make the key in the deterministic layer, e.g. {run_id}:{step_id}.';
    END IF;
    IF octet_length(p_key) > 255 THEN
        RAISE EXCEPTION 'outbox.%: key is % bytes long; the limit is 255', p_function, octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    bad := substring(p_key FROM '[\u0001-\u001f\u007f-\u009f]');   -- 0023: named, and the key escaped
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.%: key % contains a control character (U+%)', p_function, outbox.quote_key(p_key),
                        lpad(upper(to_hex(ascii(bad))), 4, '0')
            USING ERRCODE = 'OR004', HINT = 'Keys travel in HTTP headers; control characters are refused.';
    END IF;
    IF p_key IN ('.', '..') THEN
        RAISE EXCEPTION 'outbox.%: key % is a dot segment: in a status URL it would name another path',
                        p_function, quote_literal(p_key)
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
    IF p_key ~ '^ | $' THEN
        RAISE EXCEPTION 'outbox.%: key % % with a space: receivers strip it from the header, so it would be another key''s duplicate',
                        p_function, quote_literal(p_key), CASE WHEN p_key ~ '^ ' THEN 'begins' ELSE 'ends' END
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
    bad := substring(p_key FROM '[\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.%: key % contains U+%, a Unicode space or invisible format character',
                        p_function, quote_literal(p_key), upper(lpad(to_hex(ascii(bad)), greatest(4, length(to_hex(ascii(bad)))), '0'))
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
END
$_$;

COMMENT ON FUNCTION outbox.refuse_key(p_function text, p_key text) IS 'Raises OR004 or OR009 with the reason when a key is outside the key alphabet (see migration 0010); returns otherwise.';

REVOKE ALL ON FUNCTION outbox.refuse_key(p_function text, p_key text) FROM PUBLIC;
