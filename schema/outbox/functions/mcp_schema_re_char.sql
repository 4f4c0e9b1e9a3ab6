CREATE FUNCTION outbox.mcp_schema_re_char(p text, p_i integer, OUT cp integer, OUT next integer, OUT why text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    n      int := length(p);
    e      text := substr(p, p_i, 1);
    i      int := p_i + 1;
    digits int;
    low    int;
BEGIN
    CASE e
        WHEN 't' THEN cp := 9;
        WHEN 'n' THEN cp := 10;
        WHEN 'r' THEN cp := 13;
        WHEN 'f' THEN cp := 12;
        WHEN 'v' THEN cp := 11;
        WHEN 'c' THEN
            IF substr(p, i, 1) ~ '^[A-Za-z]$' THEN
                cp := ascii(substr(p, i, 1)) & 31;
                i := i + 1;
            ELSE
                why := 'has \c without a letter';
            END IF;
        WHEN 'x' THEN
            IF substr(p, i, 2) ~ '^[0-9A-Fa-f]{2}$' THEN
                cp := ('x' || lpad(substr(p, i, 2), 8, '0'))::bit(32)::int;
                i := i + 2;
            ELSE
                why := 'has a malformed \x escape';
            END IF;
        WHEN 'u' THEN
            IF substr(p, i, 1) = '{' THEN
                i := i + 1;
                cp := 0;
                digits := 0;
                WHILE i <= n AND substr(p, i, 1) ~ '^[0-9A-Fa-f]$' LOOP
                    cp := cp * 16 + ('x' || lpad(substr(p, i, 1), 8, '0'))::bit(32)::int;
                    i := i + 1;
                    digits := digits + 1;
                    IF digits > 6 OR cp > 1114111 THEN
                        why := 'has a \u{...} escape above U+10FFFF';
                        RETURN;
                    END IF;
                END LOOP;
                IF digits = 0 OR i > n OR substr(p, i, 1) <> '}' THEN
                    why := 'has a malformed \u{...} escape';
                    RETURN;
                END IF;
                i := i + 1;
            ELSIF substr(p, i, 4) ~ '^[0-9A-Fa-f]{4}$' THEN
                cp := ('x' || lpad(substr(p, i, 4), 8, '0'))::bit(32)::int;
                i := i + 4;
            ELSE
                why := 'has a malformed \u escape';
                RETURN;
            END IF;
            IF cp BETWEEN 55296 AND 56319 AND substr(p, i, 2) = '\u' AND substr(p, i + 2, 4) ~ '^[0-9A-Fa-f]{4}$' THEN
                low := ('x' || lpad(substr(p, i + 2, 4), 8, '0'))::bit(32)::int;
                IF low BETWEEN 56320 AND 57343 THEN
                    cp := 65536 + ((cp - 55296) << 10) + (low - 56320);
                    i := i + 6;
                END IF;
            END IF;
            IF cp BETWEEN 55296 AND 57343 THEN
                why := format('has a lone surrogate escape \u%s', upper(lpad(to_hex(cp), 4, '0')));
            END IF;
        WHEN '0' THEN
            why := CASE WHEN substr(p, i, 1) ~ '^[0-9]$' THEN 'has an octal escape (not ECMA-262 in unicode mode)'
                        ELSE 'has \0: U+0000 cannot be matched by POSIX regcomp' END;
        WHEN 'p', 'P' THEN
            why := format('has a Unicode property escape \%s{...}: not supported by POSIX ERE', e);
        WHEN 'k' THEN
            why := 'has a named backreference \k<...>: not supported by POSIX ERE';
        ELSE
            IF e ~ '^[1-9]$' THEN
                why := format('has a backreference \%s: not supported', e);
            ELSIF position(e IN '^$\.*+?()[]{}|/-') > 0 THEN
                cp := ascii(e);
            ELSIF ascii(e) >= 128 OR e ~ '^[A-Za-z]$' THEN
                why := format('has an unknown escape \%s', CASE WHEN ascii(e) >= 128 THEN '?' ELSE e END);
            ELSE
                cp := ascii(e);
            END IF;
    END CASE;
    next := i;
END
$_$;

REVOKE ALL ON FUNCTION outbox.mcp_schema_re_char(p text, p_i integer, OUT cp integer, OUT next integer, OUT why text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_re_char(p text, p_i integer, OUT cp integer, OUT next integer, OUT why text) TO outbox_admin;
